
typedef unsigned long long u64;
typedef long long i64;

#define THREADS 256
#define NONE 0xffffffffffffffffULL
#define INF __longlong_as_double(0x7ff0000000000000LL)
// The CPU scan's REL_SLACK.
#define REL_SLACK (1.0 + 1e-12)

// Element rule codes packed beside the flat index (the adversarial crate's Rule::code):
// 0 elementwise, 1 nonfinite-invented, 2 drops-nan, 3 drops-inf, 4 inf-sign, 5 nan-inf-kind.
#define R_INVENTED 1
#define R_DROPS_NAN 2
#define R_DROPS_INF 3
#define R_INF_SIGN 4
#define R_NAN_INF_KIND 5
// nonfinite_rule's answers besides those: passes, or accepted as a reference artefact.
#define R_PASS 0
#define R_ARTEFACT 8

// One thread's (then one block's) statistics. Layout read by the host: 8 u64, 8 double.
struct Acc {
    u64 fails;      // finite pairs outside tolerance, not rescued
    u64 nonfinite;  // NaN/Inf rule failures
    u64 rescued;
    u64 first;      // lowest failing flat index * 8 + rule code, NONE if none
    u64 gate_n;     // elements where c, r and r64 are all finite
    u64 worst_idx;  // argmax |c - r64| over those, lowest index among equals
    u64 artefacts;  // nan-inf: finite candidates accepted against the probe reference
    u64 first_art;  // lowest flat index of those, NONE if none
    double max_abs;
    double max_rel;
    double ce2;     // sum (c - r64)^2
    double re2;     // sum (r - r64)^2
    double t2;      // sum r64^2
    double worst_err;
    double tol_needed;  // max |c - r| / (1 + |r|) over finite pairs (and artefacts vs probe)
    double we2;     // sum (c - r64)^2 over the elements within tolerance
};
static_assert(sizeof(Acc) == 128, "Acc layout");

struct P {
    double atol, rtol, factor, slack, rel_scale, abs_scale, own_rel, own_abs;
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
    a.artefacts = 0; a.first_art = NONE;
    a.max_abs = 0.0; a.max_rel = 0.0; a.ce2 = 0.0; a.re2 = 0.0; a.t2 = 0.0; a.we2 = 0.0; a.worst_err = -1.0;
    a.tol_needed = 0.0;
}

__device__ __forceinline__ void fail(Acc& a, u64 i, int rule) {
    if (rule != 0) a.nonfinite++; else a.fails++;
    u64 key = (i << 3) | (u64)rule;
    if (key < a.first) a.first = key;
}

// The CPU's update_rel: divides only where the maximum may grow; exactly max fl(d/|r|).
__device__ __forceinline__ void upd_rel(double& m, double d, double ra) {
    if (d * REL_SLACK > m * ra) {
        double rel = d / ra;
        if (rel > m) m = rel;
    }
}

// The CPU's update_tol_needed: max fl(d / fl(1 + |r|)), dividing only where it may grow.
__device__ __forceinline__ void upd_tn(double& m, double d, double ra) {
    double q = 1.0 + ra;
    if (d * REL_SLACK > m * q) {
        double tn = d / q;
        if (tn > m) m = tn;
    }
}

// The NaN/Inf rules (the CPU's judge_nonfinite), for an element where c or r is not
// finite: R_PASS, R_ARTEFACT, or a failed rule's code. `has_alt`: a probe reference is
// given (nan-inf family), `al` its value here (NaN where the element depends on the
// injected non-finite inputs).
__device__ __forceinline__ int nonfinite_rule(double c, double r, bool has_alt, double al,
                                              const P& p) {
    if (is_finite(r)) return R_INVENTED;
    bool by_alt = has_alt && is_finite(al) && is_finite(c) &&
                  fabs(c - al) <= p.atol + p.rtol * fabs(al);
    if (is_nan(r)) {
        if (is_nan(c)) return R_PASS;
        if (!is_finite(c)) return has_alt ? R_PASS : R_NAN_INF_KIND;
        return by_alt ? R_ARTEFACT : R_DROPS_NAN;
    }
    if (c == r) return R_PASS;
    if (c == -r) return R_INF_SIGN;
    if (is_nan(c)) return has_alt ? R_PASS : R_NAN_INF_KIND;
    return by_alt ? R_ARTEFACT : R_DROPS_INF;
}

__device__ __forceinline__ void gate_add(Acc& a, u64 i, double c, double r, double t,
                                         bool within) {
    double ec = c - t, er = r - t;
    a.gate_n++;
    a.ce2 += ec * ec;
    if (within) a.we2 += ec * ec;
    a.re2 += er * er;
    a.t2 += t * t;
    double err = fabs(ec);
    if (err > a.worst_err || (err == a.worst_err && i < a.worst_idx)) {
        a.worst_err = err;
        a.worst_idx = i;
    }
}

