"""The stability measurements of make_case."""


import unittest

import torch

from .support import WorkerTestCase, simple_problem


class StabilityTests(WorkerTestCase):
    """make_case with `stability_rtol` (PROTOCOL.md, "Reference stability")."""

    def load(self, source, name, **kw):
        path = self.files.write(name, source)
        self.load_reference(path, **kw)
        return path

    def test_deterministic_model_repeats_exactly(self):
        self.load_reference(self.linear)
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        st = reply["stability"]
        self.assertEqual(set(st), {"repeat", "f64"})
        self.assertLessEqual(st["repeat"]["max_excess"], 0)
        self.assertEqual(st["repeat"]["nan_mismatch"], 0)
        self.assertEqual(st["repeat"]["elements"], 32)
        self.assertLess(st["f64"]["max_excess"], 1e-4)
        self.assertEqual(st["f64"]["nan_mismatch"], 0)
        self.assertEqual(st["f64"]["elements"], 32)
        self.assertIsInstance(reply["stability_s"], float)
        # not for random, and not without stability_rtol
        reply, _ = self.make_case(family="random", stability_rtol=1e-4)
        self.assertNotIn("stability", reply)
        reply, _ = self.make_case(family="signed")
        self.assertNotIn("stability", reply)

    def test_unseeded_noise_shows_in_repeat(self):
        self.load(simple_problem(
            "x + torch.randn(x.shape, generator=torch.Generator().manual_seed(time.perf_counter_ns())) * 1e-2"
        ), "11_Noise.py")  # fmt: skip
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertGreater(reply["stability"]["repeat"]["max_excess"], 0)
        self.assertEqual(reply["stability"]["repeat"]["nan_mismatch"], 0)

    def test_fp32_overflow_against_float64(self):
        self.load(simple_problem("torch.exp(x)", "[torch.rand(256)]"), "12_Exp.py")
        reply, t = self.make_case(family="large", stability_rtol=1e-4)
        st = reply["stability"]
        self.assertTrue(torch.isinf(t["out:0"]).any())
        self.assertGreater(st["f64"]["nan_mismatch"], 0)
        self.assertEqual(st["f64"]["elements"], 256)
        # the working precision agrees with itself
        self.assertEqual(st["repeat"]["nan_mismatch"], 0)
        self.assertLessEqual(st["repeat"]["max_excess"], 0)

    def test_without_float64_model_f64_is_null(self):
        self.load_reference(self.linear, want_f64=False)
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertIsNone(reply["stability"]["f64"])
        self.assertLessEqual(reply["stability"]["repeat"]["max_excess"], 0)
        path = self.files.write("13_NoF64.py", simple_problem(
            "x * 2 if x.dtype != torch.float64 else torch.zeros(1).bad_call()"))  # fmt: skip
        self.load_reference(path)
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertIn("f64_error", reply)
        self.assertIsNone(reply["stability"]["f64"])

    def test_repeat_runs_on_pristine_inputs(self):
        # A reference that writes to its input: the second run must see the case's inputs,
        # not the first run's leftovers.
        self.load(simple_problem("x.mul_(2)"), "14_InPlace.py")
        reply, t = self.make_case(family="signed", stability_rtol=0.0)
        self.assert_bit_identical(t["out:0"], t["in:0"] * 2)
        self.assertLessEqual(reply["stability"]["repeat"]["max_excess"], 0)
        self.assertLessEqual(reply["stability"]["f64"]["max_excess"], 0)

    def test_repeat_is_not_fooled_by_an_output_that_aliases_its_input(self):
        # The first run's output is the input tensor itself; restoring the inputs for the
        # second run must not overwrite it (or the repeat would compare a run with itself).
        self.load(simple_problem(
            "x.add_(torch.randn(x.shape, generator=torch.Generator().manual_seed(time.perf_counter_ns())) * 1e-2)"
        ), "15_InPlaceNoise.py")  # fmt: skip
        reply, t = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertGreater(reply["stability"]["repeat"]["max_excess"], 0)
        self.assertLess(float((t["out:0"] - t["in:0"]).abs().max()), 0.1)

    def test_nan_inf_outputs_agree_with_themselves(self):
        self.load_reference(self.linear)
        reply, t = self.make_case(family="nan-inf", stability_rtol=1e-4)
        self.assertFalse(torch.isfinite(t["out:0"]).all())
        self.assertEqual(reply["stability"]["repeat"]["nan_mismatch"], 0)
        self.assertEqual(reply["stability"]["f64"]["nan_mismatch"], 0)


