//! `kernels.cu` compiled as C++ for the host, one thread and no warp reduction, so that its
//! rules can be checked without a GPU: the float kernels against the CPU comparator on
//! random mixes of finite values, NaN, ±Inf and `nan-inf` probe references, and the flush
//! kernels against [`kbench_adversarial::flush_count_bytes`]. Needs a C++
//! compiler (`c++`, as PyTorch's extension builds do); the partial result the emulated
//! kernel writes is folded by the harness's own [`Stats::fold`], so its layout is checked
//! too. What it cannot check: the CUDA-only parts (warp shuffles, the f16 `cvt`
//! instruction, NVRTC's compile), which the GPU half of the other tests covers.

use std::io::Write;
use std::process::{Command, Stdio};

use kbench_adversarial::{compare_with_alt, Comparison, Rule};
use kbench_record::{Dtype, FlushCount};

use super::super::stats::{Stats, PARTIAL_BYTES};
use super::flush::flush_mix;
use super::*;

/// The host shim: CUDA's qualifiers and intrinsics for one thread of one block.
const SHIM: &str = r#"#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
struct uint4 { unsigned int x, y, z, w; };
struct double2 { double x, y; };
struct D3 { unsigned long long x; };
static D3 threadIdx{0}, blockIdx{0}, blockDim{1}, gridDim{1};
inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
inline int __ffs(unsigned x) { return __builtin_ffs(x); }
template <class T> T __shfl_down_sync(unsigned, T v, int) { return v; }
inline void __syncthreads() {}
using std::fabs; using std::fmax;
// IEEE binary16 to double, exactly (cvt.f32.f16 on the GPU), without compiler support.
inline double host_f16(unsigned short b) {
    double sign = (b & 0x8000) ? -1.0 : 1.0;
    int e = (b >> 10) & 0x1f, m = b & 0x3ff;
    if (e == 0) return sign * std::ldexp((double)m, -24);
    if (e == 31) return m ? NAN : sign * INFINITY;
    return sign * std::ldexp((double)(1024 + m), e - 25);
}
"#;

/// Reads `name n atol rtol has_alt size` and the raw tensors on stdin, writes the block's
/// `Acc`, or for `flush_<dtype>` its two counts. A name ending in `_t` is the kernel with a
/// float64 reference: the header goes on with `factor slack rel_scale abs_scale own_rel
/// own_abs` (the rescue, on), and the float64 reference follows the tensors.
const DRIVER: &str = r#"
typedef void (*Kernel)(const void*, const void*, const double*, const void*, u64, double,
                       double, int, double, double, double, double, double, double, Acc*);
int main() {
    char name[32]; unsigned long long n; double atol, rtol; int has_alt, size;
    if (scanf("%31s %llu %lf %lf %d %d", name, &n, &atol, &rtol, &has_alt, &size) != 6) return 2;
    getchar();
    std::vector<unsigned char> c(n * size + 16), r(n * size + 16), a(n * size + 16);
    if (fread(c.data(), 1, n * size, stdin) != n * size) return 3;
    if (fread(r.data(), 1, n * size, stdin) != n * size) return 3;
    if (has_alt && fread(a.data(), 1, n * size, stdin) != n * size) return 3;
    if (!strncmp(name, "flush_", 6)) {
        typedef void (*Flush)(const void*, const void*, u64, u64*);
        const char* d = name + 6;
        Flush f = !strcmp(d, "f64") ? devflush_f64 : !strcmp(d, "f32") ? devflush_f32
                : !strcmp(d, "f16") ? devflush_f16 : devflush_bf16;
        u64 counts[2];
        f(c.data(), r.data(), n, counts);
        fwrite(counts, sizeof(u64), 2, stdout);
        return 0;
    }
    Kernel k = !strcmp(name, "f64") ? devcmp_f64 : !strcmp(name, "f32") ? devcmp_f32
             : !strcmp(name, "f16") ? devcmp_f16 : !strcmp(name, "bf16") ? devcmp_bf16
             : !strcmp(name, "f64_t") ? devcmp_f64_t : !strcmp(name, "f32_t") ? devcmp_f32_t
             : !strcmp(name, "f16_t") ? devcmp_f16_t : devcmp_bf16_t;
    Acc out;
    if (strstr(name, "_t")) {
        double s[6];
        std::vector<double> t(n + 2);
        if (fread(s, sizeof(double), 6, stdin) != 6) return 4;
        if (fread(t.data(), sizeof(double), n, stdin) != n) return 4;
        k(c.data(), r.data(), t.data(), has_alt ? a.data() : nullptr, n, atol, rtol, 1, s[0],
          s[1], s[2], s[3], s[4], s[5], &out);
    } else {
        k(c.data(), r.data(), nullptr, has_alt ? a.data() : nullptr, n, atol, rtol, 0, 0, 0, 0,
          0, 0, 0, &out);
    }
    fwrite(&out, sizeof(Acc), 1, stdout);
    return 0;
}
"#;

