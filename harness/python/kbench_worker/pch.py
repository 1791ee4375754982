"""Precompiled `torch/extension.h` for candidates' C++ builds: `python -m kbench_worker pch
DIR KIND` (kbench's own code, run by the harness outside any sandbox; never candidate code).

Every `load_inline` main.cpp starts with `#include <torch/extension.h>`, and parsing that
header is most of what g++ spends on it (20.9 s for a one-function main.cpp on a CI-like core;
8.0 s with the header precompiled). GCC looks for `<dir>/torch/extension.h.gch` in each include folder
before the header itself, and uses a precompiled header only where it is valid for the
compilation at hand: same compiler, same target options, and every macro the header reads
defined alike. Where none is valid it parses the header as usual. Optimisation defines
`__OPTIMIZE__`, which the header reads: one file serves builds without `-O`, one made with
`-O3` serves `-O1` to `-O3` (GCC 12 accepts it for each; `-march=native` and the like get
none). So a folder of precompiled headers that
candidates' compilers find first (the harness puts DIR on their `CPATH`, read-only in the
sandbox) changes how long a build takes, never what it compiles.

Written here rather than with torch's own `load_inline(use_pch=True)`: torch writes its
header into torch's install folder (read-only in the sandbox, shared by every candidate), and
its `load_inline` without `use_pch` deletes it there.

DIR gets `torch/extension.h.gch/` holding one file per flag set of VARIANTS, each written
under another name and renamed into place once complete (a compiler sees a whole file or
none), `torch/extension.h` beside it (FORWARDER), and `signature.json` saying what they were
made from. The forwarder is needed: once GCC has found a `.gch` for `torch/extension.h` in a
folder, a second `#include <torch/extension.h>` in the same file (most model-written
`cpp_sources` have their own after the one `load_inline` puts first) opens the header of
that folder, and without one fails with "No such file or directory". The forwarder includes
torch's own header, whose `#pragma once` (recorded in the precompiled header too) makes the
second include empty, as it is without kbench; where no precompiled header is valid, the
first include goes through it to torch's header as well. KIND is `cuda` or `cpu`: the
include folders torch gives a CUDA extension's C++ files or a C++ one's. A second helper
finding the folder locked (another run builds it) exits at once, or with KBENCH_PCH_WAIT=1
(`kbench setup`) waits for the first and then makes what is still missing. With
`KBENCH_CXX_HEADER=light` it also makes `DIR/<cxx_header.LIGHT>/`, first: the light C++ header
(`cxx_header.HEADER`) as `torch/extension.h`, written and dated as the forwarder is, and its
precompiled forms beside it.
"""

import fcntl
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time

from . import cxx_header
from .build_folder import write_if_changed, write_whole

# The extra_cflags model-written kernels pass: none or [''] most (KernelBenchLeaderboard: 472
# of 532 sites), then -O3 (60), which also serves -O1 and -O2. Most used first.
VARIANTS = (("plain", []), ("O3", ["-O3"]))
HEADER = os.path.join("torch", "extension.h")
FORWARDER = """// kbench: torch's own torch/extension.h. This folder holds its precompiled forms
// (extension.h.gch/); a compiler that uses one, or none, reads torch's header through here.
#pragma once
#include_next <torch/extension.h>
"""


def compile_args(kind):
    """(compiler, flags): the compiler and flags torch's extension builder gives a C++ file of
    an extension of `kind` (`_write_ninja_file_to_build_library`), less the extension's name,
    which torch/extension.h does not read."""
    from torch.utils import cpp_extension as ext

    includes = ext.include_paths("cuda" if kind == "cuda" else "cpu")
    py_include = sysconfig.get_path("include", scheme="posix_prefix")
    if py_include:
        includes.append(py_include)
    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H"]
    for inc in includes:
        flags += ["-isystem", inc]
    flags += ["-fPIC", "-std=c++17"]
    return ext.get_cxx_compiler(), flags, includes


def _compiler_version(compiler):
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else None


def signature(kind):
    """What the precompiled headers are made from; a folder whose signature differs is made
    again."""
    import torch
    from torch.utils import cpp_extension as ext

    compiler, flags, includes = compile_args(kind)
    header = next((os.path.join(i, HEADER) for i in includes if os.path.isfile(os.path.join(i, HEADER))), None)
    st = os.stat(header) if header else None
    return {
        "torch": torch.__version__,
        "header": header,
        "header_mtime_ns": st.st_mtime_ns if st else None,
        "compiler": compiler,
        "compiler_version": _compiler_version(compiler),
        "gcc": bool(ext.check_compiler_is_gcc(compiler)),
        "flags": flags,
        "variants": [name for name, _ in VARIANTS],
    }


