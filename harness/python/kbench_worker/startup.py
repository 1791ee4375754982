"""The process's set-up before torch is imported: the protocol's private fds, PATH, and
the niceness of build jobs. Standard library only."""

import os
import sys


def _take_protocol_fds():
    """Moves the protocol onto private fds before any other code can print.

    Afterwards fd 0 reads /dev/null and fd 1 is a copy of fd 2, so whatever the problem or
    the candidate writes (Python print, C printf, ninja/nvcc output of an extension build)
    lands on stderr, which the harness drains and truncates, and never on the protocol.
    os.dup returns non-inheritable fds, so build subprocesses do not get them either.
    """
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    # Python-level writes to sys.stdout go straight to stderr as well, with no buffer of
    # their own that could interleave oddly with stderr.
    sys.stdout = sys.stderr
    return proto_in, proto_out


def _put_interpreter_bin_on_path():
    """Puts the interpreter's bin directory first on PATH, as activating its venv would.

    The harness starts `<venv>/bin/python -m kbench_worker` without activating anything, and
    torch.utils.cpp_extension finds `ninja` (installed in that venv) through PATH only.
    """
    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bin_dir and bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")


def _lower_priority():
    """KBENCH_NICE=N (set by the harness for its build-ahead jobs): this process and the
    compilers it starts run at niceness N, so a compile pipeline that fills every core takes
    only what the evaluation's own processes leave (an unprivileged process can never raise
    its priority back)."""
    n = os.environ.get("KBENCH_NICE")
    if n and n.isdigit() and hasattr(os, "nice"):
        try:
            os.nice(int(n))
        except OSError:
            pass