/// `src` with the body of the function that begins with the line `start` replaced.
fn replace_body(src: &str, start: &str, body: &str) -> String {
    let i = src.find(start).expect("kernels.cu defines the function");
    let j = i + src[i..].find("\n}\n").expect("the function ends") + 3;
    format!("{}{start} {body} }}\n{}", &src[..i], &src[j..])
}

/// `kernels.cu` for the host: the warp reductions become plain stores (one thread), f16
/// decodes in portable C++.
fn host_source() -> String {
    let src = replace_body(
        include_str!("../kernels.cu"),
        "__device__ __forceinline__ void block_store(Acc a, Acc* out) {",
        "out[blockIdx.x] = a;",
    );
    let src = replace_body(
        &src,
        "__device__ __forceinline__ void flush_store(u64 sub, u64 zeroed, u64* out) {",
        "out[2 * blockIdx.x] = sub; out[2 * blockIdx.x + 1] = zeroed;",
    );
    let asm = "    float f;\n    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x));\n    return (double)f;";
    assert!(
        src.contains(asm),
        "kernels.cu's h2d changed: update the host emulation"
    );
    let body = src.replace(asm, "    return host_f16(x);");
    format!("{SHIM}{body}{DRIVER}")
}

/// The emulated kernels, built once; `None` (test skipped, said so) without a C++ compiler.
fn build(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let cpp = dir.join("kernels_host.cpp");
    std::fs::write(&cpp, host_source()).unwrap();
    let exe = dir.join("kernels_host");
    let built = Command::new("c++")
        .args(["-std=c++17", "-O1", "-ffp-contract=off", "-w", "-o"])
        .arg(&exe)
        .arg(&cpp)
        .output();
    match built {
        Err(e) => {
            println!("host emulation skipped: no C++ compiler (c++: {e})");
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "kernels.cu does not compile for the host emulation:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(exe)
        }
    }
}

fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F64 => "f64",
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        _ => "bf16",
    }
}

fn run(
    exe: &std::path::Path,
    dtype: Dtype,
    tol: f64,
    c: &[u8],
    r: &[u8],
    a: Option<&[u8]>,
) -> Stats {
    let out = run_raw(exe, dtype_name(dtype), dtype, tol, c, r, a, &[]);
    assert_eq!(out.len(), PARTIAL_BYTES, "one Acc");
    Stats::fold(&out)
}

/// The emulated flush kernel of `dtype` on raw tensors.
fn run_flush(exe: &std::path::Path, dtype: Dtype, c: &[u8], r: &[u8]) -> FlushCount {
    let name = format!("flush_{}", dtype_name(dtype));
    let out = run_raw(exe, &name, dtype, 0.0, c, r, None, &[]);
    assert_eq!(out.len(), 16, "two counts");
    let word = |k: usize| u64::from_le_bytes(out[8 * k..8 * k + 8].try_into().unwrap());
    FlushCount {
        subnormal: word(0),
        zeroed: word(1),
    }
}

/// The driver's stdout for kernel `name`; `extra` follows the tensors (a `_t` kernel's
/// rescue scales and float64 reference).
#[allow(clippy::too_many_arguments)]
fn run_raw(
    exe: &std::path::Path,
    name: &str,
    dtype: Dtype,
    tol: f64,
    c: &[u8],
    r: &[u8],
    a: Option<&[u8]>,
    extra: &[u8],
) -> Vec<u8> {
    let n = c.len() / dtype.size();
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = format!(
        "{name} {n} {tol:e} {tol:e} {} {}\n",
        i32::from(a.is_some()),
        dtype.size()
    )
    .into_bytes();
    input.extend_from_slice(c);
    input.extend_from_slice(r);
    input.extend_from_slice(a.unwrap_or_default());
    input.extend_from_slice(extra);
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "emulated kernel {name} exited {}",
        out.status
    );
    out.stdout
}

