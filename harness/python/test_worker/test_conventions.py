"""The `time_as` command: other evaluators' timing conventions, each with its grad and
module mode."""

import textwrap

from .support import WorkerTestCase

# A model that refuses grad mode or train mode when asked to (by a module-level switch in its
# own file), so that a convention's mode is seen in the worker's answer.
STRICT_MODES = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    REFUSE = "{refuse}"

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            if REFUSE == "grad" and torch.is_grad_enabled():
                raise RuntimeError("called with grad mode on")
            if REFUSE == "train" and self.training:
                raise RuntimeError("called in train mode")
            return self.fc(x)

    def get_inputs():
        return [torch.rand(4, 8)]

    def get_init_inputs():
        return []
    """
)


class TimeAsTests(WorkerTestCase):
    def _time_as(self, method, **extra):
        cmd = {"cmd": "time_as", "method": method, "timed_calls": 5, "seed": 7, "id": 3, **extra}
        reply, tensors = self.ref.call(cmd)
        self.assertEqual(tensors, {})
        return reply

    def _load(self, refuse):
        path = self.files.write(f"1_Modes_{refuse}.py", STRICT_MODES.format(refuse=refuse))
        self.load_reference(path, want_f64=False)

    def test_each_convention_times_its_calls(self):
        self._load("none")
        for method, calls in (("kernelbench", 5), ("kernelbench-v0.1", 5), ("cuda-l1", 5)):
            reply = self._time_as(method)
            self.assertEqual((reply["type"], reply["id"], reply["method"]), ("time_as", 3, method), reply)
            self.assertEqual(reply["timed_calls"], calls)
            self.assertGreater(reply["mean_ms"], 0.0)

    def test_kernelbench_times_with_grad_mode_on_and_cuda_l1_with_it_off(self):
        self._load("grad")
        for method in ("kernelbench", "kernelbench-v0.1"):
            reply = self._time_as(method)
            self.assert_error(reply, "runtime_error", "run")
            self.assertIn("called with grad mode on", reply["message"])
        self.assertEqual(self._time_as("cuda-l1")["type"], "time_as")

    def test_cuda_l1_times_in_eval_mode_and_restores_train_mode(self):
        self._load("train")
        self.assertEqual(self._time_as("cuda-l1")["type"], "time_as")
        # KernelBench's method leaves the module as loaded (train mode), and cuda-l1 gave it
        # back in train mode.
        reply = self._time_as("kernelbench")
        self.assertIn("called in train mode", reply.get("message", ""), reply)

    def test_an_unknown_method_is_a_protocol_error(self):
        self._load("none")
        reply = self._time_as("hyperfine")
        self.assert_error(reply, "protocol", "run")
