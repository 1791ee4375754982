"""Why a load compiles again: in an evaluating worker, a ninja run in a build folder that
already holds a build (its build job's, made ahead, or an earlier run's) first asks ninja
what it would do and why (`ninja -n -d explain`), and writes ninja's reasons to the worker's
log when there is work to do.

A build made ahead is meant to leave the evaluating worker nothing to compile; when it does
compile (a command line that differs between the two, a dependency that is missing or newer
in the worker's view), the seconds show in `compile_s` and nothing else says why. ninja's
`-d explain` says it per output ("command line changed for main.o", "output cuda.cuda.o older
than most recent input ..."), which is what finding such a fault needs.

The dry run writes nothing (ninja opens neither its log nor its dependency log for writing
with `-n`), runs only where a `.ninja_log` says an earlier ninja run left a build, and is
bounded in time; any failure of it is ignored and the build goes on as it would have. It
costs one more ninja start on every load whose folder holds a build, warm loads included:
0.01-0.02 s here on a CUDA build whose dependency log names 5,795 headers. What it prints is
the candidate's own log, as untrusted as the rest of that log.

Why by hand: ninja's reasons exist only on its stderr with `-d explain`, and torch runs
ninja itself (`_run_ninja_build`, wrapped as `build_failures` wraps it)."""

import os
import subprocess
import sys

from .build_failures import wrap_ninja_run

# ninja's lines of `-d explain`.
_PREFIX = "ninja explain: "
# At most this many reasons in the log, and this long for the dry run.
_MAX_LINES = 12
_TIMEOUT_S = 20


def reasons(build_directory):
    """ninja's reasons for the work it would do in `build_directory`, or [] where it would do
    none, the folder holds no earlier build, or the dry run fails."""
    if not os.path.isfile(os.path.join(build_directory, ".ninja_log")):
        return []
    try:
        out = subprocess.run(
            ["ninja", "-n", "-d", "explain"],
            cwd=build_directory,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if "no work to do" in out.stdout:
        return []
    lines = (out.stdout + out.stderr).splitlines()
    return [line[len(_PREFIX):] for line in lines if line.startswith(_PREFIX)]


def _say(build_directory, found):
    shown = found[:_MAX_LINES]
    more = f" (and {len(found) - len(shown)} more)" if len(found) > len(shown) else ""
    text = "".join(f"\n  {line}" for line in shown)
    try:
        print(f"kbench: ninja compiles again in {build_directory}, which holds a build{more}:{text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _explaining(original):
    def run(build_directory, verbose, error_prefix):
        found = reasons(build_directory)
        if found:
            _say(build_directory, found)
        return original(build_directory, verbose, error_prefix)

    return run


def install(cpp_extension):
    """An evaluating worker: each of torch's ninja runs says first why it compiles again."""
    wrap_ninja_run(cpp_extension, _explaining, "_kbench_explains")
