//! Output comparison on the GPU: the statistics of [`kbench_adversarial::compare`], computed
//! where the tensors already are.
//!
//! The CPU comparator needs both tensors in host memory; for outputs of gigabytes the copy
//! alone takes longer than the comparison. [`DeviceComparator`] runs the same rules in an
//! NVRTC-compiled kernel over device buffers ([`DevBuf`]) and copies back only one partial
//! result per thread block (96 bytes each, a few thousand at most), which the host folds
//! into the very [`Comparison`] the CPU path builds:
//!
//! - shape, dtype and float64-reference checks run on the host before any kernel, in the CPU
//!   path's order;
//! - every element is decoded exactly to f64 (f16 through `cvt.f32.f16`, bf16 by a shift,
//!   integers and bools as i64) and judged in f64 with the module compiled `--fmad=false`,
//!   so `atol + rtol·|r|`, the rescue bound and the `max_rel` filter round exactly as the
//!   Rust code does;
//! - counts, the first mismatch (lowest flat index), `max_abs`, `max_rel` and the worst
//!   element against the float64 reference are order-independent and therefore identical;
//!   the float64 gate's sums (`Σ(c − r64)²`, `Σ(r − r64)²`, `Σ r64²`) are added in another
//!   order than on the CPU and may differ in the last bits (they are deterministic for a
//!   given GPU: fixed grid, fixed reduction tree, blocks folded in order on the host);
//! - the first mismatch's `candidate` and `reference` values are read back from the device
//!   buffers (one element each) and decoded on the host.
//!
//! On an H100 80GB HBM3 (driver 580, CUDA 13.0): 1.6e9 fp32 elements compare in 4.3 ms
//! (3.0 TB/s of both tensors' bytes), 7.2 ms when every element is wrong; 256 MiB fp32
//! tensors in 0.24 ms, 0.40 ms under `strict` with a float64 reference; 22 µs for one
//! element. Building the comparator (NVRTC) takes about 4 s, once per architecture and
//! process.
//!
//! Like `devmem.rs` and `gpu.rs`, this module is part of kbench's cudarc boundary.

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use kbench_adversarial::{
    float64_gate, tolerance, unravel_index, CompareError, Comparison, ElementMismatch,
    Float64Check, Float64Gate, Float64Status, Rule, Tolerance, ValueReport,
};
use kbench_record::{Dtype, Precision, ToleranceProfile};

use crate::gpu::devmem::{DevBuf, Gpu};

/// A tensor in device memory: `buf` holds at least `numel(shape)` elements of `dtype`,
/// row-major, from its start.
pub struct DevTensor<'a> {
    pub buf: &'a DevBuf,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

/// Threads per block of the scan kernels (a multiple of 32; the kernels assume 256).
const THREADS: u32 = 256;

/// Bytes of one block's partial result (`struct Acc` in the kernel source).
const PARTIAL_BYTES: usize = 96;

/// The scan kernels. One template instantiated per dtype (and, for floats, with and
/// without a float64 reference); each thread walks 16-byte vectors grid-stride, then the
/// tail elements one at a time, and each block writes one `Acc`.
const KERNEL_SRC: &str = r#"
typedef unsigned long long u64;
typedef long long i64;

#define THREADS 256
#define NONE 0xffffffffffffffffULL
#define INF __longlong_as_double(0x7ff0000000000000LL)
// The CPU scan's REL_SLACK.
#define REL_SLACK (1.0 + 1e-12)

// One thread's (then one block's) statistics. Layout read by the host: 6 u64, 6 double.
struct Acc {
    u64 fails;      // finite pairs outside tolerance, not rescued
    u64 nonfinite;  // NaN/Inf position mismatches
    u64 rescued;
    u64 first;      // lowest failing flat index * 2 + (1 if NaN/Inf rule), NONE if none
    u64 gate_n;     // elements where c, r and r64 are all finite
    u64 worst_idx;  // argmax |c - r64| over those, lowest index among equals
    double max_abs;
    double max_rel;
    double ce2;     // sum (c - r64)^2
    double re2;     // sum (r - r64)^2
    double t2;      // sum r64^2
    double worst_err;
};
static_assert(sizeof(Acc) == 96, "Acc layout");

struct P {
    double atol, rtol, factor, slack, rel_scale, abs_scale;
    int rescue;
};

union V16 {
    uint4 u;
    double d[2];
    float f[4];
    unsigned short h[8];
    i64 q[2];
    int i[4];
    short s[8];
    signed char sc[16];
    unsigned char uc[16];
};

__device__ __forceinline__ double h2d(unsigned short x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return (double)f;
}
__device__ __forceinline__ double b2d(unsigned short x) {
    return (double)__uint_as_float(((unsigned int)x) << 16);
}

struct F64 { enum { V = 2 };
    __device__ static double get(const V16& v, int k) { return v.d[k]; }
    __device__ static double at(const void* p, u64 i) { return ((const double*)p)[i]; } };
struct F32 { enum { V = 4 };
    __device__ static double get(const V16& v, int k) { return (double)v.f[k]; }
    __device__ static double at(const void* p, u64 i) { return (double)((const float*)p)[i]; } };
struct F16 { enum { V = 8 };
    __device__ static double get(const V16& v, int k) { return h2d(v.h[k]); }
    __device__ static double at(const void* p, u64 i) { return h2d(((const unsigned short*)p)[i]); } };
struct BF16 { enum { V = 8 };
    __device__ static double get(const V16& v, int k) { return b2d(v.h[k]); }
    __device__ static double at(const void* p, u64 i) { return b2d(((const unsigned short*)p)[i]); } };
struct I64 { enum { V = 2 };
    __device__ static i64 get(const V16& v, int k) { return v.q[k]; }
    __device__ static i64 at(const void* p, u64 i) { return ((const i64*)p)[i]; } };
struct I32 { enum { V = 4 };
    __device__ static i64 get(const V16& v, int k) { return (i64)v.i[k]; }
    __device__ static i64 at(const void* p, u64 i) { return (i64)((const int*)p)[i]; } };
struct I16 { enum { V = 8 };
    __device__ static i64 get(const V16& v, int k) { return (i64)v.s[k]; }
    __device__ static i64 at(const void* p, u64 i) { return (i64)((const short*)p)[i]; } };
struct I8 { enum { V = 16 };
    __device__ static i64 get(const V16& v, int k) { return (i64)v.sc[k]; }
    __device__ static i64 at(const void* p, u64 i) { return (i64)((const signed char*)p)[i]; } };
struct U8 { enum { V = 16 };
    __device__ static i64 get(const V16& v, int k) { return (i64)v.uc[k]; }
    __device__ static i64 at(const void* p, u64 i) { return (i64)((const unsigned char*)p)[i]; } };
// Any non-zero byte is true, as in PyTorch's bool storage.
struct BOOL { enum { V = 16 };
    __device__ static i64 get(const V16& v, int k) { return v.uc[k] != 0 ? 1 : 0; }
    __device__ static i64 at(const void* p, u64 i) { return ((const unsigned char*)p)[i] != 0 ? 1 : 0; } };

__device__ __forceinline__ bool is_nan(double x) { return x != x; }
__device__ __forceinline__ bool is_finite(double x) { return fabs(x) < INF; }

__device__ __forceinline__ void acc_init(Acc& a) {
    a.fails = 0; a.nonfinite = 0; a.rescued = 0; a.first = NONE; a.gate_n = 0; a.worst_idx = NONE;
    a.max_abs = 0.0; a.max_rel = 0.0; a.ce2 = 0.0; a.re2 = 0.0; a.t2 = 0.0; a.worst_err = -1.0;
}

__device__ __forceinline__ void fail(Acc& a, u64 i, bool nonfinite) {
    if (nonfinite) a.nonfinite++; else a.fails++;
    u64 key = (i << 1) | (nonfinite ? 1ULL : 0ULL);
    if (key < a.first) a.first = key;
}

// The CPU's update_rel: divides only where the maximum may grow; exactly max fl(d/|r|).
__device__ __forceinline__ void upd_rel(double& m, double d, double ra) {
    if (d * REL_SLACK > m * ra) {
        double rel = d / ra;
        if (rel > m) m = rel;
    }
}

__device__ __forceinline__ void gate_add(Acc& a, u64 i, double c, double r, double t) {
    double ec = c - t, er = r - t;
    a.gate_n++;
    a.ce2 += ec * ec;
    a.re2 += er * er;
    a.t2 += t * t;
    double err = fabs(ec);
    if (err > a.worst_err || (err == a.worst_err && i < a.worst_idx)) {
        a.worst_err = err;
        a.worst_idx = i;
    }
}

// The common case, decided without a division: both finite, within tolerance, no new
// max_rel, finite float64 reference. Returns false, having changed nothing, otherwise.
template <bool T>
__device__ __forceinline__ bool fast(Acc& a, u64 i, double c, double r, double t, const P& p) {
    double d = fabs(c - r), ra = fabs(r);
    bool ok = (d <= p.atol + p.rtol * ra) & (ra != INF) & !(d * REL_SLACK > a.max_rel * ra);
    if (T) ok = ok & is_finite(t);
    if (ok) {
        a.max_abs = fmax(a.max_abs, d);
        if (T) gate_add(a, i, c, r, t);
    }
    return ok;
}

// The full rules for one element (the CPU's Scanner::element and slow_element).
template <bool T>
__device__ void slow(Acc& a, u64 i, double c, double r, double t, const P& p) {
    if (is_nan(r)) {
        if (!is_nan(c)) fail(a, i, true);
        return;
    }
    if (fabs(r) == INF) {
        if (c != r) fail(a, i, true);
        return;
    }
    if (!is_finite(c)) {
        fail(a, i, true);
        return;
    }
    double d = fabs(c - r), ra = fabs(r);
    a.max_abs = fmax(a.max_abs, d);
    upd_rel(a.max_rel, d, ra);
    bool within = d <= p.atol + p.rtol * ra;
    if (T && is_finite(t)) {
        gate_add(a, i, c, r, t);
        if (within) return;
        bool rescued = false;
        if (p.rescue) {
            double own = fabs(r - t);
            double typical = p.rel_scale * fabs(t) + p.abs_scale;
            rescued = fabs(c - t) <= p.factor * fmax(own, typical) + p.slack;
        }
        if (rescued) a.rescued++; else fail(a, i, false);
    } else if (!within) {
        fail(a, i, false);
    }
}

