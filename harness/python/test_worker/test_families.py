"""Case families: the inputs made for each family, in both roles."""

import math

import torch

from kbench_worker.families import FAMILIES, STRESS_FAMILIES

from .support import FAMILY_PROBLEM, WorkerTestCase, as_candidate


class CaseFamilyTests(WorkerTestCase):
    """make_case with `family` (PROTOCOL.md, "Case families")."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.family = cls.files.write("10_Family.py", FAMILY_PROBLEM)

    def case(self, family=None, seed=5, **extra):
        if family is not None:
            extra["family"] = family
        return self.make_case(seed=seed, **extra)

    def test_random_is_unchanged(self):
        for problem in (self.family, self.linear):
            with self.subTest(problem=problem):
                self.load_reference(problem)
                plain, tp = self.case()
                rand, tr = self.case("random")
                self.assertEqual((plain["family"], plain["transformed"]), ("random", 0))
                self.assertEqual((rand["family"], rand["transformed"]), ("random", 0))
                self.assertEqual(plain["inputs"], rand["inputs"])
                self.assertEqual(set(tp), set(tr))
                for name in tp:
                    self.assert_bit_identical(tp[name], tr[name])
                self.assertNotIn("stability", plain)
        # the problem's own values: what get_inputs makes under the seed
        self.load_reference(self.family)
        _, t = self.case(seed=9)
        torch.manual_seed(9)
        x = torch.rand(16, 65)
        self.assert_bit_identical(t["in:0"], x)

    def test_families_are_deterministic_and_keep_shapes_dtypes_and_non_floats(self):
        for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            self.load_reference(self.family, precision=precision)
            base, tb = self.case()
            for family in STRESS_FAMILIES:
                with self.subTest(precision=precision, family=family):
                    a, ta = self.case(family)
                    b, tb2 = self.case(family)
                    _, tc = self.case(family, seed=6)
                    self.assertEqual((a["family"], a["transformed"]), (family, 2))
                    self.assertEqual(a["inputs"], base["inputs"])  # the scalar 0.5 stays
                    self.assertEqual(set(ta), set(tb))
                    for name in ta:
                        self.assert_bit_identical(ta[name], tb2[name])  # same seed, same case
                        self.assertEqual((ta[name].dtype, ta[name].shape), (tb[name].dtype, tb[name].shape))
                    self.assertEqual(ta["in:0"].dtype, dtype)
                    # integer and bool inputs exactly as the problem makes them
                    self.assert_bit_identical(ta["in:1"], tb["in:1"])
                    self.assert_bit_identical(ta["in:2"], tb["in:2"])
                    # the floating ones replaced, and by the seed
                    self.assertFalse(torch.equal(ta["in:0"], tb["in:0"]))
                    self.assertFalse(torch.equal(ta["in:0"].nan_to_num(), tc["in:0"].nan_to_num()))

    def test_family_values(self):
        self.load_reference(self.family)
        _, t = self.case("signed")
        x = t["in:0"]
        self.assertTrue((x < 0).any() and (x > 0).any())
        self.assertTrue(torch.isfinite(x).all())
        self.assertGreater(x.abs().max(), 2.0)  # mixed scales, not [0, 1)

        _, t = self.case("nan-inf")
        for x in (t["in:0"], t["in:4"]):
            self.assertEqual(int(torch.isnan(x).sum()), 1)
            self.assertEqual(int((x == math.inf).sum()), 1)
            self.assertEqual(int((x == -math.inf).sum()), 1)
            self.assertEqual(int(torch.isfinite(x).sum()), x.numel() - 3)

        _, t = self.case("fp16-saturation")
        a = t["in:0"].abs()
        self.assertTrue(((a >= 32752) & (a <= 65504)).all())
        self.assertTrue((t["in:0"] < 0).any() and (t["in:0"] > 0).any())

        _, t = self.case("large")
        a = t["in:0"].abs()
        self.assertTrue(((a >= 1e2) & (a <= 1e5)).all(), (a.min(), a.max()))
        self.assertGreater(a.max(), 1e4)
        self.assertLess(a.min(), 1e3)
        self.assertTrue((t["in:0"] < 0).any() and (t["in:0"] > 0).any())

        _, t = self.case("small")
        a = t["in:0"].abs()
        self.assertTrue(((a >= 1e-8) & (a <= 1e-5)).all(), (a.min(), a.max()))
        self.assertTrue((t["in:0"] < 0).any() and (t["in:0"] > 0).any())

        _, t = self.case("cancellation")
        x = t["in:0"].double()
        self.assertTrue((x[:, -1] == 0).all())  # 65 columns: the odd one out is 0
        rel = x.sum(-1).abs() / x.abs().sum(-1)
        self.assertLess(float(rel.max()), 1e-5)
        self.assertGreater(float(x.abs().max()), 100)  # large terms
        # each row: 32 values and their negatives (up to 1e-6 noise), in another order
        first, second = x[:, :32].sort(-1).values, (-x[:, 32:64]).sort(-1).values
        torch.testing.assert_close(first, second, rtol=1e-5, atol=0)
        self.assertFalse(torch.equal(x[:, :32], -x[:, 32:64]))

    def test_denormal_for_the_working_dtype(self):
        for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            with self.subTest(precision=precision):
                self.load_reference(self.family, precision=precision)
                _, t = self.case("denormal")
                x = t["in:0"]
                self.assertEqual(x.dtype, dtype)
                tiny = torch.finfo(dtype).smallest_normal
                sub = (x != 0) & (x.abs() < tiny)
                self.assertTrue(torch.isfinite(x).all())
                self.assertEqual(int((x == 0).sum()), 0)
                frac = float(sub.float().mean())
                self.assertGreater(frac, 0.4)
                self.assertLess(frac, 0.6)
                # the others are normal numbers in [tiny, 1]
                a = x[~sub].abs().float()
                self.assertTrue(((a >= tiny) & (a <= 1)).all())
                self.assertTrue((x < 0).any() and (x > 0).any())

    def test_unknown_family_is_a_protocol_error(self):
        self.load_reference(self.family)
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 1, "family": "gaussian"})
        self.assert_error(reply, "protocol", "run")
        self.assertIn("gaussian", reply["message"])
        for name in FAMILIES:
            self.assertIn(name, reply["message"])
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 1, "family": "signed",
                                  "stability_rtol": "tight"})  # fmt: skip
        self.assert_error(reply, "protocol", "run")
        self.case("signed")  # the loop goes on

    def test_reference_runs_on_the_family_inputs(self):
        self.load_reference(self.family)
        reply, t = self.case("signed")
        self.assertEqual((reply["outputs"], reply["outputs_f64"]), (2, 2))
        x, idx, mask, y = t["in:0"], t["in:1"], t["in:2"], t["in:4"]
        self.assert_bit_identical(t["out:0"], x * 0.5 + idx.sum())
        self.assert_bit_identical(t["out:1"], torch.where(mask, y, -y))
        self.assert_bit_identical(t["out64:0"], x.double() * 0.5 + idx.sum())

    def test_candidate_gets_the_family_inputs(self):
        self.load_reference(self.family)
        loaded, _ = self.load_candidate(as_candidate(FAMILY_PROBLEM), self.family)
        self.assertEqual(loaded["type"], "loaded", loaded)
        case, t = self.case("nan-inf")
        reply, out = self.run_case(case, t)
        self.assertEqual(reply["type"], "outputs", reply)
        self.assert_bit_identical(out["out:0"], t["out:0"])
        self.assert_bit_identical(out["out:1"], t["out:1"])
