"""A C++ source's `torch/extension.h` compiled first as `torch/types.h` + `torch/python.h`
(`kbench_worker.cxx_header`, `KBENCH_CXX_HEADER=light`), through torch's own
`_run_ninja_build` and the failure-recording wrapper build jobs use (`light_build`), with
real ninja and a real g++ that reads `CPATH`, on a stand-in torch whose `torch/extension.h`
declares more than its `torch/types.h` and `torch/python.h`. Checked: a binding the light
header serves compiles once against it; one that needs the full header compiles again against
torch's own and succeeds; one that fails both ways fails with the full build's message,
recorded; beside a CUDA source that compiles with torch's own header the light folder is never
on `CPATH`, and where a CUDA source needs torch's own header after a light attempt the binding
is compiled again with torch's too; what built is not compiled again when loaded; `CPATH` is
restored; with the setting off, or no light folder made, nothing changes."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import torch.utils.cpp_extension as cpp_extension

from kbench_worker import build_failures, cuda_header, cxx_header, light_build, undefined_symbols

# A template declared where the light headers reach and defined only in the full header, as
# a source that compiles light can still need torch/all.h's definitions.
TYPES_H = "#pragma once\nint light_api();\nnamespace torch { template <typename T> T full_template(T); }\n"
PYTHON_H = "#pragma once\nint binding_api();\n"
EXTENSION_H = (
    "#pragma once\n#include <torch/types.h>\n#include <torch/python.h>\nint full_api();\n"
    "namespace torch { template <typename T> T full_template(T x) { return x + 1; } }\n"
)
# torch's link step, with the real linker (which leaves a shared library's undefined symbols
# to the loader).
LINK = "rule link\n  command = sh -c 'echo link >> {calls}; exec g++ -shared \"$$@\"' sh $in -o $out\nbuild x.so: link {objects}\n"

# The C++ step as torch writes it (`rule compile`, a depfile), through a g++ that logs the
# CPATH it was given; the CUDA step a g++ that appends NVCC_APPEND_FLAGS, as nvcc does.
NINJA_HEAD = """\
ninja_required_version = 1.3
rule compile
  depfile = $out.d
  deps = gcc
  command = sh {gxx} $in $out
rule cuda_compile
  depfile = $out.d
  deps = gcc
  command = sh {nvcc} $in $out
