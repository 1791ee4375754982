"""Structure kept by the case families (structure.py): what get_inputs promises about an
input holds for every family's values, and inputs without structure are left to the family."""

import unittest

import torch

from kbench_worker.families import STRESS_FAMILIES, apply_family
from kbench_worker.structure import detect

from .support import WorkerTestCase


def _made(family, *inputs, seed=3):
    raw, kept = list(inputs), []
    n = apply_family(raw, family, seed, torch.float32, kept)
    return raw, n, kept


class DetectTests(unittest.TestCase):
    def test_what_each_structure_is_read_from(self):
        g = torch.Generator().manual_seed(0)
        a = torch.rand(64, 64, generator=g)
        cases = {
            "upper": torch.triu(a),
            "lower": torch.tril(a),
            "diagonal": torch.diag(torch.rand(64, generator=g)),
            "symmetric": (a + a.T) / 2,
            "simplex": torch.rand(8, 100, generator=g).softmax(-1),
            "labels": torch.randint(0, 2, (256,), generator=g).float() * 2 - 1,
        }
        for kind, x in cases.items():
            with self.subTest(kind=kind):
                self.assertEqual(detect(x).kind, kind)
        # a batch of triangles, and a triangle of more columns than rows
        self.assertEqual(detect(torch.triu(torch.rand(3, 16, 16, generator=g))).kind, "upper")
        self.assertEqual(detect(torch.tril(torch.rand(8, 32, generator=g))).kind, "lower")

    def test_plain_inputs_have_none(self):
        g = torch.Generator().manual_seed(1)
        for x in (
            torch.rand(64, 64, generator=g),
            torch.randn(4, 3, 8, 8, generator=g),
            torch.rand(1, 128, generator=g),  # one row: nothing below a diagonal to read
            torch.rand(5, generator=g),  # a short row of uniforms is no distribution
            torch.zeros(16, 16),  # all zero: no promise a kernel could use
            torch.ones(32),  # one value: not labels
            torch.rand(64, 64, generator=g).T,  # not contiguous
            torch.tensor(0.5),
        ):
            with self.subTest(shape=tuple(x.shape)):
                self.assertIsNone(detect(x))


    def test_checks_in_slices_agree_with_whole_ones(self):
        # The full checks read slices of about 64 MiB; tiny slices must say the same.
        from kbench_worker import structure

        g = torch.Generator().manual_seed(5)
        a = torch.rand(2, 40, 40, generator=g)
        inputs = {
            "upper": torch.triu(a),
            "lower": torch.triu(a).transpose(-1, -2),  # not contiguous
            "symmetric": a + a.transpose(-1, -2),
            "labels": (torch.rand(6, 50, generator=g) > 0.5).float().t(),  # not contiguous
            None: a,
        }
        kept = structure._CHUNK
        try:
            for chunk in (kept, 7, 1):
                structure._CHUNK = chunk
                for kind, x in inputs.items():
                    with self.subTest(chunk=chunk, kind=kind):
                        got = detect(x)
                        self.assertEqual(None if got is None else got.kind, kind)
                # one element off the triangle, late in the last slice
                off = torch.triu(a)
                off[1, 39, 2] = 0.5
                self.assertIsNone(detect(off))
        finally:
            structure._CHUNK = kept


class FamiliesKeepStructureTests(unittest.TestCase):
    def test_the_specials_land_apart_in_a_narrow_triangle(self):
        # A 64 x 2 upper triangle keeps three elements: the three specials take all of them.
        for seed in range(20):
            raw, _, kept = _made("nan-inf", torch.triu(torch.rand(64, 2)) + torch.eye(64, 2), seed=seed)
            self.assertEqual(kept, ["input 0: upper"])
            t = raw[0]
            self.assertEqual(int(torch.isnan(t).sum()), 1, seed)
            self.assertEqual(int(torch.isinf(t).sum()), 2, seed)

    def test_every_family_keeps_every_structure(self):
        g = torch.Generator().manual_seed(2)
        a = torch.rand(48, 48, generator=g)
        signs = torch.randint(0, 2, (48,), generator=g).float() * 2 - 1
        for family in STRESS_FAMILIES:
            raw, n, kept = _made(
                family,
                torch.triu(a),
                torch.tril(a),
                (a + a.T) / 2,
                torch.rand(6, 40, generator=g).softmax(-1),
                signs.clone(),
            )
            up, low, sym, prob, labels = raw
            with self.subTest(family=family):
                self.assertEqual(n, 4)
                self.assertEqual(
                    kept,
                    ["input 0: upper", "input 1: lower", "input 2: symmetric", "input 3: simplex", "input 4: labels"],
                )
                self.assertEqual(int(torch.tril(up, -1).count_nonzero()), 0)
                self.assertEqual(int(torch.triu(low, 1).count_nonzero()), 0)
                self.assertTrue(torch.equal(sym.nan_to_num(), sym.T.nan_to_num()))  # NaN != NaN
                self.assertTrue(torch.equal(labels, signs))
                self.assertGreater(int(torch.triu(up).count_nonzero()), 48 * 49 // 2 - 5)
                if family == "nan-inf":
                    # the specials are moved into what the structure keeps
                    for t in (up, low):
                        self.assertEqual(int(torch.isnan(t).sum() + torch.isinf(t).sum()), 3)
                    self.assertTrue(bool(torch.isnan(prob).any()))
                else:
                    self.assertTrue(bool((prob >= 0).all()))
                    self.assertTrue(torch.allclose(prob.sum(-1, dtype=torch.float64), torch.ones(6, dtype=torch.float64), atol=1e-5))
                    # the family's values, not the problem's: the triangle is new
                    self.assertFalse(torch.equal(up, torch.triu(a)))

    def test_labels_keep_their_values_and_count_as_unchanged(self):
        t = torch.tensor([1.0, -1.0, -1.0, 1.0] * 8)
        raw, n, kept = _made("large", t.clone())
        self.assertEqual((n, kept), (0, ["input 0: labels"]))
        self.assertTrue(torch.equal(raw[0], t))

    def test_inputs_without_structure_are_the_familys(self):
        x = torch.rand(16, 65, generator=torch.Generator().manual_seed(4))
        raw, n, kept = _made("signed", x.clone())
        self.assertEqual((n, kept), (1, []))
        self.assertLess(float(raw[0].min()), 0.0)  # signed values, no structure put on them


TRIANGLE_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.triu(torch.matmul(A, B))

def get_inputs():
    return [torch.triu(torch.rand(24, 24)), torch.triu(torch.rand(24, 24))]

def get_init_inputs():
    return []
"""


class StructureInCasesTests(WorkerTestCase):
    """make_case: the reply names what was kept, and the inputs hold it."""

    def test_a_triangular_problem_keeps_its_triangles_in_every_family(self):
        path = self.files.write("14_Triangle.py", TRIANGLE_PROBLEM)
        self.load_reference(path)
        plain, _ = self.make_case(seed=5)
        self.assertNotIn("structure", plain)
        for family in STRESS_FAMILIES:
            with self.subTest(family=family):
                reply, tensors = self.make_case(seed=5, family=family)
                self.assertEqual(reply["structure"], ["input 0: upper", "input 1: upper"])
                self.assertEqual(reply["transformed"], 2)
                for name in ("in:0", "in:1"):
                    self.assertEqual(int(torch.tril(tensors[name].float(), -1).count_nonzero()), 0)
