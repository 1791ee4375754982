"""torch's ninja run with the light headers where they are chosen: a CUDA source's
(`cuda_header`, `KBENCH_CUDA_HEADER=light`) and a C++ source's (`cxx_header`,
`KBENCH_CXX_HEADER=light`), each first, each with torch's own header again where the compiler
refuses the light build.

One ninja run compiles both kinds, and the two settings reach the compilers through the
process's environment (`NVCC_APPEND_FLAGS`, `CPATH`), which ninja does not see: objects built
one way are kept by a later run the other way. So each kind's objects are removed before its
sources compile again with torch's header, and its build folder is marked for every later
load. nvcc's host compiler reads `CPATH` as well: the light C++ folder is on it only where no
CUDA source compiles with torch's own header in the same run, and where a CUDA source needs
torch's header the C++ objects compile again with torch's too (a binding built light is
removed), so that a build folder's sources saw one header each way, said by its markers.

A compiler that accepts a source with the light header can still leave a symbol undefined: a
template declared where the light header reaches and defined only where torch's own does is
compiled as a call to an instantiation nobody emits, and the linker, making a shared library,
does not resolve it. That library would fail only at import, after the build. So a run that
built a kind light loads the library it linked as Python's import will (`RTLD_NOW`, every
symbol resolved), and one left with an undefined symbol a header may define (of torch's
namespaces or `std`) is treated as a refusal: every kind built light is compiled again with
torch's own header, and the import then succeeds or fails as it would without kbench."""

import ctypes
import os
import re
import threading

from . import cuda_header, cxx_header

# The variables are the process's: one build at a time changes them (a candidate may load
# extensions from several threads).
_LOCK = threading.Lock()


class _Setting:
    """An environment variable set for one ninja run, then put back as it was."""

    def __init__(self, name, value):
        self.name, self.value, self.before = name, value, os.environ.get(name)

    def __enter__(self):
        if self.value is not None:
            os.environ[self.name] = self.value

    def __exit__(self, *exc):
        if self.before is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.before


# A shared library's link step of torch's build.ninja: `build NAME.so: link OBJECTS` (an
# executable's, `load(..., is_standalone=True)`, has no `.so` and is not loaded).
_LINK_EDGE = re.compile(r"^build (.+?\.so)(?<!\$): link ")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
# The outermost name of an Itanium-mangled symbol (of a vtable, type info or guard variable
# too), where it is one: `_ZN2at6native3fooEv` -> `at`. A symbol a header can leave undefined
# names something of that header's, so only a symbol of torch's namespaces, of `std` or one
# this cannot read sends a build back: one of the candidate's own (a function it declares and
# never defines, the commonest load failure of generated kernels) fails the same with either
# header, and building it again would cost a whole build for nothing.
_OUTERMOST = re.compile(r"_Z(?:T[VIS]|GV)?(?:N[rVK]*[RO]?)?(\d+)")
_TORCH_SCOPES = frozenset(("at", "c10", "torch", "caffe2", "pybind11"))


def headers_may_define(symbol):
    """Whether torch's own header may define `symbol` where the light one left it undefined:
    False for an unmangled (C) symbol and for a mangled one whose outermost name is the
    candidate's; True for torch's namespaces, `std` and whatever else."""
    if not symbol.startswith("_Z"):
        return False
    m = _OUTERMOST.match(symbol)
    if m is None:
        return True
    return symbol[m.end() : m.end() + int(m.group(1))] in _TORCH_SCOPES


def unresolved(build_directory):
    """The symbol a shared library of the build folder needs, nothing loaded defines (dlopen's
    word for it, the first it meets) and torch's own header may (`headers_may_define`), else
    None. The library is loaded as Python's import loads an extension
    (`RTLD_NOW`): the import that follows the build finds it loaded, and its static
    initializers run once, here instead of there, in the same process a moment earlier. Why
    by hand: neither torch nor the linker checks this (`--no-undefined` would refuse every
    extension, whose Python symbols come from the interpreter)."""
    for library in cuda_header.edge_outputs(build_directory, _LINK_EDGE) or ():
        if not os.path.isfile(library):
            continue
        try:
            ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as exc:
            # The symbol alone: the message's path is the build folder's.
            symbol = _UNDEFINED.search(str(exc))
            if symbol is not None and headers_may_define(symbol.group(1)):
                return symbol.group(1)
    return None


def _remove(paths):
    for p in paths or ():
        try:
            os.remove(p)
        except OSError:
            pass