#[test]
fn kernels_cu_on_the_host_agrees_with_the_cpu_comparator() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build(dir.path()) else { return };
    let mut rng = Rng(21);
    let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let (mut artefacts, mut seen) = (0u64, std::collections::BTreeSet::new());
    for trial in 0..320 {
        let dtype = FLOATS[trial % FLOATS.len()];
        let precision = precision_of(dtype);
        let n = [1usize, 3, 8, 37, 100, 257][(trial / 4) % 6];
        let r: Vec<f64> = (0..n)
            .map(|_| {
                if rng.unit() < 0.1 {
                    rng.pick(&specials)
                } else {
                    10.0 * rng.sym()
                }
            })
            .collect();
        let mut c = r.clone();
        for x in c.iter_mut() {
            let u = rng.unit();
            if u < 0.1 {
                *x = rng.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5, *x * 1.03]);
            } else if u < 0.15 {
                *x += 1e-4;
            }
        }
        let a: Vec<f64> = c
            .iter()
            .map(|&x| match rng.below(3) {
                0 => x,
                1 => f64::NAN,
                _ => x + 1.0,
            })
            .collect();
        let with_alt = trial % 3 != 0;
        let shape = [n as u64];
        let (ct, rt, at) = (
            floats(dtype, &shape, &c),
            floats(dtype, &shape, &r),
            floats(dtype, &shape, &a),
        );
        let alt = with_alt.then_some(&at);
        let Ok(Comparison::Values(v)) = compare_with_alt(&ct, &rt, None, alt, KB, precision) else {
            panic!("expected a value comparison")
        };
        let tol = v.tolerance.atol;
        let s = run(
            &exe,
            dtype,
            tol,
            ct.data(),
            rt.data(),
            alt.map(|t| t.data()),
        );
        let what =
            format!("trial {trial}: {dtype} n={n} alt={with_alt}\n cpu {v:?}\n emulated {s:?}");
        assert_eq!(
            s.elementwise_failures + s.nonfinite_mismatches,
            v.mismatches,
            "{what}"
        );
        assert_eq!(s.nonfinite_mismatches, v.nonfinite_mismatches, "{what}");
        assert_eq!(s.artefacts, v.artefacts, "{what}");
        assert_eq!(
            s.first_artefact.map(|f| vec![f]),
            v.first_artefact,
            "{what}"
        );
        assert_eq!(
            s.first,
            v.first_mismatch.as_ref().map(|m| (m.flat_index, m.rule)),
            "{what}"
        );
        assert!(same_f64(s.tol_needed, v.tol_needed), "{what}");
        assert!(same_f64(s.max_abs, v.max_abs), "{what}");
        assert!(same_f64(s.max_rel, v.max_rel), "{what}");
        artefacts += s.artefacts;
        if let Some((_, rule)) = s.first {
            seen.insert(rule.as_str());
        }
    }
    // The mix exercised every rule and the artefacts.
    assert!(artefacts > 0);
    for rule in [
        Rule::Elementwise,
        Rule::NonfiniteInvented,
        Rule::DropsNan,
        Rule::DropsInf,
        Rule::InfSign,
        Rule::NanInfKind,
    ] {
        assert!(seen.contains(rule.as_str()), "{rule} never seen: {seen:?}");
    }
}

#[test]
fn flush_kernels_on_the_host_agree_with_flush_count_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build(dir.path()) else { return };
    let mut rng = Rng(24);
    for dtype in FLOATS {
        let (mut subnormal, mut zeroed) = (0, 0);
        for n in [1usize, 7, 8, 9, 16, 17, 100, 257, 1000] {
            let (ct, rt) = flush_mix(&mut rng, dtype, n);
            let want = kbench_adversarial::flush_count_bytes(dtype, ct.data(), rt.data())
                .expect("a float dtype");
            let got = run_flush(&exe, dtype, ct.data(), rt.data());
            assert_eq!(got, want, "{dtype} n={n}");
            subnormal += want.subnormal;
            zeroed += want.zeroed;
        }
        // The mix had subnormals both flushed and kept.
        assert!(
            zeroed > 0 && zeroed < subnormal,
            "{dtype}: {zeroed}/{subnormal}"
        );
    }
}

