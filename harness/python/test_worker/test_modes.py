"""Module modes (PROTOCOL.md, "Model mode"): `load`'s model_mode, the observations behind
the `mode-switch` advisory, and `eval_case`."""

import textwrap

import torch

from .support import Worker, WorkerTestCase

# A convolution and a BatchNorm: in train mode the BatchNorm normalises with the batch's
# statistics, in eval mode with its running statistics.
CONV_BN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))

def get_inputs():
    return [torch.randn(4, 3, 8, 8)]

def get_init_inputs():
    return [3, 8]
"""

# Calls self.eval() and folds the BatchNorm (running statistics as constructed) into the
# convolution, as published level-3 kernels do.
FOLDED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.eval()
        with torch.no_grad():
            scale = self.bn.weight / torch.sqrt(self.bn.running_var + self.bn.eps)
            self.w = nn.Parameter(self.conv.weight * scale[:, None, None, None])
            self.b = nn.Parameter((self.conv.bias - self.bn.running_mean) * scale + self.bn.bias)

    def forward(self, x):
        return torch.relu(F.conv2d(x, self.w, self.b, padding=1))
"""

# Never calls eval(), but normalises with the running statistics.
RUNNING_STATS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        bn = self.bn
        y = F.batch_norm(self.conv(x), bn.running_mean, bn.running_var, bn.weight, bn.bias,
                         training=False, eps=bn.eps)
        return torch.relu(y)
"""

HONEST = CONV_BN.replace("class Model(", "class ModelNew(")

# Honest, but each call takes back the storage of the outputs it returned before, as a CUDA
# graph's replay does (torch.compile's max-autotune and reduce-overhead modes): reading them
# after the next call raised "accessing tensor output of CUDAGraphs that has been overwritten".
# Here the stale output is emptied, so reading it after the next call shows.
REPLAYED = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.last = None

    def forward(self, x):
        if self.last is not None:
            self.last.resize_(0)
        self.last = torch.relu(self.bn(self.conv(x)))
        return self.last
"""


class ModeTests(WorkerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.conv_bn = cls.files.write("30_ConvBN.py", CONV_BN)

    def setUp(self):
        # A candidate worker per test: its probe runs once per worker.
        self.cand = Worker("candidate")
        hello, _ = self.cand.recv()
        self.assertEqual(hello["type"], "hello")

    def tearDown(self):
        self.assertEqual(self.cand.close(), 0)

    def load_ref(self, mode):
        reply, _ = self.ref.call({"cmd": "load", "problem_path": self.conv_bn, "device": "cpu",
                                  "precision": "fp32", "weight_seed": 42, "want_f64": False,
                                  "cpu_threads": 1, "model_mode": mode})  # fmt: skip
        self.assertEqual(reply["type"], "loaded", reply)
        return reply

    def load(self, source, mode="train"):
        self.load_ref(mode)
        loaded, _ = self.load_candidate(textwrap.dedent(source), self.conv_bn, model_mode=mode)
        self.assertEqual(loaded["type"], "loaded", loaded)
        return loaded

    def first_case(self):
        case, t = self.make_case()
        reply, outs = self.run_case(case, t)
        self.assertEqual(reply["type"], "outputs", reply)
        return reply["integrity"], torch.allclose(outs["out:0"], t["out:0"], atol=1e-4, rtol=1e-4)

    def eval_case(self):
        """The first case with both models as constructed in eval(): do they agree?"""
        ref, t = self.ref.call({"cmd": "eval_case", "seed": 7, "forward_seed": 11})
        self.assertEqual(ref["type"], "eval_case", ref)
        inputs = [(a["tensor"], t[a["tensor"]]) for a in ref["inputs"] if "tensor" in a]
        cand, c = self.cand.call({"cmd": "eval_case", "forward_seed": 11, "inputs": ref["inputs"]}, inputs)
        self.assertEqual(cand["type"], "eval_case", cand)
        return torch.allclose(c["out:0"], t["out:0"], atol=1e-4, rtol=1e-4)

    def test_honest_candidate_trains_and_reads_no_running_statistics(self):
        loaded = self.load(HONEST)
        self.assertNotIn("eval_modules", loaded["integrity"])
        probes, same = self.first_case()
        self.assertTrue(same)
        self.assertNotIn("eval_modules", probes)
        self.assertEqual(probes["running_stats_read"], [])
        self.assertTrue(self.eval_case())

    def test_outputs_a_later_call_takes_back_are_copied_before_the_probe_calls_again(self):
        # The running-statistics probe calls the model a second time; the case's outputs are
        # the first call's, copied before that call.
        self.load(REPLAYED)
        probes, same = self.first_case()
        self.assertEqual(probes["running_stats_read"], [])
        self.assertTrue(same)

    def test_eval_in_init_is_seen_and_the_fold_is_right_in_eval_mode_only(self):
        loaded = self.load(FOLDED)
        self.assertEqual(loaded["integrity"]["eval_module_count"], 3)
        self.assertEqual(loaded["integrity"]["eval_modules"], ["ModelNew", "conv", "bn"])
        probes, same = self.first_case()
        self.assertFalse(same, "folded running statistics differ from batch statistics")
        self.assertEqual(probes["eval_module_count"], 3)
        self.assertTrue(self.eval_case())
        # eval_case left both models as they were: the next case still disagrees, and the
        # candidate's modules are still in eval mode.
        probes, same = self.first_case()
        self.assertFalse(same)
        self.assertEqual(probes["eval_module_count"], 3)

    def test_reading_running_statistics_in_train_mode_is_seen(self):
        loaded = self.load(RUNNING_STATS)
        self.assertNotIn("eval_modules", loaded["integrity"])
        probes, same = self.first_case()
        self.assertFalse(same)
        self.assertEqual(probes["running_stats_read"], ["bn.running_mean", "bn.running_var"])
        # The probe put the statistics back: in eval mode, as constructed, it is right.
        self.assertTrue(self.eval_case())

    def test_eval_mode_runs_both_models_in_eval_and_reports_nothing(self):
        loaded = self.load(FOLDED, mode="eval")
        self.assertNotIn("eval_modules", loaded["integrity"])
        probes, same = self.first_case()
        self.assertTrue(same)
        self.assertNotIn("running_stats_read", probes)
        self.assertNotIn("eval_modules", probes)

    def test_eval_case_resets_running_statistics_the_train_forwards_moved(self):
        # The reference's train-mode cases moved its running statistics; eval_case uses them
        # as constructed, so an honest candidate that never ran a case agrees.
        self.load(HONEST)
        for seed in (1, 2, 3):
            self.make_case(seed=seed)
        self.assertTrue(self.eval_case())

    def test_bad_model_mode_is_a_protocol_error(self):
        reply, _ = self.ref.call({"cmd": "load", "problem_path": self.conv_bn, "model_mode": "inference"})
        self.assert_error(reply, "protocol", "load")
        self.assertIn("model_mode", reply["message"])