// The common case, decided without a division: both finite, within tolerance, no new
// max_rel or tol_needed, finite float64 reference. Returns false, having changed nothing,
// otherwise.
template <bool T>
__device__ __forceinline__ bool fast(Acc& a, u64 i, double c, double r, double t, const P& p) {
    double d = fabs(c - r), ra = fabs(r);
    bool ok = (d <= p.atol + p.rtol * ra) & (ra != INF) & !(d * REL_SLACK > a.max_rel * ra) &
              !(d * REL_SLACK > a.tol_needed * (1.0 + ra));
    if (T) ok = ok & is_finite(t);
    if (ok) {
        a.max_abs = fmax(a.max_abs, d);
        if (T) gate_add(a, i, c, r, t, true);
    }
    return ok;
}

// The full rules for one element (the CPU's Scanner::element and slow_element); `al` is
// the probe reference's value when `has_alt`.
template <bool T>
__device__ void slow(Acc& a, u64 i, double c, double r, double t, bool has_alt, double al,
                     const P& p) {
    if (!is_finite(r) || !is_finite(c)) {
        int rule = nonfinite_rule(c, r, has_alt, al, p);
        if (rule == R_ARTEFACT) {
            a.artefacts++;
            if (i < a.first_art) a.first_art = i;
            upd_tn(a.tol_needed, fabs(c - al), fabs(al));
        } else if (rule != R_PASS) {
            fail(a, i, rule);
        }
        return;
    }
    double d = fabs(c - r), ra = fabs(r);
    a.max_abs = fmax(a.max_abs, d);
    upd_rel(a.max_rel, d, ra);
    upd_tn(a.tol_needed, d, ra);
    bool within = d <= p.atol + p.rtol * ra;
    if (T && is_finite(t)) {
        gate_add(a, i, c, r, t, within);
        if (within) return;
        bool rescued = false;
        if (p.rescue) {
            // The CPU's Rescue::accepts, operation for operation.
            double ta = fabs(t);
            double reference = p.rel_scale * ta + p.abs_scale;
            double spread = p.own_rel * ta + p.own_abs;
            rescued = fabs(c - t) <= p.factor * fmax(fabs(r - t), fmax(reference, spread)) + p.slack;
        }
        if (rescued) a.rescued++; else fail(a, i, 0);
    } else if (!within) {
        fail(a, i, 0);
    }
}

__device__ __forceinline__ void int_mismatch(Acc& a, u64 i, i64 c, i64 r) {
    // |c - r| fits a u64 (at most 2^64 - 1); the conversions round to nearest, as Rust's.
    u64 diff = c > r ? (u64)c - (u64)r : (u64)r - (u64)c;
    u64 rabs = r < 0 ? 0ULL - (u64)r : (u64)r;
    double d = (double)diff, ra = (double)rabs;
    a.max_abs = fmax(a.max_abs, d);
    upd_rel(a.max_rel, d, ra);
    upd_tn(a.tol_needed, d, ra);
    fail(a, i, 0);
}

__device__ __forceinline__ void combine(Acc& a, const Acc& b) {
    a.fails += b.fails;
    a.nonfinite += b.nonfinite;
    a.rescued += b.rescued;
    a.first = b.first < a.first ? b.first : a.first;
    a.gate_n += b.gate_n;
    a.artefacts += b.artefacts;
    a.first_art = b.first_art < a.first_art ? b.first_art : a.first_art;
    if (b.worst_err > a.worst_err || (b.worst_err == a.worst_err && b.worst_idx < a.worst_idx)) {
        a.worst_err = b.worst_err;
        a.worst_idx = b.worst_idx;
    }
    a.max_abs = fmax(a.max_abs, b.max_abs);
    a.max_rel = fmax(a.max_rel, b.max_rel);
    a.tol_needed = fmax(a.tol_needed, b.tol_needed);
    a.ce2 += b.ce2;
    a.re2 += b.re2;
    a.t2 += b.t2;
    a.we2 += b.we2;
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
    b.artefacts = __shfl_down_sync(m, a.artefacts, off);
    b.first_art = __shfl_down_sync(m, a.first_art, off);
    b.max_abs = __shfl_down_sync(m, a.max_abs, off);
    b.max_rel = __shfl_down_sync(m, a.max_rel, off);
    b.ce2 = __shfl_down_sync(m, a.ce2, off);
    b.re2 = __shfl_down_sync(m, a.re2, off);
    b.t2 = __shfl_down_sync(m, a.t2, off);
    b.we2 = __shfl_down_sync(m, a.we2, off);
    b.worst_err = __shfl_down_sync(m, a.worst_err, off);
    b.tol_needed = __shfl_down_sync(m, a.tol_needed, off);
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

// `ap`: the probe reference (nan-inf family), same dtype as c and r, or null. Read only
// where an element takes the full rules.
template <class C, bool T>
__device__ __forceinline__ void scan_float(const void* cp, const void* rp, const double* tp,
                                           const void* ap, u64 n, const P& p, Acc* out) {
    const bool has_alt = ap != 0;
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
            slow<T>(a, i, C::at(cp, i), C::at(rp, i), T ? tp[i] : 0.0, has_alt,
                    has_alt ? C::at(ap, i) : 0.0, p);
        }
    }
