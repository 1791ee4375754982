"""The `build` command: a build job's pass reaches builds made in `__init__` behind a guard
that fails without a GPU, in a method, at the first call; it never calls a look-alike of the
candidate's own, and a forward that never ends is cut off. Builds here are plain C++ files
through `torch.utils.cpp_extension.load` (no torch headers: well under a second each)."""

import json
import os
import time

from .support import WorkerTestCase

# A C++ file the candidate writes beside itself at import, then builds where the test says.
WRITES_SOURCE = """
import os, time
import torch
import torch.nn as nn
import torch.utils.cpp_extension as cpp_extension
from torch.utils.cpp_extension import load

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{name}.cpp")
with open(SRC, "w") as f:
    f.write('extern "C" int {name}(int x) {{ return x {body}; }}\\n')
"""

# The same, built with `load` in `__init__`.
LOADS_WRITTEN = WRITES_SOURCE + """
class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.lib = load(name="{name}", sources=[SRC], is_python_module=False)

    def forward(self, x):
        return x
"""


class BuildAheadTests(WorkerTestCase):
    def _build(self, source, forward_s=30):
        type(self).n_candidates += 1
        path = self.files.write(f"ahead_{self.n_candidates}.py", source)
        build = os.path.join(self.files.dir.name, f"build_{self.n_candidates}")
        t0 = time.monotonic()
        reply, _ = self.cand.call({"cmd": "build", "problem_path": self.linear, "candidate_path": path,
                                   "build_dir": build, "weight_seed": 0, "forward_s": forward_s})  # fmt: skip
        self.assertEqual(reply["type"], "built", reply)
        return reply, build, time.monotonic() - t0

    def _library(self, build, name):
        return os.path.isfile(os.path.join(build, name, f"{name}.so"))

    def test_init_build_behind_a_guard_that_fails_without_a_gpu(self):
        reply, build, _ = self._build(WRITES_SOURCE.format(name="kb_guarded", body="+ 1") + """
class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.probe = torch.zeros(1, device="cuda")  # raises where no GPU is visible
        self.lib = load(name="kb_guarded", sources=[SRC], is_python_module=False)

    def forward(self, x):
        return x
""")
        self.assertEqual(reply["steps"]["construct"], "raised", reply)
        self.assertEqual((reply["sites"], reply["built"], reply["failed"]), (1, 1, 0), reply)
        self.assertTrue(reply["complete"], reply)
        self.assertTrue(self._library(build, "kb_guarded"))

    def test_a_build_that_needs_the_model_runs_its_first_call(self):
        reply, build, _ = self._build(WRITES_SOURCE.format(name="kb_first_call", body="* 2") + """
class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.lib = None
        self.name = "kb_first_call"

    def _compile(self):
        return cpp_extension.load(name=self.name, sources=[SRC], is_python_module=False)

    def forward(self, x):
        if self.lib is None:
            self.lib = self._compile()
        return x
""")
        # No site's arguments could be evaluated (`self.name`): the first call built it.
        self.assertEqual(reply["steps"].get("forward"), "ran", reply)
        self.assertEqual(reply["built"], 1, reply)
        self.assertTrue(reply["complete"], reply)
        self.assertTrue(self._library(build, "kb_first_call"))

    def test_a_first_call_build_longer_than_the_forwards_limit_is_complete(self):
        # The compiler, through CXX, takes 3 s; the forward may run 1 s. The build's time is
        # not the forward's: the build finishes and is recorded as built.
        cxx = self.files.write("slow_cxx.sh", "#!/bin/sh\nsleep 3\nexec c++ \"$@\"\n")
        os.chmod(cxx, 0o755)
        reply, build, _ = self._build(WRITES_SOURCE.format(name="kb_slow_first_call", body="- 1") + f"""
class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.lib = None
        self.name = "kb_slow_first_call"

    def forward(self, x):
        if self.lib is None:
            old = os.environ.get("CXX")
            os.environ["CXX"] = {cxx!r}
            try:
                self.lib = cpp_extension.load(name=self.name, sources=[SRC], is_python_module=False)
            finally:
                os.environ.pop("CXX") if old is None else os.environ.update(CXX=old)
        return x
""", forward_s=1)
        self.assertEqual(reply["steps"].get("forward"), "ran", reply)
        self.assertEqual((reply["built"], reply["failed"]), (1, 0), reply)
        self.assertTrue(reply["complete"], reply)
        self.assertTrue(self._library(build, "kb_slow_first_call"))

    def test_a_look_alike_of_the_candidates_own_is_never_called(self):
        marker = os.path.join(self.files.dir.name, "lookalike_called")
        reply, _, _ = self._build(f"""
import torch
import torch.nn as nn

def load_inline(name, cpp_sources):
    open({marker!r}, "w").close()

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def helper(self):
        return load_inline(name="x", cpp_sources="")

    def forward(self, x):
        return x
""")
        self.assertFalse(os.path.exists(marker), "the pass called the candidate's own load_inline")
        self.assertEqual((reply["sites"], reply["calls"]), (0, 0), reply)
        self.assertFalse(reply["complete"], reply)

    def test_a_forward_that_never_ends_is_cut_off(self):
        reply, _, took = self._build("""
import time
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        while True:
            time.sleep(0.05)
        return load_inline(name=self.unknown, cpp_sources="")
""", forward_s=1)
        self.assertEqual(reply["steps"].get("forward"), "timed out", reply)
        self.assertLess(took, 30)

    def test_a_build_that_fails_is_counted_and_said(self):
        reply, _, _ = self._build(LOADS_WRITTEN.format(name="kb_broken", body="+"))
        self.assertEqual((reply["built"], reply["failed"]), (0, 1), reply)
        self.assertFalse(reply["complete"], reply)
        self.assertTrue(reply["errors"], reply)


