"""The helper that makes the precompiled torch/extension.h (`kbench_worker.pch`): each variant
renamed into place only once complete, the forwarding header beside them, a folder made for other headers or another compiler
emptied before anything new is made, leftovers of a stopped helper cleared, one helper at a
time, and a compiler that is not GCC said once. The compiler is a stand-in (`CXX`): the real
one takes 40 s a header here, and `tests/precompiled_header.rs` runs it."""

import fcntl
import io
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from kbench_worker import pch

# A stand-in for g++: says it is GCC, and writes its `-o` file (the header's first line) after
# a pause long enough to look at the folder while it works.
FAKE_GCC = """#!/bin/sh
case "$1" in
  -v) echo "COLLECT_GCC=c++" >&2; echo "gcc version 12.2.0 (stand-in)" >&2; exit 0 ;;
  --version) echo "c++ (stand-in) {tag}"; exit 0 ;;
esac
out=""
prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
echo "$*" >> "{calls}"
printf 'made for: %s\\n' "$*" > "$out"
"""

NOT_GCC = """#!/bin/sh
case "$1" in
  -v) echo "clang version 18 (stand-in)" >&2; exit 0 ;;
  --version) echo "clang (stand-in)"; exit 0 ;;
esac
exit 1
"""


class HelperTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.out = os.path.join(self.dir, "pch")
        self.calls = os.path.join(self.dir, "calls")

    def tearDown(self):
        self.tmp.cleanup()

    def compiler(self, body, name="c++"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        return path

    def build(self, cxx, jobs=2):
        log = io.StringIO()
        with mock.patch.dict(os.environ, {"CXX": cxx}):
            made = pch.build(self.out, "cpu", jobs=jobs, log=log)
        return made, log.getvalue()

    def gch(self):
        folder = os.path.join(self.out, "torch", "extension.h.gch")
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def test_every_variant_is_made_with_torchs_flags_and_renamed_into_place(self):
        cxx = self.compiler(FAKE_GCC.format(tag="a", calls=self.calls))
        made, log = self.build(cxx)
        self.assertEqual(made, len(pch.VARIANTS), log)
        self.assertEqual(self.gch(), sorted(f"{n}.gch" for n, _ in pch.VARIANTS))
        with open(os.path.join(self.out, "signature.json")) as f:
            sig = json.load(f)
        self.assertEqual(sig["variants"], [n for n, _ in pch.VARIANTS])
        self.assertEqual(sig["compiler_version"], "c++ (stand-in) a")
        with open(os.path.join(self.out, "torch", "extension.h.gch", "O3.gch")) as f:
            made_for = f.read()
        # The flags torch's builder gives a C++ file, the header, and the variant's own.
        for part in ("-x c++-header", "torch/extension.h", "-DTORCH_API_INCLUDE_EXTENSION_H",
                     "-isystem", "-fPIC -std=c++17 -O3"):
            self.assertIn(part, made_for)
        self.assertEqual([n for n in os.listdir(self.out) if n.endswith(".partial")], [])
        # Beside them, the header a second #include opens: torch's own, through include_next.
        with open(os.path.join(self.out, "torch", "extension.h")) as f:
            forwarder = f.read()
        self.assertIn("#pragma once", forwarder)
        self.assertIn("#include_next <torch/extension.h>", forwarder)
        # Complete: a second helper compiles nothing.
        with open(self.calls) as f:
            before = f.read()
        self.assertEqual(self.build(cxx)[0], len(pch.VARIANTS))
        with open(self.calls) as f:
            self.assertEqual(f.read(), before)

    def test_with_the_light_cxx_header_chosen_its_folder_is_made_first(self):
        from kbench_worker import cxx_header

        cxx = self.compiler(FAKE_GCC.format(tag="a", calls=self.calls))
        with mock.patch.dict(os.environ, {cxx_header.ENV: "light"}):
            made, log = self.build(cxx, jobs=1)
        self.assertEqual(made, len(pch.VARIANTS), log)
        light = os.path.join(self.out, cxx_header.LIGHT)
        self.assertEqual(sorted(os.listdir(os.path.join(light, "torch", "extension.h.gch"))),
                         sorted(f"{n}.gch" for n, _ in pch.VARIANTS))
        self.assertEqual(self.gch(), sorted(f"{n}.gch" for n, _ in pch.VARIANTS))
        header = os.path.join(light, "torch", "extension.h")
        with open(header) as f:
            self.assertEqual(f.read(), cxx_header.HEADER)
        with open(os.path.join(self.out, "signature.json")) as f:
            sig = json.load(f)
        self.assertEqual(os.stat(header).st_mtime_ns, sig["header_mtime_ns"], "dated like torch's header")
        with open(self.calls) as f:
            calls = f.read().splitlines()
        # The light forms first (builds use them), each from the light header.
        self.assertEqual(len(calls), 2 * len(pch.VARIANTS), calls)
        for c in calls[: len(pch.VARIANTS)]:
            self.assertIn(header, c)
        for c in calls[len(pch.VARIANTS):]:
            self.assertNotIn(light, c)
        # Made: a second helper compiles nothing; without the choice, no light folder.
        with mock.patch.dict(os.environ, {cxx_header.ENV: "light"}):
            self.build(cxx)
        with open(self.calls) as f:
            self.assertEqual(len(f.read().splitlines()), len(calls))
        other = os.path.join(self.dir, "other")
        with mock.patch.dict(os.environ, {"CXX": cxx}):
            os.environ.pop(cxx_header.ENV, None)
            pch.build(other, "cpu", jobs=1, log=io.StringIO())
        self.assertFalse(os.path.exists(os.path.join(other, cxx_header.LIGHT)))

    def test_the_light_cxx_header_is_in_place_before_torch_is_imported(self):
        # Builds that start while the helper imports torch (seconds on a busy host) find the
        # light header already, dated as torch's own.
        from kbench_worker import cxx_header

        cxx = self.compiler(FAKE_GCC.format(tag="a", calls=self.calls))
        header = os.path.join(self.out, cxx_header.LIGHT, "torch", "extension.h")
        seen = []
        real = pch.signature

        def signature(kind):
            seen.append(os.path.isfile(header) and os.stat(header).st_mtime_ns)
            return real(kind)

        with mock.patch.dict(os.environ, {cxx_header.ENV: "light"}), \
                mock.patch.object(pch, "signature", signature):
            made, log = self.build(cxx, jobs=1)
        self.assertEqual(made, len(pch.VARIANTS), log)
        with open(os.path.join(self.out, "signature.json")) as f:
            sig = json.load(f)
        self.assertEqual(seen, [sig["header_mtime_ns"]])
        self.assertEqual(pch._torch_header_mtime_ns(), sig["header_mtime_ns"])

    def test_headers_of_another_compiler_leave_before_new_ones_are_made(self):
        made, log = self.build(self.compiler(FAKE_GCC.format(tag="old", calls=self.calls), "old-c++"))
        self.assertEqual(made, len(pch.VARIANTS), log)
        # A stopped helper's partial file, and a compiler that fails: nothing half made, and
        # nothing of the old compiler's left in sight.
        open(os.path.join(self.out, "O3.999.partial"), "w").close()
        failing = self.compiler(FAKE_GCC.format(tag="new", calls=self.calls).replace('printf', 'exit 1; printf'), "new-c++")
        made, log = self.build(failing)
        self.assertEqual(made, 0, log)
        self.assertIn("plain failed", log)
        self.assertEqual(self.gch(), [])
        self.assertFalse(os.path.exists(os.path.join(self.out, "O3.999.partial")))
        with open(os.path.join(self.out, "signature.json")) as f:
            self.assertEqual(json.load(f)["compiler_version"], "c++ (stand-in) new")

    def test_a_helper_started_again_leaves_cuda_objects_built_through_the_forwarder_up_to_date(self):
        """nvcc's dependency files list the forwarder; a helper that runs again (a variant
        failed, or the last was stopped with its run) must not make ninja compile them again."""
        import shutil
        ninja = shutil.which("ninja") or shutil.which("ninja", path=os.path.dirname(sys.executable))
        if ninja is None:
            self.skipTest("no ninja")
        fails_o3 = FAKE_GCC.format(tag="a", calls=self.calls).replace('out=""', 'case "$*" in *-O3*) exit 1 ;; esac\nout=""')
        made, log = self.build(self.compiler(fails_o3))
        self.assertEqual(made, len(pch.VARIANTS) - 1, log)
        forwarder = os.path.join(self.out, "torch", "extension.h")
        with open(os.path.join(self.out, "signature.json")) as f:
            sig = json.load(f)
        self.assertEqual(os.stat(forwarder).st_mtime_ns, sig["header_mtime_ns"], "dated like torch's header")
        # An object whose dependency file names the forwarder, as nvcc's does.
        build = os.path.join(self.dir, "build")
        os.makedirs(build)
        open(os.path.join(build, "k.cu"), "w").close()
        with open(os.path.join(build, "build.ninja"), "w") as f:
            f.write(f"rule nvcc\n  command = printf '%s: %s %s\\n' $out $in {forwarder} > $out.d && touch $out\n"
                    "  depfile = $out.d\n  deps = gcc\nbuild k.o: nvcc k.cu\n")
        run = lambda *a: subprocess.run([ninja, *a], cwd=build, capture_output=True, text=True, timeout=60)
        self.assertEqual(run().returncode, 0)
        self.assertIn(forwarder, run("-t", "deps").stdout)
        self.assertIn("no work to do", run("-n").stdout)
        # The helper again (its O3 still missing): the forwarder's content and date stay.
        made, log = self.build(self.compiler(fails_o3))
        self.assertEqual(made, len(pch.VARIANTS) - 1, log)
        self.assertEqual(os.stat(forwarder).st_mtime_ns, sig["header_mtime_ns"])
        self.assertIn("no work to do", run("-n").stdout, run("-n", "-d", "explain").stderr)
        # A forwarder of another content (an older kbench's) is written anew, dated the same.
        with open(forwarder, "w") as f:
            f.write("// old\n")
        self.build(self.compiler(fails_o3))
        with open(forwarder) as f:
            self.assertEqual(f.read(), pch.FORWARDER)
        self.assertEqual(os.stat(forwarder).st_mtime_ns, sig["header_mtime_ns"])

    def test_one_helper_at_a_time(self):
        cxx = self.compiler(FAKE_GCC.format(tag="a", calls=self.calls))
        os.makedirs(self.out)
        with open(os.path.join(self.out, ".lock"), "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            made, log = self.build(cxx)
        self.assertEqual(made, 0)
        self.assertIn("another process is making these headers", log)
        self.assertEqual(self.gch(), [])
        self.assertFalse(os.path.exists(self.calls))

    def test_a_compiler_that_is_not_gcc_is_said_once_in_the_signature(self):
        made, log = self.build(self.compiler(NOT_GCC))
        self.assertEqual(made, 0)
        with open(os.path.join(self.out, "signature.json")) as f:
            sig = json.load(f)
        self.assertEqual(sig["variants"], [])
        self.assertIn("not GCC", sig["none"])
        self.assertIn("none made", log)

    def test_the_module_entry_prints_what_it_made(self):
        cxx = self.compiler(FAKE_GCC.format(tag="a", calls=self.calls))
        env = dict(os.environ, CXX=cxx, KBENCH_PCH_JOBS="1")
        root = os.path.dirname(os.path.dirname(os.path.abspath(pch.__file__)))
        out = subprocess.run([sys.executable, "-m", "kbench_worker", "pch", self.out, "cpu"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout.splitlines()[-1]), {"made": len(pch.VARIANTS)})


if __name__ == "__main__":
    unittest.main()
