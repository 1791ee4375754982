"""Whether a shared library a light build linked needs a symbol that torch's own header may
define and nothing loaded does, found without loading the library (`light_build`).

A compiler that accepts a source with a light header can still leave a symbol undefined: a
template declared where the light header reaches and defined only where torch's own does is
compiled as a call to an instantiation nobody emits, and the linker, making a shared library,
leaves it to the loader. Such a library fails only at import, after the build, where torch's
own header would have given a library that loads.

The library is read, not loaded: loading it would run the candidate's static initializers
inside the build (torch holds its build folder's lock file then, and a process that aborts
there leaves the lock behind for every later load of the folder), before they would run
without kbench. Its undefined dynamic symbols (`nm -D`, the strong ones: a weak one never fails
a load) are each looked up, as the loader would, in the process's global scope and in the
libraries the extension names (`DT_NEEDED`, `readelf -d`) that are loaded already
(`RTLD_NOLOAD`: nothing new is loaded); every one is looked at, not only the first a loader
would meet. Only a symbol a header may define counts (`headers_may_define`): one of the
candidate's own, a function it declares and never defines (the commonest load failure of
generated kernels), fails the same with either header.

Why by hand: neither torch nor the linker checks this (`--no-undefined` refuses every
extension, whose Python symbols come from the interpreter), and binutils' `nm` and `readelf`
are there wherever g++ links. Where they are not, or cannot read the library, nothing is
said: the build stands as built."""

import ctypes
import os
import re
import subprocess

# The outermost name of an Itanium-mangled symbol (of a vtable, type info or guard variable
# too), where it is one: `_ZN2at6native3fooEv` -> `at`.
_OUTERMOST = re.compile(r"_Z(?:T[VIS]|GV)?(?:N[rVK]*[RO]?)?(\d+)")
# The outermost namespaces of what torch's full header declares beyond the light ones (torch
# 2.11: torch, at, c10, std, and c10's strong and fmt), with the other names its libraries and
# headers use, so that a later torch's do not pass for the candidate's.
_TORCH_SCOPES = frozenset(
    ("at", "c10", "c10d", "torch", "caffe2", "pybind11", "strong", "fmt", "ska", "ska_ordered", "__gnu_cxx", "__cxxabiv1")
)
_TOOL_S = 60


def headers_may_define(symbol):
    """Whether torch's own header may define `symbol` where a light one left it undefined:
    False for an unmangled (C) symbol and for a mangled one whose outermost name is the
    candidate's; True for torch's namespaces, `std` and whatever this cannot read."""
    if not symbol.startswith("_Z"):
        return False
    m = _OUTERMOST.match(symbol)
    if m is None:
        return True
    return symbol[m.end() : m.end() + int(m.group(1))] in _TORCH_SCOPES


def _tool(args):
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=_TOOL_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _undefined(library):
    """The library's strong undefined dynamic symbols (versions cut off), or None where `nm`
    cannot say."""
    out = _tool(["nm", "-D", "--undefined-only", "--format=posix", library])
    if out is None:
        return None
    names = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] == "U":
            names.append(parts[0].split("@", 1)[0])
    return names


def _needed(library):
    """The sonames the library names (`DT_NEEDED`), or None where `readelf` cannot say."""
    out = _tool(["readelf", "-d", "--wide", library])
    if out is None:
        return None
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _defines(handle, symbol):
    try:
        handle[symbol]
    except AttributeError:
        return False
    return True


def first_unresolved(library):
    """The first symbol, in the library's own order, that it needs, a header may define and
    nothing loaded defines; None where there is none, or the tools cannot say."""
    wanted = _undefined(library)
    if not wanted:
        return None
    wanted = [s for s in wanted if headers_may_define(s)]
    if not wanted:
        return None
    needed = _needed(library)
    if needed is None:
        return None
    handles = [ctypes.CDLL(None)]
    for soname in needed:
        try:
            handles.append(ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
        except OSError:
            # Not loaded: the import would load it, and what it defines is not known here;
            # its symbols count as undefined, which costs a build of torch's header at most.
            pass
    for symbol in wanted:
        if not any(_defines(h, symbol) for h in handles):
            return symbol
    return None
