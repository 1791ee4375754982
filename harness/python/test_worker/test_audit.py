"""The `audit` command."""


from .support import FAMILY_PROBLEM, WorkerTestCase, simple_problem


class AuditTests(WorkerTestCase):
    """The `audit` command (PROTOCOL.md, "audit")."""

    def audit(self, source, name, families=("random", "signed"), rtol=1e-4, **extra):
        path = self.files.write(name, source)
        self.load_reference(path, want_f64=False)
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4,
                                  "families": list(families), "rtol": rtol, **extra})  # fmt: skip
        self.assertEqual(reply["type"], "audit", reply)
        self.assertEqual(list(reply["families"]), list(families))
        return reply["families"]

    def test_identity(self):
        fams = self.audit(simple_problem("x"), "20_Identity.py")
        for fam in ("random", "signed"):
            (out,) = fams[fam]["outputs"]
            self.assertEqual((out["shape"], out["dtype"], out["elements"]), ([4, 32], "f32", 128))
            self.assertLessEqual(out["input_excess"][0], 0)
            self.assertEqual(out["nonfinite"], 0)
            self.assertGreater(out["input_sensitivity"][0]["max_excess"], 1e-4)
            self.assertEqual(out["weight_sensitivity"], {})
        self.assertEqual((fams["random"]["transformed"], fams["signed"]["transformed"]), (0, 1))
        self.assertIsInstance(fams["signed"]["seconds"], float)

    def test_relu_is_the_identity_on_random_only(self):
        fams = self.audit(simple_problem("torch.relu(x)"), "21_ReLU.py")
        self.assertLessEqual(fams["random"]["outputs"][0]["input_excess"][0], 0)
        self.assertGreater(fams["signed"]["outputs"][0]["input_excess"][0], 1e-4)

    def test_constant_output(self):
        fams = self.audit(simple_problem("x * 0 + 1"), "22_Const.py")
        for fam in ("random", "signed"):
            out = fams[fam]["outputs"][0]
            self.assertLessEqual(out["constant_excess"], 0)
            self.assertEqual(out["max_abs"], 1.0)
            self.assertLessEqual(out["input_sensitivity"][0]["max_excess"], 0)
        # not constant: x itself
        fams = self.audit(simple_problem("x"), "20_Identity.py", families=["random"])
        self.assertGreater(fams["random"]["outputs"][0]["constant_excess"], 1e-4)

    def test_softmax_over_a_long_row_is_below_tolerance(self):
        fams = self.audit(simple_problem("torch.softmax(x, dim=-1)", "[torch.rand(2, 100000)]"), "23_Softmax.py")
        out = fams["random"]["outputs"][0]
        self.assertLess(out["zeros_excess"], 1e-4)
        self.assertLess(out["max_abs"], 1e-4)
        self.assertGreater(out["input_excess"][0], 1e-4)  # not the input either
        # the float64 definitions: zeros_excess = max (1 - rtol) |o|
        self.assertAlmostEqual(out["zeros_excess"], out["max_abs"] * (1 - 1e-4), delta=1e-12)

    def test_weight_sensitivity(self):
        params = "self.w = nn.Parameter(torch.ones(32))"
        fams = self.audit(simple_problem("x + 0 * self.w", params=params), "24_AddW.py")
        for fam in ("random", "signed"):
            ws = fams[fam]["outputs"][0]["weight_sensitivity"]
            self.assertEqual(set(ws), {"w"})
            self.assertLessEqual(ws["w"]["max_excess"], 0)
            self.assertEqual(ws["w"]["nan_mismatch"], 0)
            self.assertEqual(fams[fam]["weights_total"], 1)
        path = self.files.write("25_MulW.py", simple_problem("x * self.w", params=params))
        self.load_reference(path, want_f64=False)
        _, before = self.make_case()
        fams = self.audit(simple_problem("x * self.w", params=params), "25_MulW.py")
        for fam in ("random", "signed"):
            self.assertGreater(fams[fam]["outputs"][0]["weight_sensitivity"]["w"]["max_excess"], 1e-4)
        # the weights are restored exactly
        _, after = self.make_case()
        self.assert_bit_identical(before["out:0"], after["out:0"])
        self.assert_bit_identical(after["out:0"], after["in:0"])  # w is still all ones

    def test_max_weights_spreads_over_the_parameters(self):
        params = "\n".join(f"self.w{j} = nn.Parameter(torch.full((32,), {j + 1.0}))" for j in range(5))
        forward = "x * self.w0 * self.w1 * self.w2 * self.w3 * self.w4"
        fams = self.audit(simple_problem(forward, params=params), "26_FiveW.py", families=["random"], max_weights=2)
        fam = fams["random"]
        self.assertEqual(fam["weights_total"], 5)
        ws = fam["outputs"][0]["weight_sensitivity"]
        self.assertEqual(set(ws), {"w0", "w2"})
        self.assertTrue(all(m["max_excess"] > 0 for m in ws.values()))
        fams = self.audit(simple_problem(forward, params=params), "26_FiveW.py", families=["random"], max_weights=0)
        self.assertEqual(fams["random"]["outputs"][0]["weight_sensitivity"], {})

    def test_ignored_input(self):
        fams = self.audit(simple_problem("x * 2", "[torch.rand(4, 32), torch.rand(4, 32)]"), "27_Ignores.py")
        for fam in ("random", "signed"):
            sens = fams[fam]["outputs"][0]["input_sensitivity"]
            self.assertEqual(len(sens), 2)
            self.assertGreater(sens[0]["max_excess"], 1e-4)
            self.assertLessEqual(sens[1]["max_excess"], 0)
            self.assertEqual(sens[1]["nan_mismatch"], 0)
            # input_excess: x * 2 is neither input
            self.assertGreater(min(fams[fam]["outputs"][0]["input_excess"]), 1e-4)

    def test_mixed_inputs_and_outputs(self):
        path = self.files.write("10_Family.py", FAMILY_PROBLEM)
        self.load_reference(path, want_f64=False)
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4,
                                  "families": ["signed", "nan-inf"], "rtol": 1e-4})  # fmt: skip
        self.assertEqual(reply["type"], "audit", reply)
        signed = reply["families"]["signed"]
        self.assertEqual(signed["transformed"], 2)
        o0, o1 = signed["outputs"]
        self.assertEqual((o0["shape"], o1["shape"]), ([16, 65], [16]))
        # inputs: x, idx, mask, scale (not a tensor), y
        self.assertEqual(len(o0["input_sensitivity"]), 5)
        self.assertIsNone(o0["input_sensitivity"][3])
        self.assertIsNone(o0["input_excess"][3])
        self.assertIsNone(o0["input_excess"][1])  # integer input
        self.assertIsNone(o0["input_excess"][4])  # other element count
        self.assertIsNotNone(o1["input_excess"][4])  # y has o1's 16 elements
        dep0 = [m is not None and m["max_excess"] > 1e-4 for m in o0["input_sensitivity"]]
        dep1 = [m is not None and m["max_excess"] > 1e-4 for m in o1["input_sensitivity"]]
        self.assertEqual(dep0, [True, True, False, False, False])
        self.assertEqual(dep1, [False, False, True, False, True])
        nan_inf = reply["families"]["nan-inf"]["outputs"]
        self.assertEqual(nan_inf[0]["nonfinite"], 3)
        self.assertEqual(nan_inf[1]["nonfinite"], 3)
        self.assertIsNotNone(nan_inf[0]["max_abs"])

    def test_same_inputs_as_make_case(self):
        # The audit's unperturbed run uses make_case's inputs: an identity's input_excess
        # against the make_case input is exactly what make_case's output shows.
        path = self.files.write("20_Identity.py", simple_problem("x"))
        self.load_reference(path, want_f64=False)
        _, t = self.make_case(seed=3, forward_seed=4, family="large")
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4, "families": ["large"], "rtol": 0})
        out = reply["families"]["large"]["outputs"][0]
        self.assertEqual(out["max_abs"], float(t["out:0"].abs().max()))
        self.assertEqual(out["constant_excess"],
                         float(((t["out:0"].max() + t["out:0"].min()).double() / 2 - t["out:0"].double()).abs().max()))  # fmt: skip

    def test_weights_total_on_each_output(self):
        params = "self.w = nn.Parameter(torch.ones(32))\nself.b = nn.Parameter(torch.zeros(32))"
        fams = self.audit(simple_problem("(x * self.w, x + self.b)", params=params), "28_TwoW.py", families=["signed"])
        fam = fams["signed"]
        self.assertEqual(fam["weights_total"], 2)
        self.assertEqual([o["weights_total"] for o in fam["outputs"]], [2, 2])
        o0, o1 = fam["outputs"]
        self.assertGreater(o0["weight_sensitivity"]["w"]["max_excess"], 1e-4)
        self.assertLessEqual(o0["weight_sensitivity"]["b"]["max_excess"], 0)
        self.assertLessEqual(o1["weight_sensitivity"]["w"]["max_excess"], 0)
        self.assertGreater(o1["weight_sensitivity"]["b"]["max_excess"], 1e-4)
        self.assertFalse(fam["rows_cut"])
        self.assertNotIn("error", fam)

    def test_max_rows_cuts_the_batch_where_the_model_allows_it(self):
        inputs = "[torch.rand(8, 32), torch.rand(8, 32), torch.rand(32)]"
        fams = self.audit(simple_problem("x + rest[0] + rest[1]", inputs), "29_Rows.py", max_rows=3)
        for fam in ("random", "signed"):
            f = fams[fam]
            self.assertTrue(f["rows_cut"])
            (o,) = f["outputs"]
            self.assertEqual(o["shape"], [3, 32])
            self.assertTrue(all(m["max_excess"] > 1e-4 for m in o["input_sensitivity"]))
        # a model fixed to its batch: the full inputs
        fams = self.audit(simple_problem("x.reshape(8, 32) * 2", "[torch.rand(8, 32)]"), "30_Fixed.py", max_rows=3)
        self.assertFalse(fams["random"]["rows_cut"])
        self.assertEqual(fams["random"]["outputs"][0]["shape"], [8, 32])
        # no more rows than asked for: nothing to cut
        fams = self.audit(simple_problem("x"), "20_Identity.py", max_rows=100)
        self.assertFalse(fams["random"]["rows_cut"])
        self.assertEqual(fams["random"]["outputs"][0]["shape"], [4, 32])

    def test_a_family_that_fails_is_reported_and_the_others_measured(self):
        forward = "x if bool((x >= 0).all()) else torch.zeros(1).no_such_method()"
        fams = self.audit(simple_problem(forward), "31_PositiveOnly.py")
        self.assertNotIn("error", fams["random"])
        self.assertEqual(len(fams["random"]["outputs"]), 1)
        self.assertEqual(fams["signed"]["outputs"], [])
        self.assertIn("no_such_method", fams["signed"]["error"])
        self.assertEqual(fams["signed"]["transformed"], 1)
        self.assertIsInstance(fams["signed"]["seconds"], float)

    def test_bad_requests(self):
        self.load_reference(self.linear)
        base = {"cmd": "audit", "seed": 1, "forward_seed": 1, "families": ["random"], "rtol": 1e-4}
        for bad in ({"families": ["gaussian"]}, {"families": "random"}, {"rtol": "x"}, {"rtol": -1},
                    {"max_weights": -1}, {"seed": None}, {"max_rows": 0}):  # fmt: skip
            with self.subTest(bad=bad):
                reply, _ = self.ref.call(dict(base, **bad))
                self.assert_error(reply, "protocol", "run")
        reply, _ = self.cand.call(base)
        self.assert_error(reply, "protocol")
