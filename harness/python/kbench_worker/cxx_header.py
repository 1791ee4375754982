"""A C++ source's `torch/extension.h`, compiled first as `torch/types.h` + `torch/python.h`
(`KBENCH_CXX_HEADER=light`; off by default).

Every `load_inline` compiles a binding, `main.cpp`: `#include <torch/extension.h>`, the
candidate's `cpp_sources` (most often declarations only) and a pybind11 module. A precompiled
header (pch.py) takes away the parsing, but not what GCC does at the end of every translation
unit: it instantiates every template the header's inline functions name, and generates code
for what the module uses. For `torch/extension.h` that is 7.0 s of the 9.5 s a one-function
`main.cpp` takes with the header precompiled (g++ 12.2 on one core of a CI-like machine,
`-ftime-report`), most of it for `torch/all.h` (autograd, nn, optim, data, jit, ...), which a
binding does not use. `torch/types.h` + `torch/python.h` (every pybind11 type caster torch
has, the same 25 as the full header, and its module bindings) took 6.7 s against 9.9 s, both
precompiled, and the objects hold the same functions (only header-local constants of
autograd and the profiler differ).

So, with `KBENCH_CXX_HEADER=light`, a ninja run that compiles C++ sources runs with the light
folder first on `CPATH`: `<precompiled headers>/light-<hash>/` (pch.py, LIGHT), whose
`torch/extension.h` is this header and whose `torch/extension.h.gch/` holds its precompiled
forms, made by the trusted helper and shown read-only. A second `#include
<torch/extension.h>` in the same file opens the same header, empty the second time
(`#pragma once`), as torch's is. Where g++ refuses the light build (a source that uses
`torch::nn`, `torch::optim`, anything of `torch/all.h`), the C++ objects of the folder are
removed (ninja does not see `CPATH`) and ninja runs again without the folder: those sources
compile against torch's own header, failures included, and the build folder stays marked
`full` (MARKER) for every later load, as does one built with torch's header while the
setting is on (the light folder not made yet, or CUDA sources compiled with torch's header).

nvcc's host compiler reads `CPATH` too: the light folder is on it only in a run whose CUDA
sources compile with the light CUDA header as well (`cuda_header`: its `-I` comes before
`CPATH`) or that has none, so a CUDA source never gets this header in place of torch's
(`light_build`).

What a light build can change, so it stays opt-in, as `cuda_header` says for CUDA sources: a
source that compiles with fewer declarations in sight may fail, or pick another overload, with
torch's own header (a name of its own that clashes with one of `torch/all.h` under `using
namespace torch;`). A template that only `torch/all.h` defines, used where it compiles without
it, links (a shared library may leave symbols to the loader) and would fail only at import:
`light_build` reads what a light run linked (`undefined_symbols`) and builds again with
torch's header where a symbol of torch's stays undefined."""

import hashlib
import os
import re

from .build_folder import edge_outputs, read_marker, write_marker

ENV = "KBENCH_CXX_HEADER"
# The light folder's name inside the precompiled-header folder (pch.py writes it there): named
# after this file's bytes, as the harness names it (`worker::pch`, and the build folders' key
# in `worker::build`), so that another kbench's header, precompiled forms and objects are
# never taken for this one's (GCC uses a precompiled header whatever its header's text, and
# the header is dated like torch's, so ninja would not see a new text either).
with open(__file__, "rb") as _f:
    LIGHT = "light-" + hashlib.sha256(_f.read()).hexdigest()[:12]
MARKER = "kbench-cxx-header.txt"
HEADER = """// kbench: torch/extension.h for a C++ source, first attempt: torch/types.h and
// torch/python.h, what a binding uses (KBENCH_CXX_HEADER=light). Where the source needs more,
// kbench compiles it again against torch's own torch/extension.h.
#pragma once
#include <torch/types.h>
#include <torch/python.h>
"""
# A C++ compile step of torch's build.ninja: `build OUT: compile IN` (`$ ` escapes).
_CXX_EDGE = re.compile(r"^build (.+?)(?<!\$): compile ")


def enabled():
    return os.environ.get(ENV) == "light"


def light_folder():
    """The light folder beside the precompiled headers the harness put on `CPATH`, where
    its header is there; else None (the helper has not written it, or the setting was off
    when it ran)."""
    for entry in os.environ.get("CPATH", "").split(os.pathsep):
        if not entry:
            continue
        folder = os.path.join(entry, LIGHT)
        if os.path.isfile(os.path.join(folder, "torch", "extension.h")):
            return folder
    return None


def objects(build_directory):
    """The outputs of torch's C++ compile steps in `build.ninja` (absolute paths), or None
    when it has none or cannot be read."""
    return edge_outputs(build_directory, _CXX_EDGE)


def marked(build_directory):
    return read_marker(build_directory, MARKER)


def mark(build_directory, which):
    write_marker(build_directory, MARKER, which)


def with_folder_first(folder):
    """`CPATH` with `folder` first."""
    before = os.environ.get("CPATH")
    return folder + (os.pathsep + before if before else "")
