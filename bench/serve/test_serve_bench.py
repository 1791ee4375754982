#!/usr/bin/env python3
"""Tests of the serve benchmark that need no GPU, torch or built kbench (Python 3 standard
library only): serve_bench.py's HTTP side against stand_in_kbench.py on loopback (429 waited
out, long polls, the cache step, a published set), and run.sh end to end with the stand-in as
KBENCH (token, start, measure, SIGTERM). Run: python3 bench/serve/test_serve_bench.py"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import selftest  # noqa: E402
import serve_bench  # noqa: E402
import summary  # noqa: E402

STAND_IN = HERE / "stand_in_kbench.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kernelbench(tmp):
    """The shared KernelBench checkout when there is one, else suites/smoke as level 1."""
    class A:
        kernelbench = None

    kb = selftest.kernelbench_dir(A)
    if kb:
        return kb
    (Path(tmp) / "level1").symlink_to(REPO / "suites" / "smoke")
    return Path(tmp)


class AgainstStandIn(unittest.TestCase):
    """One stand-in service for the class; every 5th POST is refused with 429."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="serve-bench-test-")
        t = Path(cls.tmp.name)
        cls.kb = kernelbench(t)
        cls.token = "kbs_test_token"
        sha = hashlib.sha256(cls.token.encode()).hexdigest()
        (t / "tokens.toml").write_text(serve_bench.tokens_toml("t", sha))
        cls.port = free_port()
        cls.url = f"http://127.0.0.1:{cls.port}"
        env = dict(os.environ, FAKE_429_EVERY="5", FAKE_EVAL_S="0.02")
        cls.log = open(t / "serve.log", "w")
        cls.proc = subprocess.Popen(
            [sys.executable, str(STAND_IN), "serve", "--kernelbench", str(cls.kb), "--levels", "1",
             "--listen", f"127.0.0.1:{cls.port}", "--out", str(t / "run"), "--tokens", str(t / "tokens.toml")],
            env=env, stderr=cls.log,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(cls.url + "/v1/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or cls.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(10)
        cls.log.close()
        cls.tmp.cleanup()

    def test_a_bench_against_the_stand_in(self):
        out = Path(self.tmp.name) / "out"
        rc = serve_bench.main([
            "--url", self.url, "--token", self.token, "--kernelbench", str(self.kb), "--out", str(out),
            "-n", "8", "-k", "12", "--poll-s", "0.5", "--idle-probe-s", "0.5",
            "--published", str(REPO / "tests" / "fixtures" / "import" / "leaderboard"),
        ])
        self.assertEqual(rc, 0)
        r = json.loads((out / "results.json").read_text())
        self.assertEqual(r["schema"], "kbench-serve-bench/1")
        t = r["throughput"]
        self.assertEqual((t["submitted"], t["done"], t["cached_among_them"]), (8, 8, 0))
        self.assertGreater(t["evaluations_per_min"], 0)
        self.assertEqual(t["verdict_latency_s"]["n"], 8)
        self.assertEqual(len(r["throughput_candidates"]), 8)
        c = r["cached"]
        self.assertEqual((c["resubmitted"], c["cached"], c["not_cached"], c["verdict_differs_from_first"]), (12, 12, 0, 0))
        self.assertEqual(c["submit_to_done_ms"]["n"], 12)
        p = r["published"]
        # The fixture's L1/1 and L1/2 kernels: the leaderboard's four readable entries.
        self.assertEqual((p["kernels"], p["submitted"], p["done"]), (4, 4, 4))
        # Every 5th POST was refused once and retried after Retry-After.
        self.assertGreaterEqual(r["retries"]["429"], 1)
        b = r["gpu_busy"]
        self.assertEqual(b["metrics_busy_ratio_before"].keys(), {"0"})
        self.assertEqual(b["metrics_clock_start_from"], "idle reads")
        md = (out / "summary.md").read_text()
        self.assertIn("evaluations/min", md)
        self.assertIn("cached answer, 12/12 from cache", md)

    def test_b_a_rerun_with_the_same_nonce_is_answered_from_the_cache(self):
        out = Path(self.tmp.name) / "again"
        args = ["--url", self.url, "--token", self.token, "--kernelbench", str(self.kb), "-n", "4",
                "--steps", "throughput", "--nonce", "fixed", "--poll-s", "0.5", "--idle-probe-s", "0"]
        self.assertEqual(serve_bench.main(args + ["--out", str(out / "1")]), 0)
        self.assertEqual(serve_bench.main(args + ["--out", str(out / "2")]), 0)
        r = json.loads((out / "2" / "results.json").read_text())
        self.assertEqual(r["throughput"]["cached_among_them"], 4)
        self.assertIsNone(r["throughput"]["evaluations_per_min"])
        self.assertIsNone(r["throughput"]["goal_met"])

    def test_c_a_wrong_token_is_an_error_not_a_retry(self):
        api = serve_bench.Api(self.url, "not-a-token")
        with self.assertRaises(serve_bench.ApiError) as e:
            api.problems()
        self.assertEqual(e.exception.status, 401)


class RunSh(unittest.TestCase):
    def test_run_sh_with_the_stand_in(self):
        with tempfile.TemporaryDirectory(prefix="serve-bench-runsh-") as t:
            kb = kernelbench(t)
            out = Path(t) / "out"
            env = dict(os.environ, KBENCH=str(STAND_IN), FAKE_EVAL_S="0.02", HEALTH_WAIT_S="30", STOP_WAIT_S="10")
            r = subprocess.run(
                ["bash", str(HERE / "run.sh"), "--kernelbench", str(kb), "--out", str(out),
                 "-n", "4", "-k", "5", "--poll-s", "0.5", "--idle-probe-s", "0.5"],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
            )
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for f in ("results.json", "summary.md", "serve.log", "env.txt", "bench.log"):
                self.assertTrue((out / f).is_file(), f)
            res = json.loads((out / "results.json").read_text())
            self.assertEqual(res["throughput"]["done"], 4)
            self.assertEqual(res["cached"]["cached"], 5)
            log = (out / "bench.log").read_text()
            self.assertIn("service exit status 0", log)
            self.assertIn("SIGTERM, stopping", (out / "serve.log").read_text())
            # The token stays in the removed work folder, never in OUT.
            self.assertNotIn("kbs_", "".join(p.read_text(errors="replace") for p in out.iterdir() if p.is_file()))

    def test_run_sh_dry_run_starts_nothing(self):
        with tempfile.TemporaryDirectory(prefix="serve-bench-dry-") as t:
            kb = kernelbench(t)
            out = Path(t) / "out"
            r = subprocess.run(
                ["bash", str(HERE / "run.sh"), "--kernelbench", str(kb), "--out", str(out), "--dry-run", "-n", "5"],
                cwd=REPO, env=dict(os.environ, KBENCH="/nonexistent/kbench"), capture_output=True, text=True, timeout=60,
            )
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("--levels 1 --listen 127.0.0.1:", r.stdout)
            self.assertEqual(len(list((out / "candidates").iterdir())), 5)
            self.assertFalse((out / "serve.log").exists())


class SessionsLine(unittest.TestCase):
    def test_the_summary_says_how_many_reference_sessions_each_pass_opened_and_reused(self):
        m = {
            'kbench_serve_reference_sessions_opened_total{"pass": "public"}': 6.0,
            'kbench_serve_reference_sessions_reused_total{"pass": "public"}': 18.0,
            'kbench_serve_reference_sessions_opened_total{"pass": "ranked"}': 2.0,
            'kbench_serve_evaluations_total': 48.0,
        }
        self.assertEqual(
            summary.sessions_line(m),
            "Reference sessions after the throughput step: public pass 6 opened, 18 reused; ranked pass 2 opened, 0 reused.",
        )
        self.assertIsNone(summary.sessions_line({"kbench_serve_evaluations_total": 1.0}))


class FailureLines(unittest.TestCase):
    def test_the_summary_names_each_candidate_that_finished_not_correct_with_its_message(self):
        cands = [
            {"index": 0, "kind": "triton", "problem": "kernelbench/L1/19", "outcome": "ok", "correct": True},
            {"index": 1, "kind": "pytorch", "problem": "kernelbench/L1/25", "outcome": "runtime_error",
             "correct": False, "message": "runtime error (time):\n torch.OutOfMemoryError: CUDA out of memory"},
            {"index": 2, "kind": "pytorch", "problem": "kernelbench/L1/27", "outcome": None, "correct": None},
            {"index": 3, "kind": "pytorch", "problem": "kernelbench/L1/30", "outcome": "mismatch", "correct": False},
        ]
        self.assertEqual(
            summary.failure_lines(cands, width=60),
            [
                "- kernelbench/L1/25 (pytorch, #1): runtime_error: runtime error (time): torch.OutOfMemoryError: CUDA out of me",
                "- kernelbench/L1/30 (pytorch, #3): mismatch",
            ],
        )
        self.assertEqual(summary.failure_lines(cands[:1]), [])


class RecordPhases(unittest.TestCase):
    def test_phases_are_summed_over_the_records_of_the_step_only(self):
        def rec(started, notes=(), **phases):
            return json.dumps({"mac": "m", "started_unix_s": started, "phases": phases, "notes": list(notes)})

        retimed = ["timed again: the harness's clock could not tell whether it supports the claims of 1 timing(s)"]
        lines = [
            rec(10.0, retimed, timing_s=9.0, reference_open_s=2.0),  # an earlier run's: left out
            rec(100.0, retimed, timing_s=1.5, reference_open_s=2.5, stress_s=0.5),
            "",
            rec(101.0, ["precision: fp32"], timing_s=0.5, reference_open_s=0.0, stress_s=0.25, profile_s=0),
        ]
        got = serve_bench.record_phases(lines, 99.0)
        self.assertEqual(got["records"], 2)
        self.assertEqual(got["opened_a_reference_session"], 1)
        self.assertEqual(got["timed_again"], 1)
        self.assertEqual(got["timing_s_max"], 1.5)
        self.assertEqual(got["phases_s"], {"reference_open_s": 2.5, "timing_s": 2.0, "stress_s": 0.75, "profile_s": 0})
        self.assertEqual(list(got["phases_s"])[0], "reference_open_s", "largest first")

    def test_the_summary_says_how_many_were_timed_again_and_the_longest_timing(self):
        tp = {"records": 16, "opened_a_reference_session": 2, "timed_again": 3, "timing_s_max": 11.2, "phases_s": {"timing_s": 89.7}}
        md = summary.summary_md({"started_unix_s": 0, "url": "u", "nonce": "n", "throughput_phases": tp})
        self.assertIn("2 opened their problem's reference session; 3 timed again by the harness's clock; the longest timing phase 11.20 s.", md)
        # Results of a bench before these fields: the line as it was.
        del tp["timed_again"], tp["timing_s_max"]
        self.assertIn("2 opened their problem's reference session.", summary.summary_md({"started_unix_s": 0, "url": "u", "nonce": "n", "throughput_phases": tp}))


class TimingCeiling(unittest.TestCase):
    def test_the_ceiling_is_what_the_summed_timing_phases_leave_a_minute(self):
        tp = {"records": 20, "phases_s": {"timing_s": 90.8, "stress_s": 56.1}}
        line = summary.timing_ceiling(tp)
        self.assertIn("4.54 s an evaluation", line)
        self.assertIn("at most 13.2 evaluations a minute on 1 GPU(s)", line)
        self.assertIn("at most 26.4 evaluations", summary.timing_ceiling(tp, gpus=2))
        self.assertIsNone(summary.timing_ceiling({"records": 3, "phases_s": {"timing_s": 0.0}}))
        self.assertIsNone(summary.timing_ceiling({}))


class SelfTest(unittest.TestCase):
    def test_self_test_passes(self):
        r = subprocess.run([sys.executable, str(HERE / "serve_bench.py"), "--self-test"], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("self-test: ok", r.stdout)


if __name__ == "__main__":
    unittest.main()
