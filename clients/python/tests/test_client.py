"""The client against a fake service on a real local HTTP server (tests/fakeserve.py)."""

import json
import socket
import time
import unittest

import _path  # noqa: F401
from fakeserve import TOKEN, FakeService

from kbench_client import (AuthError, BadResponse, Busy, Client, KbenchError, NewSubmission,
                           NotFound, RateLimited, Submission, Timeout, Unreachable, Verdict)

P = "smoke/L1/1"


class FakeTest(unittest.TestCase):
    def setUp(self):
        self.svc = FakeService()
        self.addCleanup(self.svc.close)
        self.client = Client(self.svc.url, TOKEN, timeout=5, retries=3, backoff=0.01)


class Parsing(FakeTest):
    def test_health_needs_no_token_and_problems_are_typed(self):
        health = Client(self.svc.url, None).health()
        self.assertEqual((health.status, health.queued, health.running), ("ok", 0, 0))
        self.assertNotIn("Authorization", self.svc.calls("GET", "/v1/health")[0][4])
        problems = self.client.problems()
        self.assertEqual([(p.id, p.level) for p in problems], [(P, 1), ("smoke/L1/2", 1)])
        self.assertEqual(self.svc.calls("GET", "/v1/problems")[0][4]["Authorization"],
                         f"Bearer {TOKEN}")

    def test_a_done_submission_carries_its_verdict_and_record(self):
        sid = self.client.submit(P, "# verdict: ok 2.5", label="tiled")
        sub = self.client.get(sid, wait=5)
        self.assertEqual((sub.id, sub.state, sub.label, sub.cached), (sid, "done", "tiled", False))
        self.assertTrue(sub.done)
        self.assertEqual(sub.verdict, Verdict("ok", True, False, [], 2.5, None))
        self.assertEqual(sub.record["signature"], "ed25519:fake")
        self.assertIsNotNone(sub.finished_unix_s)
        sent = json.loads(self.svc.calls("POST", "/v1/submissions")[0][3])
        self.assertEqual(sent, {"submissions": [{"problem": P, "source": "# verdict: ok 2.5",
                                                 "label": "tiled"}]})

    def test_unknown_fields_are_ignored_and_missing_ones_named(self):
        base = {"id": "a", "seq": 1, "problem": P, "state": "queued", "cached": False,
                "ranked": False, "submitted_unix_s": 1, "new_field": [1]}
        self.assertEqual(Submission.from_json(base).seq, 1)
        for key in ("seq", "state", "cached"):
            with self.assertRaisesRegex(BadResponse, f"submission a: .*'{key}'"):
                Submission.from_json({k: v for k, v in base.items() if k != key})
        with self.assertRaisesRegex(BadResponse, "'seq' should be int"):
            Submission.from_json(dict(base, seq=True))
        with self.assertRaisesRegex(BadResponse, "verdict: required field 'flags'"):
            Submission.from_json(dict(base, verdict={"outcome": "ok", "correct": True,
                                                     "flagged": False}))

    def test_a_malformed_answer_is_a_bad_response(self):
        self.svc.inject("GET", "/v1/health", (200, {}, b'{"status": "ok"}'), (200, {}, b"<html>"))
        with self.assertRaisesRegex(BadResponse, "'version'"):
            self.client.health()
        with self.assertRaisesRegex(BadResponse, "not JSON"):
            self.client.health()

    def test_a_dict_with_an_unknown_key_fails_before_any_request(self):
        with self.assertRaises(TypeError):
            self.client.submit_many([{"problem": P, "source": "x", "priority": 1}])
        self.assertEqual(self.svc.calls("POST", "/v1/submissions"), [])
        self.assertEqual(self.client.submit_many([]), [])