def run(original, build_directory, verbose, error_prefix):
    """torch's ninja run (`original`), light first for each kind where chosen and possible;
    torch's own header for a kind whose light build its compiler refuses. At most three runs:
    each failed run that names a step of a kind still built light (or names none) sends that
    kind back to torch's header, so a kind refused only in a later run (ninja stops at the
    first failure, and one step at a time with MAX_JOBS=1) is sent back too; a failure no
    light header can have caused is the build's own, raised as without kbench."""
    cuda_on, cxx_on = cuda_header.enabled(), cxx_header.enabled()
    if not (cuda_on or cxx_on):
        return original(build_directory, verbose, error_prefix)
    with _LOCK:
        cuda_objects = cuda_header.cuda_objects(build_directory)
        cuda_folder = None
        # A folder whose CUDA objects were built with torch's header stays so (the flag is
        # not seen by ninja: a light run would take them as built light).
        if cuda_on and cuda_objects is not None and not cuda_header.marked(build_directory).startswith("full"):
            cuda_folder = cuda_header.write_header(build_directory)
        cxx_objects = cxx_header.objects(build_directory)
        cxx_folder, cxx_why = None, None
        if cxx_on and cxx_objects is not None:
            if cxx_header.marked(build_directory).startswith("full"):
                pass
            elif cuda_objects is not None and cuda_folder is None:
                cxx_why = "the folder's CUDA sources compile with torch's own header"
            else:
                cxx_folder = cxx_header.light_folder()
                if cxx_folder is None:
                    cxx_why = "the light header was not made when it built"
        if cxx_why is not None and not cxx_header.marked(build_directory):
            # Built with torch's header now, so kept so: a later load that finds the light
            # header made must not take these objects for light ones (ninja does not see CPATH).
            cxx_header.mark(build_directory, f"full: torch/extension.h ({cxx_why})")
        if cuda_folder is None and cxx_folder is None:
            return original(build_directory, verbose, error_prefix)
        before_flags = os.environ.get("NVCC_APPEND_FLAGS")
        while True:
            nvcc_flags = None
            if cuda_folder is not None:
                nvcc_flags = (before_flags + " " if before_flags else "") + "-I" + cuda_folder
            cpath = cxx_header.with_folder_first(cxx_folder) if cxx_folder is not None else None
            try:
                with _Setting("NVCC_APPEND_FLAGS", nvcc_flags), _Setting("CPATH", cpath):
                    result = original(build_directory, verbose, error_prefix)
            except RuntimeError as exc:
                if cuda_folder is None and cxx_folder is None:
                    raise
                failed = set(cuda_header.failed_steps(build_directory, exc))
                # Without a step named (ninja said nothing of one), every light kind again.
                cuda_again = cuda_folder is not None and (not failed or bool(failed & set(cuda_objects or ())))
                cxx_again = cxx_folder is not None and (not failed or bool(failed & set(cxx_objects or ())))
                if not (cuda_again or cxx_again):
                    # The steps that failed saw torch's own header, or none (the link): a
                    # light header does not change them.
                    raise
                why = "the light build failed"
            else:
                if cuda_folder is None and cxx_folder is None:
                    return result
                undefined = unresolved(build_directory)
                if undefined is None:
                    if cuda_folder is not None:
                        cuda_header.mark(build_directory, "light: torch/types.h")
                    if cxx_folder is not None:
                        cxx_header.mark(build_directory, "light: torch/types.h + torch/python.h")
                    return result
                # Which kind's object wants the symbol is not asked: every light kind again
                # (ninja links anew from the new objects).
                cuda_again, cxx_again = cuda_folder is not None, cxx_folder is not None
                why = f"the light build left {undefined[:200]} undefined"
            # Again with torch's own header for each kind refused light; a kind built light
            # stays so, but C++ sources never see the light folder beside a CUDA source that
            # compiles with torch's header (CPATH reaches nvcc's host compiler).
            if cuda_again:
                _remove(cuda_objects)
                cuda_header.mark(build_directory, f"full: torch/extension.h ({why})")
                cuda_folder = None
                if cxx_folder is not None and not cxx_again:
                    cxx_again = True
                    why = "a CUDA source of the folder needed torch's own header"
            if cxx_again:
                _remove(cxx_objects)
                cxx_header.mark(build_directory, f"full: torch/extension.h ({why})")
                cxx_folder = None
