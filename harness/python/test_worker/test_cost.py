"""The `cost` command and the `profile SPEC` script mode."""

import json
import os
import subprocess

from .support import HERE, PYTHON, WATCHDOG_S, WORKER, WorkerTestCase


# A KernelBench checkout (its folder with level1/..); tests that need one skip without it.
KERNELBENCH = os.environ.get("KBENCH_KERNELBENCH_DIR", "")


class CostAndProfileTests(WorkerTestCase):
    """The `cost` command (FLOPs and bytes of the reference) and `python -m kbench_worker profile`."""

    def test_cost_of_a_linear_layer(self):
        self.load_reference(self.linear, want_f64=False)
        reply, tensors = self.ref.call({"cmd": "cost", "seed": 3, "forward_seed": 4, "id": 9})
        self.assertEqual((reply["type"], reply["id"]), ("cost", 9), reply)
        self.assertEqual(tensors, {})
        # x (4x16) @ W^T (16x8): 2·4·16·8 FLOPs; the bias add and relu are not counted.
        self.assertEqual(reply["flops"], 2 * 4 * 16 * 8)
        self.assertEqual(reply["flops_by_op"], {"aten.addmm": 2 * 4 * 16 * 8})
        self.assertEqual(reply["precision"], "fp32")
        self.assertEqual(reply["input_bytes"], 4 * 16 * 4)
        self.assertEqual(reply["weight_bytes"], (16 * 8 + 8) * 4)
        self.assertEqual(reply["output_bytes"], 4 * 8 * 4)
        # bf16 halves every byte count; the FLOPs stay.
        self.load_reference(self.linear, precision="bf16", want_f64=False)
        reply, _ = self.ref.call({"cmd": "cost", "seed": 3, "forward_seed": 4})
        self.assertEqual((reply["precision"], reply["input_bytes"]), ("bf16", 4 * 16 * 2))
        self.assertEqual(reply["flops"], 2 * 4 * 16 * 8)

    def test_cost_is_reference_only_and_needs_a_model(self):
        reply, _ = self.cand.call({"cmd": "cost", "seed": 1, "forward_seed": 1})
        self.assert_error(reply, "protocol", "run")
        self.assertIn("reference role only", reply["message"])

    def test_cost_of_a_real_kernelbench_matmul(self):
        if not KERNELBENCH:
            self.skipTest("KBENCH_KERNELBENCH_DIR is not set (a KernelBench checkout's folder with level1/..)")
        problem = os.path.join(KERNELBENCH, "level1", "2_Standard_matrix_multiplication_.py")
        if not os.path.isfile(problem):
            self.skipTest(f"KernelBench not found at KBENCH_KERNELBENCH_DIR={KERNELBENCH}")
        # M=2048, K=8192, N=4096 in the problem file: 2·M·N·K FLOPs.
        self.load_reference(problem, want_f64=False)
        reply, _ = self.ref.call({"cmd": "cost", "seed": 1, "forward_seed": 1})
        m, k, n = 1024 * 2, 4096 * 2, 2048 * 2
        self.assertEqual(reply["flops"], 2 * m * n * k)
        self.assertEqual(reply["input_bytes"], 4 * (m * k + k * n))
        self.assertEqual(reply["output_bytes"], 4 * m * n)
        self.assertEqual(reply["weight_bytes"], 0)

    def _profile(self, **spec):
        out = os.path.join(self.files.dir.name, "profile.result.json")
        if os.path.exists(out):
            os.remove(out)
        spec_path = self.files.write("profile.spec.json", json.dumps(dict(spec, out_path=out)))
        code = subprocess.run([PYTHON, *WORKER, "profile", spec_path], cwd=HERE, timeout=WATCHDOG_S).returncode
        with open(out) as f:
            return code, json.load(f)

    def test_profile_script_mode_with_the_torch_profiler_on_cpu(self):
        cand = self.files.write("cand_profile.py", """
import torch
class ModelNew(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.clamp(self.linear(x), min=0.0)
""")
        code, r = self._profile(problem_path=self.linear, candidate_path=cand, mode="torch",
                                device="cpu", calls=4, warmup=1)  # fmt: skip
        self.assertEqual(code, 0, r)
        self.assertEqual((r["role"], r["device"], r["calls"]), ("candidate", "cpu", 4))
        self.assertGreater(r["wall_s_per_call"], 0)
        names = {e["name"]: e for e in r["events"]}
        self.assertIn("aten::clamp", names, names)
        self.assertEqual(names["aten::clamp"]["count"], 4)
        self.assertTrue(all(e["kind"] == "cpu_op" for e in r["events"]))
        # load mode loads (and would build) the candidate and stops.
        code, r = self._profile(problem_path=self.linear, candidate_path=cand, mode="load", device="cpu")
        self.assertEqual((code, r["role"], r["mode"]), (0, "candidate", "load"), r)
        self.assertNotIn("calls", r)
        self.assertNotIn("wall_s_per_call", r)
        # cost mode profiles the reference only (candidate_path absent).
        code, r = self._profile(problem_path=self.linear, mode="cost", device="cpu")
        self.assertEqual((code, r["role"], r["cost"]["flops"]), (0, "reference", 2 * 4 * 16 * 8))
        # A candidate that raises: an error object naming it, non-zero exit.
        bad = self.files.write("cand_bad.py", "raise RuntimeError('nope')\n")
        code, r = self._profile(problem_path=self.linear, candidate_path=bad, mode="torch", device="cpu")
        self.assertNotEqual(code, 0)
        self.assertEqual(r["error"]["kind"], "compile_error", r)
        self.assertIn("cand_bad.py", r["error"]["message"])