class ExcessTests(unittest.TestCase):
    """Excess accumulates on the device and reads its figures once (measure.py)."""

    def test_chunks_with_nothing_finite_leave_the_maximum_and_counts_add_up(self):
        import math
        from unittest import mock

        from kbench_worker import measure

        a = torch.tensor([1.0, math.nan, math.inf, 2.0, math.nan, math.nan, 5.0, 3.0])
        b = torch.tensor([1.5, 1.0, math.inf, 2.0, math.nan, math.nan, -math.inf, 3.25])
        whole = measure.Excess(0.0)
        whole.add(a, b)
        with mock.patch.object(measure, "COMPARE_CHUNK", 2):
            chunked = measure.Excess(0.0)
            chunked.add(a, b)  # chunk [nan, nan] (indices 4, 5) has nothing finite in both
            chunked.add(a[4:6], b[4:6])  # a pair with nothing finite at all
        want = {"max_excess": 0.5, "nan_mismatch": 2, "elements": 8}
        self.assertEqual(whole.json(), want)
        self.assertEqual(chunked.json(), {**want, "elements": 10})
        none = measure.Excess(0.0)
        none.add(a[4:6], b[4:6])
        self.assertEqual(none.json(), {"max_excess": None, "nan_mismatch": 0, "elements": 2})
        # read twice, counted once
        self.assertEqual(whole.json(), want)

    def test_the_all_finite_pass_gives_the_full_passs_figures(self):
        from unittest import mock

        from kbench_worker import measure

        g = torch.Generator().manual_seed(5)
        a = torch.randn(1000, generator=g) * 100
        b = a + torch.randn(1000, generator=g) * 1e-3
        for other in (b, b.double()):
            want = (a.double() - other.double()).abs() - 1e-4 * other.double().abs()
            for chunk in (7, 1 << 24):
                with mock.patch.object(measure, "COMPARE_CHUNK", chunk):
                    m = measure.Excess(1e-4)
                    m.add(a, other)
                    got = m.json()
                self.assertEqual(got["nan_mismatch"], 0)
                self.assertAlmostEqual(got["max_excess"], float(want.max()), delta=1e-12)
                # One Inf anywhere: the full pass, with its finiteness rules.
                with mock.patch.object(measure, "COMPARE_CHUNK", chunk):
                    m = measure.Excess(1e-4)
                    c = a.clone()
                    c[3] = float("inf")
                    m.add(c, other)
                    got = m.json()
                self.assertEqual(got["nan_mismatch"], 1)
                keep = torch.ones(1000, dtype=torch.bool)
                keep[3] = False
                self.assertAlmostEqual(got["max_excess"], float(want[keep].max()), delta=1e-12)



