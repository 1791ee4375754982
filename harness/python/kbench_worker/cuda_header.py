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
always. Where that build fails for what the compiler said (a source that uses `torch::nn`,
pybind11, Python.h, anything beyond `torch/types.h`), ninja runs again without it and the
source compiles against torch's own header: its build, and the kernel's verdict, are what
they are without kbench, failures included (a failure of the binding alone is not tried
again: nvcc's header does not change it). A build that succeeds is marked (`MARKER` in its folder, naming the header it
was compiled with).

What a light build could change: only which overload or specialisation a source picks when
it compiles both ways, where a declaration visible only through the full header would win
(none of torch's kernel-facing API is declared twice so). Hence opt-in until it is measured
on published sets against the verdicts of full builds (`bench/build_ahead/run.sh
CUDA_HEADER=both`).

The folder is written into the candidate's own build folder, just before the ninja run: a
candidate that changes it changes only its own build, which its code could do anyway."""

import os
import re


ENV = "KBENCH_CUDA_HEADER"
# ninja's line for a failed step (`FAILED: [code=2] cuda.cuda.o` from ninja 1.13, without the
# code before); torch names a CUDA source's object `<stem>.cuda.o`.
_FAILED = re.compile(r"FAILED: (?:\[code=\d+\] )?(\S+)")
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


def _compiles_cuda(build_directory):
    """Whether torch's `build.ninja` here has a CUDA compile step (nvcc)."""
    try:
        with open(os.path.join(build_directory, "build.ninja")) as f:
            return any(line.startswith("rule cuda_compile") for line in f)
    except OSError:
        return False


def _write_header(build_directory):
    """The light folder in the build folder (rewritten each time: the candidate may have
    changed it); its path, or None where it cannot be written or nvcc could not be given it
    (NVCC_APPEND_FLAGS splits on spaces)."""
    folder = os.path.join(os.path.abspath(build_directory), FOLDER)
    if any(c.isspace() for c in folder):
        return None
    try:
        os.makedirs(os.path.join(folder, "torch"), exist_ok=True)
        path = os.path.join(folder, "torch", "extension.h")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(HEADER)
        os.replace(tmp, path)
    except OSError:
        return None
    return folder


def _mark(build_directory, which):
    try:
        with open(os.path.join(build_directory, MARKER), "w") as f:
            f.write(which + "\n")
    except OSError:
        pass


def run(original, build_directory, verbose, error_prefix):
    """torch's ninja run (`original`), light first where enabled and a CUDA source is
    compiled; torch's own header where the light build fails for the compiler's reasons."""
    folder = _write_header(build_directory) if enabled() and _compiles_cuda(build_directory) else None
    if folder is None:
        return original(build_directory, verbose, error_prefix)
    before = os.environ.get("NVCC_APPEND_FLAGS")
    os.environ["NVCC_APPEND_FLAGS"] = (before + " " if before else "") + "-I" + folder
    try:
        result = original(build_directory, verbose, error_prefix)
        _mark(build_directory, "light: torch/types.h")
        return result
    except RuntimeError as exc:
        # Again unless ninja names only steps that are not CUDA sources: the binding's
        # failure does not depend on the header a CUDA source saw. Anything else (a CUDA
        # object among the failed, or no step named) compiles again as without kbench.
        failed = _FAILED.findall(str(exc))
        if failed and not any(t.endswith(".cuda.o") for t in failed):
            raise
    finally:
        if before is None:
            os.environ.pop("NVCC_APPEND_FLAGS", None)
        else:
            os.environ["NVCC_APPEND_FLAGS"] = before
    # The compiler refused the light build: torch's own header, as without kbench. ninja
    # compiles what did not build (the CUDA object), the binding stays built.
    result = original(build_directory, verbose, error_prefix)
    _mark(build_directory, "full: torch/extension.h (the light build failed)")
    return result
