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
import unittest
from unittest import mock

import torch.utils.cpp_extension as cpp_extension

from kbench_worker import build_failures, cuda_header

TYPES_H = "#pragma once\nint light_api();\n"
EXTENSION_H = "#pragma once\n#include <torch/types.h>\nint full_api();\n"

# The CUDA step: a compiler that appends NVCC_APPEND_FLAGS to its arguments, like nvcc, and
# logs each call. `$$` is ninja's `$`.
NINJA = """\
ninja_required_version = 1.3
rule cuda_compile
  command = sh {nvcc} $in $out
rule compile
  command = g++ -isystem {torch} -c $in -o $out
build main.o: compile {main}
build cuda.cuda.o: cuda_compile {cu}
"""
NVCC = """\
echo "$NVCC_APPEND_FLAGS" >> {calls}
exec g++ -x c++ -isystem {torch} -c "$1" -o "$2" $NVCC_APPEND_FLAGS
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
        self.nvcc = os.path.join(self.tmp, "nvcc.sh")
        with open(self.nvcc, "w") as f:
            f.write(NVCC.format(calls=self.calls, torch=torch_dir))
        env = mock.patch.dict(os.environ, {cuda_header.ENV: "light"})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("NVCC_APPEND_FLAGS", None)

    def build_dir(self, cu_body, main_body="int binding() { return 0; }\n"):
        d = tempfile.mkdtemp(dir=self.tmp)
        cu = os.path.join(d, "cuda.cu")
        main = os.path.join(d, "main.cpp")
        with open(cu, "w") as f:
            f.write("#include <torch/extension.h>\n" + textwrap.dedent(cu_body))
        with open(main, "w") as f:
            f.write("#include <torch/extension.h>\n" + main_body)
        with open(os.path.join(d, "build.ninja"), "w") as f:
            f.write(NINJA.format(nvcc=self.nvcc, torch=self.torch_dir, main=main, cu=cu))
        return d

    def nvcc_calls(self):
        try:
            with open(self.calls) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def build(self, d):
        """As a build job builds: torch's ninja run behind the failure-recording wrapper."""
        run = build_failures._recording(cpp_extension._run_ninja_build)
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
        self.assertFalse(os.path.exists(os.path.join(d, cuda_header.MARKER)))

    def test_a_failing_binding_is_not_compiled_again(self):
        d = self.build_dir("int kernel() { return light_api(); }\n", "int binding() { return nope(); }\n")
        with self.assertRaises(RuntimeError) as raised:
            self.build(d)
        self.assertIn("FAILED: ", str(raised.exception))
        self.assertEqual(len(self.nvcc_calls()), 1)

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


if __name__ == "__main__":
    unittest.main()
