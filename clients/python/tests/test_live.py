"""The client against a real `kbench serve`; skipped unless KBENCH_SERVE_URL and
KBENCH_SERVE_TOKEN are set. Then KBENCH_SERVE_PROBLEM must name one of its problems and
KBENCH_SERVE_SOURCES a folder of kernel .py files for it; KBENCH_SERVE_TIMEOUT (seconds,
default 1800) bounds each wait.

Every file is submitted twice, the second time after the first copies are done, so the second
copies must come from the verdict cache; then once more through KernelReward.
"""

import json
import math
import os
import unittest
from pathlib import Path

import _path  # noqa: F401

from kbench_client import AuthError, Client, KbenchError, KernelReward, NewSubmission

URL = os.environ.get("KBENCH_SERVE_URL")
TOKEN = os.environ.get("KBENCH_SERVE_TOKEN")
TIMEOUT = float(os.environ.get("KBENCH_SERVE_TIMEOUT", "1800"))
LIVE = unittest.skipUnless(URL and TOKEN, "KBENCH_SERVE_URL and KBENCH_SERVE_TOKEN are not set")


def _setting(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise AssertionError(f"{name} must be set with KBENCH_SERVE_URL (see this file's doc)")
    return value


@LIVE
class LiveService(unittest.TestCase):
    def setUp(self):
        self.client = Client(URL, TOKEN, timeout=60)

    def test_health(self):
        h = Client(URL, None).health()
        self.assertTrue(h.status and h.version)
        self.assertGreaterEqual(min(h.queued, h.running), 0)

    def test_problems(self):
        ids = [p.id for p in self.client.problems()]
        self.assertEqual(len(ids), len(set(ids)))
        self.assertIn(_setting("KBENCH_SERVE_PROBLEM"), ids)

    def test_a_wrong_or_missing_token_is_refused(self):
        for token in (TOKEN + "-wrong", None):
            with self.assertRaises(AuthError) as ctx:
                Client(URL, token, timeout=60).problems()
            self.assertIn(ctx.exception.status, (401, 403))
            self.assertTrue(ctx.exception.code and ctx.exception.message)

    def test_an_unknown_submission_is_refused(self):
        with self.assertRaises(KbenchError) as ctx:
            self.client.get("no-such-submission")
        self.assertIn(ctx.exception.status, (400, 404))


@LIVE
class LiveSubmissions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.problem = _setting("KBENCH_SERVE_PROBLEM")
        files = sorted(Path(_setting("KBENCH_SERVE_SOURCES")).glob("*.py"))
        if not files:
            raise AssertionError("KBENCH_SERVE_SOURCES holds no .py file")
        cls.sources = [f.read_text() for f in files]
        cls.labels = [f.name for f in files]
        cls.client = Client(URL, TOKEN, timeout=60)
        items = [NewSubmission(cls.problem, s, label=n) for s, n in zip(cls.sources, cls.labels)]
        cls.first_ids = cls.client.submit_many(items)
        cls.first = cls.client.wait(cls.first_ids, timeout=TIMEOUT)
        cls.second_ids = cls.client.submit_many(items)
        cls.second = cls.client.wait(cls.second_ids, timeout=TIMEOUT)

    def test_every_submission_is_done_with_a_verdict(self):
        self.assertEqual([s.id for s in self.first], self.first_ids)
        self.assertEqual([s.id for s in self.second], self.second_ids)
        self.assertEqual(len(set(self.first_ids + self.second_ids)), 2 * len(self.sources))
        for s, label in zip(self.first + self.second, self.labels * 2):
            self.assertEqual((s.state, s.problem, s.label), ("done", self.problem, label))
            self.assertIsNotNone(s.verdict, s.id)
            self.assertIsInstance(s.verdict.outcome, str)
            self.assertTrue(s.verdict.outcome, s.id)
            self.assertIsInstance(s.verdict.correct, bool)
            if s.verdict.correct and not s.verdict.flagged and s.verdict.speedup is not None:
                self.assertGreater(s.verdict.speedup, 0, s.id)

    def test_the_second_copies_come_from_the_cache(self):
        for a, b in zip(self.first, self.second):
            self.assertTrue(b.cached, f"{b.label}: {b.id} was evaluated again ({a.id} was done)")
            self.assertEqual((b.verdict.outcome, b.verdict.correct, b.verdict.flagged),
                             (a.verdict.outcome, a.verdict.correct, a.verdict.flagged), b.label)

    def test_get_and_paging_find_them(self):
        one = self.client.get(self.first_ids[0], wait=1)
        self.assertEqual((one.id, one.state), (self.first_ids[0], "done"))
        listed = list(self.client.iter_all(problem=self.problem, limit=2))
        seqs = [s.seq for s in listed]
        self.assertEqual(seqs, sorted(set(seqs)), "pages overlap or go backwards")
        missing = set(self.first_ids + self.second_ids) - {s.id for s in listed}
        self.assertFalse(missing, "submissions paging did not reach")
        self.assertEqual({s.problem for s in listed}, {self.problem})

    def test_export(self):
        lines = [l for l in self.client.export("jsonl").splitlines() if l.strip()]
        self.assertGreaterEqual(len(lines), len(set(self.sources)))
        for line in lines:
            self.assertIsInstance(json.loads(line), dict)
        for fmt in ("csv", "markdown"):
            self.assertTrue(self.client.export(fmt).strip(), fmt)

    def test_the_reward_scores_every_source(self):
        reward = KernelReward(self.client, timeout=TIMEOUT, wrong=-1.0, flagged=-2.0)
        scores, details = reward(self.sources, [self.problem] * len(self.sources))
        self.assertEqual((len(scores), len(details)), (len(self.sources), len(self.sources)))
        for score, d, first in zip(scores, details, self.first):
            v = first.verdict
            self.assertIsInstance(score, float)
            self.assertTrue(math.isfinite(score))
            self.assertNotIn(d["id"], self.first_ids + self.second_ids)
            self.assertEqual(d["outcome"], v.outcome, first.label)
            self.assertTrue(d["cached"], first.label)
            if v.flagged:
                self.assertEqual(score, -2.0, first.label)
            elif not v.correct:
                self.assertEqual(score, -1.0, first.label)
            else:
                self.assertAlmostEqual(score, 1.0 if v.speedup is None else v.speedup)


if __name__ == "__main__":
    unittest.main()
