"""The worker's bounds, set at start-up before any problem or candidate code: it ends with the
harness (parent-death signal, and the checks that close its race), it becomes the uid the
harness asks for, and it caps its own address space. Each runs in a child process, so that
nothing here changes the test's own process."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from .support import HERE, PYTHON

LINUX = sys.platform.startswith("linux")


def child(code, env_extra, **kw):
    """A Python child running `code` with the worker package importable."""
    env = dict(os.environ, **env_extra)
    for k in ("KBENCH_HARNESS_PID", "KBENCH_SANDBOX", "KBENCH_WORKER_UID", "KBENCH_MEMORY_CAP_RLIMIT"):
        if k not in env_extra:
            env.pop(k, None)
    return subprocess.Popen([PYTHON, "-c", textwrap.dedent(code)], cwd=HERE, env=env, **kw)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@unittest.skipUnless(LINUX, "the parent-death signal is Linux's")
class DiesWithHarnessTests(unittest.TestCase):
    def test_a_sleeping_worker_dies_when_its_harness_is_killed(self):
        # The "harness" starts the worker with its own pid and holds the worker's stdin, then
        # sleeps; the worker sleeps too, so only the parent-death signal can end it.
        harness = child(
            f"""
            import os, subprocess, sys, time
            w = subprocess.Popen(
                [{PYTHON!r}, "-c",
                 "import sys, time\\n"
                 "from kbench_worker.startup import _die_with_harness\\n"
                 "_die_with_harness(0)\\n"
                 "print('armed', flush=True)\\n"
                 "time.sleep(600)\\n"],
                cwd={HERE!r}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                env=dict(os.environ, KBENCH_HARNESS_PID=str(os.getpid())))
            assert w.stdout.readline().strip() == b"armed"
            print(w.pid, flush=True)
            time.sleep(600)
            """,
            {},
            stdout=subprocess.PIPE,
        )
        try:
            worker = int(harness.stdout.readline())
            self.assertTrue(alive(worker))
            harness.send_signal(signal.SIGKILL)
            harness.wait()
            deadline = time.monotonic() + 10
            while alive(worker) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertFalse(alive(worker), "the worker outlived its killed harness")
        finally:
            harness.kill()
            harness.wait()
            harness.stdout.close()

    def test_a_worker_whose_harness_is_not_its_parent_exits_at_once(self):
        # The harness ended before the signal was set: the worker's parent is another process.
        w = child(
            """
            import time
            from kbench_worker.startup import _die_with_harness
            _die_with_harness(0)
            time.sleep(600)
            """,
            {"KBENCH_HARNESS_PID": "1"},
            stdin=subprocess.PIPE,
        )
        self.assertEqual(w.wait(timeout=30), 0)
        w.stdin.close()

    def test_a_sandboxed_worker_whose_harness_closed_the_pipe_exits_at_once(self):
        # In the sandbox the parent is bwrap: the harness's end of the protocol pipe tells.
        r, wr = os.pipe()
        os.close(wr)
        w = child(
            """
            import time
            from kbench_worker.startup import _die_with_harness
            _die_with_harness(0)
            time.sleep(600)
            """,
            {"KBENCH_HARNESS_PID": str(os.getpid()), "KBENCH_SANDBOX": "1"},
            stdin=r,
        )
        os.close(r)
        self.assertEqual(w.wait(timeout=30), 0)


@unittest.skipUnless(LINUX and os.geteuid() == 0, "only root can change uid")
class DropPrivilegesTests(unittest.TestCase):
    def test_the_worker_becomes_the_uid_and_cannot_read_roots_files_nor_come_back(self):
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("root's")
        os.chmod(f.name, 0o600)
        try:
            w = child(
                f"""
                import os
                from kbench_worker.startup import _drop_privileges
                assert _drop_privileges() is None
                print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
                try:
                    open({f.name!r}).read()
                    print("read")
                except PermissionError:
                    print("refused")
                try:
                    os.setuid(0)
                    print("root again")
                except PermissionError:
                    print("stays")
                """,
                {"KBENCH_WORKER_UID": "65534"},
                stdout=subprocess.PIPE,
            )
            out = w.communicate(timeout=30)[0].decode().split("\n")
            self.assertEqual(out[:3], ["65534 65534 65534 []", "refused", "stays"])
        finally:
            os.unlink(f.name)

    def test_no_uid_asked_for_leaves_the_worker_as_it_is(self):
        w = child(
            "from kbench_worker.startup import _drop_privileges\nimport os\n"
            "print(_drop_privileges(), os.getuid())",
            {},
            stdout=subprocess.PIPE,
        )
        self.assertEqual(w.communicate(timeout=30)[0].decode().strip(), "None 0")


@unittest.skipUnless(os.path.exists("/proc/self/status"), "needs /proc")
class AddressSpaceCapTests(unittest.TestCase):
    def test_an_allocation_past_the_cap_is_refused(self):
        w = child(
            """
            from kbench_worker.startup import _cap_address_space
            limit = _cap_address_space()
            small = bytearray(64 << 20)
            try:
                bytearray(1 << 30)
                print(limit, "allocated")
            except MemoryError:
                print(limit, "refused")
            """,
            {"KBENCH_MEMORY_CAP_RLIMIT": str(256 << 20)},
            stdout=subprocess.PIPE,
        )
        limit, what = w.communicate(timeout=30)[0].decode().split()
        self.assertEqual(what, "refused")
        self.assertGreater(int(limit), 256 << 20)


if __name__ == "__main__":
    unittest.main()
