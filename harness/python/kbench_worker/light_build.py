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
does not resolve it. That library would fail only at import, after the build. So the library
a run built light is read (`undefined_symbols`, without loading it), and one left with an
undefined symbol torch's header may define is treated as a refusal: every kind built light is
compiled again with torch's own header, and the import then succeeds or fails as it would
without kbench. Where a link resolves symbols itself (an executable, `load(...,
is_standalone=True)`, or a library linked with `-z defs`) the light header's gap is the link's
failure: a failed link sends every light kind back too."""

import os
import re
import threading

from . import build_folder, cuda_header, cxx_header, undefined_symbols

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


# torch's link step in build.ninja: `build NAME.so: link OBJECTS` for an extension,
# `build NAME: link OBJECTS` for an executable (`load(..., is_standalone=True)`).
_LINK_EDGE = re.compile(r"^build (.+?)(?<!\$): link ")


def unresolved(build_directory):
    """Why a shared library of the build folder may not load where torch's own header would
    have given one that does (`undefined_symbols`, words that follow "the light build"), else
    None."""
    for library in build_folder.edge_outputs(build_directory, _LINK_EDGE) or ():
        if library.endswith(".so") and os.path.isfile(library):
            why = undefined_symbols.why_not_loadable(library)
            if why is not None:
                return why
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
                failed = set(build_folder.failed_steps(build_directory, exc))
                # Without a step named (ninja said nothing of one), or where a link failed
                # (an executable's symbols are resolved there, and so are a library's linked
                # with `-z defs`), every light kind again.
                links = set(build_folder.edge_outputs(build_directory, _LINK_EDGE) or ())
                every = not failed or bool(failed & links)
                cuda_again = cuda_folder is not None and (every or bool(failed & set(cuda_objects or ())))
                cxx_again = cxx_folder is not None and (every or bool(failed & set(cxx_objects or ())))
                if not (cuda_again or cxx_again):
                    # The steps that failed saw torch's own header: a light header does not
                    # change them.
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
                why = f"the light build {undefined}"
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