class _JobThenLoad(WorkerTestCase):
    """A candidate of LOADS_WRITTEN through its build job, then through an evaluating
    worker's load in a fresh process (torch remembers builds per process)."""

    def _job(self, name, body, template=LOADS_WRITTEN):
        """The build job's reply, the candidate's path and its build folder."""
        path = self.files.write(f"{name}.py", template.format(name=name, body=body))
        build = os.path.join(self.files.dir.name, f"build_{name}")
        reply, _ = self.cand.call({"cmd": "build", "problem_path": self.linear, "candidate_path": path,
                                   "build_dir": build, "weight_seed": 0})  # fmt: skip
        self.assertEqual(reply["type"], "built", reply)
        return reply, path, build

    def _load_fresh(self, path, build):
        from .support import Worker

        fresh = Worker("candidate")
        try:
            fresh.recv()
            reply, _ = fresh.call({"cmd": "load", "problem_path": self.linear, "candidate_path": path,
                                   "device": "cpu", "precision": "fp32", "weight_seed": 42,
                                   "cpu_threads": 1, "build_dir": build})  # fmt: skip
        finally:
            self.assertEqual(fresh.close(), 0)
        return reply


class WrittenSourcesTests(_JobThenLoad):
    """A candidate that writes its source at run time and builds it with `load`: its
    evaluating worker finds the build job's build up to date when the content is the same,
    and rebuilds when it is not."""

    def _library_mtime(self, build, name):
        return os.stat(os.path.join(build, name, f"{name}.so")).st_mtime_ns

    def _pass_then_load(self, name, forget_record):
        reply, path, build = self._job(name, "+ 3")
        self.assertTrue(reply["complete"], reply)
        built = self._library_mtime(build, name)
        if forget_record:
            os.remove(os.path.join(build, name, "kbench-sources.json"))
        time.sleep(0.05)
        reply = self._load_fresh(path, build)
        self.assertEqual(reply["type"], "loaded", reply)
        return built, self._library_mtime(build, name)

    def test_an_unchanged_written_source_is_not_built_again(self):
        before, after = self._pass_then_load("kb_written_same", forget_record=False)
        self.assertEqual(before, after, "the evaluating worker built the extension again")

    def test_without_the_record_ninja_builds_again(self):
        # The control: the same candidate, its build job's record removed.
        before, after = self._pass_then_load("kb_written_control", forget_record=True)
        self.assertNotEqual(before, after)