class F64FiguresTests(unittest.TestCase):
    """f64_figures: one pass where every output is finite, the same figures as the two
    passes apart (measure.py)."""

    def apart(self, outs_a, outs_b, rtol):
        from kbench_worker import measure

        m = measure.Excess(rtol)
        m.add_all(outs_a, outs_b)
        return m.json(), measure.rel_l2_max(outs_a, outs_b)

    def test_the_one_pass_gives_the_figures_of_the_passes_apart_to_the_bit(self):
        from unittest import mock

        from kbench_worker import measure

        g = torch.Generator().manual_seed(11)
        a = [torch.randn(1000, generator=g) * 100, torch.randn(0, generator=g), torch.randn(3, 7, generator=g)]
        b = [(x.double() + torch.randn(x.shape, generator=g, dtype=torch.float64) * 1e-3) for x in a]
        # a float32 "float64 output" too (a model that casts inside its forward)
        b32 = [x.float() for x in b]
        for other in (b, b32):
            for chunk in (7, 1 << 24):
                with mock.patch.object(measure, "COMPARE_CHUNK", chunk):
                    want = self.apart(a, other, 1e-4)
                    # one pass: rel_l2_max's own pass never runs
                    with mock.patch.object(measure, "rel_l2_max", wraps=measure.rel_l2_max) as apart_pass:
                        m, rel = measure.f64_figures(a, other, 1e-4)
                    apart_pass.assert_not_called()
                    self.assertEqual((m.json(), rel), want)

    def test_a_non_finite_value_a_shape_mismatch_or_an_integer_output_takes_the_passes_apart(self):
        from unittest import mock

        from kbench_worker import measure

        g = torch.Generator().manual_seed(12)
        a = [torch.randn(64, generator=g)]
        b = [a[0].double() * (1 + 1e-6)]
        cases = {
            "nan": ([a[0].clone().index_fill_(0, torch.tensor([5]), float("nan"))], b),
            "inf in both": ([a[0].clone().index_fill_(0, torch.tensor([5]), float("inf"))],
                            [b[0].clone().index_fill_(0, torch.tensor([5]), float("inf"))]),
            "shape": ([a[0][:32]], b),
            "integer": ([torch.arange(64)], [torch.arange(64)]),
            "one side has more": (a + a, b),
            "overflowing sums": ([torch.full((8,), 3e38)], [torch.full((8,), 1e200, dtype=torch.float64)]),
        }
        for what, (x, y) in cases.items():
            with self.subTest(what):
                want = self.apart(x, y, 1e-4)
                with mock.patch.object(measure, "rel_l2_max", wraps=measure.rel_l2_max) as apart_pass:
                    m, rel = measure.f64_figures(x, y, 1e-4)
                apart_pass.assert_called_once()
                self.assertEqual((m.json(), rel), want)


class InputChecksumTests(unittest.TestCase):
    """input_checksums reads its device sums back once, and still tells any one changed
    element, of any dtype, across chunks (integrity.py)."""

    def test_one_changed_element_in_any_chunk_changes_its_arguments_checksum_only(self):
        from unittest import mock

        from kbench_worker import integrity, measure

        g = torch.Generator().manual_seed(3)
        args = [torch.randn(100, generator=g), 7, torch.randint(-2**62, 2**62, (50,), generator=g),
                torch.rand(30, generator=g) > 0.5, torch.randn(20, generator=g).half()]
        for chunk in (3, 1 << 24):
            with mock.patch.object(measure, "COMPARE_CHUNK", chunk), \
                    mock.patch.object(integrity, "COMPARE_CHUNK", chunk):
                before = integrity.input_checksums(args)
                self.assertEqual(sorted(before), [0, 2, 3, 4])
                self.assertEqual(integrity._changed_inputs(before, args), [])
                for i, pos in ((0, 97), (2, 1), (3, 29), (4, 10)):
                    changed = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
                    t = changed[i]
                    if t.dtype == torch.bool:
                        t[pos] = ~t[pos]
                    elif t.is_floating_point():
                        # the next representable value: one bit of one element
                        t[pos] = torch.nextafter(t[pos], t[pos] + 1)
                    else:
                        t[pos] += 1
                    self.assertEqual(integrity._changed_inputs(before, changed), [i])
                # sums of small integers are the plain sums
                small = [torch.arange(10, dtype=torch.int32)]
                self.assertEqual(integrity.input_checksums(small)[0][:2], (45, 285))
