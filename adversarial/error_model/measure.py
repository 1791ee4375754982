"""The strict profile's fp32 error model, measured: honest reorderings against precision
downgrades on matmuls, triangular matmuls, im2col convolutions, long row sums and softmax,
under KernelBench's `rand` inputs and kbench's `signed` family.

Prints, per candidate: KernelBench's elementwise verdict (kb), strict before the
candidate's error spread was added (old), strict now (new), the normwise gate (norm), the
candidate's and reference's relative L2 error against float64, and the worst element's
error over rho_c * max(|r64|, rms(r64)) (tail). CPU only, PyTorch; about 20 s:

    python3 adversarial/error_model/measure.py
"""
import math

import torch

u = 2.0**-24
TAU = 8.0


def tf32(x):  # round to 10 explicit mantissa bits, nearest-even
    b = x.contiguous().view(torch.int32)
    lsb = (b >> 13) & 1
    b = (b + 0x0FFF + lsb) & ~0x1FFF
    return b.view(torch.float32)

def seq_dot(A, B):  # one fp32 accumulator per element, in order over K (a loop: torch's
    # CPU cumsum accumulates fp32 in double and would hide the error)
    acc = torch.zeros(A.shape[0], B.shape[1])
    for k in range(A.shape[1]):
        acc = acc + A[:, k:k+1] * B[k:k+1, :]
    return acc

