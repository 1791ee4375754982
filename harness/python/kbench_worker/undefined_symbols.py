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
are there wherever g++ links (binutils). Where they are not, or cannot read the library, the
library counts as one that may not load: it is built again with torch's header, and its
build folder's marker says why. They run with `LC_ALL=C`, so that `readelf`'s words are not
translated."""

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
    (
        "at",
        "c10",
        "c10d",
        "c10_complex_math",
        "torch",
        "caffe2",
        "pybind11",
        "strong",
        "fmt",
        "ska",
        "ska_ordered",
        "__gnu_cxx",
        "__gnu_debug",
        "__pstl",
        "__cxxabiv1",
    )
)
_TOOL_S = 60
_NM, _READELF = "nm", "readelf"
# The tools' words untranslated (`readelf` translates "Shared library"), whatever the
# candidate's locale.
_TOOL_ENV = {"LC_ALL": "C"}


class _Unread(Exception):
    """A tool could not read the library: why, in a few words."""


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
    """The tool's output (bytes a locale cannot decode kept, as surrogates), else `_Unread`."""
    try:
        done = subprocess.run(args, capture_output=True, timeout=_TOOL_S, env={**os.environ, **_TOOL_ENV})
    except FileNotFoundError:
        raise _Unread(f"{args[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise _Unread(f"{args[0]} took over {_TOOL_S} s") from None
    except OSError as exc:
        raise _Unread(f"{args[0]} did not start: {exc.strerror}") from None
    if done.returncode != 0:
        raise _Unread(f"{args[0]} exited with {done.returncode}")
    return done.stdout.decode("utf-8", "surrogateescape")


def _undefined(library):
    """The library's strong undefined dynamic symbols (versions cut off)."""
    names = []
    for line in _tool([_NM, "-D", "--undefined-only", "--format=posix", library]).splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] == "U":
            names.append(parts[0].split("@", 1)[0])
    return names


def _needed(library):
    """The sonames the library names (`DT_NEEDED`)."""
    return re.findall(r"\(NEEDED\)[^\[]*\[([^\]]+)\]", _tool([_READELF, "-d", "--wide", library]))


def _defines(handle, symbol):
    try:
        handle[symbol]
    except (AttributeError, ValueError):
        # Not found, or a name dlsym cannot be asked for (bytes no encoding gives back):
        # undefined, which costs a build of torch's header at most.
        return False
    return True


def _told(symbol):
    """A symbol as a marker may say it (bytes that are no UTF-8 escaped)."""
    return symbol.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")[:200]


def why_not_loadable(library):
    """Why the library may not load where torch's own header would have given one that does,
    in words that follow "the light build": "left SYMBOL undefined" for the first symbol, in
    the library's own order, that it needs, a header may define and nothing loaded defines;
    "could not be read for undefined symbols (...)" where the tools could not say, which
    counts the same (a build of torch's header at most, never a verdict of the light one
    that went unchecked); None where every such symbol is defined."""
    try:
        wanted = [s for s in _undefined(library) if headers_may_define(s)]
        if not wanted:
            return None
        needed = _needed(library)
    except _Unread as exc:
        return f"could not be read for undefined symbols ({exc})"
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
            return f"left {_told(symbol)} undefined"
    return None
