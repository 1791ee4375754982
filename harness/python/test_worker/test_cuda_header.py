"""A CUDA source's `torch/extension.h` compiled first as `torch/types.h`
(`kbench_worker.cuda_header`, `KBENCH_CUDA_HEADER=light`), through torch's own
`_run_ninja_build` and the failure-recording wrapper build jobs use, with real ninja and a
real compiler. There is no nvcc here: the CUDA step is g++ with `NVCC_APPEND_FLAGS` appended,
as nvcc appends it, on a stand-in torch whose `torch/types.h` declares less than its
`torch/extension.h`. Checked: a source the light header serves compiles once against it; one
that needs the full header compiles again against torch's own and succeeds, leaving no
failure behind; one that fails both ways fails with the full build's message, recorded; a
failing binding is not compiled again; with the setting off nothing changes; the variable is
restored."""

import json
import os
import shutil
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

import torch.utils.cpp_extension as cpp_extension

from kbench_worker import build_failures, cuda_header, light_build

TYPES_H = "#pragma once\nint light_api();\n"
EXTENSION_H = "#pragma once\n#include <torch/types.h>\nint full_api();\n"

# The CUDA step: a compiler that appends NVCC_APPEND_FLAGS to its arguments, like nvcc, and
# logs each call. `$$` is ninja's `$`.
NINJA_HEAD = """\
ninja_required_version = 1.3
rule cuda_compile
  depfile = $out.d
  deps = gcc
  command = sh {nvcc} $in $out
rule compile
  command = sh {binding} $in $out
build main.o: compile {main}
"""
# The CUDA step: a compiler that appends NVCC_APPEND_FLAGS to its arguments, like nvcc, writes
# its dependencies as torch's rule asks (`-MD`), and logs each call.
NVCC = """\
echo "$NVCC_APPEND_FLAGS" >> {calls}
exec g++ -x c++ -isystem {torch} -MD -MF "$2.d" -c "$1" -o "$2" $NVCC_APPEND_FLAGS
"""
BINDING = """\
echo binding >> {calls}
exec g++ -isystem {torch} -c "$1" -o "$2"
"""