class Batches(FakeTest):
    def test_more_than_256_are_split_and_ids_kept_in_order(self):
        items = [NewSubmission(P, f"# verdict: ok 1.{i}\n# {i}", label=f"k{i}") for i in range(600)]
        ids = self.client.submit_many(items)
        posts = self.svc.calls("POST", "/v1/submissions")
        self.assertEqual([len(json.loads(p[3])["submissions"]) for p in posts], [256, 256, 88])
        self.assertEqual(len(set(ids)), 600)
        subs = self.client.wait(ids, timeout=20)
        self.assertEqual([s.label for s in subs], [f"k{i}" for i in range(600)])
        polled = [q["ids"].split(",") for _, _, q, _, _ in self.svc.calls("GET", "/v1/submissions")]
        self.assertTrue(polled and all(len(p) <= 256 for p in polled))

    def test_wait_answers_in_the_order_asked(self):
        ids = self.client.submit_many([{"problem": P, "source": f"# verdict: ok {i}"}
                                       for i in range(1, 6)])
        asked = ids[::-1] + ids[:1]
        subs = self.client.wait(asked, timeout=10)
        self.assertEqual([s.id for s in subs], asked)
        self.assertEqual([s.verdict.speedup for s in subs], [5.0, 4.0, 3.0, 2.0, 1.0, 1.0])

    def test_wait_raises_timeout_naming_the_unfinished(self):
        ids = self.client.submit_many([{"problem": P, "source": "# verdict: ok"},
                                       {"problem": P, "source": "# verdict: never"}])
        start = time.monotonic()
        with self.assertRaises(Timeout) as ctx:
            self.client.wait(ids, timeout=1, poll=0.5)
        self.assertLess(time.monotonic() - start, 3)
        self.assertEqual(ctx.exception.unfinished, [ids[1]])
        self.assertIn("1 of 2", str(ctx.exception))
        self.assertEqual([s.state for s in ctx.exception.submissions], ["done", "queued"])

    def test_paging_walks_every_submission_by_seq(self):
        ids = self.client.submit_many([{"problem": P if i % 2 else "smoke/L1/2",
                                        "source": f"# verdict: ok {i}"} for i in range(1, 8)])
        self.assertEqual([s.id for s in self.client.list(limit=3)], ids[:3])
        self.assertEqual([s.id for s in self.client.list(after=5)], ids[5:])
        before = len(self.svc.calls("GET", "/v1/submissions"))
        self.assertEqual([s.id for s in self.client.iter_all(limit=3)], ids)
        pages = self.svc.calls("GET", "/v1/submissions")[before:]
        self.assertEqual([q.get("after") for _, _, q, _, _ in pages], [None, "3", "6", "7"])
        self.assertEqual([s.id for s in self.client.iter_all(problem=P)], ids[::2])
        self.client.wait(ids)
        self.assertEqual(len(self.client.list(state="done")), 7)

    def test_export_and_cache(self):
        src = {"problem": P, "source": "# verdict: ok 2.0"}
        first = self.client.submit_and_wait([src])[0]
        again = self.client.submit_and_wait([src, dict(src, remeasure=True)])
        self.assertEqual([first.cached] + [s.cached for s in again], [False, True, False])
        lines = self.client.export("jsonl").splitlines()
        self.assertEqual(len(lines), 2)
        self.assertEqual(json.loads(lines[0])["outcome"], "ok")
        self.assertTrue(self.client.export("csv").startswith("id,outcome"))
        with self.assertRaises(ValueError):
            self.client.export("xml")

    def test_leaderboard(self):
        with self.assertRaises(NotFound):
            self.client.leaderboard()
        self.svc.leaderboard = True
        board = self.client.leaderboard()
        self.assertEqual(board.problems, [P, "smoke/L1/2"])
        self.assertEqual((board.entries[0].client, board.entries[0].speedup), ("alice", 3.5))


