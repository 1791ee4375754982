"""A build that failed in its build job fails again in the evaluating worker without the
compiler.

A candidate whose extension does not compile used to be compiled twice: once by its build
job, ahead, and once more by its evaluating worker, on the GPU's critical path (13-15 s of
nvcc on an H200 for a CUDA source with one undeclared name). The build job records a failed
ninja run beside the build (`kbench-build-failed.json`: the hash of `build.ninja`, the hash
of every source it compiles, torch's error message, ninja's status); the evaluating worker's
ninja run, when `build.ninja` and every source are exactly what failed, raises the same
RuntimeError with the same message at once. The candidate sees what it would have seen: a
candidate that catches the error and falls back to another path still does.

Only a failure the compiler reported is recorded: ninja's status between 1 and 127 (ninja
1.13 exits with the failed command's own status, e.g. nvcc's 2; older ninja with 1) and
every failed command's status below 128. A compiler killed by a signal (out of memory, a
timeout) is not a property of the source, and is tried again in place.

Both wrappers run ninja as torch does without `verbose`, whatever the candidate asked: torch
then captures the compiler's output and puts it in the error's message, so that the
record's `compile_error` says what the compiler said and the build job's record can tell a
compiler's verdict from a kill (`[code=N]`). With `verbose=True` torch prints that output
and raises only "Error building extension 'NAME'" (seen on KernelBenchLeaderboard: three
kernels that no longer compile against torch 2.11 said only that, and each was compiled
twice). A failure's output is still printed when `verbose` asked for it; a candidate
loses only the progress lines of a build that succeeds.

Why by hand: torch has no hook for its ninja runs; `_run_ninja_build` is its private
function, wrapped only where it exists with the signature this module knows. The record lies
in the candidate's own content-addressed build folder, written by its own build job: a
forged record can only make that candidate's own build fail, which its code could do
anyway."""

import inspect
import json
import os
import re
import subprocess

from . import light_build
from .written_sources import file_sha256

RECORD = "kbench-build-failed.json"
NINJA_FILE = "build.ninja"

# ninja's "FAILED: [code=N]" for each command that failed.
_CODE = re.compile(r"\[code=(\d+)\]")
# A build edge of ninja's file: `build OUT: RULE INPUT ...` (torch writes one input per edge).
_EDGE = re.compile(r"^build [^:]+: \S+ (.+)$")


def _inputs(build_directory):
    """The sources `build.ninja` compiles (ninja's `$ ` and `$:` escapes undone), as
    absolute paths."""
    out = []
    with open(os.path.join(build_directory, NINJA_FILE)) as f:
        for line in f:
            m = _EDGE.match(line.rstrip("\n"))
            if not m:
                continue
            for p in re.split(r"(?<!\$) ", m.group(1)):
                p = p.replace("$ ", " ").replace("$:", ":").replace("$$", "$")
                path = os.path.abspath(os.path.join(build_directory, p))
                if p and not p.endswith(".o") and os.path.isfile(path):
                    out.append(path)
    return out


def _state(build_directory):
    """`build.ninja`'s hash and each source's, or None when one cannot be read."""
    try:
        return {
            "ninja_sha256": file_sha256(os.path.join(build_directory, NINJA_FILE)),
            "inputs": {p: file_sha256(p) for p in _inputs(build_directory)},
        }
    except (OSError, ValueError):
        return None


def compiler_reported(exc):
    """Whether a failed ninja run is the compiler's verdict on the source (not a kill)."""
    cause = exc.__cause__
    if not isinstance(cause, subprocess.CalledProcessError) or not 0 < cause.returncode < 128:
        return False
    codes = [int(c) for c in _CODE.findall(str(exc))]
    return bool(codes) and all(c < 128 for c in codes)


def _quiet(original, build_directory, verbose, error_prefix):
    """torch's ninja run without `verbose` (see above); a failure's output, which `verbose`
    would have shown, is printed too. The headers as `light_build` says: the failure
    recorded or replayed is the last run's."""
    try:
        return light_build.run(original, build_directory, False, error_prefix)
    except RuntimeError as exc:
        _say(exc, verbose)
        raise


def _say(error, verbose):
    """What a verbose build shows of a failure: its output (a candidate that closed its
    stdout gets nothing, and still its error)."""
    if verbose:
        try:
            print(error, flush=True)
        except (OSError, ValueError):
            pass


def _recording(original):
    def run(build_directory, verbose, error_prefix):
        try:
            return _quiet(original, build_directory, verbose, error_prefix)
        except RuntimeError as exc:
            state = _state(build_directory) if compiler_reported(exc) else None
            if state is not None:
                state["message"] = str(exc)
                state["status"] = exc.__cause__.returncode
                try:
                    with open(os.path.join(build_directory, RECORD), "w") as f:
                        json.dump(state, f)
                except OSError:
                    pass
            raise

    return run


def _replaying(original):
    def run(build_directory, verbose, error_prefix):
        try:
            with open(os.path.join(build_directory, RECORD)) as f:
                seen = json.load(f)
        except (OSError, ValueError):
            seen = None
        if isinstance(seen, dict) and isinstance(seen.get("message"), str):
            now = _state(build_directory)
            if now is not None and now["inputs"] and all(now[k] == seen.get(k) for k in ("ninja_sha256", "inputs")):
                status = seen.get("status")
                status = status if isinstance(status, int) and 0 < status < 128 else 1
                cause = subprocess.CalledProcessError(status, ["ninja", "-v"])
                _say(seen["message"], verbose)
                raise RuntimeError(seen["message"]) from cause
        return _quiet(original, build_directory, verbose, error_prefix)

    return run


def wrapped_with(fn, mark):
    """Whether `fn` or a function it wraps (`__wrapped__`, as kbench's wrappers of torch's
    ninja run set it) carries `mark`: a second load in the same worker wraps nothing twice,
    whichever wrapper is outermost."""
    seen = 0
    while fn is not None and seen < 16:
        if getattr(fn, mark, False):
            return True
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return False


def wrap_ninja_run(cpp_extension, wrap, mark):
    """torch's ninja run replaced by `wrap(original)`, marked `mark`, once, and only where it
    has the signature these wrappers know (another torch: left alone, and only the wrapper's
    saving is lost)."""
    original = getattr(cpp_extension, "_run_ninja_build", None)
    if original is None or wrapped_with(original, mark):
        return
    try:
        params = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return
    if params != ["build_directory", "verbose", "error_prefix"]:
        return
    run = wrap(original)
    setattr(run, mark, True)
    run.__wrapped__ = original
    cpp_extension._run_ninja_build = run


def install_recording(cpp_extension):
    """A build job: a failed ninja run the compiler reported is recorded beside the build."""
    wrap_ninja_run(cpp_extension, _recording, "_kbench_records_failures")


def install_replaying(cpp_extension):
    """An evaluating worker: a ninja run that failed in the build job, on the same
    `build.ninja` and sources, raises the same error without running ninja."""
    wrap_ninja_run(cpp_extension, _replaying, "_kbench_replays_failures")