def _torch_header_mtime_ns():
    """The date of torch's `torch/extension.h` where torch's package keeps it
    (`torch/include/`, the first include folder torch's builder gives), read without importing
    torch; None where it is not there."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        roots = list(spec.submodule_search_locations or []) if spec else []
    except (ImportError, ValueError):
        roots = []
    for root in roots:
        try:
            return os.stat(os.path.join(root, "include", HEADER)).st_mtime_ns
        except OSError:
            continue
    return None


def _write_json(path, value):
    write_whole(path, json.dumps(value, indent=1))


def _write_header(out_dir, text, header_mtime_ns):
    """`text` as DIR's `torch/extension.h` (FORWARDER, or cxx_header's light header), written
    only where missing or different, and dated like torch's own header. nvcc's and g++'s
    dependency files list every header a source opened, this one included wherever it was
    in sight, and ninja compiles an object again once one of those is newer than it:
    rewritten at every helper's start, it sent every CUDA object built before back to nvcc
    at its next load (a run stopped before its headers were complete, then the next run's
    helper). Written only when its text changes, no date of it can change what compiles."""
    path = os.path.join(out_dir, HEADER)
    write_if_changed(path, text)
    if header_mtime_ns:
        os.utime(path, ns=(header_mtime_ns, header_mtime_ns))


def _clear_stale(gch_dir, sig_path, sig):
    """Takes precompiled headers made from other headers or by another compiler (their
    folder's signature is not `sig`) out of the compilers' sight in one rename, then deletes
    them."""
    try:
        with open(sig_path) as f:
            same = json.load(f) == sig
    except (OSError, ValueError):
        same = False
    if not same and os.path.isdir(gch_dir):
        gone = f"{gch_dir}.{os.getpid()}.old"
        os.rename(gch_dir, gone)
        subprocess.run(["rm", "-rf", gone], check=False)


def _clear_leftovers(out_dir):
    """Partial files of a helper that was stopped (the run it served ended)."""
    for name in os.listdir(out_dir):
        if name.endswith(".partial"):
            try:
                os.unlink(os.path.join(out_dir, name))
            except OSError:
                pass


def build(out_dir, kind, jobs=1, log=sys.stderr):
    """Makes the missing precompiled headers in `out_dir`; returns how many are there."""
    os.makedirs(out_dir, exist_ok=True)
    lock = open(os.path.join(out_dir, ".lock"), "w")
    wait = os.environ.get("KBENCH_PCH_WAIT") == "1"
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        print("kbench pch: another process is making these headers", file=log)
        return 0
    # The light C++ header's folder where the setting is on (cxx_header), else None.
    light = os.path.join(out_dir, cxx_header.LIGHT) if cxx_header.enabled() else None
    if light:
        # The light header itself before `signature` imports torch (seconds on a host busy
        # with builds): builds that start meanwhile compile against it, without its
        # precompiled forms, rather than against torch's header and stay marked `full` for
        # every later load. Its text is fixed; its date is torch's header's, found without
        # importing torch (and written again below from the signature, changing nothing
        # where both found the same header).
        os.makedirs(os.path.join(light, "torch"), exist_ok=True)
        _write_header(light, cxx_header.HEADER, _torch_header_mtime_ns())
    try:
        sig = signature(kind)
    except Exception as exc:  # noqa: BLE001 (e.g. `cuda` without a CUDA toolkit: no headers)
        sig = {"none": f"torch gives no include folders for {kind} extensions: {exc}", "variants": []}
    if "none" not in sig and not (sig["gcc"] and sig["header"]):
        why = "the C++ compiler is not GCC" if sig["header"] else "torch/extension.h not found"
        sig = {"none": f"{why} ({sig['compiler']})", "variants": []}
    sig_path = os.path.join(out_dir, "signature.json")
    if "none" in sig:
        # Said once, in the signature: later runs do not start the helper again.
        _write_json(sig_path, sig)
        print(f"kbench pch: none made: {sig['none']}", file=log)
        return 0
    gch_dir = os.path.join(out_dir, HEADER + ".gch")
    _clear_stale(gch_dir, sig_path, sig)
    os.makedirs(gch_dir, exist_ok=True)
    _write_json(sig_path, sig)
    # Before any precompiled header is in sight (see FORWARDER).
    _write_header(out_dir, FORWARDER, sig.get("header_mtime_ns"))
    _clear_leftovers(out_dir)
    todo = []
    if light:
        # The light C++ header (cxx_header) and its precompiled forms, first: with the
        # setting on, builds use them, and torch's own only where a source needs more.
        light_gch = os.path.join(light, HEADER + ".gch")
        _clear_stale(light_gch, os.path.join(light, "signature.json"), sig)
        os.makedirs(light_gch, exist_ok=True)
        _write_json(os.path.join(light, "signature.json"), sig)
        _write_header(light, cxx_header.HEADER, sig.get("header_mtime_ns"))
        todo += [(light_gch, os.path.join(light, HEADER), "light " + n, n, x) for n, x in VARIANTS]
    todo += [(gch_dir, sig["header"], n, n, x) for n, x in VARIANTS]
    todo = [t for t in todo if not os.path.isfile(os.path.join(t[0], t[3] + ".gch"))]
    compiler, flags = sig["compiler"], sig["flags"]
    running = []
    made = len(VARIANTS) - sum(1 for t in todo if t[0] == gch_dir)
    while todo or running:
        while todo and len(running) < max(1, jobs):
            where, header, label, name, extra = todo.pop(0)
            partial = os.path.join(out_dir, f"{label.replace(' ', '-')}.{os.getpid()}.partial")
            cmd = [compiler, "-x", "c++-header", header, "-o", partial] + flags + extra
            t0 = time.time()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            running.append((where, label, name, partial, t0, cmd, proc))
        where, label, name, partial, t0, cmd, proc = running.pop(0)
        text = proc.communicate()[0].decode(errors="replace")
        if proc.returncode == 0:
            os.replace(partial, os.path.join(where, name + ".gch"))
            made += where == gch_dir
            print(f"kbench pch: {label} made in {time.time() - t0:.1f} s", file=log)
        else:
            print(f"kbench pch: {label} failed ({shlex.join(cmd[:2])} ... exit {proc.returncode}):\n{text[-2000:]}", file=log)
    return made


def pch_main(out_dir, kind):
    from .startup import _lower_priority

    _lower_priority()
    jobs = int(os.environ.get("KBENCH_PCH_JOBS", "1") or 1)
    made = build(out_dir, kind, jobs=jobs)
    print(json.dumps({"made": made}))
    return 0