class FailedBuildTests(_JobThenLoad):
    """A build that failed in its build job fails again in the evaluating worker with the same
    error, without the compiler, while its sources and `build.ninja` are what failed."""

    def _job_then_load(self, name, body, change=None):
        """The build job on `body`, then `change(record_path, source_path)`, then an evaluating
        worker's load: its reply and the record the job left."""
        reply, path, build = self._job(name, body)
        self.assertEqual(reply["failed"], 1, reply)
        record = os.path.join(build, name, "kbench-build-failed.json")
        self.assertTrue(os.path.isfile(record), "the build job recorded no failure")
        if change is not None:
            change(record, path)
        return self._load_fresh(path, build), record

    @staticmethod
    def _mark(record, _path):
        # A message the compiler never writes: seen again only if the record was replayed.
        with open(record) as f:
            seen = json.load(f)
        seen["message"] = "Error building extension: replayed from the build job"
        with open(record, "w") as f:
            json.dump(seen, f)

    def test_the_evaluating_worker_raises_the_recorded_error_without_building(self):
        loaded, _ = self._job_then_load("kb_fails_twice", "+", change=self._mark)
        self.assertEqual(loaded["type"], "error", loaded)
        self.assertIn("replayed from the build job", json.dumps(loaded))

    def test_a_verbose_build_that_fails_says_what_the_compiler_said(self):
        # verbose=True: torch alone would print the compiler's output and raise only "Error
        # building extension"; the job records the failure, and the message names the error.
        verbose = LOADS_WRITTEN.replace("is_python_module=False)", "is_python_module=False, verbose=True)")
        reply, path, build = self._job("kb_verbose_broken", "+", template=verbose)
        self.assertEqual(reply["failed"], 1, reply)
        record = os.path.join(build, "kb_verbose_broken", "kbench-build-failed.json")
        self.assertTrue(os.path.isfile(record), "the build job recorded no failure")
        loaded = self._load_fresh(path, build)
        self.assertEqual(loaded["type"], "error", loaded)
        self.assertIn("expected primary-expression", loaded["message"])
        self.assertIn("extension build failed", loaded["message"])

    def test_a_changed_source_is_built_again(self):
        # The control: the written source differs from the one that failed (the candidate
        # writes it at import, so the test fixes the template it writes).
        def fix(record, path):
            self._mark(record, path)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(text.replace("return x +; ", "return x + 1; "))

        loaded, _ = self._job_then_load("kb_fixed_later", "+", change=fix)
        self.assertEqual(loaded["type"], "loaded", loaded)

    def test_a_compiler_killed_by_a_signal_is_not_recorded(self):
        import subprocess

        from kbench_worker.build_failures import compiler_reported

        def failed(text, status=1):
            try:
                raise subprocess.CalledProcessError(status, ["ninja", "-v"])
            except subprocess.CalledProcessError as cause:
                try:
                    raise RuntimeError(text) from cause
                except RuntimeError as exc:
                    return exc

        self.assertTrue(compiler_reported(failed("FAILED: [code=2] cuda.cuda.o\nerror: undefined")))
        self.assertFalse(compiler_reported(failed("FAILED: [code=137] cuda.cuda.o\nKilled")))
        # ninja 1.13 exits with the failed command's status (nvcc's is 2): still the compiler's.
        self.assertTrue(compiler_reported(failed("FAILED: [code=2] x.o", status=2)))
        self.assertFalse(compiler_reported(failed("FAILED: [code=137] x.o", status=137)))
        self.assertFalse(compiler_reported(failed("FAILED: [code=2] x.o", status=-9)))
        self.assertFalse(compiler_reported(RuntimeError("no ninja run behind it")))