__device__ __forceinline__ void int_mismatch(Acc& a, u64 i, i64 c, i64 r) {
    // |c - r| fits a u64 (at most 2^64 - 1); the conversions round to nearest, as Rust's.
    u64 diff = c > r ? (u64)c - (u64)r : (u64)r - (u64)c;
    u64 rabs = r < 0 ? 0ULL - (u64)r : (u64)r;
    double d = (double)diff, ra = (double)rabs;
    a.max_abs = fmax(a.max_abs, d);
    upd_rel(a.max_rel, d, ra);
    fail(a, i, false);
}

__device__ __forceinline__ void combine(Acc& a, const Acc& b) {
    a.fails += b.fails;
    a.nonfinite += b.nonfinite;
    a.rescued += b.rescued;
    a.first = b.first < a.first ? b.first : a.first;
    a.gate_n += b.gate_n;
    if (b.worst_err > a.worst_err || (b.worst_err == a.worst_err && b.worst_idx < a.worst_idx)) {
        a.worst_err = b.worst_err;
        a.worst_idx = b.worst_idx;
    }
    a.max_abs = fmax(a.max_abs, b.max_abs);
    a.max_rel = fmax(a.max_rel, b.max_rel);
    a.ce2 += b.ce2;
    a.re2 += b.re2;
    a.t2 += b.t2;
}

__device__ __forceinline__ Acc shfl_down(const Acc& a, int off) {
    const unsigned m = 0xffffffffu;
    Acc b;
    b.fails = __shfl_down_sync(m, a.fails, off);
    b.nonfinite = __shfl_down_sync(m, a.nonfinite, off);
    b.rescued = __shfl_down_sync(m, a.rescued, off);
    b.first = __shfl_down_sync(m, a.first, off);
    b.gate_n = __shfl_down_sync(m, a.gate_n, off);
    b.worst_idx = __shfl_down_sync(m, a.worst_idx, off);
    b.max_abs = __shfl_down_sync(m, a.max_abs, off);
    b.max_rel = __shfl_down_sync(m, a.max_rel, off);
    b.ce2 = __shfl_down_sync(m, a.ce2, off);
    b.re2 = __shfl_down_sync(m, a.re2, off);
    b.t2 = __shfl_down_sync(m, a.t2, off);
    b.worst_err = __shfl_down_sync(m, a.worst_err, off);
    return b;
}

// A fixed reduction tree: the result depends on the grid, never on timing.
__device__ __forceinline__ void block_store(Acc a, Acc* out) {
    __shared__ Acc sh[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) {
        Acc b = shfl_down(a, off);
        combine(a, b);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        Acc s = sh[0];
        for (int w = 1; w < THREADS / 32; w++) combine(s, sh[w]);
        out[blockIdx.x] = s;
    }
}

template <class C, bool T>
__device__ __forceinline__ void scan_float(const void* cp, const void* rp, const double* tp,
                                           u64 n, const P& p, Acc* out) {
    Acc a;
    acc_init(a);
    const int V = C::V;
    const u64 nvec = n / V;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const uint4* cv = (const uint4*)cp;
    const uint4* rv = (const uint4*)rp;
#pragma unroll 1
    for (u64 v = tid; v < nvec; v += stride) {
        V16 cu, ru;
        cu.u = cv[v];
        ru.u = rv[v];
        double tv[V];
        if (T) {
            const double2* t2 = (const double2*)(tp + v * V);
#pragma unroll
            for (int k = 0; k < V / 2; k++) {
                double2 x = t2[k];
                tv[2 * k] = x.x;
                tv[2 * k + 1] = x.y;
            }
        }
        unsigned flags = 0;
#pragma unroll
        for (int k = 0; k < V; k++) {
            if (!fast<T>(a, v * V + k, C::get(cu, k), C::get(ru, k), T ? tv[k] : 0.0, p))
                flags |= 1u << k;
        }
        // Rare: re-read the few elements that need the full rules (no dynamic register
        // indexing, and the full rules are compiled once).
        while (flags) {
            int k = __ffs(flags) - 1;
            flags &= flags - 1;
            u64 i = v * V + k;
            slow<T>(a, i, C::at(cp, i), C::at(rp, i), T ? tp[i] : 0.0, p);
        }
    }
#pragma unroll 1
    for (u64 i = nvec * V + tid; i < n; i += stride) {
        double c = C::at(cp, i), r = C::at(rp, i), t = T ? tp[i] : 0.0;
        if (!fast<T>(a, i, c, r, t, p)) slow<T>(a, i, c, r, t, p);
    }
    block_store(a, out);
}

template <class C>
__device__ __forceinline__ void scan_int(const void* cp, const void* rp, u64 n, Acc* out) {
    Acc a;
    acc_init(a);
    const int V = C::V;
    const u64 nvec = n / V;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const uint4* cv = (const uint4*)cp;
    const uint4* rv = (const uint4*)rp;
#pragma unroll 1
    for (u64 v = tid; v < nvec; v += stride) {
        V16 cu, ru;
        cu.u = cv[v];
        ru.u = rv[v];
        unsigned flags = 0;
#pragma unroll
        for (int k = 0; k < V; k++) {
            if (C::get(cu, k) != C::get(ru, k)) flags |= 1u << k;
        }
        while (flags) {
            int k = __ffs(flags) - 1;
            flags &= flags - 1;
            u64 i = v * V + k;
            int_mismatch(a, i, C::at(cp, i), C::at(rp, i));
        }
    }
#pragma unroll 1
    for (u64 i = nvec * V + tid; i < n; i += stride) {
        i64 c = C::at(cp, i), r = C::at(rp, i);
        if (c != r) int_mismatch(a, i, c, r);
    }
    block_store(a, out);
}

#define FLOAT_KERNEL(NAME, CODEC, T)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        NAME(const void* c, const void* r, const double* t, u64 n, double atol, double rtol, \
             int rescue, double factor, double slack, double rel_scale, double abs_scale,    \
             Acc* out) {                                                                      \
        P p;                                                                                  \
        p.atol = atol; p.rtol = rtol; p.factor = factor; p.slack = slack;                     \
        p.rel_scale = rel_scale; p.abs_scale = abs_scale; p.rescue = rescue;                  \
        scan_float<CODEC, T>(c, r, t, n, p, out);                                             \
    }

FLOAT_KERNEL(devcmp_f64, F64, false)
FLOAT_KERNEL(devcmp_f64_t, F64, true)
FLOAT_KERNEL(devcmp_f32, F32, false)
FLOAT_KERNEL(devcmp_f32_t, F32, true)
FLOAT_KERNEL(devcmp_f16, F16, false)
FLOAT_KERNEL(devcmp_f16_t, F16, true)
FLOAT_KERNEL(devcmp_bf16, BF16, false)
FLOAT_KERNEL(devcmp_bf16_t, BF16, true)

#define INT_KERNEL(NAME, CODEC)                                                               \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        NAME(const void* c, const void* r, u64 n, Acc* out) {                                 \
        scan_int<CODEC>(c, r, n, out);                                                        \
    }

INT_KERNEL(devcmp_i64, I64)
INT_KERNEL(devcmp_i32, I32)
INT_KERNEL(devcmp_i16, I16)
INT_KERNEL(devcmp_i8, I8)
INT_KERNEL(devcmp_u8, U8)
INT_KERNEL(devcmp_bool, BOOL)
"#;

/// Every dtype's kernel: (dtype, with a float64 reference, entry point).
const KERNELS: [(Dtype, bool, &str); 14] = [
    (Dtype::F64, false, "devcmp_f64"),
    (Dtype::F64, true, "devcmp_f64_t"),
    (Dtype::F32, false, "devcmp_f32"),
    (Dtype::F32, true, "devcmp_f32_t"),
    (Dtype::F16, false, "devcmp_f16"),
    (Dtype::F16, true, "devcmp_f16_t"),
    (Dtype::Bf16, false, "devcmp_bf16"),
    (Dtype::Bf16, true, "devcmp_bf16_t"),
    (Dtype::I64, false, "devcmp_i64"),
    (Dtype::I32, false, "devcmp_i32"),
    (Dtype::I16, false, "devcmp_i16"),
    (Dtype::I8, false, "devcmp_i8"),
    (Dtype::U8, false, "devcmp_u8"),
    (Dtype::Bool, false, "devcmp_bool"),
];

/// Options that make the kernel's arithmetic the Rust code's: no contraction of `a·b + c`
/// into an FMA (it rounds once where Rust rounds twice), no flushing of subnormals, IEEE
/// division.
const NVRTC_OPTS: [&str; 4] = [
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
];

/// Whether libnvrtc can be loaded (cudarc panics calling into an absent library).
fn nvrtc_present() -> bool {
    // SAFETY: only probes for libnvrtc by its known names; loading runs the library's
    // initialisers, nothing else.
    #[allow(unsafe_code)]
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    present
}

/// Compiles the kernels to a CUBIN for `arch` (`sm_90`); also returns NVRTC's log.
///
/// A CUBIN, unlike PTX, loads on a driver older than NVRTC within the same CUDA major
/// version, and skips the driver's JIT.
fn compile_cubin(arch: &str, extra: &[&str]) -> std::result::Result<(Vec<u8>, String), String> {
    use cudarc::nvrtc::{result as nvrtc, sys as nvsys};
    let src = CString::new(KERNEL_SRC).map_err(|e| e.to_string())?;
    let name = CString::new("kbench_devcmp.cu").map_err(|e| e.to_string())?;
    let prog = nvrtc::create_program(&src, Some(&name)).map_err(|e| format!("{e:?}"))?;
    let mut opts: Vec<String> = vec![format!("--gpu-architecture={arch}")];
    opts.extend(NVRTC_OPTS.iter().map(|s| s.to_string()));
    opts.extend(extra.iter().map(|s| s.to_string()));
    // SAFETY: `prog` was created above and is destroyed only at the end of this function;
    // `src` and `name`, which it may reference, outlive it.
    #[allow(unsafe_code)]
    let compiled = unsafe { nvrtc::compile_program(prog, &opts) };
    // SAFETY: as above.
    #[allow(unsafe_code)]
    let log = unsafe { nvrtc::get_program_log(prog) }
        .map(|raw| {
            let bytes: Vec<u8> = raw
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let out = match compiled {
        Err(e) => Err(format!("NVRTC failed ({e:?}) for {arch}: {log}")),
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
            #[allow(unsafe_code)]
            let rc = unsafe { nvsys::nvrtcGetCUBINSize(prog, &mut size) };
            match rc.result() {
                Err(e) => Err(format!("nvrtcGetCUBINSize: {e:?}")),
                Ok(()) => {
                    let mut cubin = vec![0u8; size];
                    // SAFETY: `cubin` has the `size` bytes NVRTC asked for.
                    #[allow(unsafe_code)]
                    let rc = unsafe { nvsys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) };
                    rc.result()
                        .map(|()| (cubin, log))
                        .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))
                }
            }
        }
    };
    // SAFETY: `prog` is live and destroyed exactly once, here.
    #[allow(unsafe_code)]
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

