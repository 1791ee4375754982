"""`serve_bench.py --self-test`: the candidates and the helpers, with no service and no GPU
(Python 3 standard library). With a Python that has torch and triton (`--python`, or
$KBENCH_PYTHON when it has them) the Triton candidates also run under Triton's interpreter
against their problems' own `Model` on small inputs with NaN, ±Inf, subnormal and tiny values.
Prints `self-test: ok` and exits 0, else names what failed and exits 1."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import candidates
import observe
import serve_bench as sb

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def kernelbench_dir(args):
    """--kernelbench, $KBENCH_KERNELBENCH_DIR, the shared checkout beside the repository
    (as CI keeps it), or None."""
    for d in (args.kernelbench, os.environ.get("KBENCH_KERNELBENCH_DIR"), REPO.parent / "shared" / "kernelbench", "/work/shared/kernelbench"):
        if d and Path(d).is_dir():
            try:
                candidates.level_dir(d, 1)
                return Path(d)
            except FileNotFoundError:
                pass
    return None


class Checks:
    def __init__(self):
        self.failed = []
        self.passed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"FAIL {what}")


def compiles(src, name):
    try:
        compile(src, name, "exec")
        return True
    except SyntaxError as e:
        print(f"{name}: {e}")
        return False


def check_candidates(c, kb, real_kernelbench):
    files = candidates.problem_files(candidates.level_dir(kb, 1))
    c.check(len(files) > 0, f"{kb}: level-1 problem files")
    # Every problem once, plus a second round: all distinct, all compile, all ModelNew.
    n = len(files) * 2 + 3
    cands = candidates.throughput_set(kb, n, "selftest", triton=real_kernelbench)
    srcs = [x["source"] for x in cands]
    c.check(len(cands) == n, f"throughput_set gives {n} candidates (got {len(cands)})")
    c.check(len(set(srcs)) == n, "every candidate's source is distinct")
    py = [x for x in cands if x["kind"] == "pytorch"]
    c.check({x["id"] for x in py} == {f[0] for f in files}, "PyTorch candidates cover every level-1 problem")
    bad = [x["label"] for x in cands if not compiles(x["source"], x["label"])]
    c.check(not bad, f"every candidate compiles ({len(cands) - len(bad)}/{len(cands)}; failing: {bad[:5]})")
    c.check(all("class ModelNew" in x["source"] for x in cands), "every candidate defines class ModelNew")
    c.check(not any("class Model(" in x["source"] for x in py), "no PyTorch candidate keeps class Model(")
    c.check(all(x["source"].startswith("# kbench serve bench selftest: candidate ") for x in cands), "every source starts with the bench's header")
    # The default set: 60 = the Triton ones + PyTorch spread over the level.
    d = candidates.throughput_set(kb, 60, "x", triton=real_kernelbench)
    tri = [x for x in d if x["kind"] == "triton"]
    if real_kernelbench:
        c.check(len(tri) == len(candidates.TRITON_KERNELS), f"60 candidates hold every Triton kernel ({len(tri)})")
    pyd = [x["id"] for x in d if x["kind"] == "pytorch"]
    c.check(len(pyd) == 60 - len(tri) and len(set(pyd)) == min(len(pyd), len(files)),
            "the default PyTorch candidates are of distinct problems while the level has enough")
    c.check(len(candidates.throughput_set(kb, 4, "x", triton=real_kernelbench)) == 4, "n=4 gives 4")
    return files


def check_triton(c, kb):
    by_id = {} if kb is None else {pid: (name, path) for pid, name, path in candidates.problem_files(candidates.level_dir(kb, 1))}
    for pid, (name, _, _, call) in sorted(candidates.TRITON_KERNELS.items()):
        src = candidates.triton_source(pid)
        c.check(compiles(src, f"triton L1/{pid}"), f"Triton candidate L1/{pid} compiles")
        c.check("@triton.jit" in src and "class ModelNew(nn.Module)" in src, f"Triton candidate L1/{pid} is a jit kernel and a ModelNew")
        if kb is not None:
            c.check(pid in by_id, f"KernelBench has level-1 problem {pid} ({name})")
            if pid in by_id:
                c.check(call in by_id[pid][1].read_text(), f"L1/{pid} {by_id[pid][0]}'s forward uses {call}")


def check_helpers(c):
    c.check(candidates.rename_model("class Model(nn.Module):\n    super(Model, self)\nMyModel ModelX Model.") ==
            "class ModelNew(nn.Module):\n    super(ModelNew, self)\nMyModel ModelX ModelNew.", "rename_model at identifier boundaries")
    c.check(observe.quantile([1, 2, 3, 4], 0.5) == 2.5 and observe.quantile([5], 0.99) == 5 and observe.quantile([], 0.5) is None, "quantile")
    c.check(abs(observe.quantile(list(range(101)), 0.99) - 99.0) < 1e-9, "quantile p99 of 0..100")
    text = (
        "# HELP kbench_serve_queue_depth queued\n# TYPE kbench_serve_queue_depth gauge\n"
        "kbench_serve_queue_depth 7\n"
        'kbench_serve_submissions{state="done"} 12\n'
        'kbench_serve_gpu_busy_ratio{gpu="0"} 0.93\n'
        'kbench_serve_gpu_busy_ratio{gpu="1"} 0.5 1700000000000\n'
        'kbench_serve_api_latency_seconds{quantile="0.99"} 0.004\n'
        'odd{a="x\\"y",b="2"} 1e-3\n'
    )
    m = observe.parse_prometheus(text)
    c.check(observe.metric(m, "kbench_serve_queue_depth") == 7.0, "prometheus: a bare gauge")
    c.check(observe.metric(m, "kbench_serve_submissions", state="done") == 12.0, "prometheus: a labelled sample")
    c.check(observe.busy_ratios(m) == {"0": 0.93, "1": 0.5}, "prometheus: per-GPU busy ratios, timestamp ignored")
    c.check(observe.metric(m, "odd", a='x"y', b="2") == 0.001, "prometheus: escaped quote in a label")
    # busy_between: started at 0, ratio 0.5 at t=100 (50 s busy), 0.75 at t=200 (150 s busy):
    # 100 s busy in the 100 s between.
    c.check(observe.busy_between({"0": 0.5}, {"0": 0.75}, 100.0, 200.0, 0.0) == {"0": 1.0}, "busy_between")
    # Started at 1000 with 30 s busy: 0.3 at 1100, 0.25 at 1120.
    st = observe.clock_start({"0": 0.3}, {"0": 0.25}, 1100.0, 1120.0)
    c.check(st is not None and abs(st - 1000.0) < 1e-6, f"clock_start from two idle reads ({st})")
    c.check(observe.clock_start({"0": 0.0}, {"0": 0.0}, 1100.0, 1120.0) is None, "clock_start: nothing busy, no answer")
    import hashlib

    tok = "kbs_4f1c2d9e0a7b"
    sha = hashlib.sha256(tok.encode()).hexdigest()
    for out in (
        # kbench serve --new-token's own shape: the token on a line, then the entry.
        f"token (give it to bench; it is not kept anywhere): {tok}\n\n[[client]]\nname = \"bench\"\n"
        f"token_sha256 = \"{sha}\"\n# submissions_per_minute = 600\n# max_queued = 1000\n",
        f"token: {tok}\n\n[[client]]\nname = \"bench\"\ntoken_sha256 = \"{sha}\"\n",
        f"[[client]]\nname = \"bench\"\ntoken_sha256 = \"{sha}\"\n# give the client this token: {tok}\n",
        f"KBENCH_SERVE_TOKEN={tok}\n[[client]]\nname = \"bench\"\ntoken_sha256 = \"{sha}\"\n",
    ):
        try:
            got = sb.client_from_new_token(out)
        except ValueError as e:
            got = str(e)
        c.check(got == (tok, "bench", sha), f"client_from_new_token finds the token in {out!r}: {got}")
    try:
        sb.client_from_new_token(f"[[client]]\nname = \"x\"\ntoken_sha256 = \"{'0' * 64}\"\n")
        c.check(False, "client_from_new_token refuses output without the token")
    except ValueError:
        c.check(True, "")
    toml = sb.tokens_toml("bench", sha)
    c.check(f'token_sha256 = "{sha}"' in toml and "submissions_per_minute = 1000000" in toml and toml.startswith("[[client]]"), "tokens_toml")
    pm = sb.problem_ids([
        {"id": "kernelbench/L1/19", "level": 1, "name": "ReLU"},
        {"id": "smoke/L1/2", "level": 1, "name": "ELU"},
        {"id": "p-7", "level": 2, "name": "7_Thing"},
    ])
    c.check(pm == {(1, 19): "kernelbench/L1/19", (1, 2): "smoke/L1/2", (2, 7): "p-7"}, f"problem_ids: {pm}")
    c.check(sb.parse_ids("1-3,7") == {1, 2, 3, 7}, "parse_ids")
    # Batches: at most 256 kernels and MAX_BODY_BYTES of JSON a request, ids in order.
    class Recorder(sb.Api):
        def __init__(self):
            super().__init__("http://127.0.0.1:9", "t")
            self.bodies = []

        def json(self, method, path, body=None, auth=True, timeout_s=None):
            self.bodies.append(body)
            return {"ids": [it["label"] for it in body["submissions"]]}

    r = Recorder()
    items = [{"problem": "p", "source": "x" * 10, "label": str(i)} for i in range(600)]
    items += [{"problem": "p", "source": "y" * 900_000, "label": f"big{i}"} for i in range(5)]
    got = r.submit(items)
    sizes = [len(b["submissions"]) for b in r.bodies]
    c.check(got == [it["label"] for it in items], "submit keeps the order of ids across batches")
    c.check(max(sizes) <= 256 and all(len(json.dumps(b)) <= sb.MAX_BODY_BYTES for b in r.bodies),
            f"submit batches stay under 256 kernels and the body limit ({sizes})")
    c.check(sb.outcome_counts([{"state": "done", "verdict": {"outcome": "ok"}}, {"state": "queued"}]) == {"ok": 1, "not done (queued)": 1}, "outcome_counts")


def check_published(c):
    fx = REPO / "tests" / "fixtures" / "import"
    lb, notes = candidates.published_set(fx / "leaderboard")
    got = sorted(((e["level"], e["id"], e["file"].split("/")[-1], e["claimed_speedup"]) for e in lb), key=str)
    c.check(got == [(1, 1, "aa11.py", 1.5), (1, 1, "bb22.py", 3.0), (1, 2, "cc33.py", 0.7), (1, 2, "cc33.py", None)],
            f"published: the leaderboard fixture's kernels ({got})")
    c.check(any("dd44" in n for n in notes) and any("Level one" in n for n in notes), f"published: the leaderboard fixture's notes ({notes})")
    runs, _ = candidates.published_set(fx / "kernelbench_runs")
    c.check(sorted((e["level"], e["id"]) for e in runs) == [(1, 1), (1, 1), (1, 2)], "published: KernelBench's runs layout")
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        (t / "1_19_relu.py").write_text("class ModelNew: pass\n")
        (t / "level2").mkdir()
        (t / "level2" / "7_fused.py").write_text("class ModelNew: pass\n")
        (t / "problems" / "level1").mkdir(parents=True)
        (t / "problems" / "level1" / "19_ReLU.py").write_text("class Model: pass\n")
        (t / "notes.py").write_text("")
        flat, _ = candidates.published_set(t)
        c.check(sorted((e["level"], e["id"]) for e in flat) == [(1, 19), (2, 7)], f"published: <L>_<P>_*.py and level<L>/<P>_*.py, references left out ({flat})")


TRITON_RUN = r'''
import os, sys, types, json
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, sys.argv[1])
import torch, candidates
files = {pid: p for pid, _, p in candidates.problem_files(candidates.level_dir(sys.argv[2], 1))}
def load(name, src):
    m = types.ModuleType(name); exec(compile(src, name, "exec"), m.__dict__); return m
torch.manual_seed(0)
special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -1e-40, 1e-30, -1e-30,
                        1e-3, -1e-3, 5e-3, -5e-3, 0.02, -0.02, 3.0, -3.0, 100.0, -100.0, 1e5, -1e5])
out = {}
for pid in sorted(candidates.TRITON_KERNELS):
    ref = load(f"ref{pid}", files[pid].read_text())
    cand = load(f"cand{pid}", candidates.triton_source(pid))
    init = ref.get_init_inputs()
    r, c = ref.Model(*init), cand.ModelNew(*init)
    worst, kinds, flushed = 0.0, 0, 0
    for x in (torch.cat([torch.randn(1500) * 3, torch.rand(500), special]),
              torch.rand(2000) * 1e-5 * torch.sign(torch.randn(2000)),
              (torch.rand(2000) * 1e-38) * torch.sign(torch.randn(2000))):
        x = x.reshape(4, -1) if x.numel() % 4 == 0 else x.reshape(1, -1)
        rr, cc = r(x.clone()), c(x.clone())
        fin = torch.isfinite(rr) & torch.isfinite(cc)
        if fin.any():
            worst = max(worst, ((cc[fin] - rr[fin]).abs() / (1 + rr[fin].abs())).max().item())
        nan_r, nan_c = torch.isnan(rr), torch.isnan(cc)
        # kbench passes NaN against ±Inf in the nan-inf family; anything else must match.
        ok = fin | (nan_r & nan_c) | (rr == cc) | (nan_r & torch.isinf(cc)) | (torch.isinf(rr) & nan_c)
        kinds += int((~ok).sum())
        sub = (rr.abs() < 1.1754944e-38) & (rr != 0)
        flushed += int((sub & (cc == 0)).sum())
    out[pid] = {"tol_needed": worst, "nonfinite_mismatches": kinds, "subnormals_flushed": flushed}
print(json.dumps(out))
'''


def check_triton_numerics(c, kb, python):
    r = subprocess.run([python, "-c", TRITON_RUN, str(HERE), str(kb)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        c.check(False, f"Triton candidates under the interpreter: {r.stderr[-2000:]}")
        return
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for pid, v in sorted(res.items(), key=lambda kv: int(kv[0])):
        print(f"  triton L1/{pid}: tol needed {v['tol_needed']:.1e}, non-finite mismatches {v['nonfinite_mismatches']}, subnormals flushed {v['subnormals_flushed']}")
        c.check(v["tol_needed"] <= 1e-5 and v["nonfinite_mismatches"] == 0 and v["subnormals_flushed"] == 0,
                f"Triton L1/{pid} agrees with its problem's Model: {v}")


def has_torch_triton(python):
    try:
        return subprocess.run([python, "-c", "import torch, triton"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run(args):
    c = Checks()
    kb = kernelbench_dir(args)
    check_helpers(c)
    check_published(c)
    check_triton(c, kb)
    tmp = None
    if kb is None:
        # No KernelBench here: the embedded smoke suite's problem files, as a level folder.
        tmp = tempfile.TemporaryDirectory()
        os.symlink(REPO / "suites" / "smoke", Path(tmp.name) / "level1")
        print("self-test: no KernelBench checkout (--kernelbench, $KBENCH_KERNELBENCH_DIR): PyTorch candidates from suites/smoke")
        check_candidates(c, Path(tmp.name), real_kernelbench=False)
    else:
        print(f"self-test: candidates from {kb}")
        check_candidates(c, kb, real_kernelbench=True)
        with tempfile.TemporaryDirectory() as t:
            rc = sb.main(["--dry-run", "--kernelbench", str(kb), "--out", t, "-n", "12", "--nonce", "dry"])
            plan = json.loads((Path(t) / "plan.json").read_text())
            c.check(rc == 0 and len(plan["throughput"]) == 12 and len(list((Path(t) / "candidates").iterdir())) == 12, "--dry-run writes 12 candidates and the plan")
    python = args.python or os.environ.get("KBENCH_PYTHON")
    if kb is not None and python and has_torch_triton(python):
        print(f"self-test: Triton candidates under the interpreter with {python}")
        check_triton_numerics(c, kb, python)
    else:
        print("self-test: Triton candidates not run (no --python with torch and triton, or no KernelBench)")
    if tmp:
        tmp.cleanup()
    if c.failed:
        print(f"self-test: {len(c.failed)} failed, {c.passed} passed")
        return 1
    print(f"self-test: ok ({c.passed} checks)")
    return 0