/// The emulated float kernel with a float64 reference and the rescue on, as the comparator
/// launches it: `scales` for the rescue, the factor and slack of `precision`'s gate.
fn run_with_truth(
    exe: &std::path::Path,
    dtype: Dtype,
    precision: Precision,
    tensors: (&HostTensor, &HostTensor, &HostTensor),
    scales: kbench_adversarial::RescueScales,
) -> Stats {
    let (c, r, t) = tensors;
    let tol = tolerance(STRICT, precision).atol;
    let gate = kbench_adversarial::float64_gate(precision);
    let mut extra = Vec::new();
    for x in [
        gate.element_factor,
        tol * gate.element_atol_scale,
        scales.rel_scale,
        scales.abs_scale,
        scales.own_rel,
        scales.own_abs,
    ] {
        extra.extend_from_slice(&x.to_le_bytes());
    }
    extra.extend_from_slice(t.data());
    let name = format!("{}_t", dtype_name(dtype));
    let out = run_raw(exe, &name, dtype, tol, c.data(), r.data(), None, &extra);
    assert_eq!(out.len(), PARTIAL_BYTES, "one Acc");
    Stats::fold(&out)
}

#[test]
fn rescue_on_the_host_agrees_with_the_cpu_comparator() {
    // Honest noise whose size follows the output's typical size (so cancelling elements
    // fall outside the elementwise tolerance), a reference off by less, and a few
    // elements off by far more: the strict profile's two passes, both rescue rules.
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build(dir.path()) else { return };
    let mut rng = Rng(31);
    let (mut by_spread, mut outliers_failed) = (0, 0);
    for trial in 0..96 {
        let dtype = FLOATS[trial % FLOATS.len()];
        let precision = precision_of(dtype);
        let tol = tolerance(STRICT, precision).atol;
        let n = [37usize, 100, 1000, 4099][(trial / 4) % 4];
        let zero_truth = trial % 16 == 15;
        let t: Vec<f64> = (0..n)
            .map(|_| {
                if zero_truth {
                    0.0
                } else if rng.unit() < 0.2 {
                    1e-3 * rng.sym()
                } else {
                    10.0 * rng.sym()
                }
            })
            .collect();
        let noise = tol * [0.02, 0.2, 1.0][trial % 3] * if zero_truth { 1.0 } else { 6.0 };
        let r: Vec<f64> = t.iter().map(|&x| x + 0.1 * noise * rng.sym()).collect();
        let mut c: Vec<f64> = t.iter().map(|&x| x + noise * rng.sym()).collect();
        for _ in 0..2 {
            let i = rng.below(n as u64) as usize;
            c[i] = t[i] + 50.0 * tol * (1.0 + t[i].abs());
        }
        let shape = [n as u64];
        let (ct, rt, tt) = (
            floats(dtype, &shape, &c),
            floats(dtype, &shape, &r),
            f64s(&shape, &t),
        );
        let Ok(Comparison::Values(v)) =
            kbench_adversarial::compare(&ct, &rt, Some(&tt), STRICT, precision)
        else {
            panic!("expected a value comparison")
        };
        let first_pass = kbench_adversarial::RescueScales::FIRST_PASS;
        let mut s = run_with_truth(&exe, dtype, precision, (&ct, &rt, &tt), first_pass);
        let rescued_first = s.rescued;
        if s.elementwise_failures > 0 && s.gate_elements > 0 {
            let gate = kbench_adversarial::float64_gate(precision);
            let scales = kbench_adversarial::rescue_scales(&gate, &s.gate_sums());
            s = run_with_truth(&exe, dtype, precision, (&ct, &rt, &tt), scales);
        }
        let what = format!("trial {trial}: {dtype} n={n}\n cpu {v:?}\n emulated {s:?}");
        assert_eq!(
            s.elementwise_failures + s.nonfinite_mismatches,
            v.mismatches,
            "{what}"
        );
        assert_eq!(s.rescued, v.rescued, "{what}");
        assert_eq!(
            s.first,
            v.first_mismatch.as_ref().map(|m| (m.flat_index, m.rule)),
            "{what}"
        );
        if s.rescued > rescued_first {
            by_spread += 1;
        }
        if v.mismatches > 0 {
            outliers_failed += 1;
        }
    }
    // The mix exercised the second pass and the elements beyond any rescue.
    assert!(by_spread > 10, "{by_spread}");
    assert!(outliers_failed > 10, "{outliers_failed}");
}