/// [`compile_cubin`] once per architecture and process (NVRTC takes seconds; a machine
/// with eight GPUs of one kind compiles once).
fn cached_cubin(arch: &str) -> std::result::Result<Vec<u8>, String> {
    static CUBINS: Mutex<Vec<(String, Vec<u8>)>> = Mutex::new(Vec::new());
    let mut cache = CUBINS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, cubin)) = cache.iter().find(|(a, _)| a == arch) {
        return Ok(cubin.clone());
    }
    let (cubin, _) = compile_cubin(arch, &[])?;
    cache.push((arch.to_string(), cubin.clone()));
    Ok(cubin)
}

/// The kernels as PTX for NVRTC's default architecture (the driver JIT-compiles it).
fn compile_ptx() -> std::result::Result<Ptx, String> {
    let opts = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        name: Some("kbench_devcmp.cu".to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SRC, opts).map_err(|e| format!("{e}"))
}

struct Kernel {
    dtype: Dtype,
    truth: bool,
    func: CudaFunction,
    /// Resident blocks on the whole GPU: the grid of a large scan.
    max_blocks: u32,
}

/// The scan parameters (the CPU's `ScanParams` with its `Rescue`).
#[derive(Debug, Clone, Copy)]
struct Params {
    tol: Tolerance,
    rescue: Option<Rescue>,
}

#[derive(Debug, Clone, Copy)]
struct Rescue {
    factor: f64,
    slack: f64,
    rel_scale: f64,
    abs_scale: f64,
}

/// The folded statistics of one scan (the CPU's `ChunkStats`, plus the worst element).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stats {
    elementwise_failures: u64,
    nonfinite_mismatches: u64,
    rescued: u64,
    /// Lowest failing flat index, and whether it broke the NaN/Inf rule.
    first: Option<(u64, bool)>,
    gate_elements: u64,
    /// (flat index, |c − r64|) of the worst element, lowest index among equals.
    worst: Option<(u64, f64)>,
    max_abs: f64,
    max_rel: f64,
    cand_err2: f64,
    ref_err2: f64,
    truth2: f64,
}

impl Stats {
    const EMPTY: Stats = Stats {
        elementwise_failures: 0,
        nonfinite_mismatches: 0,
        rescued: 0,
        first: None,
        gate_elements: 0,
        worst: None,
        max_abs: 0.0,
        max_rel: 0.0,
        cand_err2: 0.0,
        ref_err2: 0.0,
        truth2: 0.0,
    };

    /// Folds the blocks' partial results, in block order.
    fn fold(partials: &[u8]) -> Stats {
        const NONE: u64 = u64::MAX;
        let mut fails = 0u64;
        let mut nonfinite = 0u64;
        let mut rescued = 0u64;
        let mut first = NONE;
        let mut gate_n = 0u64;
        let mut worst_idx = NONE;
        let mut worst_err = -1.0f64;
        let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
        let (mut ce2, mut re2, mut t2) = (0.0f64, 0.0f64, 0.0f64);
        for p in partials.chunks_exact(PARTIAL_BYTES) {
            let word = |k: usize| {
                let b: [u8; 8] = p[8 * k..8 * k + 8].try_into().expect("8 bytes");
                u64::from_le_bytes(b)
            };
            let float = |k: usize| f64::from_bits(word(k));
            fails += word(0);
            nonfinite += word(1);
            rescued += word(2);
            first = first.min(word(3));
            gate_n += word(4);
            let (idx, err) = (word(5), float(11));
            if err > worst_err || (err == worst_err && idx < worst_idx) {
                worst_err = err;
                worst_idx = idx;
            }
            max_abs = max_abs.max(float(6));
            max_rel = max_rel.max(float(7));
            ce2 += float(8);
            re2 += float(9);
            t2 += float(10);
        }
        Stats {
            elementwise_failures: fails,
            nonfinite_mismatches: nonfinite,
            rescued,
            first: (first != NONE).then_some((first >> 1, first & 1 == 1)),
            gate_elements: gate_n,
            worst: (worst_idx != NONE).then_some((worst_idx, worst_err)),
            max_abs,
            max_rel,
            cand_err2: ce2,
            ref_err2: re2,
            truth2: t2,
        }
    }
}

/// Compares output tensors on one GPU with the CPU comparator's rules (see the module
/// docs). Compiled once per GPU; [`DeviceComparator::compare`] may be called from several
/// threads (scans take turns on the one partials buffer).
pub struct DeviceComparator {
    gpu: Arc<Gpu>,
    kernels: Vec<Kernel>,
    /// One `Acc` per block of the largest grid.
    partials: Mutex<DevBuf>,
    _module: Arc<CudaModule>,
}