class LightHeaderBuilds(unittest.TestCase):
    def setUp(self):
        # ninja as the worker finds it: in the interpreter's bin folder, put first on PATH.
        path = mock.patch.dict(os.environ, {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
        path.start()
        self.addCleanup(path.stop)
        if shutil.which("ninja") is None or shutil.which("g++") is None:
            self.fail("ninja and g++ are needed (kbench's environment installs ninja)")
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        torch_dir = os.path.join(self.tmp, "include")
        os.makedirs(os.path.join(torch_dir, "torch"))
        for name, text in (("types.h", TYPES_H), ("extension.h", EXTENSION_H)):
            with open(os.path.join(torch_dir, "torch", name), "w") as f:
                f.write(text)
        self.torch_dir = torch_dir
        self.calls = os.path.join(self.tmp, "nvcc-calls.txt")
        self.binding_calls = os.path.join(self.tmp, "binding-calls.txt")
        self.nvcc = os.path.join(self.tmp, "nvcc.sh")
        with open(self.nvcc, "w") as f:
            f.write(NVCC.format(calls=self.calls, torch=torch_dir))
        self.binding = os.path.join(self.tmp, "binding.sh")
        with open(self.binding, "w") as f:
            f.write(BINDING.format(calls=self.binding_calls, torch=torch_dir))
        env = mock.patch.dict(os.environ, {cuda_header.ENV: "light"})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("NVCC_APPEND_FLAGS", None)

    def build_dir(self, *cu_bodies, main_body="int binding() { return 0; }\n", names=None):
        """A build folder as torch writes one: the binding and one CUDA source per body."""
        d = tempfile.mkdtemp(dir=self.tmp)
        main = os.path.join(d, "main.cpp")
        with open(main, "w") as f:
            f.write("#include <torch/extension.h>\n" + main_body)
        ninja = NINJA_HEAD.format(nvcc=self.nvcc, binding=self.binding, main=main)
        for i, body in enumerate(cu_bodies):
            stem = names[i] if names else ("cuda" if i == 0 else f"cuda{i}")
            cu = os.path.join(d, stem + ".cu")
            with open(cu, "w") as f:
                f.write("#include <torch/extension.h>\n" + textwrap.dedent(body))
            esc = lambda p: p.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")  # noqa: E731
            ninja += f"build {esc(stem)}.cuda.o: cuda_compile {esc(cu)}\n"
        with open(os.path.join(d, "build.ninja"), "w") as f:
            f.write(ninja)
        return d

    def nvcc_calls(self):
        try:
            with open(self.calls) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def binding_runs(self):
        try:
            with open(self.binding_calls) as f:
                return len(f.read().splitlines())
        except FileNotFoundError:
            return 0

    def build(self, d):
        """As a build job builds: torch's ninja run behind the failure-recording wrapper."""
        run = build_failures._recording(cpp_extension._run_ninja_build)
        return run(d, False, "Error building extension 'x'")

    def load(self, d):
        """As the evaluating worker loads it afterwards: behind the replaying wrapper."""
        run = build_failures._replaying(cpp_extension._run_ninja_build)
        return run(d, False, "Error building extension 'x'")

    def marker(self, d):
        with open(os.path.join(d, cuda_header.MARKER)) as f:
            return f.read()

    def test_a_source_the_light_header_serves_compiles_once_against_it(self):
        d = self.build_dir("int kernel() { return light_api(); }\n")
        self.build(d)
        calls = self.nvcc_calls()
        self.assertEqual(len(calls), 1, calls)
        self.assertIn("-I" + os.path.join(d, cuda_header.FOLDER), calls[0])
        self.assertTrue(self.marker(d).startswith("light"))
        self.assertTrue(os.path.isfile(os.path.join(d, "cuda.cuda.o")))
        self.assertNotIn("NVCC_APPEND_FLAGS", os.environ)

    def test_a_source_that_needs_the_full_header_compiles_again_against_it(self):
        d = self.build_dir("int kernel() { return full_api() + light_api(); }\n")
        self.build(d)
        calls = self.nvcc_calls()
        self.assertEqual(len(calls), 2, calls)
        self.assertIn(cuda_header.FOLDER, calls[0])
        self.assertEqual(calls[1], "", "the second build must not see the light header")
        self.assertTrue(self.marker(d).startswith("full"))
        self.assertTrue(os.path.isfile(os.path.join(d, "cuda.cuda.o")))
        self.assertFalse(os.path.exists(os.path.join(d, build_failures.RECORD)))

    def test_a_source_that_fails_both_ways_fails_with_the_full_builds_message(self):
        d = self.build_dir("int kernel() { return not_declared_anywhere(); }\n")
        with self.assertRaises(RuntimeError) as raised:
            self.build(d)
        self.assertEqual(len(self.nvcc_calls()), 2)
        self.assertIn("not_declared_anywhere", str(raised.exception))
        with open(os.path.join(d, build_failures.RECORD)) as f:
            record = json.load(f)
        self.assertEqual(record["message"], str(raised.exception))
        self.assertTrue(self.marker(d).startswith("full"))
        # The evaluating worker replays that failure without a compiler.
        with self.assertRaises(RuntimeError) as again:
            self.load(d)
        self.assertEqual(str(again.exception), str(raised.exception))
        self.assertEqual(len(self.nvcc_calls()), 2)

    def test_a_failing_binding_is_not_compiled_again(self):
        d = self.build_dir("int kernel() { return light_api(); }\n", main_body="int binding() { return nope(); }\n")
        with self.assertRaises(RuntimeError) as raised:
            self.build(d)
        self.assertIn("FAILED: ", str(raised.exception))
        self.assertIn("main.o", str(raised.exception))
        self.assertEqual(self.binding_runs(), 1, "the binding's failure was compiled again")
        self.assertLessEqual(len(self.nvcc_calls()), 1)

    def test_what_built_is_not_compiled_again_when_loaded(self):
        for bodies in (["int kernel() { return light_api(); }\n"], ["int kernel() { return full_api(); }\n"]):
            d = self.build_dir(*bodies)
            self.build(d)
            calls = len(self.nvcc_calls())
            self.load(d)
            self.build(d)
            self.assertEqual(len(self.nvcc_calls()), calls, f"compiled again: {bodies}")

    def test_cuda_objects_built_light_are_built_again_with_the_full_header_beside_one_that_needs_it(self):
        d = self.build_dir("int a() { return light_api(); }\n", "int b() { return full_api(); }\n")
        self.build(d)
        calls = self.nvcc_calls()
        # Light: both (one fails); full: both again.
        self.assertEqual(sum(1 for c in calls if cuda_header.FOLDER in c), 2, calls)
        self.assertEqual(sum(1 for c in calls if c == ""), 2, calls)
        self.assertTrue(self.marker(d).startswith("full"))

    def test_an_object_name_with_a_space_is_retried(self):
        d = self.build_dir("int kernel() { return full_api(); }\n", names=["my k"])
        self.build(d)
        self.assertTrue(self.marker(d).startswith("full"))
        self.assertTrue(os.path.isfile(os.path.join(d, "my k.cuda.o")))

    def test_off_by_default_and_nothing_written(self):
        os.environ.pop(cuda_header.ENV)
        d = self.build_dir("int kernel() { return full_api(); }\n")
        self.build(d)
        self.assertEqual(self.nvcc_calls(), [""])
        self.assertFalse(os.path.exists(os.path.join(d, cuda_header.FOLDER)))
        self.assertFalse(os.path.exists(os.path.join(d, cuda_header.MARKER)))

    def test_a_header_the_candidate_planted_is_written_over(self):
        d = self.build_dir("int kernel() { return light_api(); }\n")
        planted = os.path.join(d, cuda_header.FOLDER, "torch")
        os.makedirs(planted)
        with open(os.path.join(planted, "extension.h"), "w") as f:
            f.write("#error planted\n")
        self.build(d)
        with open(os.path.join(planted, "extension.h")) as f:
            self.assertEqual(f.read(), cuda_header.HEADER)

    def test_flags_already_set_are_kept_and_restored(self):
        os.environ["NVCC_APPEND_FLAGS"] = "-DKEPT=1"
        self.addCleanup(os.environ.pop, "NVCC_APPEND_FLAGS", None)
        d = self.build_dir("int kernel() { return KEPT + light_api(); }\n")
        self.build(d)
        self.assertTrue(self.nvcc_calls()[0].startswith("-DKEPT=1 -I"))
        self.assertEqual(os.environ["NVCC_APPEND_FLAGS"], "-DKEPT=1")


class OneBuildAtATime(unittest.TestCase):
    """Loads from two threads: each build sees only its own folder, and the variable is as it
    was once both are done (without the lock, the second saved the first's flag as what to
    restore, and left it set)."""

    def test_overlapping_builds_see_their_own_folder_and_restore_the_variable(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        dirs = []
        for i in range(2):
            d = os.path.join(tmp, f"b{i}")
            os.makedirs(d)
            with open(os.path.join(d, "build.ninja"), "w") as f:
                f.write("rule cuda_compile\n  command = x\nbuild cuda.cuda.o: cuda_compile cuda.cu\n")
            dirs.append(d)
        seen = {}

        def original(build_directory, verbose, error_prefix):
            seen[build_directory] = os.environ.get("NVCC_APPEND_FLAGS")
            time.sleep(0.2)

        with mock.patch.dict(os.environ, {cuda_header.ENV: "light"}):
            os.environ.pop("NVCC_APPEND_FLAGS", None)
            threads = [threading.Thread(target=light_build.run, args=(original, d, False, "")) for d in dirs]
            for t in threads:
                t.start()
                time.sleep(0.05)
            for t in threads:
                t.join()
            self.assertNotIn("NVCC_APPEND_FLAGS", os.environ)
        for d in dirs:
            self.assertEqual(seen[d], "-I" + os.path.join(d, cuda_header.FOLDER))


if __name__ == "__main__":
    unittest.main()