build main.o: compile {main}
"""
GXX = """\
echo "cpath=$CPATH" >> {calls}
exec g++ -fPIC -isystem {torch} -MMD -MF "$2.d" -c "$1" -o "$2"
"""
NVCC = """\
echo "nvcc=$NVCC_APPEND_FLAGS cpath=$CPATH" >> {calls}
exec g++ -fPIC -x c++ -isystem {torch} -MMD -MF "$2.d" -c "$1" -o "$2" $NVCC_APPEND_FLAGS
"""


class LightCxxHeaderBuilds(unittest.TestCase):
    def setUp(self):
        path = mock.patch.dict(os.environ, {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
        path.start()
        self.addCleanup(path.stop)
        if shutil.which("ninja") is None or shutil.which("g++") is None:
            self.fail("ninja and g++ are needed (kbench's environment installs ninja)")
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        torch_dir = os.path.join(self.tmp, "include")
        os.makedirs(os.path.join(torch_dir, "torch"))
        for name, text in (("types.h", TYPES_H), ("python.h", PYTHON_H), ("extension.h", EXTENSION_H)):
            with open(os.path.join(torch_dir, "torch", name), "w") as f:
                f.write(text)
        # The precompiled-header folder as the helper leaves it (no .gch: g++ parses the
        # headers), with the light folder inside, on CPATH as the harness puts it.
        self.pch = os.path.join(self.tmp, "pch")
        self.light = os.path.join(self.pch, cxx_header.LIGHT)
        os.makedirs(os.path.join(self.light, "torch"))
        with open(os.path.join(self.light, "torch", "extension.h"), "w") as f:
            f.write(cxx_header.HEADER)
        self.calls = os.path.join(self.tmp, "calls.txt")
        self.gxx = os.path.join(self.tmp, "gxx.sh")
        with open(self.gxx, "w") as f:
            f.write(GXX.format(calls=self.calls, torch=torch_dir))
        self.nvcc = os.path.join(self.tmp, "nvcc.sh")
        with open(self.nvcc, "w") as f:
            f.write(NVCC.format(calls=self.calls, torch=torch_dir))
        env = mock.patch.dict(os.environ, {cxx_header.ENV: "light", "CPATH": self.pch})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop(cuda_header.ENV, None)
        os.environ.pop("NVCC_APPEND_FLAGS", None)

    def build_dir(self, main_body, cu_body=None):
        """A build folder as torch writes one: the binding, and a CUDA source if given."""
        d = tempfile.mkdtemp(dir=self.tmp)
        main = os.path.join(d, "main.cpp")
        with open(main, "w") as f:
            f.write("#include <torch/extension.h>\n#include <torch/extension.h>\n" + main_body)
        ninja = NINJA_HEAD.format(gxx=self.gxx, nvcc=self.nvcc, main=main)
        if cu_body is not None:
            cu = os.path.join(d, "k.cu")
            with open(cu, "w") as f:
                f.write("#include <torch/extension.h>\n" + cu_body)
            ninja += f"build k.cuda.o: cuda_compile {cu}\n"
        with open(os.path.join(d, "build.ninja"), "w") as f:
            f.write(ninja)
        return d

    def calls_made(self):
        try:
            with open(self.calls) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def build(self, d):
        run = build_failures._recording(cpp_extension._run_ninja_build)
        return run(d, False, "Error building extension 'x'")

    def load(self, d):
        run = build_failures._replaying(cpp_extension._run_ninja_build)
        return run(d, False, "Error building extension 'x'")

    def marker(self, d, module=cxx_header):
        with open(os.path.join(d, module.MARKER)) as f:
            return f.read()

    def light_cpath(self):
        return f"cpath={self.light}{os.pathsep}{self.pch}"

    def test_a_binding_the_light_header_serves_compiles_once_against_it(self):
        d = self.build_dir("int binding() { return light_api() + binding_api(); }\n")
        self.build(d)
        self.assertEqual(self.calls_made(), [self.light_cpath()])
        self.assertTrue(self.marker(d).startswith("light"))
        self.assertTrue(os.path.isfile(os.path.join(d, "main.o")))
        self.assertEqual(os.environ["CPATH"], self.pch, "CPATH is restored")
        # Its dependencies name the light header, which the helper never dates anew.
        deps = subprocess.run(["ninja", "-t", "deps"], cwd=d, capture_output=True, text=True, timeout=60)
        self.assertIn(os.path.join(self.light, "torch", "extension.h"), deps.stdout)

    def test_a_binding_that_needs_the_full_header_compiles_again_against_it(self):
        d = self.build_dir("int binding() { return full_api(); }\n")
        self.build(d)
        self.assertEqual(self.calls_made(), [self.light_cpath(), f"cpath={self.pch}"])
        self.assertTrue(self.marker(d).startswith("full"))
        self.assertTrue(os.path.isfile(os.path.join(d, "main.o")))
        self.assertFalse(os.path.exists(os.path.join(d, build_failures.RECORD)))
        # A later load keeps torch's header: nothing is compiled again, nor light.
        self.load(d)
        self.build(d)
        self.assertEqual(len(self.calls_made()), 2)

    def test_a_binding_that_fails_both_ways_fails_with_the_full_builds_message(self):
        d = self.build_dir("int binding() { return not_declared_anywhere(); }\n")
        with self.assertRaises(RuntimeError) as raised:
            self.build(d)
        self.assertEqual(self.calls_made(), [self.light_cpath(), f"cpath={self.pch}"])
        self.assertIn("not_declared_anywhere", str(raised.exception))
        with open(os.path.join(d, build_failures.RECORD)) as f:
            self.assertEqual(json.load(f)["message"], str(raised.exception))
        with self.assertRaises(RuntimeError) as again:
            self.load(d)
        self.assertEqual(str(again.exception), str(raised.exception))
        self.assertEqual(len(self.calls_made()), 2, "replayed without a compiler")

    def test_what_built_light_is_not_compiled_again_when_loaded(self):
        d = self.build_dir("int binding() { return light_api(); }\n")
        self.build(d)
        self.load(d)
        self.build(d)
        self.assertEqual(len(self.calls_made()), 1)

    def test_beside_a_cuda_source_compiled_with_torchs_header_the_light_folder_stays_out_of_sight(self):
        d = self.build_dir("int binding() { return light_api(); }\n", cu_body="int k() { return light_api(); }\n")
        self.build(d)
        calls = self.calls_made()
        self.assertEqual(len(calls), 2, calls)
        self.assertTrue(all(c.endswith(f"cpath={self.pch}") for c in calls), calls)
        self.assertIn("CUDA sources compile with torch's own header", self.marker(d))

    def test_with_both_light_headers_a_cuda_source_that_needs_torchs_sends_the_binding_back_too(self):
        os.environ[cuda_header.ENV] = "light"
        d = self.build_dir("int binding() { return light_api(); }\n", cu_body="int k() { return full_api(); }\n")
        self.build(d)
        calls = self.calls_made()
        light_runs = [c for c in calls if self.light in c]
        again = calls[len(light_runs):]
        # First both light (the CUDA source fails), then both with torch's own header.
        self.assertEqual(len(again), 2, calls)
        self.assertTrue(all(c.endswith(f"cpath={self.pch}") and "nvcc=-I" not in c for c in again), calls)
        self.assertTrue(self.marker(d, cuda_header).startswith("full"))
        self.assertIn("a CUDA source", self.marker(d))
        self.assertTrue(os.path.isfile(os.path.join(d, "main.o")))
        self.assertTrue(os.path.isfile(os.path.join(d, "k.cuda.o")))

    def test_with_both_light_headers_that_serve_both_compile_once(self):
        os.environ[cuda_header.ENV] = "light"
        d = self.build_dir("int binding() { return light_api(); }\n", cu_body="int k() { return light_api(); }\n")
        self.build(d)
        calls = self.calls_made()
        self.assertEqual(len(calls), 2, calls)
        self.assertTrue(all(self.light_cpath() in c for c in calls), calls)
        self.assertTrue(self.marker(d).startswith("light"))
        self.assertTrue(self.marker(d, cuda_header).startswith("light"))

    def test_off_or_without_a_light_folder_nothing_changes(self):
        for case in ("off", "no folder"):
            with self.subTest(case):
                if case == "off":
                    os.environ.pop(cxx_header.ENV)
                else:
                    os.environ[cxx_header.ENV] = "light"
                    shutil.rmtree(self.light)
                d = self.build_dir("int binding() { return full_api(); }\n")
                self.build(d)
                self.assertEqual(self.calls_made()[-1], f"cpath={self.pch}")
                if case == "off":
                    self.assertFalse(os.path.exists(os.path.join(d, cxx_header.MARKER)))
                else:
                    self.assertIn("not made", self.marker(d))

    def test_objects_built_before_the_light_header_was_made_stay_marked_full(self):
        light = self.light + ".later"
        os.rename(self.light, light)
        d = self.build_dir("int binding() { return light_api(); }\n")
        self.build(d)
        self.assertTrue(self.marker(d).startswith("full"))
        # The helper has made it since: a later load keeps what was built, and says so.
        os.rename(light, self.light)
        self.load(d)
        self.assertEqual(self.calls_made(), [f"cpath={self.pch}"])
        self.assertTrue(self.marker(d).startswith("full"))

    def test_one_step_at_a_time_each_kind_refused_light_in_a_later_run_goes_back_too(self):
        # MAX_JOBS=1: ninja stops at the binding's failure before the CUDA source starts, so
        # the CUDA source is refused light only in the second run (a third runs both full).
        os.environ[cuda_header.ENV] = "light"
        os.environ["MAX_JOBS"] = "1"
        self.addCleanup(os.environ.pop, "MAX_JOBS", None)
        d = self.build_dir("int binding() { return full_api(); }\n", cu_body="int k() { return full_api(); }\n")
        self.build(d)
        calls = self.calls_made()
        self.assertTrue(os.path.isfile(os.path.join(d, "main.o")))
        self.assertTrue(os.path.isfile(os.path.join(d, "k.cuda.o")))
        self.assertTrue(self.marker(d).startswith("full"))
        self.assertTrue(self.marker(d, cuda_header).startswith("full"))
        self.assertFalse(os.path.exists(os.path.join(d, build_failures.RECORD)))
        last = [c for c in calls if c.startswith("nvcc=")][-1]
        self.assertNotIn(cuda_header.FOLDER, last, calls)
        self.assertNotIn(self.light, last, calls)

    def test_a_link_that_fails_is_built_again_with_torchs_header_and_fails_the_same(self):
        # A link may resolve symbols itself (-z defs), so the light header may be its failure.
        d = self.build_dir("int binding() { return light_api(); }\n")
        with open(os.path.join(d, "build.ninja"), "a") as f:
            f.write("rule link\n  command = sh -c 'echo link >> {calls}; exit 1'\nbuild x.so: link main.o\n".format(calls=self.calls))
        with self.assertRaises(RuntimeError):
            self.build(d)
        self.assertEqual(self.calls_made(), self.light_then_torchs())
        self.assertIn("the light build failed", self.marker(d))

    def light_then_torchs(self):
        """The calls of a linked build sent back: light and linked, then torch's and linked."""
        return [self.light_cpath(), "link", f"cpath={self.pch}", "link"]

    def linked_build(self, body, cu_body=None):
        """A build folder as `build_dir` makes it, with torch's link step, built."""
        d = self.build_dir(body, cu_body)
        self.linked(d)
        self.build(d)
        return d

    def linked(self, d):
        objects = "main.o" + (" k.cuda.o" if os.path.exists(os.path.join(d, "k.cu")) else "")
        with open(os.path.join(d, "build.ninja"), "a") as f:
            f.write(LINK.format(calls=self.calls, objects=objects))
        return os.path.join(d, "x.so")

    def test_a_light_build_that_leaves_a_symbol_undefined_is_built_again_with_torchs_header(self):
        d = self.build_dir("int binding() { return torch::full_template(1); }\n")
        library = self.linked(d)
        self.build(d)
        self.assertEqual(self.calls_made(), self.light_then_torchs())
        self.assertTrue(self.marker(d).startswith("full"), self.marker(d))
        self.assertIn("left _ZN5torch13full_templateIiEET_S1_ undefined", self.marker(d))
        self.assertNotIn(d, self.marker(d), "the marker names the symbol, not the folder")
        # What the import will do: every symbol resolved at once.
        lib = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.assertEqual(lib._Z7bindingv(), 2)
        # Loaded again, nothing is compiled.
        self.load(d)
        self.assertEqual(len(self.calls_made()), 4)

    def test_a_light_build_whose_symbols_resolve_is_kept(self):
        # std's symbols are defined by the libstdc++ this process has loaded: found there.
        d = self.build_dir("#include <string>\nint binding() { return (int)std::to_string(3).size() + 2; }\n")
        library = self.linked(d)
        self.build(d)
        self.assertEqual(self.calls_made(), [self.light_cpath(), "link"])
        self.assertTrue(self.marker(d).startswith("light"))
        self.assertIsNone(light_build.unresolved(d))
        self.assertEqual(ctypes.CDLL(library, mode=os.RTLD_NOW)._Z7bindingv(), 3)

    def test_the_check_never_runs_the_libraries_code(self):
        # A static initializer that would end the process if the library were loaded in the
        # build (where torch holds the build folder's lock file).
        d = self.linked_build("#include <cstdlib>\nstatic int boom = (std::abort(), 0);\nint binding() { return torch::full_template(1); }\n")
        self.assertEqual(self.calls_made(), self.light_then_torchs())
        self.assertIn("full_template", self.marker(d))

    def test_an_executable_whose_light_link_fails_is_built_again_with_torchs_header(self):
        d = self.build_dir("int main() { return torch::full_template(1) - 2; }\n")
        with open(os.path.join(d, "build.ninja"), "a") as f:
            f.write("rule link\n  command = sh -c 'echo link >> {calls}; exec g++ \"$$@\"' sh $in -o $out\nbuild x: link main.o\n".format(calls=self.calls))
        self.build(d)
        self.assertEqual(self.calls_made(), self.light_then_torchs())
        self.assertIn("the light build failed", self.marker(d))
        self.assertEqual(subprocess.run([os.path.join(d, "x")], timeout=60).returncode, 0)

    def test_with_both_light_headers_an_undefined_symbol_sends_both_back(self):
        os.environ[cuda_header.ENV] = "light"
        d = self.linked_build("int binding() { return 4; }\n", cu_body="int k() { return torch::full_template(1); }\n")
        calls = self.calls_made()
        self.assertEqual([c for c in calls if c == "link"], ["link", "link"], calls)
        self.assertTrue(all(self.light in c for c in calls[:2]), calls)
        self.assertTrue(all(c == "link" or (c.endswith(f"cpath={self.pch}") and "nvcc=-I" not in c) for c in calls[3:]), calls)
        self.assertIn("undefined", self.marker(d, cuda_header))
        self.assertIn("undefined", self.marker(d))
        self.assertIsNone(light_build.unresolved(d))

    def test_a_symbol_no_header_defines_is_left_to_the_import_as_without_kbench(self):
        # The candidate's own function, declared and never defined: the same with either
        # header, so not built again; one in torch's namespace is built again, then fails the
        # same way.
        for body, again in (
            ("int nowhere();\nint binding() { return nowhere(); }\n", False),
            ('extern "C" int nowhere_c();\nint binding() { return nowhere_c(); }\n', False),
            ("namespace at { int nowhere(); }\nint binding() { return at::nowhere(); }\n", True),
        ):
            with self.subTest(body):
                open(self.calls, "w").close()
                d = self.linked_build(body)  # it builds, as torch's does; its import will fail
                light = [self.light_cpath(), "link"]
                self.assertEqual(self.calls_made(), light + ([f"cpath={self.pch}", "link"] if again else []))
                self.assertTrue(self.marker(d).startswith("full" if again else "light"), self.marker(d))
                with self.assertRaisesRegex(OSError, "undefined symbol: .*nowhere"):
                    ctypes.CDLL(os.path.join(d, "x.so"), mode=os.RTLD_NOW)
                self.assertFalse(os.path.exists(os.path.join(d, build_failures.RECORD)))

    def test_a_library_the_tools_cannot_read_counts_as_one_that_may_not_load(self):
        for tool in ("_NM", "_READELF"):
            with self.subTest(tool), mock.patch.object(undefined_symbols, tool, "kbench-no-such-tool"):
                open(self.calls, "w").close()
                d = self.linked_build("int binding() { return torch::full_template(1) + 1; }\n")
                self.assertEqual(self.calls_made(), self.light_then_torchs())
                self.assertIn("could not be read for undefined symbols (kbench-no-such-tool is not installed)", self.marker(d))

    def test_a_symbol_no_encoding_gives_back_is_told_escaped_and_counts_as_undefined(self):
        d = self.linked_build('int strange() __asm__("_ZN2at\\xffx");\nint binding() { return strange(); }\n')
        self.assertEqual(self.calls_made(), self.light_then_torchs())
        self.assertIn("left _ZN2at\\xffx undefined", self.marker(d))

    def test_the_tools_words_are_read_whatever_the_locale(self):
        # A readelf that translates its words unless LC_ALL=C, as a translated binutils does.
        fake = os.path.join(self.tmp, "readelf-translated.sh")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\n[ "$LC_ALL" = C ] && exec readelf "$@"\nreadelf "$@" | sed "s/Shared library/Gemeinsame Bibliothek/"\n')
        os.chmod(fake, 0o755)
        d = self.build_dir("#include <string>\nint binding() { return (int)std::to_string(3).size(); }\n")
        self.linked(d)
        with mock.patch.dict(os.environ, {"LC_ALL": "de_DE.UTF-8"}), mock.patch.object(undefined_symbols, "_READELF", fake):
            self.build(d)
        self.assertEqual(self.calls_made(), [self.light_cpath(), "link"])
        self.assertTrue(self.marker(d).startswith("light"))

    def test_which_undefined_symbols_a_header_may_define(self):
        for symbol, may in (
            ("_ZN2at6native3fooEv", True),
            ("_ZNK3c1010TensorImpl4sizeEv", True),
            ("_ZN5torch13full_templateIiEET_S1_", True),
            ("_ZTVN5torch8autograd4NodeE", True),
            ("_ZNSt6vectorIiSaIiEE9push_backEOi", True),
            ("_ZSt4cout", True),
            ("_Z7nowherev", False),
            ("_Z17my_kernel_forwardN2at6TensorE", False),
            ("_ZN6mykern3runEN2at6TensorE", False),
            ("_ZNK6mykern3Foo3getEv", False),
            ("_ZTV4Mine", False),
            ("_ZN3fmt2v96detail10vformat_toEv", True),
            ("nowhere_c", False),
            ("_Zz", True),
        ):
            with self.subTest(symbol):
                self.assertEqual(undefined_symbols.headers_may_define(symbol), may)

if __name__ == "__main__":
    unittest.main()
