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


def _drop_privileges():
    """KBENCH_WORKER_UID=N (set by the harness for untrusted workers in its sandbox when it
    runs as root): this process becomes uid and gid N with no supplementary groups, before
    anything but the standard library has run, so that files only root may read (the host's
    /etc/shadow, a 0600 file in a folder the sandbox shows) stay unreadable to the candidate.
    The sandbox grants exactly CAP_SETUID and CAP_SETGID for this; setuid() to a non-zero uid
    clears every capability, and bubblewrap's no_new_privs keeps them from coming back.
    Returns an error text, or None when done (or not asked for)."""
    wanted = os.environ.get("KBENCH_WORKER_UID")
    if not wanted:
        return None
    try:
        uid = int(wanted)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except (ValueError, OSError) as exc:
        return f"could not become uid {wanted}: {exc}"
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
        return f"still uid {os.getresuid()} gid {os.getresgid()} groups {os.getgroups()} after becoming uid {uid}"
    try:
        os.setuid(0)
    except OSError:
        return None
    return f"could become root again after becoming uid {uid}"


def _die_with_harness(proto_in):
    """KBENCH_HARNESS_PID=N (the harness always sets it): this process gets SIGKILL when the
    harness ends, however it ends (SIGKILL included), through the kernel's parent-death signal
    (PR_SET_PDEATHSIG; the harness starts every worker from one thread that lives as long as
    it does, and the signal fires when the thread that forked the worker exits). Set here, after
    any change of uid (which clears it) and before torch or any problem or candidate code.
    A harness that ended before the signal was set is found by the checks after it: the
    worker's parent is no longer N (outside the sandbox, where the harness is the parent), or
    the harness's end of the protocol pipe is closed (anywhere; inside the sandbox the parent
    is bubblewrap, whose own --die-with-parent ends the sandbox once it is set). Standard
    library only (ctypes), as nothing else is imported yet."""
    harness = os.environ.get("KBENCH_HARNESS_PID")
    if not harness or not sys.platform.startswith("linux"):
        return
    import ctypes
    import select
    import signal

    PR_SET_PDEATHSIG = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError, ValueError):
        pass
    if os.environ.get("KBENCH_SANDBOX") != "1" and str(os.getppid()) != harness:
        os._exit(0)
    poll = select.poll()
    poll.register(proto_in, select.POLLHUP)
    if any(ev & (select.POLLHUP | select.POLLERR) for _, ev in poll.poll(0)):
        os._exit(0)


def _cap_address_space():
    """KBENCH_MEMORY_CAP_RLIMIT=N (set by the harness where no cgroup caps the worker's
    memory, on the CPU device): the process may map at most N bytes more than it has mapped
    once torch is imported (RLIMIT_AS, soft and hard; an unprivileged process cannot raise a
    hard limit). torch maps about 3 GiB of shared libraries that use little memory, so the cap
    counts from there. Called after torch's import and before any problem or candidate code.
    Returns the limit set, bytes, or None."""
    extra = os.environ.get("KBENCH_MEMORY_CAP_RLIMIT")
    if not extra:
        return None
    import resource

    mapped = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    mapped = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    limit = mapped + int(extra)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit
