#!/usr/bin/env python3
"""Tests of the side-by-side benchmark that need no GPU (Python 3 standard library only):
the summary's seconds and ratios on the fixture in fixture/state, the selection syntax, and
run.sh's dry run. Run: python3 bench/side_by_side/test_side_by_side.py"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kb_eval  # noqa: E402 (needs no torch for selections)
import summarize  # noqa: E402

FIXTURE = os.path.join(HERE, "fixture", "state")


class Summary(unittest.TestCase):
    """The fixture: problems L1/10, 20, 30. KernelBench 12, 10 and 14 s (one call, 40 s; L1/30
    not correct). kbench random: one call 2000-2020, finishes at 2006, 2010, 2015 (L1/20 a
    mismatch), so 6, 4 and 5 s. kbench all: stopped after L1/10 (call 3000-3012, finish 3010)
    and resumed (call 3100-3118, finishes 3110, 3116), so 10, 10 and 6 s; 30 s of process."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sbs-test-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.json_path = os.path.join(cls.tmp, "results.json")
        cls.md_path = os.path.join(cls.tmp, "results.md")
        rc = summarize.main(["--state", FIXTURE, "--out", cls.json_path, "--md", cls.md_path])
        assert rc == 0
        with open(cls.json_path) as f:
            cls.res = json.load(f)
        with open(cls.md_path) as f:
            cls.md = f.read()

    def test_totals(self):
        t = self.res["tools"]
        kb, ra, al = t["kernelbench"], t["random"], t["all"]
        self.assertEqual((kb["problem_count"], kb["correct"]), (3, 2))
        self.assertAlmostEqual(kb["process_wall_s"], 40.0)
        self.assertAlmostEqual(kb["s_per_problem"], 40.0 / 3)
        self.assertAlmostEqual(kb["sum_problem_s"], 36.0)
        self.assertAlmostEqual(kb["outside_problems_s"], 4.0)
        self.assertAlmostEqual(kb["mean_breakdown_s"]["worker_start_s"], 7.0)
        self.assertEqual((ra["problem_count"], ra["correct"]), (3, 2))  # the cut-off line is skipped
        self.assertAlmostEqual(ra["process_wall_s"], 20.0)
        self.assertAlmostEqual(ra["sum_problem_s"], 15.0)
        self.assertAlmostEqual(ra["sum_record_s"], 13.5)
        self.assertAlmostEqual(ra["records_span_s"], 12.0)
        self.assertEqual(al["invocations"], 2)
        self.assertAlmostEqual(al["process_wall_s"], 30.0)
        self.assertAlmostEqual(al["sum_problem_s"], 26.0)
        self.assertAlmostEqual(al["mean_phases_s"]["stress_s"], 3.0)
        self.assertTrue(kb["complete"] and ra["complete"] and al["complete"])
        self.assertEqual(al["containment"], ["none"])

    def test_ratios(self):
        r = self.res["ratios"]["kernelbench_over_kbench_random"]
        self.assertTrue(r["same_problems"])
        self.assertAlmostEqual(r["by_process_wall"], 2.0)
        self.assertAlmostEqual(r["by_process_wall_per_problem"], 2.0)
        self.assertAlmostEqual(r["by_sum_of_problems"], 36.0 / 15.0)
        self.assertAlmostEqual(r["per_problem_median"], 2.5)  # 12/6, 10/4, 14/5
        self.assertAlmostEqual(r["per_problem_max"], 2.8)
        a = self.res["ratios"]["kernelbench_over_kbench_all"]
        self.assertAlmostEqual(a["by_process_wall"], 40.0 / 30.0)
        self.assertAlmostEqual(a["by_sum_of_problems"], 36.0 / 26.0)
        self.assertAlmostEqual(a["per_problem_median"], 1.2)  # 12/10, 10/10, 14/6

    def test_per_problem(self):
        rows = {r["key"]: r for r in self.res["per_problem"]}
        self.assertEqual(list(rows), ["L1/10", "L1/20", "L1/30"])
        r = rows["L1/20"]
        self.assertEqual(r["name"], "LeakyReLU")
        self.assertAlmostEqual(r["kernelbench"]["seconds"], 10.0)
        self.assertAlmostEqual(r["random"]["marginal_s"], 4.0)
        self.assertAlmostEqual(r["random"]["record_s"], 4.5)
        self.assertEqual(r["random"]["outcome"], "mismatch")
        self.assertAlmostEqual(r["all"]["marginal_s"], 10.0)  # from the resumed call's start
        self.assertAlmostEqual(r["ratio_random"], 2.5)
        self.assertAlmostEqual(r["all"]["phases"]["stress_reference_s"], 1.5)
        self.assertFalse(rows["L1/30"]["kernelbench"]["correct"])

    def test_environment(self):
        self.assertEqual(self.res["gpu"], ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2)"])
        self.assertEqual(len(self.res["gpus_over_calls"]), 2)
        self.assertEqual(self.res["torch"], "2.11.0+cu130 cuda 13.0")
        self.assertEqual(self.res["kbench"], "kbench 0.1.0")
        self.assertTrue(self.res["kernelbench_commit"].startswith("423217d"))
        self.assertEqual(self.res["date"], "2026-11-26")
        self.assertEqual(self.res["selection"], "1/10,1/20,1/30")
        self.assertEqual(self.res["calls"], 2)

    def test_markdown(self):
        for needle in ("| KernelBench eval | 3 | 2 | 40.0 | 13.33 | 36.0 | 1 | yes |",
                       "**KernelBench / kbench --families random**: 2.00× by process wall per problem",
                       "median 2.50×", "| L1/20 | LeakyReLU | 10.00 | 5.0 / 4.5 / 0.5 | 4.00 (4.50) ✗ mismatch |",
                       "the calls ran on different GPUs", "## kbench phases per problem"):
            self.assertIn(needle, self.md)

    def test_stress_added(self):
        # Record seconds, random / all: L1/10 3 / 8 (+167%), L1/30 6 / 7 (+17%); L1/20 is a
        # mismatch in the random run and is left out.
        sa = self.res["ratios"]["stress_added"]
        self.assertEqual(sa["problems"], 2)
        self.assertAlmostEqual(sa["max"], 8.0 / 3.0 - 1)
        self.assertEqual(sa["max_problem"], "L1/10")
        self.assertAlmostEqual(sa["per_problem_median"], ((8.0 / 3.0 - 1) + (7.0 / 6.0 - 1)) / 2)
        self.assertEqual(sa["over_half"], ["L1/10"])
        self.assertIn("**Stress families' cost**", self.md)
        self.assertIn("most +167% (L1/10); over +50% on 1 of 2 problems: L1/10", self.md)

    def test_case_times_by_family(self):
        fams = self.res["tools"]["all"]["case_times_by_family"]
        self.assertEqual(fams["denormal"]["judge_s"], 3.0)
        self.assertEqual(fams["nan-inf"]["not_applicable"], 1)
        self.assertEqual(fams["denormal"]["max_problem"], "L1/10")
        md = summarize.markdown(self.res)
        self.assertIn("| denormal | 1 | 0 | 3.6 | 0.5 | 0.1 | 3.0 | 3.6 L1/10 |", md)

    def test_partial_state(self):
        """A state with only KernelBench's timings and a kbench run cut off: ratios over
        different problem sets are given per problem only."""
        d = tempfile.mkdtemp(prefix="sbs-partial-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        os.makedirs(os.path.join(d, "random"))
        with open(os.path.join(FIXTURE, "kb_timings.json")) as f, open(os.path.join(d, "kb_timings.json"), "w") as g:
            g.write(f.read())
        with open(os.path.join(FIXTURE, "random", "records.jsonl")) as f:
            first = f.readline()
        with open(os.path.join(d, "random", "records.jsonl"), "w") as g:
            g.write(first)
        with open(os.path.join(d, "random.invocations"), "w") as g:
            g.write("2000.0 2008.0 124\n")
        res = summarize.build(d)
        r = res["ratios"]["kernelbench_over_kbench_random"]
        self.assertFalse(r["same_problems"])
        self.assertIsNone(r["by_process_wall"])
        # No kernelbench.invocations: kb_eval.py's own clock (1000.5 to 1039.5).
        self.assertAlmostEqual(r["by_process_wall_per_problem"], (39.0 / 3) / 8.0)
        self.assertAlmostEqual(r["per_problem_median"], 2.0)
        self.assertFalse(res["tools"]["random"]["complete"])
        self.assertEqual(res["tools"]["all"]["problem_count"], 0)
        summarize.markdown(res)  # renders with missing runs


class Selection(unittest.TestCase):
    def test_specs(self):
        for spec, want in (("1/10,1/20", "1/10,1/20"), ("1:10,20", "1/10,1/20"), ("1:10-12,2:5,7", "1/10-12,2/5,2/7"),
                           ("5,1/3-4", "5,1/3-4")):
            self.assertEqual(kb_eval.kbench_spec(kb_eval.parse_select(spec)), want, spec)
        for bad in ("", "1/", "x", "5-2", "1,,2", "1/a"):
            with self.assertRaises(ValueError, msg=bad):
                kb_eval.parse_select(bad)
        items = kb_eval.parse_select("1/10-12,7")
        self.assertTrue(kb_eval.matches(items, 1, 11) and kb_eval.matches(items, 3, 7))
        self.assertFalse(kb_eval.matches(items, 2, 11))

    def test_reference_rename(self):
        src = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n# MyModel Model2\n"
        out = kb_eval.rename_model(src)
        self.assertIn("class ModelNew(nn.Module)", out)
        self.assertIn("super(ModelNew, self)", out)
        self.assertIn("MyModel Model2", out)


class DryRun(unittest.TestCase):
    def test_prints_the_commands(self):
        run_sh = os.path.join(HERE, "run.sh")
        subprocess.run(["bash", "-n", run_sh], check=True)
        tmp = tempfile.mkdtemp(prefix="sbs-dry-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        env = dict(os.environ, D=os.path.join(tmp, "devrun"), WORK=os.path.join(tmp, "work"),
                   OUT=os.path.join(tmp, "out"), SELECT="1:10,20", KBENCH_PYTHON=sys.executable, BUDGET_S="500")
        for k in ("DRY_RUN", "STEPS", "KB", "KBENCH", "STATE_IN", "KBENCH_CACHE_DIR"):
            env.pop(k, None)
        p = subprocess.run(["bash", run_sh, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = [x for x in p.stdout.splitlines() if x.startswith("+ ")]
        self.assertEqual(len(lines), 7, p.stdout)
        # The warm step fills kbench's caches with the first problem, untimed.
        self.assertIn("--select 1/10 --gpus 0 --device cuda --families random --no-timing --out {}/work/kbench-warm"
                      .format(tmp), lines[1])
        lines = lines[:1] + lines[2:]
        self.assertIn("kb_eval.py run --kb {}/devrun/KernelBench --select 1/10,1/20".format(tmp), lines[1])
        self.assertIn("--budget-s", lines[1])
        self.assertIn("kbench run --agent reference", lines[2])
        self.assertIn("--select 1/10,1/20 --gpus 0 --device cuda --families random --out {}/work/random".format(tmp),
                      lines[2])
        self.assertNotIn("--families", lines[3])
        self.assertIn("summarize.py --state {}/work/state".format(tmp), lines[4])
        self.assertFalse(os.path.exists(os.path.join(tmp, "work")) or os.path.exists(os.path.join(tmp, "out")),
                         "a dry run writes nothing")


if __name__ == "__main__":
    unittest.main(verbosity=1)
