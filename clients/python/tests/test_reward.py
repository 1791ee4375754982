"""KernelReward and reward_fn against the fake service: one float and one details dict per
source, for correct, wrong, flagged, untimed, cached and unfinished kernels."""

import math
import os
import unittest
from unittest import mock

import _path  # noqa: F401
from fakeserve import TOKEN, FakeService

from kbench_client import Client, KernelReward
from kbench_client import reward as reward_module
from kbench_client.reward import extract_code, reward_fn

P = "smoke/L1/1"
FAST, WRONG, FLAGGED, UNTIMED = ("# verdict: ok 2.0", "# verdict: mismatch",
                                 "# verdict: flagged", "# verdict: ok")


class Reward(unittest.TestCase):
    def setUp(self):
        self.svc = FakeService()
        self.addCleanup(self.svc.close)
        self.client = Client(self.svc.url, TOKEN, backoff=0.01)

    def test_each_verdict_scores_as_documented(self):
        self.client.submit_and_wait([{"problem": P, "source": FAST}])  # FAST is cached below
        reward = KernelReward(self.client, wrong=-1.0, flagged=-2.0)
        sources = [FAST, WRONG, FLAGGED, UNTIMED]
        scores, details = reward(sources, [P] * 4)
        self.assertEqual(scores, [2.0, -1.0, -2.0, 1.0])
        self.assertEqual(len(self.svc.calls("POST", "/v1/submissions")), 2)  # one for the batch
        self.assertEqual([d["outcome"] for d in details], ["ok", "mismatch", "ok", "ok"])
        self.assertEqual([d["cached"] for d in details], [True, False, False, False])
        self.assertEqual([d["correct"] for d in details], [True, False, True, True])
        self.assertEqual(details[2]["flags"], ["forged_clock"])
        self.assertTrue(details[2]["flagged"])
        self.assertEqual(details[1]["message"], "output 0 differs at [3, 1]")
        self.assertEqual([d["speedup"] for d in details], [2.0, None, 40.0, None])
        self.assertEqual(set(details[0]), {"id", "outcome", "correct", "flagged", "flags",
                                           "speedup", "cached", "message"})
        self.assertEqual(len({d["id"] for d in details}), 4)

    def test_log_speedup(self):
        reward = KernelReward(self.client, transform="log_speedup")
        scores, _ = reward([FAST, UNTIMED, WRONG], [P] * 3)
        self.assertEqual(scores, [math.log(2.0), 0.0, 0.0])
        with self.assertRaises(ValueError):
            KernelReward(self.client, transform="speedup^2")
        with self.assertRaises(ValueError):
            reward([FAST], [P, P])

    def test_an_unfinished_kernel_scores_wrong(self):
        reward = KernelReward(self.client, timeout=0.5, wrong=-1.0)
        scores, details = reward([FAST, "# verdict: never"], [P] * 2)
        self.assertEqual(scores, [2.0, -1.0])
        self.assertIsNone(details[1]["outcome"])
        self.assertIn("not done within 0.5 s", details[1]["message"])

    def test_reward_fn_takes_a_models_answer_and_a_problem_id(self):
        answer = "Here:\n```python\nimport torch\n```\nbetter:\n```python\n" + FAST + "\n```\n"
        self.assertEqual(extract_code(answer), FAST + "\n")
        self.assertEqual(extract_code(FAST), FAST)
        env = {"KBENCH_SERVE_URL": self.svc.url, "KBENCH_SERVE_TOKEN": TOKEN}
        with mock.patch.dict(os.environ, env), mock.patch.object(reward_module, "_default", None):
            self.assertEqual(reward_fn("kbench", answer, P, {}), math.log(2.0))
            self.assertEqual(reward_fn("kbench", [answer, WRONG], [P, P]), [math.log(2.0), 0.0])


if __name__ == "__main__":
    unittest.main()