def splitk(A, B, s=8):
    K = A.shape[1]; parts = []
    for i in range(s):
        sl = slice(i*K//s, (i+1)*K//s)
        parts.append(seq_dot(A[:, sl], B[sl, :]))
    out = parts[0]
    for p in parts[1:]: out = out + p
    return out


def verdicts(c, r, t, tau=TAU):
    c64, r64 = c.double(), r.double()
    ec, er = c64 - t, r64 - t
    n = t.numel()
    tn = t.norm().item()
    rho_c, rho_r = ec.norm().item()/tn, er.norm().item()/tn
    rms_t = tn / math.sqrt(n)
    within = (c64 - r64).abs() <= 1e-4 + 1e-4 * r64.abs()
    kb = bool(within.all())
    norm_ok = rho_c <= max(1e-4, 4*rho_r)
    old = within | (ec.abs() <= 2*torch.maximum(er.abs(), rho_r*t.abs()) + 1e-7)
    k = tau  # own_error_factor; element_factor 2 below
    bound = max(1e-4, 4*rho_r)
    w2 = min(ec[within].pow(2).sum().item(), (bound*tn)**2)
    rho_w = (w2 ** 0.5) / tn
    new = within | (ec.abs() <= 2*torch.maximum(torch.maximum(er.abs(), rho_r*t.abs()), k*rho_w*(t.abs() + rms_t)) + 1e-8)
    ratio = (ec.abs() / (rho_c * torch.maximum(t.abs(), torch.full_like(t, rms_t)))).max().item() if rho_c > 0 else 0
    return dict(kb=kb, old=bool(old.all()) and norm_ok, new=bool(new.all()) and norm_ok, norm=norm_ok, rho_c=rho_c, rho_r=rho_r, tail=ratio, fails=int((~new).sum()))

def show(name, c, r, t):
    v = verdicts(c, r, t)
    print(f"  {name:14s} kb={int(v['kb'])} old={int(v['old'])} new={int(v['new'])} norm={int(v['norm'])} rho_c={v['rho_c']:.2e} rho_r={v['rho_r']:.2e} tail={v['tail']:.2f} newfail={v['fails']}")


def fam_inputs(shape, fam):
    if fam == "rand": return torch.rand(*shape)
    return torch.randn(*shape) * (torch.rand(*shape) * 9.9 + 0.1)

def seq_rows(x):  # sequential fp32 sum over last dim
    acc = torch.zeros(x.shape[:-1])
    for k in range(x.shape[-1]): acc = acc + x[..., k]
    return acc

def blocked_rows(x, b=256):
    n = x.shape[-1]; parts = x.reshape(*x.shape[:-1], n//b, b)
    s = torch.zeros(parts.shape[:-1])
    for k in range(b): s = s + parts[..., k]
    out = torch.zeros(x.shape[:-1])
    for j in range(n//b): out = out + s[..., j]
    return out


def main():
    torch.manual_seed(1)
    for fam in ("rand", "signed"):
        # triangular matmul
        N = 384
        A, B = torch.tril(fam_inputs((N, N), fam)), torch.tril(fam_inputs((N, N), fam))
        t = torch.tril(A.double() @ B.double()); r = torch.tril(A @ B)
        print(f"tril matmul N={N} {fam}")
        show("seq", torch.tril(seq_dot(A, B)), r, t)
        show("splitk4", torch.tril(splitk(A, B, 4)), r, t)
        show("tf32", torch.tril(seq_dot(tf32(A), tf32(B))), r, t)
        show("bf16in", torch.tril(seq_dot(A.bfloat16().float(), B.bfloat16().float())), r, t)
        show("fp16out", r.half().float(), r, t)
        bug = r.clone(); bug[5, 3] += 1e-3 * max(1.0, bug[5, 3].abs().item()); show("bug1elem", bug, r, t)
        # long row sum
        x = fam_inputs((16, 65536), fam)
        t = x.double().sum(-1); r = x.sum(-1)
        print(f"row sum 16x65536 {fam}")
        show("seq", seq_rows(x), r, t)
        show("blocked256", blocked_rows(x), r, t)
        show("bf16in", seq_rows(x.bfloat16().float()), r, t)
        show("fp16out", r.half().float(), r, t)
        # softmax over long rows
        x = fam_inputs((16, 65536), fam)
        t = torch.softmax(x.double(), -1); r = torch.softmax(x, -1)
        print(f"softmax 16x65536 {fam}")
        m = x.max(-1, keepdim=True).values
        e = torch.exp(x - m)
        show("seq", e / seq_rows(e).unsqueeze(-1), r, t)
        show("blocked", e / blocked_rows(e).unsqueeze(-1), r, t)
        show("nomax", torch.exp(x) / seq_rows(torch.exp(x)).unsqueeze(-1), r, t)
        show("bf16exp", e.bfloat16().float() / seq_rows(e.bfloat16().float()).unsqueeze(-1), r, t)
        show("fp16out", r.half().float(), r, t)
        # exp with a relative error of 2e-4 and 2e-6 (an approximation, beyond and within fp32's)
        ea = torch.exp(x - m) * (1 + 2e-4 * torch.sin(1000 * x))
        show("approx-exp2e-4", ea / seq_rows(ea).unsqueeze(-1), r, t)
        ea = torch.exp(x - m) * (1 + 2e-6 * torch.sin(1000 * x))
        show("approx-exp2e-6", ea / seq_rows(ea).unsqueeze(-1), r, t)

    torch.manual_seed(2)
    for fam in ("rand", "signed"):
        N = 1024
        A, B = torch.tril(fam_inputs((N, N), fam)), torch.tril(fam_inputs((N, N), fam))
        t = torch.tril(A.double() @ B.double()); r = torch.tril(A @ B)
        print(f"tril matmul N={N} {fam}")
        show("seq", torch.tril(seq_dot(A, B)), r, t)
        show("splitk8", torch.tril(splitk(A, B, 8)), r, t)
        show("tf32", torch.tril(seq_dot(tf32(A), tf32(B))), r, t)
        # conv2d: direct (torch) vs im2col + sequential matmul
        x = fam_inputs((2, 64, 32, 32), fam); w = fam_inputs((64, 64, 3, 3), fam)
        t = torch.nn.functional.conv2d(x.double(), w.double(), padding=1); r = torch.nn.functional.conv2d(x, w, padding=1)
        cols = torch.nn.functional.unfold(x, 3, padding=1)  # (2, 576, 1024)
        W = w.reshape(64, 576)
        out = torch.stack([seq_dot(W, cols[b]) for b in range(2)]).reshape(2, 64, 32, 32)
        print(f"conv2d 64->64 3x3 {fam}")
        show("im2col-seq", out, r, t)
        out = torch.stack([seq_dot(tf32(W), tf32(cols[b])) for b in range(2)]).reshape(2, 64, 32, 32)
        show("im2col-tf32", out, r, t)
        show("fp16out", r.half().float(), r, t)
    # partial downgrade: 6% of rows computed from fp16 inputs; one wrong 8x8 tile
    for fam in ("rand", "signed"):
        A, B = fam_inputs((64, 4096), fam), fam_inputs((4096, 64), fam)
        t = A.double() @ B.double(); r = A @ B
        print(f"matmul 64x4096x64 {fam}")
        c = seq_dot(A, B); show("seq", c, r, t)
        c2 = c.clone(); c2[:4] = seq_dot(A[:4].half().float(), B.half().float()); show("fp16-rows-6%", c2, r, t)
        c3 = c.clone(); c3[:8, :8] *= (1 + 1e-3); show("tile-1e-3", c3, r, t)


if __name__ == "__main__":
    main()