#pragma unroll 1
    for (u64 i = nvec * V + tid; i < n; i += stride) {
        double c = C::at(cp, i), r = C::at(rp, i), t = T ? tp[i] : 0.0;
        if (!fast<T>(a, i, c, r, t, p))
            slow<T>(a, i, c, r, t, has_alt, has_alt ? C::at(ap, i) : 0.0, p);
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
        NAME(const void* c, const void* r, const double* t, const void* alt, u64 n,          \
             double atol, double rtol, int rescue, double factor, double slack,              \
             double rel_scale, double abs_scale, double own_rel, double own_abs,             \
             Acc* out) {                                                                     \
        P p;                                                                                  \
        p.atol = atol; p.rtol = rtol; p.factor = factor; p.slack = slack;                     \
        p.rel_scale = rel_scale; p.abs_scale = abs_scale; p.rescue = rescue;                  \
        p.own_rel = own_rel; p.own_abs = own_abs;                                             \
        scan_float<CODEC, T>(c, r, t, alt, n, p, out);                                        \
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

// The denormal family's flush count (the adversarial crate's flush_count_bytes): reference
// values subnormal in their dtype (nonzero, |r| below `tiny`, its smallest normal) and, of
// those, candidate values exactly zero (either sign). NaN is never subnormal. Each block
// writes its two counts to out[2 * block], out[2 * block + 1]; the host adds them.
__device__ __forceinline__ void flush_store(u64 sub, u64 zeroed, u64* out) {
    __shared__ u64 sh[2 * (THREADS / 32)];
    for (int off = 16; off > 0; off >>= 1) {
        sub += __shfl_down_sync(0xffffffffu, sub, off);
        zeroed += __shfl_down_sync(0xffffffffu, zeroed, off);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sh[2 * warp] = sub;
        sh[2 * warp + 1] = zeroed;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 s = 0, z = 0;
        for (int w = 0; w < THREADS / 32; w++) {
            s += sh[2 * w];
            z += sh[2 * w + 1];
        }
        out[2 * blockIdx.x] = s;
        out[2 * blockIdx.x + 1] = z;
    }
}

// The candidate is read only where the reference is subnormal.
template <class C>
__device__ __forceinline__ void flush_scan(const void* cp, const void* rp, u64 n, double tiny,
                                           u64* out) {
    u64 sub = 0, zeroed = 0;
    const int V = C::V;
    const u64 nvec = n / V;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const uint4* cv = (const uint4*)cp;
    const uint4* rv = (const uint4*)rp;
#pragma unroll 1
    for (u64 v = tid; v < nvec; v += stride) {
        V16 ru;
        ru.u = rv[v];
        unsigned flags = 0;
#pragma unroll
        for (int k = 0; k < V; k++) {
            double r = C::get(ru, k);
            if (r != 0.0 && fabs(r) < tiny) flags |= 1u << k;
        }
        if (flags) {
            V16 cu;
            cu.u = cv[v];
#pragma unroll
            for (int k = 0; k < V; k++) {
                if ((flags >> k) & 1u) {
                    sub++;
                    if (C::get(cu, k) == 0.0) zeroed++;
                }
            }
        }
    }
#pragma unroll 1
    for (u64 i = nvec * V + tid; i < n; i += stride) {
        double r = C::at(rp, i);
        if (r != 0.0 && fabs(r) < tiny) {
            sub++;
            if (C::at(cp, i) == 0.0) zeroed++;
        }
    }
    flush_store(sub, zeroed, out);
}

// The smallest normal values: 2^-1022, 2^-126 (f32 and bf16), 2^-14, each exact.
#define FLUSH_KERNEL(NAME, CODEC, TINY)                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
        NAME(const void* c, const void* r, u64 n, u64* out) {                                 \
        flush_scan<CODEC>(c, r, n, TINY, out);                                                \
    }

FLUSH_KERNEL(devflush_f64, F64, 2.2250738585072014e-308)
FLUSH_KERNEL(devflush_f32, F32, 1.1754943508222875e-38)
FLUSH_KERNEL(devflush_f16, F16, 6.103515625e-05)
FLUSH_KERNEL(devflush_bf16, BF16, 1.1754943508222875e-38)