impl DeviceComparator {
    /// Compiles the kernels with NVRTC for `gpu` (a CUBIN for its architecture, else PTX
    /// for the driver to JIT) and allocates the partials buffer.
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        if !nvrtc_present() {
            bail!("the GPU comparator needs NVRTC, and libnvrtc.so could not be loaded");
        }
        gpu.ctx
            .bind_to_thread()
            .map_err(|e| anyhow!("binding GPU {}'s context: {e:?}", gpu.ordinal))?;
        let (major, minor) = gpu
            .ctx
            .compute_capability()
            .map_err(|e| anyhow!("compute capability of GPU {}: {e:?}", gpu.ordinal))?;
        let arch = format!("sm_{major}{minor}");
        let module = match cached_cubin(&arch) {
            Ok(cubin) => gpu
                .ctx
                .load_module(Ptx::from_binary(cubin))
                .map_err(|e| format!("loading the {arch} CUBIN: {e:?}")),
            Err(e) => Err(e),
        };
        let module = match module {
            Ok(m) => m,
            Err(cubin_err) => {
                let ptx = compile_ptx().map_err(|e| {
                    anyhow!("compiling the comparison kernels: {cubin_err}; as PTX: {e}")
                })?;
                gpu.ctx.load_module(ptx).map_err(|e| {
                    anyhow!(
                        "loading the comparison kernels on GPU {}: {cubin_err}; as PTX: {e:?}",
                        gpu.ordinal
                    )
                })?
            }
        };
        let sms = gpu
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| anyhow!("SM count of GPU {}: {e:?}", gpu.ordinal))?
            .max(1) as u32;
        let mut kernels = Vec::with_capacity(KERNELS.len());
        for (dtype, truth, name) in KERNELS {
            let func = module
                .load_function(name)
                .map_err(|e| anyhow!("loading kernel {name}: {e:?}"))?;
            let per_sm = func
                .occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)
                .map_err(|e| anyhow!("occupancy of kernel {name}: {e:?}"))?
                .max(1);
            kernels.push(Kernel {
                dtype,
                truth,
                func,
                max_blocks: sms * per_sm,
            });
        }
        let most = kernels.iter().map(|k| k.max_blocks).max().unwrap_or(1) as usize;
        let partials = gpu.alloc(most * PARTIAL_BYTES)?;
        Ok(Self {
            gpu: Arc::clone(gpu),
            kernels,
            partials: Mutex::new(partials),
            _module: module,
        })
    }

    /// Compares `candidate` with `reference` exactly as [`kbench_adversarial::compare`]
    /// compares host tensors. The outer `Err` is a CUDA failure or tensors that do not fit
    /// their buffers or this GPU; the inner result is the comparator's.
    pub fn compare(
        &self,
        candidate: &DevTensor,
        reference: &DevTensor,
        reference_f64: Option<&DevTensor>,
        profile: ToleranceProfile,
        precision: Precision,
    ) -> Result<std::result::Result<Comparison, CompareError>> {
        if let Some(r64) = reference_f64 {
            if r64.dtype != Dtype::F64 {
                return Ok(Err(CompareError::ReferenceF64Dtype(r64.dtype)));
            }
            if r64.shape != reference.shape {
                return Ok(Err(CompareError::ReferenceF64Shape {
                    expected: reference.shape.clone(),
                    got: r64.shape.clone(),
                }));
            }
        }
        if candidate.shape != reference.shape {
            return Ok(Ok(Comparison::WrongShape {
                expected: reference.shape.clone(),
                got: candidate.shape.clone(),
            }));
        }
        if candidate.dtype != reference.dtype {
            return Ok(Ok(Comparison::WrongDtype {
                expected: reference.dtype,
                got: candidate.dtype,
            }));
        }
        let dtype = reference.dtype;
        let numel = reference
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| anyhow!("shape {:?} overflows the element count", reference.shape))?;
        if usize::try_from(numel).is_err() {
            return Ok(Err(CompareError::TooLarge(numel)));
        }
        let is_float = dtype.is_float();
        let tol = if is_float {
            tolerance(profile, precision)
        } else {
            Tolerance::EXACT
        };
        let gate = float64_gate(precision);
        let strict = profile == ToleranceProfile::Strict;
        let truth = reference_f64.filter(|_| is_float);
        self.check_buffer("candidate", candidate, numel)?;
        self.check_buffer("reference", reference, numel)?;
        if let Some(t) = truth {
            self.check_buffer("float64 reference", t, numel)?;
        }
        let mut params = Params {
            tol,
            rescue: (strict && truth.is_some()).then_some(Rescue {
                factor: gate.element_factor,
                slack: tol.atol * gate.element_atol_scale,
                rel_scale: 0.0,
                abs_scale: 0.0,
            }),
        };
        let run = |params: &Params| {
            self.scan(
                dtype,
                candidate.buf,
                reference.buf,
                truth.map(|t| t.buf),
                numel,
                params,
            )
        };
        let mut stats = run(&params)?;
        // The CPU's second pass: elements the first pass could not rescue may be as far
        // from float64 as the reference typically is.
        if let Some(rescue) = params.rescue.as_mut() {
            if stats.elementwise_failures > 0 && stats.gate_elements > 0 {
                if stats.truth2 > 0.0 {
                    rescue.rel_scale = (stats.ref_err2 / stats.truth2).sqrt();
                } else {
                    rescue.abs_scale = (stats.ref_err2 / stats.gate_elements as f64).sqrt();
                }
                stats = run(&params)?;
            }
        }
        let shape = &reference.shape;
        let float64 = match truth {
            Some(_) => {
                let mut check = float64_check(&stats, gate, strict);
                if !check.passed {
                    check.worst_index = stats.worst.map(|(flat, _)| unravel_index(flat, shape));
                }
                Float64Status::Measured(check)
            }
            None if strict && is_float => Float64Status::Skipped,
            None => Float64Status::NotApplicable,
        };
        let first_mismatch = match stats.first {
            None => None,
            Some((flat, nonfinite)) => Some(ElementMismatch {
                flat_index: flat,
                index: unravel_index(flat, shape),
                rule: if nonfinite {
                    Rule::NanInfPosition
                } else {
                    Rule::Elementwise
                },
                candidate: self.element(candidate, flat)?,
                reference: self.element(reference, flat)?,
            }),
        };
        Ok(Ok(Comparison::Values(ValueReport {
            dtype,
            shape: shape.clone(),
            profile,
            tolerance: tol,
            elements: numel,
            mismatches: stats.elementwise_failures + stats.nonfinite_mismatches,
            nonfinite_mismatches: stats.nonfinite_mismatches,
            rescued: stats.rescued,
            max_abs: stats.max_abs,
            max_rel: stats.max_rel,
            first_mismatch,
            float64,
        })))
    }

    /// `t` lives on this GPU, its buffer holds `numel` elements, and it starts on a 16-byte
    /// boundary (the kernels read 16-byte vectors; `cuMemAlloc` aligns to 256).
    fn check_buffer(&self, what: &str, t: &DevTensor, numel: u64) -> Result<()> {
        if t.buf.gpu().ordinal != self.gpu.ordinal {
            bail!(
                "the {what} is on GPU {}, the comparator on GPU {}",
                t.buf.gpu().ordinal,
                self.gpu.ordinal
            );
        }
        let need = numel
            .checked_mul(t.dtype.size() as u64)
            .ok_or_else(|| anyhow!("the {what} of {numel} elements overflows"))?;
        if need > t.buf.nbytes() as u64 {
            bail!(
                "the {what} ({} {:?}) needs {need} bytes, its buffer has {}",
                t.dtype,
                t.shape,
                t.buf.nbytes()
            );
        }
        if !t.buf.ptr().is_multiple_of(16) {
            bail!("the {what}'s buffer is not 16-byte aligned");
        }
        Ok(())
    }

    /// Element `flat` of `t`, decoded on the host as the CPU comparator decodes it.
    fn element(&self, t: &DevTensor, flat: u64) -> Result<f64> {
        let size = t.dtype.size();
        let bytes = self
            .gpu
            .read(t.buf, flat as usize * size, size)
            .context("reading back the first mismatching element")?;
        Ok(decode(t.dtype, &bytes))
    }

    /// One pass over the tensors: a kernel, then the partials folded on the host.
    fn scan(
        &self,
        dtype: Dtype,
        cand: &DevBuf,
        refr: &DevBuf,
        truth: Option<&DevBuf>,
        numel: u64,
        p: &Params,
    ) -> Result<Stats> {
        if numel == 0 {
            return Ok(Stats::EMPTY);
        }
        let kernel = self
            .kernels
            .iter()
            .find(|k| k.dtype == dtype && k.truth == (truth.is_some() && dtype.is_float()))
            .ok_or_else(|| anyhow!("no comparison kernel for {dtype}"))?;
        let per_vector = (16 / dtype.size()) as u64;
        let blocks = (numel / per_vector)
            .div_ceil(u64::from(THREADS))
            .clamp(1, u64::from(kernel.max_blocks)) as u32;
        let partials = self
            .partials
            .lock()
            .map_err(|_| anyhow!("the comparator's partials buffer is poisoned"))?;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (c, r, t, out) = (
            cand.ptr(),
            refr.ptr(),
            truth.map_or(0, DevBuf::ptr),
            partials.ptr(),
        );
        let rescue = p.rescue.unwrap_or(Rescue {
            factor: 0.0,
            slack: 0.0,
            rel_scale: 0.0,
            abs_scale: 0.0,
        });
        let rescue_on = i32::from(p.rescue.is_some());
        let stream = &self.gpu.stream;
        let mut launch = stream.launch_builder(&kernel.func);
        if dtype.is_float() {
            launch
                .arg(&c)
                .arg(&r)
                .arg(&t)
                .arg(&numel)
                .arg(&p.tol.atol)
                .arg(&p.tol.rtol)
                .arg(&rescue_on)
                .arg(&rescue.factor)
                .arg(&rescue.slack)
                .arg(&rescue.rel_scale)
                .arg(&rescue.abs_scale)
                .arg(&out);
        } else {
            launch.arg(&c).arg(&r).arg(&numel).arg(&out);
        }
        // SAFETY: the float kernels take (const void* c, const void* r, const double* t,
        // u64 n, double atol, double rtol, int rescue, double factor, double slack,
        // double rel_scale, double abs_scale, Acc* out) and the integer kernels
        // (c, r, n, out), pushed above in that order with matching types. `c` and `r` hold
        // `numel` elements of `dtype` and `t` (float kernels with a float64 reference only)
        // `numel` f64s, 16-byte aligned (check_buffer); `out` holds one 96-byte Acc per block
        // of this grid (blocks ≤ max_blocks, the buffer was sized for the largest). The
        // partials lock is held until the results are read back.
        #[allow(unsafe_code)]
        unsafe { launch.launch(cfg) }.map_err(|e| {
            anyhow!(
                "launching {dtype} comparison on GPU {}: {e:?}",
                self.gpu.ordinal
            )
        })?;
        stream.synchronize().map_err(|e| {
            anyhow!(
                "running the {dtype} comparison on GPU {}: {e:?}",
                self.gpu.ordinal
            )
        })?;
        let bytes = self
            .gpu
            .read(&partials, 0, blocks as usize * PARTIAL_BYTES)?;
        Ok(Stats::fold(&bytes))
    }
}

/// The normwise part of the float64 gate, by the CPU comparator's own function.
fn float64_check(s: &Stats, gate: Float64Gate, enforced: bool) -> Float64Check {
    let sums = kbench_adversarial::GateSums {
        elements: s.gate_elements,
        cand_err2: s.cand_err2,
        ref_err2: s.ref_err2,
        truth2: s.truth2,
    };
    kbench_adversarial::float64_check_of(&sums, gate, enforced)
}

/// One little-endian element as f64 (integers above 2⁵³ rounded, as the CPU path does).
fn decode(dtype: Dtype, b: &[u8]) -> f64 {
    let arr = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    match dtype {
        Dtype::F64 => f64::from_le_bytes(arr(8)),
        Dtype::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::F16 => f16_to_f64(u16::from_le_bytes([b[0], b[1]])),
        Dtype::Bf16 => f64::from(f32::from_bits(
            u32::from(u16::from_le_bytes([b[0], b[1]])) << 16,
        )),
        Dtype::I64 => i64::from_le_bytes(arr(8)) as f64,
        Dtype::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
        Dtype::I8 => f64::from(b[0] as i8),
        Dtype::U8 => f64::from(b[0]),
        Dtype::Bool => f64::from(u8::from(b[0] != 0)),
    }
}

/// IEEE binary16 to f64, exactly.
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let man = f64::from(bits & 0x3ff);
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1024.0 + man) * 2f64.powi(e - 25),
    }
}

#[cfg(test)]
mod tests {
    //! Every test builds tensors on the host and compares them with the CPU comparator;
    //! with a GPU it uploads them and asserts that [`DeviceComparator::compare`] gives the
    //! same [`Comparison`] (float64-gate sums to a relative 1e-9). Without a GPU the GPU
    //! half is skipped (the CPU expectations, which check that each case exercises what it
    //! claims, still run).

    use std::sync::OnceLock;
    use std::time::Instant;

    use kbench_record::HostTensor;

    use super::*;

    const KB: ToleranceProfile = ToleranceProfile::KernelBench;
    const V01: ToleranceProfile = ToleranceProfile::KernelBenchV01;
    const STRICT: ToleranceProfile = ToleranceProfile::Strict;
    const PROFILES: [ToleranceProfile; 3] = [KB, V01, STRICT];
    const PRECISIONS: [Precision; 3] = [Precision::Fp32, Precision::Fp16, Precision::Bf16];
    const FLOATS: [Dtype; 4] = [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::F64];
    const INTS: [Dtype; 6] = [
        Dtype::I64,
        Dtype::I32,
        Dtype::I16,
        Dtype::I8,
        Dtype::U8,
        Dtype::Bool,
    ];

    /// splitmix64.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        /// Uniform in [0, 1).
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
        /// Uniform in [-1, 1).
        fn sym(&mut self) -> f64 {
            2.0 * self.unit() - 1.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn pick<T: Copy>(&mut self, from: &[T]) -> T {
            from[self.below(from.len() as u64) as usize]
        }
    }