class Retries(FakeTest):
    def test_429_waits_retry_after_then_succeeds(self):
        self.svc.inject("POST", "/v1/submissions", (429, {"Retry-After": "1"}))
        start = time.monotonic()
        sid = self.client.submit(P, "# verdict: ok")
        self.assertGreaterEqual(time.monotonic() - start, 1.0)
        self.assertEqual(len(self.svc.calls("POST", "/v1/submissions")), 2)
        self.assertEqual(self.client.get(sid, wait=5).state, "done")

    def test_503_then_success(self):
        self.svc.inject("GET", "/v1/problems", 503, (503, {"Retry-After": "0"}))
        self.assertEqual(len(self.client.problems()), 2)
        self.assertEqual(len(self.svc.calls("GET", "/v1/problems")), 3)

    def test_retries_run_out_as_rate_limited_or_busy(self):
        self.svc.inject("GET", "/v1/problems", *[(429, {"Retry-After": "0"})] * 4)
        with self.assertRaises(RateLimited) as ctx:
            self.client.problems()
        self.assertEqual((ctx.exception.status, ctx.exception.code, ctx.exception.retry_after),
                         (429, "injected", 0.0))
        self.assertEqual(len(self.svc.calls("GET", "/v1/problems")), 4)  # 1 + retries=3
        self.svc.inject("POST", "/v1/submissions", *[503] * 4)
        with self.assertRaises(Busy):
            self.client.submit(P, "x")

    def test_4xx_is_final(self):
        self.svc.inject("GET", "/v1/problems", 400)
        with self.assertRaises(KbenchError) as ctx:
            self.client.problems()
        self.assertEqual((ctx.exception.status, ctx.exception.message), (400, "injected 400"))
        self.assertEqual(len(self.svc.calls("GET", "/v1/problems")), 1)
        with self.assertRaises(KbenchError) as ctx:
            self.client.submit("no/such/problem", "x")
        self.assertEqual((ctx.exception.status, ctx.exception.code), (422, "unknown_problem"))
        self.assertEqual(len(self.svc.calls("POST", "/v1/submissions")), 1)
        with self.assertRaises(NotFound):
            self.client.get("sub-99999")

    def test_a_wrong_token_is_an_auth_error(self):
        with self.assertRaises(AuthError) as ctx:
            Client(self.svc.url, "wrong", backoff=0.01).problems()
        self.assertEqual((ctx.exception.status, ctx.exception.code), (401, "unauthorized"))
        self.assertEqual(len(self.svc.calls("GET", "/v1/problems")), 1)

    def test_a_dropped_connection_is_retried(self):
        self.svc.inject("GET", "/v1/problems", "drop", "drop")
        self.assertEqual(len(self.client.problems()), 2)
        self.assertEqual(len(self.svc.calls("GET", "/v1/problems")), 3)
        self.svc.inject("POST", "/v1/submissions", "drop")  # no answer: it may be resent
        self.assertEqual(len(self.client.submit_many([{"problem": P, "source": "x"}])), 1)
        self.assertEqual(len(self.svc.calls("POST", "/v1/submissions")), 2)

    def test_502_is_retried_for_get_but_not_for_post(self):
        self.svc.inject("GET", "/v1/problems", 502, 504)
        self.assertEqual(len(self.client.problems()), 2)
        self.svc.inject("POST", "/v1/submissions", 502)
        with self.assertRaises(KbenchError) as ctx:
            self.client.submit(P, "x")
        self.assertEqual(ctx.exception.status, 502)
        self.assertEqual(len(self.svc.calls("POST", "/v1/submissions")), 1)

    def test_a_socket_timeout_is_retried(self):
        self.svc.inject("GET", "/v1/problems", ("sleep", 1.0))
        client = Client(self.svc.url, TOKEN, timeout=0.3, retries=2, backoff=0.01)
        self.assertEqual(len(client.problems()), 2)
        self.assertEqual(len(self.svc.calls("GET", "/v1/problems")), 2)

    def test_no_server_is_unreachable_after_the_retries(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        client = Client(f"http://127.0.0.1:{port}", TOKEN, retries=2, backoff=0.01)
        with self.assertRaisesRegex(Unreachable, "after 3 tries"):
            client.health()


if __name__ == "__main__":
    unittest.main()
