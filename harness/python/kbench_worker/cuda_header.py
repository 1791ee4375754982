"""A CUDA source's `torch/extension.h`, compiled first as `torch/types.h`
(`KBENCH_CUDA_HEADER=light`; off by default).

nvcc parses every header a CUDA source includes three times (cudafe++ and cicc on the device
side, the host compiler on the host side), and precompiled headers do not apply to any of
them. Model-written CUDA sources include `torch/extension.h`: all of torch's C++ frontend
(`torch/all.h`: autograd, nn, optim, data, jit, ...) and its Python bindings
(`torch/python.h`: pybind11, Python.h). A kernel source uses tensors, `TORCH_CHECK`,
`AT_DISPATCH_*` and the factories, all of which `torch/types.h` declares, and `load_inline`
puts `#include <torch/types.h>` first in every CUDA source anyway. On one H200 host, nvcc on
a one-kernel source took 62.7 s as built and 31.9 s without its `#include
<torch/extension.h>` (docs/running.md, "What a cold build cannot go below").

So, with `KBENCH_CUDA_HEADER=light`, a ninja run that compiles CUDA sources first runs with
`NVCC_APPEND_FLAGS=-I<build>/kbench-cuda-header`, a folder whose `torch/extension.h` is
`torch/types.h` (torch's own include folders are `-isystem`, searched after `-I`). nvcc
alone reads that variable: the C++ binding (`main.cpp`, which needs pybind11) is compiled as
always. Where nvcc refuses that build (a source that uses `torch::nn`, pybind11, Python.h,
anything beyond `torch/types.h`), every CUDA object of the folder is removed (ninja does not
see the flag, so objects built light would be kept) and ninja runs again without it: those
sources compile against torch's own header, failures included, and the folder stays marked
`full` for every later load. A failure of the binding alone is not tried again (nvcc's header
does not change it) unless the binding itself was compiled light (`cxx_header`). The ninja run
that does all this for both kinds is `light_build.run`. A build that succeeds is marked (`MARKER` in its folder, naming the
header it was compiled with), and the header file is rewritten only when it differs: ninja
keeps it among the objects' dependencies, and a new modification time would compile them all
again at every load.

What a light build can change, so it stays opt-in: a source that compiles on the light header
may fail, or pick another overload or specialisation, on torch's own, where a declaration only
the full header makes clashes or wins (e.g. `using namespace torch;` and a variable of the
source's own named `data`, ambiguous with `torch::data` only under the full header). Such a
kernel builds here where it would not without kbench. `bench/build_ahead/cuda_header_probe.py`
(both ways) and `bench/build_ahead/run.sh CUDA_HEADER=both` measure how often, on published
sets.

The folder is written into the candidate's own build folder, just before the ninja run: a
candidate that changes it changes only its own build, which its code could do anyway."""

import os
import re

from .build_folder import edge_outputs, read_marker, write_if_changed, write_marker

ENV = "KBENCH_CUDA_HEADER"
# A CUDA compile step of torch's build.ninja: `build OUT: cuda_compile IN` (`$ ` escapes).
_CUDA_EDGE = re.compile(r"^build (.+?)(?<!\$): cuda_compile ")
FOLDER = "kbench-cuda-header"
MARKER = "kbench-cuda-header.txt"
HEADER = """// kbench: torch/extension.h for a CUDA source, first attempt: torch/types.h, the part of
// torch a kernel source uses (KBENCH_CUDA_HEADER=light). Where the source needs more, kbench
// compiles it again against torch's own torch/extension.h.
#pragma once
#include <torch/types.h>
"""
def enabled():
    return os.environ.get(ENV) == "light"


def cuda_objects(build_directory):
    """The outputs of torch's CUDA compile steps in `build.ninja` (absolute paths), or None
    when it has none or cannot be read."""
    return edge_outputs(build_directory, _CUDA_EDGE)


def write_header(build_directory):
    """The light folder in the build folder; its path, or None where it cannot be written or
    nvcc could not be given it (NVCC_APPEND_FLAGS splits on spaces). The header is written
    only where it differs (the candidate may have changed it): ninja keeps it among the
    objects' dependencies, and a new modification time would compile them all again."""
    folder = os.path.join(os.path.abspath(build_directory), FOLDER)
    if any(c.isspace() for c in folder):
        return None
    try:
        os.makedirs(os.path.join(folder, "torch"), exist_ok=True)
        write_if_changed(os.path.join(folder, "torch", "extension.h"), HEADER)
    except OSError:
        return None
    return folder


def marked(build_directory):
    return read_marker(build_directory, MARKER)


def mark(build_directory, which):
    write_marker(build_directory, MARKER, which)