    /// The comparator on GPU 0, built once per test process; `None` without a GPU.
    fn comparator() -> Option<&'static DeviceComparator> {
        static DC: OnceLock<Option<DeviceComparator>> = OnceLock::new();
        DC.get_or_init(|| {
            if crate::gpu::inventory().count() == 0 {
                return None;
            }
            let gpu = Gpu::open(0).expect("opening GPU 0");
            let name = cudarc::driver::result::device::get(0)
                .and_then(cudarc::driver::result::device::get_name)
                .unwrap_or_default();
            let started = Instant::now();
            let dc = DeviceComparator::new(&gpu).expect("building the device comparator");
            println!(
                "devcmp: comparator for {name} built in {:.0} ms",
                started.elapsed().as_secs_f64() * 1e3
            );
            Some(dc)
        })
        .as_ref()
    }

    /// The comparator, or `None` after printing that the GPU half of `test` is skipped.
    fn gpu_or_skip(test: &str) -> Option<&'static DeviceComparator> {
        let dc = comparator();
        if dc.is_none() {
            println!("devcmp::{test}: skipped on the GPU (no GPU); CPU expectations checked");
        }
        dc
    }

    fn precision_of(dtype: Dtype) -> Precision {
        match dtype {
            Dtype::F16 => Precision::Fp16,
            Dtype::Bf16 => Precision::Bf16,
            _ => Precision::Fp32,
        }
    }

    /// f32 to binary16 by truncation (any f16 value serves a test).
    fn f16_bits(x: f32) -> u16 {
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let a = x.abs();
        if x.is_nan() {
            sign | 0x7e00
        } else if a >= 65520.0 {
            sign | 0x7c00
        } else if a >= 6.103_515_6e-5 {
            let e = ((b >> 23) & 0xff) as u16 + 15 - 127;
            sign | (e << 10) | ((b >> 13) & 0x3ff) as u16
        } else {
            sign | (a / 5.960_464_5e-8) as u16
        }
    }

    fn encode(dtype: Dtype, v: &[f64]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match dtype {
                Dtype::F64 => x.to_le_bytes().to_vec(),
                Dtype::F32 => (x as f32).to_le_bytes().to_vec(),
                Dtype::F16 => f16_bits(x as f32).to_le_bytes().to_vec(),
                Dtype::Bf16 => (((x as f32).to_bits() >> 16) as u16).to_le_bytes().to_vec(),
                _ => unreachable!("not a float dtype"),
            })
            .collect()
    }

    fn floats(dtype: Dtype, shape: &[u64], v: &[f64]) -> HostTensor {
        HostTensor::new(dtype, shape.to_vec(), encode(dtype, v)).unwrap()
    }

    fn f64s(shape: &[u64], v: &[f64]) -> HostTensor {
        floats(Dtype::F64, shape, v)
    }

    /// Raw bit patterns (the low `size` bytes of each).
    fn bits(dtype: Dtype, shape: &[u64], v: &[u64]) -> HostTensor {
        let data = v
            .iter()
            .flat_map(|b| b.to_le_bytes()[..dtype.size()].to_vec())
            .collect();
        HostTensor::new(dtype, shape.to_vec(), data).unwrap()
    }

    fn ints(dtype: Dtype, shape: &[u64], v: &[i64]) -> HostTensor {
        bits(
            dtype,
            shape,
            &v.iter().map(|&x| x as u64).collect::<Vec<_>>(),
        )
    }

    fn dev<'a>(h: &HostTensor, buf: &'a DevBuf) -> DevTensor<'a> {
        DevTensor {
            buf,
            dtype: h.dtype(),
            shape: h.shape().to_vec(),
        }
    }

    fn same_f64(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Equal up to summation order: relative difference at most 1e-9 (or both NaN, as when
    /// a sum overflows to inf and the error is inf/inf).
    fn close(a: f64, b: f64) -> bool {
        same_f64(a, b) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    /// Field by field: everything identical except the float64 gate's errors and bound,
    /// which come from float sums and may differ by summation order.
    fn assert_same(
        got: &std::result::Result<Comparison, CompareError>,
        want: &std::result::Result<Comparison, CompareError>,
        what: &str,
    ) {
        let (g, w) = match (got, want) {
            (Ok(Comparison::Values(g)), Ok(Comparison::Values(w))) => (g, w),
            _ => {
                assert_eq!(got, want, "{what}");
                return;
            }
        };
        let ctx = format!("{what}\n  gpu: {g:?}\n  cpu: {w:?}");
        assert_eq!(g.dtype, w.dtype, "dtype: {ctx}");
        assert_eq!(g.shape, w.shape, "shape: {ctx}");
        assert_eq!(g.profile, w.profile, "profile: {ctx}");
        assert_eq!(g.tolerance, w.tolerance, "tolerance: {ctx}");
        assert_eq!(g.elements, w.elements, "elements: {ctx}");
        assert_eq!(g.mismatches, w.mismatches, "mismatches: {ctx}");
        assert_eq!(
            g.nonfinite_mismatches, w.nonfinite_mismatches,
            "nonfinite: {ctx}"
        );
        assert_eq!(g.rescued, w.rescued, "rescued: {ctx}");
        assert!(same_f64(g.max_abs, w.max_abs), "max_abs: {ctx}");
        assert!(same_f64(g.max_rel, w.max_rel), "max_rel: {ctx}");
        match (&g.first_mismatch, &w.first_mismatch) {
            (None, None) => {}
            (Some(a), Some(b)) => {
                assert_eq!(a.flat_index, b.flat_index, "first index: {ctx}");
                assert_eq!(a.index, b.index, "first multi-index: {ctx}");
                assert_eq!(a.rule, b.rule, "first rule: {ctx}");
                assert!(same_f64(a.candidate, b.candidate), "first c: {ctx}");
                assert!(same_f64(a.reference, b.reference), "first r: {ctx}");
            }
            _ => panic!("first mismatch: {ctx}"),
        }
        match (&g.float64, &w.float64) {
            (Float64Status::Measured(a), Float64Status::Measured(b)) => {
                assert_eq!(a.enforced, b.enforced, "gate enforced: {ctx}");
                assert_eq!(a.measure, b.measure, "gate measure: {ctx}");
                assert_eq!(a.elements, b.elements, "gate elements: {ctx}");
                assert!(close(a.candidate_error, b.candidate_error), "gate c: {ctx}");
                assert!(close(a.reference_error, b.reference_error), "gate r: {ctx}");
                assert!(close(a.bound, b.bound), "gate bound: {ctx}");
                assert_eq!(a.passed, b.passed, "gate verdict: {ctx}");
                assert_eq!(a.worst_index, b.worst_index, "worst index: {ctx}");
                assert_eq!(a.gate, b.gate, "gate: {ctx}");
            }
            (a, b) => assert_eq!(a, b, "float64 status: {ctx}"),
        }
        assert_eq!(g.failed_rule(), w.failed_rule(), "verdict: {ctx}");
        assert_eq!(g.passed(), w.passed(), "verdict: {ctx}");
    }

    /// The CPU comparison of these tensors; with a GPU, asserts the device comparison is
    /// the same.
    fn check(
        dc: Option<&DeviceComparator>,
        c: &HostTensor,
        r: &HostTensor,
        t: Option<&HostTensor>,
        profile: ToleranceProfile,
        precision: Precision,
    ) -> std::result::Result<Comparison, CompareError> {
        let cpu = kbench_adversarial::compare(c, r, t, profile, precision);
        if let Some(dc) = dc {
            let up = |h: &HostTensor| dc.gpu.upload(h.data()).expect("uploading a tensor");
            let (cb, rb, tb) = (up(c), up(r), t.map(up));
            let td = t.zip(tb.as_ref()).map(|(h, b)| dev(h, b));
            let gpu = dc
                .compare(&dev(c, &cb), &dev(r, &rb), td.as_ref(), profile, precision)
                .expect("the device comparison ran");
            let what = format!(
                "{} {:?} vs {} {:?}, float64 reference {}, {profile} at {precision}",
                c.dtype(),
                c.shape(),
                r.dtype(),
                r.shape(),
                t.is_some()
            );
            assert_same(&gpu, &cpu, &what);
        }
        cpu
    }

    fn values(res: &std::result::Result<Comparison, CompareError>) -> ValueReport {
        match res {
            Ok(Comparison::Values(v)) => v.clone(),
            other => panic!("expected a value report, got {other:?}"),
        }
    }

    #[test]
    fn kernels_compile_with_nvrtc() {
        if !nvrtc_present() {
            println!("devcmp::kernels_compile_with_nvrtc: skipped (libnvrtc not found)");
            return;
        }
        let (cubin, log) =
            compile_cubin("sm_90", &["--ptxas-options=-v"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(cubin.starts_with(b"\x7fELF"), "a CUBIN is an ELF image");
        for line in log
            .lines()
            .filter(|l| l.contains("registers") || l.contains("spill") || l.contains("entry"))
        {
            println!("devcmp: ptxas: {line}");
        }
        let ptx = compile_ptx().unwrap_or_else(|e| panic!("{e}"));
        let src = ptx.to_src();
        for (_, _, name) in KERNELS {
            assert!(src.contains(name), "{name} in the PTX");
        }
        // No contraction: the tolerance test must round like the Rust code.
        assert!(!src.contains("fma.rn.f64"), "no f64 FMA in the PTX");
    }

    #[test]
    fn host_decoding_matches_the_encodings() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert_eq!(f16_to_f64(0x7bff), 65504.0);
        assert_eq!(f16_to_f64(0xfc00), f64::NEG_INFINITY);
        assert!(f16_to_f64(0x7e00).is_nan());
        assert!(f16_to_f64(0x8000).is_sign_negative());
        assert_eq!(f16_bits(1.5), 0x3e00);
        assert_eq!(f16_bits(2f32.powi(-24)), 0x0001);
        assert_eq!(decode(Dtype::Bf16, &0x3f80u16.to_le_bytes()), 1.0);
        assert_eq!(decode(Dtype::I8, &[0xff]), -1.0);
        assert_eq!(decode(Dtype::U8, &[0xff]), 255.0);
        assert_eq!(decode(Dtype::Bool, &[7]), 1.0);
        assert_eq!(
            decode(Dtype::I64, &i64::MIN.to_le_bytes()),
            -(2f64.powi(63))
        );
    }

    #[test]
    fn exact_matches() {
        let dc = gpu_or_skip("exact_matches");
        let mut rng = Rng(1);
        for dtype in FLOATS {
            for n in [1usize, 17, 1000, 4099] {
                let v: Vec<f64> = (0..n).map(|_| 4.0 * rng.sym()).collect();
                let r = floats(dtype, &[n as u64], &v);
                let t = f64s(&[n as u64], &v);
                for profile in PROFILES {
                    for truth in [None, Some(&t)] {
                        let res = check(dc, &r, &r, truth, profile, precision_of(dtype));
                        let v = values(&res);
                        assert!(v.passed(), "{v:?}");
                        assert_eq!((v.mismatches, v.max_abs, v.max_rel), (0, 0.0, 0.0));
                    }
                }
            }
        }
    }

    #[test]
    fn noise_around_the_tolerance() {
        let dc = gpu_or_skip("noise_around_the_tolerance");
        let mut rng = Rng(2);
        let n = 100_003usize;
        for dtype in FLOATS {
            for precision in PRECISIONS {
                for profile in PROFILES {
                    let tol = tolerance(profile, precision);
                    for factor in [0.5, 1.5] {
                        let t: Vec<f64> = (0..n).map(|_| 2.0 * rng.sym()).collect();
                        let c: Vec<f64> = t
                            .iter()
                            .map(|&x| x + factor * tol.atol * rng.sym() * (1.0 + x.abs()))
                            .collect();
                        let (ct, rt, tt) = (
                            floats(dtype, &[n as u64], &c),
                            floats(dtype, &[n as u64], &t),
                            f64s(&[n as u64], &t),
                        );
                        for truth in [None, Some(&tt)] {
                            let v = values(&check(dc, &ct, &rt, truth, profile, precision));
                            assert!(v.max_abs > 0.0 && v.max_rel > 0.0);
                            if factor > 1.0 && dtype != Dtype::Bf16 {
                                assert!(v.mismatches + v.rescued > 0, "{v:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn single_mismatch_at_first_and_last_element() {
        let dc = gpu_or_skip("single_mismatch_at_first_and_last_element");
        let mut rng = Rng(3);
        let n = 1_000_003usize;
        let t: Vec<f64> = (0..n).map(|_| 2.0 * rng.sym()).collect();
        let tt = f64s(&[n as u64], &t);
        for dtype in FLOATS {
            let rt = floats(dtype, &[n as u64], &t);
            for at in [0, n - 1] {
                let mut c = t.clone();
                c[at] += 1.0;
                let ct = floats(dtype, &[n as u64], &c);
                for profile in PROFILES {
                    for truth in [None, Some(&tt)] {
                        let res = check(dc, &ct, &rt, truth, profile, precision_of(dtype));
                        let v = values(&res);
                        assert_eq!(v.mismatches, 1, "{v:?}");
                        let m = v.first_mismatch.as_ref().unwrap();
                        assert_eq!((m.flat_index, m.rule), (at as u64, Rule::Elementwise));
                    }
                }
            }
        }
        // Multi-dimensional, and mismatches in the middle of a large tensor (the lowest
        // index wins whichever thread finds it).
        let shape = [7u64, 11, 13, 1000];
        let m = shape.iter().product::<u64>() as usize;
        let t: Vec<f64> = (0..m).map(|_| rng.sym()).collect();
        let mut c = t.clone();
        for i in [987_654usize, 500_001, 500_000, 3] {
            c[i] = -c[i] - 1.0;
        }
        c[700_000] = f64::NAN;
        for dtype in FLOATS {
            let res = check(
                dc,
                &floats(dtype, &shape, &c),
                &floats(dtype, &shape, &t),
                None,
                KB,
                precision_of(dtype),
            );
            let v = values(&res);
            assert_eq!((v.mismatches, v.nonfinite_mismatches), (5, 1));
            assert_eq!(v.first_mismatch.unwrap().index, vec![0, 0, 0, 3]);
        }
    }

    #[test]
    fn nan_and_inf_positions() {
        let dc = gpu_or_skip("nan_and_inf_positions");
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        // (candidate, reference, passes)
        let cases = [
            (nan, nan, true),
            (nan, 1.0, false),
            (1.0, nan, false),
            (inf, inf, true),
            (-inf, -inf, true),
            (inf, -inf, false),
            (-inf, inf, false),
            (inf, 1.0, false),
            (1.0, -inf, false),
            (nan, inf, false),
            (-inf, nan, false),
            (-nan, nan, true),
        ];
        let mut rng = Rng(4);
        let n = 37usize;
        for dtype in FLOATS {
            for (cv, rv, passes) in cases {
                let t: Vec<f64> = (0..n).map(|_| rng.sym()).collect();
                let (mut c, mut r) = (t.clone(), t.clone());
                // One among the 16-byte vectors, one in the tail of every dtype.
                for i in [5, 35] {
                    c[i] = cv;
                    r[i] = rv;
                }
                let (ct, rt) = (
                    floats(dtype, &[n as u64], &c),
                    floats(dtype, &[n as u64], &r),
                );
                let tt = f64s(&[n as u64], &t);
                for profile in PROFILES {
                    for truth in [None, Some(&tt)] {
                        let res = check(dc, &ct, &rt, truth, profile, precision_of(dtype));
                        let v = values(&res);
                        assert_eq!(v.passed(), passes, "{cv} vs {rv}: {v:?}");
                        if !passes {
                            assert_eq!((v.mismatches, v.nonfinite_mismatches), (2, 2));
                            let m = v.first_mismatch.unwrap();
                            assert_eq!((m.flat_index, m.rule), (5, Rule::NanInfPosition));
                        }
                    }
                }
            }
            // Both rules in one tensor, and a non-finite float64 reference (the element is
            // left out of the gate; an elementwise failure there cannot be rescued).
            let t: Vec<f64> = (0..300).map(|_| rng.sym()).collect();
            let (mut c, r) = (t.clone(), t.clone());
            c[40] = nan;
            c[20] += 0.5;
            c[260] += 0.5;
            c[299] = -inf;
            let mut t64 = t.clone();
            t64[20] = nan;
            t64[100] = inf;
            let (ct, rt, tt) = (
                floats(dtype, &[300], &c),
                floats(dtype, &[300], &r),
                f64s(&[300], &t64),
            );
            for profile in PROFILES {
                let res = check(dc, &ct, &rt, Some(&tt), profile, precision_of(dtype));
                let v = values(&res);
                assert_eq!((v.mismatches, v.nonfinite_mismatches), (4, 2), "{v:?}");
                assert_eq!(v.first_mismatch.unwrap().flat_index, 20);
            }
        }
    }

    #[test]
    fn zero_reference_and_signed_zeros() {
        let dc = gpu_or_skip("zero_reference_and_signed_zeros");
        for dtype in FLOATS {
            let r = [0.0, 0.0, 1.0, -0.0, 2.0];
            let c = [1e-6, 0.0, 1.0, 0.0, 2.0];
            let res = check(
                dc,
                &floats(dtype, &[5], &c),
                &floats(dtype, &[5], &r),
                None,
                KB,
                Precision::Fp32,
            );
            let v = values(&res);
            assert!(v.passed() && v.max_rel == f64::INFINITY, "{v:?}");
            let res = check(
                dc,
                &floats(dtype, &[5], &[-0.0, 0.0, 1.0, 0.0, 2.0]),
                &floats(dtype, &[5], &r),
                None,
                KB,
                Precision::Fp32,
            );
            let v = values(&res);
            assert!(v.passed() && v.max_rel == 0.0 && v.max_abs == 0.0, "{v:?}");
        }
        for dtype in INTS {
            let res = check(
                dc,
                &ints(dtype, &[3], &[1, 0, 1]),
                &ints(dtype, &[3], &[1, 0, 0]),
                None,
                STRICT,
                Precision::Fp32,
            );
            let v = values(&res);
            assert_eq!(
                (v.mismatches, v.max_rel, v.max_abs),
                (1, f64::INFINITY, 1.0)
            );
        }
    }

    #[test]
    fn subnormals_are_not_flushed() {
        let dc = gpu_or_skip("subnormals_are_not_flushed");
        let n = 1001u64;
        for dtype in FLOATS {
            // The smallest subnormals of each dtype: reference k, candidate 2k + 1 ulps.
            let max_sub = match dtype {
                Dtype::F16 => 0x3ff,
                Dtype::Bf16 => 0x7f,
                _ => 0xfffff,
            };
            let r: Vec<u64> = (0..n).map(|k| (k * 7919) % max_sub).collect();
            let c: Vec<u64> = r.iter().map(|&k| (2 * k + 1).min(max_sub)).collect();
            let (ct, rt) = (bits(dtype, &[n], &c), bits(dtype, &[n], &r));
            let v = values(&check(dc, &ct, &rt, None, KB, Precision::Fp32));
            assert!(v.passed() && v.max_abs > 0.0 && v.max_rel >= 1.0, "{v:?}");
            // A float64 reference of subnormals: Σ r64² underflows to 0, so the gate
            // measures the rms error.
            let tt = bits(Dtype::F64, &[n], &r);
            for profile in PROFILES {
                let v = values(&check(dc, &ct, &rt, Some(&tt), profile, Precision::Fp32));
                assert!(matches!(v.float64, Float64Status::Measured(_)));
            }
        }
    }

    /// Tensors where the reference is off from float64 by `ref_err·tol` (relative) and the
    /// candidate is exact, except at `special` indices: there the reference is exact and the
    /// candidate off by `special_err·tol`.
    fn rescue_case(
        dtype: Dtype,
        precision: Precision,
        n: usize,
        zero_truth: bool,
        special: &[usize],
        special_err: f64,
    ) -> (HostTensor, HostTensor, HostTensor) {
        let tol = tolerance(STRICT, precision).atol;
        let mut rng = Rng(5 + n as u64);
        let mut t = Vec::with_capacity(n);
        let (mut c, mut r) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let sign = if rng.next() & 1 == 0 { -1.0 } else { 1.0 };
            let x = if zero_truth {
                0.0
            } else {
                sign * (0.5 + rng.unit())
            };
            let s = if rng.next() & 1 == 0 { -1.0 } else { 1.0 };
            t.push(x);
            c.push(x);
            r.push(if zero_truth {
                s * 10.0 * tol
            } else {
                x * (1.0 + s * 10.0 * tol)
            });
        }
        for &i in special {
            r[i] = t[i];
            c[i] = if zero_truth {
                special_err * tol
            } else {
                t[i] * (1.0 + special_err * tol)
            };
        }
        let shape = [n as u64];
        (
            floats(dtype, &shape, &c),
            floats(dtype, &shape, &r),
            f64s(&shape, &t),
        )
    }

    #[test]
    fn strict_rescues_elements_in_both_passes() {
        let dc = gpu_or_skip("strict_rescues_elements_in_both_passes");
        let n = 4099;
        let special = [0usize, 1, 77, 2048, 4096, 4098];
        for dtype in FLOATS {
            let precision = precision_of(dtype);
            for zero_truth in [false, true] {
                // Specials off by 5·tol: rescued only by the second pass's ρ term.
                let (c, r, t) = rescue_case(dtype, precision, n, zero_truth, &special, 5.0);
                let v = values(&check(dc, &c, &r, Some(&t), STRICT, precision));
                assert_eq!((v.mismatches, v.rescued), (0, n as u64), "{dtype}: {v:?}");
                assert!(v.passed(), "{v:?}");
                // Without the gate, every element fails.
                let v = values(&check(dc, &c, &r, Some(&t), KB, precision));
                assert_eq!((v.mismatches, v.rescued), (n as u64, 0));
                let v = values(&check(dc, &c, &r, None, STRICT, precision));
                assert_eq!(v.float64, Float64Status::Skipped);
                // Specials off by 50·tol: beyond any rescue.
                let (c, r, t) = rescue_case(dtype, precision, n, zero_truth, &special, 50.0);
                let v = values(&check(dc, &c, &r, Some(&t), STRICT, precision));
                assert_eq!(
                    (v.mismatches, v.rescued),
                    (special.len() as u64, (n - special.len()) as u64),
                    "{dtype}: {v:?}"
                );
                assert_eq!(v.first_mismatch.unwrap().flat_index, 0);
            }
        }
    }

    #[test]
    fn failing_float64_gate_locates_the_worst_element() {
        let dc = gpu_or_skip("failing_float64_gate_locates_the_worst_element");
        let shape = [7u64, 11, 53];
        let n = shape.iter().product::<u64>() as usize;
        let mut rng = Rng(6);
        // Exact in every float dtype: multiples of 2⁻¹⁰ below 1/4, candidate 2⁻¹⁴ above
        // (within 1e-4 elementwise, a relative L2 error of ≈ 4e-4 against float64).
        let t: Vec<f64> = (0..n)
            .map(|_| (rng.below(513) as f64 - 256.0) / 1024.0)
            .collect();
        let step = 2f64.powi(-14);
        let mut c: Vec<f64> = t.iter().map(|x| x + step).collect();
        let mut r = t.clone();
        // Element 0 is NaN in both (passes, left out of the gate): with every error equal,
        // the worst element is the lowest index among the rest.
        c[0] = f64::NAN;
        r[0] = f64::NAN;
        for dtype in [Dtype::F32, Dtype::F64] {
            let (ct, rt, tt) = (
                floats(dtype, &shape, &c),
                floats(dtype, &shape, &r),
                f64s(&shape, &t),
            );
            let v = values(&check(dc, &ct, &rt, Some(&tt), STRICT, Precision::Fp32));
            assert_eq!(v.mismatches, 0);
            assert_eq!(v.failed_rule(), Some(Rule::Float64Gate), "{v:?}");
            match &v.float64 {
                Float64Status::Measured(g) => {
                    assert_eq!(g.worst_index, Some(vec![0, 0, 1]));
                    assert_eq!(g.elements, n as u64 - 1);
                }
                other => panic!("{other:?}"),
            }
            // Not enforced under kernelbench, but still measured and explained.
            let v = values(&check(dc, &ct, &rt, Some(&tt), KB, Precision::Fp32));
            assert!(v.passed());
            assert!(
                matches!(&v.float64, Float64Status::Measured(g) if !g.passed && g.worst_index.is_some())
            );
        }
        // One element further off: it is the worst wherever it is.
        for at in [1usize, 2000, n - 1] {
            let mut c2 = c.clone();
            c2[at] = t[at] + step + 2f64.powi(-16);
            let (ct, rt, tt) = (
                floats(Dtype::F32, &shape, &c2),
                floats(Dtype::F32, &shape, &r),
                f64s(&shape, &t),
            );
            let v = values(&check(dc, &ct, &rt, Some(&tt), STRICT, Precision::Fp32));
            match &v.float64 {
                Float64Status::Measured(g) => {
                    assert_eq!(g.worst_index, Some(unravel_index(at as u64, &shape)));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn shape_dtype_and_reference_errors() {
        let dc = gpu_or_skip("shape_dtype_and_reference_errors");
        let a = floats(Dtype::F32, &[2, 3], &[1.0; 6]);
        let b = floats(Dtype::F32, &[3, 2], &[1.0; 6]);
        let h = floats(Dtype::F16, &[2, 3], &[1.0; 6]);
        let t = f64s(&[2, 3], &[1.0; 6]);
        let t_wrong_shape = f64s(&[6], &[1.0; 6]);
        let t_wrong_dtype = floats(Dtype::F32, &[2, 3], &[1.0; 6]);
        assert!(matches!(
            check(dc, &b, &a, None, KB, Precision::Fp32),
            Ok(Comparison::WrongShape { .. })
        ));
        assert!(matches!(
            check(dc, &h, &a, Some(&t), STRICT, Precision::Fp32),
            Ok(Comparison::WrongDtype { .. })
        ));
        // The float64 reference is checked first: a harness fault, whatever the candidate.
        assert!(matches!(
            check(dc, &b, &a, Some(&t_wrong_shape), STRICT, Precision::Fp32),
            Err(CompareError::ReferenceF64Shape { .. })
        ));
        assert!(matches!(
            check(dc, &h, &a, Some(&t_wrong_dtype), KB, Precision::Fp32),
            Err(CompareError::ReferenceF64Dtype(Dtype::F32))
        ));
        let i = ints(Dtype::I64, &[2, 3], &[1; 6]);
        assert!(matches!(
            check(dc, &i, &a, None, KB, Precision::Fp32),
            Ok(Comparison::WrongDtype { .. })
        ));
        if let Some(dc) = dc {
            // A buffer too small for its shape is a harness fault (the outer error).
            let buf = dc.gpu.upload(&[0u8; 8]).unwrap();
            let small = DevTensor {
                buf: &buf,
                dtype: Dtype::F32,
                shape: vec![4],
            };
            let err = dc.compare(&small, &small, None, KB, Precision::Fp32);
            assert!(err.is_err(), "{err:?}");
        }
    }

    #[test]
    fn empty_tensors() {
        let dc = gpu_or_skip("empty_tensors");
        for shape in [vec![0u64], vec![4, 0, 3]] {
            let t = f64s(&shape, &[]);
            for dtype in [Dtype::F32, Dtype::Bf16, Dtype::F64, Dtype::I64, Dtype::Bool] {
                let e = HostTensor::new(dtype, shape.clone(), vec![]).unwrap();
                for profile in PROFILES {
                    for truth in [None, Some(&t)] {
                        let v = values(&check(dc, &e, &e, truth, profile, Precision::Fp32));
                        assert!(v.passed() && v.elements == 0, "{v:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn sizes_around_vector_and_block_boundaries() {
        let dc = gpu_or_skip("sizes_around_vector_and_block_boundaries");
        let mut rng = Rng(7);
        let sizes = [
            1usize, 2, 7, 8, 9, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 65537, 1_000_003,
        ];
        for n in sizes {
            let t: Vec<f64> = (0..n).map(|_| rng.sym()).collect();
            let mut c = t.clone();
            c[n - 1] += 0.25;
            let shape = [n as u64];
            for dtype in FLOATS {
                let (ct, rt) = (floats(dtype, &shape, &c), floats(dtype, &shape, &t));
                let v = values(&check(dc, &ct, &rt, None, KB, precision_of(dtype)));
                assert_eq!(v.first_mismatch.unwrap().flat_index, n as u64 - 1);
            }
            let ic: Vec<i64> = t.iter().map(|x| (x * 100.0) as i64).collect();
            let (mut ic, mut ir) = (ic.clone(), ic);
            ic[n - 1] = 0;
            ir[n - 1] = 1;
            for dtype in INTS {
                let v = values(&check(
                    dc,
                    &ints(dtype, &shape, &ic),
                    &ints(dtype, &shape, &ir),
                    None,
                    V01,
                    Precision::Fp32,
                ));
                assert_eq!(v.mismatches, 1, "{dtype} {n}");
            }
        }
        // A scalar (shape []).
        let s = floats(Dtype::F32, &[], &[1.0]);
        let s2 = floats(Dtype::F32, &[], &[2.0]);
        let v = values(&check(dc, &s2, &s, None, KB, Precision::Fp32));
        assert_eq!(v.first_mismatch.unwrap().index, Vec::<u64>::new());
    }

    #[test]
    fn integers_and_bools_are_exact() {
        let dc = gpu_or_skip("integers_and_bools_are_exact");
        let mut rng = Rng(8);
        let n = 100_003usize;
        let t = f64s(&[n as u64], &vec![0.0; n]);
        for dtype in INTS {
            let r: Vec<i64> = (0..n).map(|_| rng.next() as i64).collect();
            let rt = ints(dtype, &[n as u64], &r);
            let v = values(&check(dc, &rt, &rt, Some(&t), STRICT, Precision::Fp32));
            assert!(v.passed() && v.float64 == Float64Status::NotApplicable);
            let mut c = r.clone();
            for _ in 0..20 {
                let i = rng.below(n as u64) as usize;
                c[i] = c[i].wrapping_add(1 + rng.below(3) as i64);
            }
            let v = values(&check(
                dc,
                &ints(dtype, &[n as u64], &c),
                &rt,
                None,
                KB,
                Precision::Fp32,
            ));
            assert!(v.mismatches > 0 && v.max_abs >= 1.0, "{dtype}: {v:?}");
        }
        // Extremes: |i64::MIN − i64::MAX| = 2⁶⁴ − 1, values above 2⁵³ rounded to f64.
        let c = [i64::MIN, 0, 7, i64::MAX, (1 << 53) + 1];
        let r = [i64::MAX, 5, 0, i64::MIN, (1 << 53) + 3];
        let v = values(&check(
            dc,
            &ints(Dtype::I64, &[5], &c),
            &ints(Dtype::I64, &[5], &r),
            None,
            KB,
            Precision::Fp32,
        ));
        assert_eq!(v.mismatches, 5);
        assert_eq!(v.max_abs, 2f64.powi(64));
        assert_eq!(v.max_rel, f64::INFINITY);
        // Bools: any non-zero byte is true.
        let c = [0u64, 1, 2, 255, 0, 1];
        let r = [0u64, 1, 1, 1, 1, 0];
        let v = values(&check(
            dc,
            &bits(Dtype::Bool, &[6], &c),
            &bits(Dtype::Bool, &[6], &r),
            None,
            KB,
            Precision::Fp32,
        ));
        assert_eq!(v.mismatches, 2);
        assert_eq!(v.first_mismatch.unwrap().flat_index, 4);
    }

    /// Random tensors with random special values, sizes, shapes, profiles, precisions and
    /// float64 references.
    #[test]
    fn random_mixtures_match_the_cpu() {
        let dc = gpu_or_skip("random_mixtures_match_the_cpu");
        let specials = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1e-40,
            -3e-42,
            5e-324,
            1e-310,
            1e30,
            -3.4e38,
            65504.0,
            1e300,
        ];
        const SEEDS: u64 = 320;
        let mut failing = 0;
        for seed in 0..SEEDS {
            let mut rng = Rng(1000 + seed);
            let dtype = rng.pick(&FLOATS);
            let n = match rng.below(4) {
                0 => 1 + rng.below(20),
                1 => 1 + rng.below(2000),
                2 => 1 + rng.below(70_000),
                _ => 1 + rng.below(400_000),
            } as usize;
            let shape: Vec<u64> = if n.is_multiple_of(6) {
                vec![2, 3, n as u64 / 6]
            } else if n.is_multiple_of(2) {
                vec![n as u64 / 2, 2]
            } else {
                vec![n as u64]
            };
            let precision = rng.pick(&PRECISIONS);
            let profile = rng.pick(&PROFILES);
            let tol = tolerance(profile, precision).atol;
            let scale = 10f64.powi(rng.below(7) as i32 - 3);
            let noise = tol * rng.pick(&[0.0, 0.1, 0.5, 1.0, 2.0, 10.0]);
            let ref_err = tol * rng.pick(&[0.0, 0.1, 1.0, 10.0]);
            let p_special = rng.pick(&[0.0, 1e-4, 1e-2, 0.2]);
            let mut t = Vec::with_capacity(n);
            let (mut c, mut r) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                let x = scale * rng.sym();
                t.push(x);
                r.push(x + ref_err * rng.sym() * x.abs().max(1.0));
                c.push(x + noise * rng.sym() * x.abs().max(1.0));
            }
            for i in 0..n {
                if rng.unit() < p_special {
                    let s = rng.pick(&specials);
                    match rng.below(5) {
                        0 => c[i] = s,
                        1 => r[i] = s,
                        2 => t[i] = s,
                        3 => {
                            c[i] = s;
                            r[i] = s;
                        }
                        _ => {
                            c[i] = s;
                            r[i] = s;
                            t[i] = s;
                        }
                    }
                }
            }
            let (ct, rt, tt) = (
                floats(dtype, &shape, &c),
                floats(dtype, &shape, &r),
                f64s(&shape, &t),
            );
            let truth = (rng.below(3) > 0).then_some(&tt);
            let res = check(dc, &ct, &rt, truth, profile, precision);
            failing += u64::from(!values(&res).passed());
        }
        // The mixture is worth its time only if it has both verdicts.
        assert!(
            (SEEDS / 8..SEEDS * 7 / 8).contains(&failing),
            "{failing} of {SEEDS} failed"
        );
    }

    /// Prints the device comparator's throughput on 256 MiB fp32 tensors.
    #[test]
    fn throughput_256mib_fp32() {
        let Some(dc) = comparator() else {
            println!("devcmp::throughput_256mib_fp32: skipped (no GPU)");
            return;
        };
        let n = (256usize << 20) / 4;
        let mut rng = Rng(9);
        let mut t = Vec::with_capacity(n);
        let (mut c, mut r) = (Vec::with_capacity(4 * n), Vec::with_capacity(4 * n));
        for _ in 0..n {
            let x = rng.sym();
            let y = x as f32;
            let noise = (rng.next() % 64) as f32 * 1e-6;
            t.extend_from_slice(&x.to_le_bytes());
            r.extend_from_slice(&y.to_le_bytes());
            c.extend_from_slice(&(y + noise).to_le_bytes());
        }
        let shape = vec![n as u64];
        let ct = HostTensor::new(Dtype::F32, shape.clone(), c).unwrap();
        let rt = HostTensor::new(Dtype::F32, shape.clone(), r).unwrap();
        let tt = HostTensor::new(Dtype::F64, shape.clone(), t).unwrap();
        let (cb, rb, tb) = (
            dc.gpu.upload(ct.data()).unwrap(),
            dc.gpu.upload(rt.data()).unwrap(),
            dc.gpu.upload(tt.data()).unwrap(),
        );
        let (cd, rd, td) = (dev(&ct, &cb), dev(&rt, &rb), dev(&tt, &tb));
        for (profile, truth) in [(KB, None), (STRICT, Some(&td))] {
            let bytes = (8 + if truth.is_some() { 8 } else { 0 }) * n;
            let run = || {
                dc.compare(&cd, &rd, truth, profile, Precision::Fp32)
                    .expect("device comparison")
            };
            let got = run();
            // Deterministic: fixed grid, fixed reduction tree, float sums included.
            assert_eq!(run(), got, "two runs of one comparison");
            let started = Instant::now();
            let want =
                kbench_adversarial::compare(&ct, &rt, truth.map(|_| &tt), profile, Precision::Fp32);
            let cpu_s = started.elapsed().as_secs_f64();
            assert_same(&got, &want, &format!("256 MiB fp32, {profile}"));
            let reps = 20;
            let started = Instant::now();
            for _ in 0..reps {
                let _ = std::hint::black_box(run());
            }
            let s = started.elapsed().as_secs_f64() / reps as f64;
            println!(
                "devcmp: 256 MiB fp32 ({n} elements), {profile}{}: {:.3} ms per comparison, {:.0} GB/s over {} MiB read (CPU comparator here: {:.1} ms, {:.1} GB/s)",
                if truth.is_some() { " with float64 reference" } else { "" },
                s * 1e3,
                bytes as f64 / s / 1e9,
                bytes >> 20,
                cpu_s * 1e3,
                bytes as f64 / cpu_s / 1e9,
            );
        }
    }

    /// The size the comparator is built for: 1.6 billion fp32 elements (6.4 GB a tensor),
    /// filled on the device; all equal, then all wrong (every element through the full
    /// rules). Also the fixed cost of a one-element comparison.
    #[test]
    fn throughput_1_6_billion_fp32() {
        let Some(dc) = comparator() else {
            println!("devcmp::throughput_1_6_billion_fp32: skipped (no GPU)");
            return;
        };
        let one = floats(Dtype::F32, &[1], &[1.0]);
        let ob = dc.gpu.upload(one.data()).unwrap();
        let od = dev(&one, &ob);
        let reps = 200;
        let started = Instant::now();
        for _ in 0..reps {
            let _ = std::hint::black_box(dc.compare(&od, &od, None, KB, Precision::Fp32));
        }
        println!(
            "devcmp: one-element comparison: {:.1} us",
            started.elapsed().as_secs_f64() / reps as f64 * 1e6
        );
        let n: u64 = 1_600_000_000;
        let bytes = 4 * n as usize;
        let (free, _) = dc.gpu.mem_info().unwrap();
        if free < 2 * bytes + (1 << 30) {
            println!("devcmp::throughput_1_6_billion_fp32: skipped ({free} bytes free)");
            return;
        }
        let (cb, rb) = (dc.gpu.alloc(bytes).unwrap(), dc.gpu.alloc(bytes).unwrap());
        let shape = vec![n];
        let cd = DevTensor {
            buf: &cb,
            dtype: Dtype::F32,
            shape: shape.clone(),
        };
        let rd = DevTensor {
            buf: &rb,
            dtype: Dtype::F32,
            shape: shape.clone(),
        };
        // The same comparison on 1,000 host elements gives every statistic but the counts.
        let small = |byte: u8| HostTensor::new(Dtype::F32, vec![1000], vec![byte; 4000]).unwrap();
        for (what, cbyte, rbyte) in [("all equal", 0x3f, 0x3f), ("all wrong", 0x3f, 0x3e)] {
            dc.gpu.fill(&cb, cbyte).unwrap();
            dc.gpu.fill(&rb, rbyte).unwrap();
            let mut s = f64::INFINITY;
            let mut got = None;
            for _ in 0..3 {
                let started = Instant::now();
                got = Some(dc.compare(&cd, &rd, None, KB, Precision::Fp32).unwrap());
                s = s.min(started.elapsed().as_secs_f64());
            }
            let got = got.unwrap();
            let want = kbench_adversarial::compare(
                &small(cbyte),
                &small(rbyte),
                None,
                KB,
                Precision::Fp32,
            );
            let (mut g, w) = (values(&got), values(&want));
            assert_eq!(g.elements, n);
            let wrong = if cbyte == rbyte { 0 } else { n };
            assert_eq!(g.mismatches, wrong, "{what}");
            g.elements = w.elements;
            g.mismatches = w.mismatches;
            g.shape = w.shape.clone();
            if let Some(m) = g.first_mismatch.as_mut() {
                m.index = vec![m.flat_index];
            }
            assert_same(&Ok(Comparison::Values(g)), &want, what);
            println!(
                "devcmp: 1.6e9 fp32 elements, {what}: {:.1} ms, {:.0} GB/s over {} MiB read",
                s * 1e3,
                (2 * bytes) as f64 / s / 1e9,
                (2 * bytes) >> 20
            );
        }
    }
}
