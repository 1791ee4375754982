"""nan-inf cases: the probe references `outalt:K` (PROTOCOL.md, "Probe references")."""

import math
import unittest

import torch

from kbench_worker.probes import PROBES, probe_alt

from .support import WorkerTestCase, simple_problem

DIAG_MATMUL = simple_problem("torch.diag(x) @ rest[0]", inputs="[torch.rand(24), torch.rand(24, 40)]")
RELU = simple_problem("torch.relu(x)", inputs="[torch.rand(8, 50)]")
IN_PLACE = simple_problem("x.mul_(2)", inputs="[torch.rand(30, 20)]")
TOL = {"probe_rtol": 1e-4, "probe_atol": 1e-4}


class ProbeReferenceTests(WorkerTestCase):
    """make_case of the nan-inf family with `probe_rtol`/`probe_atol`."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.diag = cls.files.write("12_Diag.py", DIAG_MATMUL)
        cls.relu = cls.files.write("19_Relu.py", RELU)
        cls.in_place = cls.files.write("14_InPlace.py", IN_PLACE)

    def test_probe_alt_keeps_only_agreeing_finite_elements(self):
        a = torch.tensor([1.0, 2.0, math.nan, math.inf, 5.0, 1.0])
        b = torch.tensor([1.0, 2.5, math.nan, math.inf, 5.0 + 1e-9, 1.0 + 1e-5])
        alt = probe_alt(a, b, 1e-4, 1e-4)
        self.assertEqual(alt.dtype, a.dtype)
        got = [None if math.isnan(v) else v for v in alt.tolist()]
        # 1e-5 apart is within the tolerance (2e-4 at 1.0) but not within a hundredth of it
        self.assertEqual(got, [1.0, None, None, None, 5.0, None])
        half = probe_alt(a.half(), b.half(), 1e-2, 1e-2)
        self.assertEqual(half.dtype, torch.float16)
        self.assertTrue(torch.isnan(probe_alt(a, b[:3], 1e-4, 1e-4)).all())

    def test_probes_are_exact_and_asymmetric(self):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            for p in PROBES:
                self.assertEqual(torch.tensor(p, dtype=dtype).item(), p)
        self.assertNotEqual(abs(PROBES[0]), abs(PROBES[1]))

    def test_diag_matmul_artefacts_have_finite_probe_values(self):
        self.load_reference(self.diag)
        reply, t = self.make_case(family="nan-inf", **TOL)
        self.assertEqual(reply["outputs_alt"], 1, reply)
        a, b, out, alt = t["in:0"], t["in:1"], t["out:0"], t["outalt:0"]
        self.assertEqual((alt.dtype, alt.shape), (out.dtype, out.shape))
        # Element (i, j) is A[i]·B[i, j]: it depends on the injected values exactly where
        # A[i] or B[i, j] is not finite.
        depends = ~torch.isfinite(a).unsqueeze(1) | ~torch.isfinite(b)
        self.assertTrue(torch.isnan(alt[depends]).all())
        honest = a.unsqueeze(1) * b
        self.assertTrue(torch.isfinite(alt[~depends]).all())
        torch.testing.assert_close(alt[~depends], honest[~depends], rtol=1e-6, atol=1e-6)
        # The matmul's 0·NaN spreads NaN where the element does not depend on it.
        artefacts = ~torch.isfinite(out) & torch.isfinite(alt)
        self.assertGreater(int(artefacts.sum()), 20)

    def test_relu_depends_on_every_injected_element(self):
        self.load_reference(self.relu)
        reply, t = self.make_case(family="nan-inf", **TOL)
        x, out, alt = t["in:0"], t["out:0"], t["outalt:0"]
        self.assertEqual(int((~torch.isfinite(x)).sum()), 3)
        # relu(-Inf) = 0 is finite, yet it depends on the injected value: NaN there too
        self.assertTrue(torch.isnan(alt[~torch.isfinite(x)]).all())
        kept = torch.isfinite(x)
        self.assertTrue(torch.equal(alt[kept], out[kept]))

    def test_in_place_reference_probes_its_pristine_inputs(self):
        # The probes are written into the case's tensors, restored before and after each
        # run: a reference that doubles its input in place doubles the pristine values once.
        self.load_reference(self.in_place)
        reply, t = self.make_case(family="nan-inf", **TOL)
        x, out, alt = t["in:0"], t["out:0"], t["outalt:0"]
        self.assertEqual(reply["inputs_changed"], [0])
        kept = torch.isfinite(x)
        self.assertTrue(torch.equal(alt[kept], x[kept] * 2))
        self.assertTrue(torch.isnan(alt[~kept]).all())
        self.assert_bit_identical(out, x * 2)

    def test_only_nan_inf_cases_with_a_tolerance_get_probes(self):
        self.load_reference(self.diag)
        reply, t = self.make_case(family="nan-inf")
        self.assertNotIn("outalt:0", t)
        self.assertNotIn("outputs_alt", reply)
        reply, t = self.make_case(family="signed", **TOL)
        self.assertNotIn("outalt:0", t)
        # the tolerance is checked like stability_rtol
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 2, "family": "nan-inf",
                                  "probe_rtol": -1, "probe_atol": 1e-4})  # fmt: skip
        self.assert_error(reply, "protocol")


class ProbeAltInPlaceTests(unittest.TestCase):
    def test_in_place_probe_alt_equals_the_pure_one_and_writes_into_a(self):
        from kbench_worker.probes import probe_alt_

        g = torch.Generator().manual_seed(7)
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            a = torch.randn(64, generator=g).to(dtype)
            b = a.clone()
            b[::3] += 0.5
            a[5], b[7], a[9], b[9] = math.nan, math.inf, math.inf, math.inf
            want = probe_alt(a, b, 1e-3, 1e-3)
            got = probe_alt_(a, b, 1e-3, 1e-3)
            self.assertIs(got, a)
            self.assertEqual(got.dtype, dtype)
            self.assertTrue(torch.equal(torch.isnan(got), torch.isnan(want)))
            self.assertTrue(torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0)))
        self.assertTrue(torch.isnan(probe_alt_(torch.ones(3), torch.ones(2), 1e-4, 1e-4)).all())
