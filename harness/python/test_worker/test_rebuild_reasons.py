"""rebuild_reasons: real ninja in a folder that already holds a build says why it compiles
again (a changed command line, a newer input), says nothing where it has no work or where no
build was made before, and the wrapper keeps torch's signature so `build_failures` still
wraps it."""

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

from kbench_worker import build_failures, rebuild_reasons

NINJA_FILE = """rule copy
  command = {command} $in $out
build out.txt: copy in.txt
"""


class RebuildReasonsTests(unittest.TestCase):
    def setUp(self):
        here = os.path.dirname(sys.executable)
        if shutil.which("ninja") is None and shutil.which("ninja", path=here) is None:
            self.skipTest("no ninja")
        self._path = os.environ.get("PATH", "")
        os.environ["PATH"] = f"{here}:{self._path}"
        self.build = tempfile.mkdtemp(prefix="kbench-rebuild-")
        self.addCleanup(shutil.rmtree, self.build, True)
        self._write("in.txt", "a\n")
        self._ninja_file("cp")

    def tearDown(self):
        os.environ["PATH"] = self._path

    def _write(self, name, text):
        with open(os.path.join(self.build, name), "w") as f:
            f.write(text)

    def _ninja_file(self, command):
        self._write("build.ninja", NINJA_FILE.format(command=command))

    def _build(self):
        out = subprocess.run(["ninja"], cwd=self.build, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_no_earlier_build_no_reasons(self):
        self.assertEqual(rebuild_reasons.reasons(self.build), [])

    def test_a_build_with_nothing_to_do_has_no_reasons(self):
        self._build()
        self.assertEqual(rebuild_reasons.reasons(self.build), [])

    def test_changed_command_line_is_named(self):
        self._build()
        self._ninja_file("cp -p")
        found = rebuild_reasons.reasons(self.build)
        self.assertTrue(any("command line changed for out.txt" in r for r in found), found)
        # A dry run: the next real build still has the work to do.
        self.assertEqual(rebuild_reasons.reasons(self.build), found)

    def test_newer_input_is_named(self):
        self._build()
        st = os.stat(os.path.join(self.build, "out.txt"))
        os.utime(os.path.join(self.build, "in.txt"), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        found = rebuild_reasons.reasons(self.build)
        self.assertTrue(any("older than most recent input" in r for r in found), found)

    def test_wrapper_says_why_and_still_builds_under_build_failures(self):
        ran = []

        def _run_ninja_build(build_directory, verbose, error_prefix):
            ran.append(build_directory)
            subprocess.run(["ninja"], cwd=build_directory, check=True, capture_output=True, timeout=60)

        ext = types.SimpleNamespace(_run_ninja_build=_run_ninja_build)
        rebuild_reasons.install(ext)
        rebuild_reasons.install(ext)  # once only
        build_failures.install_replaying(ext)
        # A second load in the same worker installs both again: nothing is wrapped twice.
        rebuild_reasons.install(ext)
        build_failures.install_replaying(ext)
        self.assertTrue(getattr(ext._run_ninja_build, "_kbench_replays_failures", False))
        self.assertTrue(getattr(ext._run_ninja_build.__wrapped__, "_kbench_explains", False))
        self.assertIs(ext._run_ninja_build.__wrapped__.__wrapped__, _run_ninja_build)

        self._build()
        self._ninja_file("cp -p")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            ext._run_ninja_build(self.build, False, "Error building extension 'x'")
        self.assertEqual(ran, [self.build])
        self.assertIn(f"ninja compiles again in {self.build}", err.getvalue())
        self.assertIn("command line changed for out.txt", err.getvalue())
        # Built: nothing left, and nothing said the second time.
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            ext._run_ninja_build(self.build, False, "Error building extension 'x'")
        self.assertEqual(err.getvalue(), "")


if __name__ == "__main__":
    unittest.main()
