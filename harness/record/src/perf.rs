//! Hardware feedback as plain data: a GPU's peak rates (from a per-architecture table), the
//! roofline verdict for one profiled kernel, and a problem's speed of light.
//!
//! Everything here is arithmetic on numbers the caller supplies, so the agents (Judge and
//! profile tools), the reports and the integrity checks can all call it without a GPU:
//!
//! - [`ArchRates::for_cc`] + [`Peaks::from_rates`]: peak FLOP/s per precision and DRAM bytes/s.
//! - [`roofline`]: a [`KernelCounters`] (what ncu measured for one kernel, per call) and the
//!   [`Peaks`] give a [`RooflineVerdict`] (intensity, fractions of peak, [`Bound`], evidence).
//! - [`speed_of_light`]: a [`ProblemCost`] (FLOPs and bytes a problem must at least move) and
//!   the [`Peaks`] give a [`SpeedOfLight`]: the minimum time any kernel can take;
//!   [`SpeedOfLight::ratio`] says how far a measured time is from it, and
//!   [`SpeedOfLight::is_impossible`] flags a time below it.

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// Per-architecture table.

/// Dense (no structured sparsity) operations per clock per SM, for one architecture.
///
/// One FMA counts as 2 FLOPs. Peak FLOP/s = rate × SMs × clock, so the table works for any
/// SKU of an architecture (the SM count and clock come from the driver). Figures were
/// derived from NVIDIA's published whitepaper/datasheet peaks divided by SMs × boost clock
/// and cross-checked against the per-SM unit counts in the whitepapers:
///
/// - sm80 (A100): "NVIDIA A100 Tensor Core GPU Architecture" whitepaper (2020), Table 1/3:
///   64 FP32 and 32 FP64 lanes per SM; 3rd-gen tensor core 256 FP16 FMA/clk × 4 per SM →
///   2048 FLOP/clk/SM; A100 SXM 108 SMs × 1410 MHz → 19.5 TF FP32, 9.7 FP64, 19.5 FP64 TC,
///   156 TF32, 312 FP16/BF16, 624 INT8 TOPS.
/// - sm86 (GA10x: A10, A40, RTX 30): "NVIDIA Ampere GA102 GPU Architecture" whitepaper:
///   128 FP32 lanes per SM, 2 FP64 (1/64 rate); tensor cores at half GA100's per-SM rate:
///   A40 84 SMs × 1740 MHz → 37.4 TF FP32, 149.7 TF FP16 dense, 74.8 TF32, 299 INT8.
///   (GeForce cards run FP16 with FP32 accumulate at half this rate; the table gives the
///   professional parts' full rate, i.e. an upper bound.)
/// - sm89 (Ada: L40S, L4, RTX 40): "NVIDIA Ada GPU Architecture" whitepaper and the L40S
///   datasheet: 142 SMs × 2520 MHz → 91.6 TF FP32, 362 TF FP16/BF16 dense, 183 TF32,
///   733 FP8, 733 INT8, FP64 1/64 of FP32.
/// - sm90 (H100/H200): "NVIDIA H100 Tensor Core GPU Architecture" whitepaper (2022), Tables
///   2-3: 128 FP32 and 64 FP64 lanes per SM, tensor core twice A100's per-SM rate
///   (4096 FP16 FLOP/clk/SM); H100 SXM5 132 SMs: 66.9 TF FP32 and 33.5 FP64 at 1980 MHz,
///   989.4 TF FP16/BF16 dense, 494.7 TF32, 1979 FP8/INT8 at 1830 MHz. NVIDIA quotes tensor
///   figures at a lower "max boost clock for tensor core usage" (Table 3: 1830 MHz SXM5 of
///   1980, 1620 MHz PCIe of 1755: both 0.924 of the max clock): `tensor_clock_ratio`.
///   See also https://forums.developer.nvidia.com/t/how-to-calculate-the-tensor-core-fp16-performance-of-h100/244727
/// - sm100 (B200/GB200): "NVIDIA Blackwell Architecture Technical Brief" and the HGX B200
///   datasheet: tensor core twice Hopper's per-SM rate (2.25 PF FP16/BF16 dense, 4.5 PF
///   FP8/INT8 dense on 148 SMs), FP32 128 lanes/SM, FP64 ~40 TF → 128 FLOP/clk/SM (FP64
///   tensor at the same rate). The datasheet does not state the clock behind its figures.
/// - sm120 (RTX 50, RTX PRO Blackwell): "NVIDIA RTX Blackwell GPU Architecture" whitepaper:
///   RTX 5090 170 SMs × 2407 MHz → 104.8 TF FP32, 419 TF FP16 dense (FP16 accumulate; FP32
///   accumulate halved on GeForce), 105 TF32, 838 FP8/INT8; FP64 1/64 of FP32.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ArchRates {
    /// e.g. "Hopper (sm90)".
    pub arch: &'static str,
    pub fp64: f64,
    pub fp64_tensor: f64,
    pub fp32: f64,
    pub tf32_tensor: f64,
    /// FP16 and BF16 tensor rates are equal on every architecture in the table.
    pub fp16_tensor: f64,
    /// None where the architecture has no FP8 tensor path (Ampere).
    pub fp8_tensor: Option<f64>,
    pub int8_tensor: f64,
    /// Clock at which tensor peaks hold, as a fraction of the reported max SM clock (1.0
    /// except Hopper; see above).
    pub tensor_clock_ratio: f64,
}

impl ArchRates {
    /// The table row for a compute capability, or None for one kbench has no figures for
    /// (Volta, Turing, Jetson parts and anything newer than the table).
    pub fn for_cc(major: i32, minor: i32) -> Option<ArchRates> {
        let r = |arch,
                 fp64,
                 fp64_tensor,
                 fp32,
                 tf32_tensor,
                 fp16_tensor,
                 fp8_tensor,
                 int8_tensor,
                 tensor_clock_ratio| ArchRates {
            arch,
            fp64,
            fp64_tensor,
            fp32,
            tf32_tensor,
            fp16_tensor,
            fp8_tensor,
            int8_tensor,
            tensor_clock_ratio,
        };
        Some(match (major, minor) {
            (8, 0) => r(
                "Ampere (sm80)",
                64.0,
                128.0,
                128.0,
                1024.0,
                2048.0,
                None,
                4096.0,
                1.0,
            ),
            (8, 6) => r(
                "Ampere (sm86)",
                4.0,
                4.0,
                256.0,
                512.0,
                1024.0,
                None,
                2048.0,
                1.0,
            ),
            (8, 9) => r(
                "Ada (sm89)",
                4.0,
                4.0,
                256.0,
                512.0,
                1024.0,
                Some(2048.0),
                2048.0,
                1.0,
            ),
            (9, 0) => r(
                "Hopper (sm90)",
                128.0,
                256.0,
                256.0,
                2048.0,
                4096.0,
                Some(8192.0),
                8192.0,
                1830.0 / 1980.0,
            ),
            (10, 0) | (10, 3) => r(
                "Blackwell (sm100)",
                128.0,
                128.0,
                256.0,
                4096.0,
                8192.0,
                Some(16384.0),
                16384.0,
                1.0,
            ),
            (12, 0) | (12, 1) => r(
                "Blackwell (sm120)",
                4.0,
                4.0,
                256.0,
                512.0,
                1024.0,
                Some(2048.0),
                2048.0,
                1.0,
            ),
            _ => return None,
        })
    }
}

/// A GPU's peak rates: FLOP/s (or OP/s for INT8) per precision and DRAM bytes/s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// The table row's name, e.g. "Hopper (sm90)"; "custom" when built by hand.
    pub arch: String,
    pub fp64: f64,
    pub fp64_tensor: f64,
    pub fp32: f64,
    pub tf32_tensor: f64,
    pub fp16_tensor: f64,
    pub bf16_tensor: f64,
    #[serde(default)]
    pub fp8_tensor: Option<f64>,
    pub int8_tensor: f64,
    /// Theoretical DRAM bandwidth, bytes/s (2 × memory clock × bus width).
    pub dram_bytes_per_s: f64,
    /// The SM clock the vector peaks assume, MHz (the driver's max boost clock).
    pub sm_clock_mhz: f64,
    /// The clock the tensor peaks assume, MHz.
    pub tensor_clock_mhz: f64,
    pub sms: u32,
}

impl Peaks {
    /// Peaks from a table row, the SM count, the max SM clock (MHz) and the DRAM bandwidth.
    pub fn from_rates(r: &ArchRates, sms: u32, sm_clock_mhz: f64, dram_bytes_per_s: f64) -> Self {
        let vec = sms as f64 * sm_clock_mhz * 1e6;
        let tensor_clock_mhz = sm_clock_mhz * r.tensor_clock_ratio;
        let ten = sms as f64 * tensor_clock_mhz * 1e6;
        Peaks {
            arch: r.arch.to_string(),
            fp64: r.fp64 * vec,
            // FP64 tensor peaks are quoted at the full clock (H100: 66.9 TF at 1980 MHz).
            fp64_tensor: r.fp64_tensor * vec,
            fp32: r.fp32 * vec,
            tf32_tensor: r.tf32_tensor * ten,
            fp16_tensor: r.fp16_tensor * ten,
            bf16_tensor: r.fp16_tensor * ten,
            fp8_tensor: r.fp8_tensor.map(|x| x * ten),
            int8_tensor: r.int8_tensor * ten,
            dram_bytes_per_s,
            sm_clock_mhz,
            tensor_clock_mhz,
            sms,
        }
    }

    /// The peak for a precision class.
    pub fn flops(&self, p: FlopClass) -> Option<f64> {
        match p {
            FlopClass::Fp64 => Some(self.fp64),
            FlopClass::Fp32 => Some(self.fp32),
            // Scalar half-precision (HADD/HMUL/HFMA2): counted against the FP32 peak × 2
            // (packed half2), the rate on Hopper and Ada; an upper bound elsewhere is fine
            // for a roofline.
            FlopClass::Fp16 => Some(self.fp32 * 2.0),
            FlopClass::Fp64Tensor => Some(self.fp64_tensor),
            FlopClass::Tf32Tensor => Some(self.tf32_tensor),
            FlopClass::Fp16Tensor => Some(self.fp16_tensor),
            FlopClass::Bf16Tensor => Some(self.bf16_tensor),
            FlopClass::Fp8Tensor => self.fp8_tensor,
            FlopClass::Int8Tensor => Some(self.int8_tensor),
        }
    }

    /// One line per peak, for `kbench gpus` and the agents' GPU description.
    pub fn describe(&self) -> String {
        let t = |x: f64| format!("{:.1}", x / 1e12);
        format!(
            "{}: FP64 {} TF (tensor {}), FP32 {} TF, TF32 {} TF, FP16/BF16 {} TF, FP8 {}, INT8 {} TOPS (dense; tensor at {:.0} MHz, vector at {:.0} MHz); DRAM {:.0} GB/s",
            self.arch,
            t(self.fp64),
            t(self.fp64_tensor),
            t(self.fp32),
            t(self.tf32_tensor),
            t(self.fp16_tensor),
            self.fp8_tensor.map_or("-".to_string(), |x| format!("{} TF", t(x))),
            t(self.int8_tensor),
            self.tensor_clock_mhz,
            self.sm_clock_mhz,
            self.dram_bytes_per_s / 1e9
        )
    }
}

/// A precision class of floating-point (or integer tensor) work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlopClass {
    Fp64,
    Fp32,
    Fp16,
    Fp64Tensor,
    Tf32Tensor,
    Fp16Tensor,
    Bf16Tensor,
    Fp8Tensor,
    Int8Tensor,
}

impl std::fmt::Display for FlopClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FlopClass::Fp64 => "fp64",
            FlopClass::Fp32 => "fp32",
            FlopClass::Fp16 => "fp16",
            FlopClass::Fp64Tensor => "fp64 tensor",
            FlopClass::Tf32Tensor => "tf32 tensor",
            FlopClass::Fp16Tensor => "fp16 tensor",
            FlopClass::Bf16Tensor => "bf16 tensor",
            FlopClass::Fp8Tensor => "fp8 tensor",
            FlopClass::Int8Tensor => "int8 tensor",
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Roofline verdict for one kernel.

/// What a profiler measured for one kernel, averaged per call (one launch).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KernelCounters {
    /// Kernel duration, seconds (ncu `gpu__time_duration.sum`).
    pub duration_s: f64,
    pub dram_read_bytes: f64,
    pub dram_write_bytes: f64,
    /// FLOPs by precision class (FMA = 2).
    pub flops: std::collections::BTreeMap<FlopClass, f64>,
    /// Achieved occupancy, % of the SM's warp slots (ncu `sm__warps_active...pct`).
    #[serde(default)]
    pub achieved_occupancy_pct: Option<f64>,
    /// Threads per block and blocks in the grid, where known.
    #[serde(default)]
    pub block_threads: Option<u64>,
    #[serde(default)]
    pub grid_blocks: Option<u64>,
}

impl KernelCounters {
    pub fn dram_bytes(&self) -> f64 {
        self.dram_read_bytes + self.dram_write_bytes
    }
    pub fn total_flops(&self) -> f64 {
        // fold from +0.0: an empty f64 `sum()` is -0.0, which would print as "-0.000".
        self.flops.values().fold(0.0, |a, b| a + b)
    }
}

/// Why a kernel is as fast as it is, in the roofline model's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// DRAM bandwidth is the binding limit and the kernel uses a good part of it.
    MemoryBound,
    /// A compute pipe is the binding limit and the kernel uses a good part of it.
    ComputeBound,
    /// Too short to fill the GPU: launch overhead and latency dominate.
    LatencyBound,
    /// Neither roof is near and few warps are resident: latency is not hidden.
    OccupancyLimited,
    /// Neither roof is near, yet occupancy is fine (e.g. cache-, sync- or issue-bound).
    Underutilized,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bound::MemoryBound => "memory-bound",
            Bound::ComputeBound => "compute-bound",
            Bound::LatencyBound => "latency/launch-bound",
            Bound::OccupancyLimited => "occupancy-limited",
            Bound::Underutilized => "under-utilised (neither roof)",
        })
    }
}

/// Thresholds of the classification (see the README, "Roofline classification").
pub mod thresholds {
    /// A kernel shorter than this (seconds) is latency/launch-bound: ~ a few launch
    /// latencies, too short for the GPU to reach steady state.
    pub const LATENCY_S: f64 = 10e-6;
    /// A fraction of a roof at or above this counts as "near the roof".
    pub const NEAR_ROOF: f64 = 0.5;
    /// Achieved occupancy below this % is low.
    pub const LOW_OCCUPANCY_PCT: f64 = 25.0;
}

/// The roofline verdict for one kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RooflineVerdict {
    /// FLOPs per DRAM byte (None when no DRAM traffic was measured).
    pub arithmetic_intensity: Option<f64>,
    /// The ridge point for the dominant precision: peak FLOP/s / peak bytes/s.
    pub ridge_intensity: f64,
    /// The precision class with the most FLOPs (None: no floating-point work counted).
    pub dominant: Option<FlopClass>,
    /// Achieved DRAM bytes/s over the peak.
    pub bandwidth_fraction: f64,
    /// Achieved FLOP/s over the peak, summed over classes (each class against its own
    /// peak: the fraction of the time budget the compute pipes needed).
    pub compute_fraction: f64,
    /// The time the roofline allows for this much work at the peaks, seconds.
    pub roofline_min_s: f64,
    pub duration_s: f64,
    pub bound: Bound,
    /// Plain sentences with the numbers behind `bound`.
    pub evidence: Vec<String>,
}

/// Classifies one kernel. Rules, in order:
/// 1. duration < [`thresholds::LATENCY_S`] → latency/launch-bound;
/// 2. the larger of bandwidth and compute fraction ≥ [`thresholds::NEAR_ROOF`] → memory- or
///    compute-bound, whichever fraction is larger;
/// 3. achieved occupancy < [`thresholds::LOW_OCCUPANCY_PCT`] → occupancy-limited;
/// 4. otherwise under-utilised, with the side of the ridge it sits on as evidence.
pub fn roofline(c: &KernelCounters, peaks: &Peaks) -> RooflineVerdict {
    let bytes = c.dram_bytes();
    let flops = c.total_flops();
    let dur = c.duration_s.max(0.0);
    let dominant = c
        .flops
        .iter()
        .filter(|(_, v)| **v > 0.0)
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(k, _)| *k);
    let dominant_peak = dominant.and_then(|d| peaks.flops(d)).unwrap_or(peaks.fp32);
    let ridge = dominant_peak / peaks.dram_bytes_per_s;
    let intensity = (bytes > 0.0).then(|| flops / bytes);
    let mem_time = bytes / peaks.dram_bytes_per_s;
    let compute_time: f64 = c
        .flops
        .iter()
        .map(|(k, v)| v / peaks.flops(*k).unwrap_or(peaks.fp32))
        .fold(0.0, |a, b| a + b);
    let (bw_frac, cmp_frac) = if dur > 0.0 {
        (mem_time / dur, compute_time / dur)
    } else {
        (0.0, 0.0)
    };
    let mut evidence = vec![format!(
        "{:.2} us; DRAM {:.3} MB ({:.1}% of peak bandwidth); {:.3} GFLOP ({:.1}% of peak {})",
        dur * 1e6,
        bytes / 1e6,
        100.0 * bw_frac,
        flops / 1e9,
        100.0 * cmp_frac,
        dominant.map_or("compute".to_string(), |d| d.to_string()),
    )];
    match intensity {
        Some(ai) => evidence.push(format!(
            "arithmetic intensity {ai:.2} FLOP/byte vs ridge {ridge:.1}: {} side",
            if ai < ridge { "memory" } else { "compute" }
        )),
        None => evidence.push("no DRAM traffic measured (data stayed in L2)".to_string()),
    }
    if let Some(o) = c.achieved_occupancy_pct {
        evidence.push(format!("achieved occupancy {o:.1}%"));
    }
    let bound = if dur < thresholds::LATENCY_S {
        evidence.push(format!(
            "shorter than {:.0} us: launch and latency dominate{}",
            thresholds::LATENCY_S * 1e6,
            match (c.grid_blocks, c.block_threads) {
                (Some(g), Some(b)) => format!(" (grid {g} blocks × {b} threads)"),
                _ => String::new(),
            }
        ));
        Bound::LatencyBound
    } else if bw_frac.max(cmp_frac) >= thresholds::NEAR_ROOF {
        if bw_frac >= cmp_frac {
            Bound::MemoryBound
        } else {
            Bound::ComputeBound
        }
    } else if c
        .achieved_occupancy_pct
        .is_some_and(|o| o < thresholds::LOW_OCCUPANCY_PCT)
    {
        evidence.push(format!(
            "below {:.0}% of a roof and occupancy under {:.0}%: too few warps to hide latency",
            100.0 * thresholds::NEAR_ROOF,
            thresholds::LOW_OCCUPANCY_PCT
        ));
        Bound::OccupancyLimited
    } else {
        evidence.push(format!(
            "below {:.0}% of both roofs with adequate occupancy",
            100.0 * thresholds::NEAR_ROOF
        ));
        Bound::Underutilized
    };
    RooflineVerdict {
        arithmetic_intensity: intensity,
        ridge_intensity: ridge,
        dominant,
        bandwidth_fraction: bw_frac,
        compute_fraction: cmp_frac,
        roofline_min_s: mem_time.max(compute_time),
        duration_s: dur,
        bound,
        evidence,
    }
}

impl std::fmt::Display for RooflineVerdict {
    /// One markdown bullet list: the verdict, then its evidence.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "- **{}** ({:.0}% of peak DRAM bandwidth, {:.0}% of peak compute)",
            self.bound,
            100.0 * self.bandwidth_fraction,
            100.0 * self.compute_fraction
        )?;
        for e in &self.evidence {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Speed of light per problem.

/// What a problem must at least do, counted on the reference (see the worker's `cost`):
/// every input, weight and output moved once, and the reference's FLOPs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProblemCost {
    /// FLOPs of the reference forward (torch.utils.flop_counter; FMA = 2). Only the ops
    /// the counter knows (matmuls, convolutions, attention) are counted: elementwise work
    /// counts 0, so compute-light problems are bounded by their bytes.
    pub flops: f64,
    /// FLOPs by aten op, as the counter reports them.
    #[serde(default)]
    pub flops_by_op: std::collections::BTreeMap<String, f64>,
    /// The working precision the FLOPs run at ("fp32", "fp16", "bf16").
    pub precision: String,
    pub input_bytes: f64,
    pub weight_bytes: f64,
    pub output_bytes: f64,
}

impl ProblemCost {
    pub fn bytes(&self) -> f64 {
        self.input_bytes + self.weight_bytes + self.output_bytes
    }
}

/// The minimum time a problem can take on a GPU, from its [`ProblemCost`] at the [`Peaks`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedOfLight {
    pub cost: ProblemCost,
    /// bytes / peak bandwidth, seconds.
    pub memory_s: f64,
    /// FLOPs / the fastest peak that precision may use, seconds.
    pub compute_s: f64,
    /// max(memory_s, compute_s): the physical limit reports compare against.
    pub min_s: f64,
    /// reads / peak bandwidth, reads = inputs + weights: the bound
    /// [`SpeedOfLight::is_impossible`] uses. Outputs are left out because a kernel's writes
    /// can land in L2 (write-back) and reach DRAM after it ends; its inputs cannot be in L2
    /// when the timing flushed it before the call. FLOPs are left out too: they are counted
    /// on the reference's algorithm, and a correct kernel may need far fewer (KernelBench's
    /// `diag(A) @ B` is a row scaling, N² multiplies where the reference's matmul does 2N³:
    /// on the H100 an honest 13× kernel was flagged when the bound counted them).
    #[serde(default)]
    pub strict_min_s: f64,
    /// The peak `compute_s` used, e.g. "bf16 tensor".
    pub compute_peak: String,
    /// The GPU's table row.
    pub arch: String,
}

/// The speed of light of `cost` on `peaks`. FLOPs at fp32 are allowed the TF32 tensor peak
/// (a kernel may legally use TF32 tensor cores unless the tolerance forbids it; the bound
/// must never exceed what some kernel could reach), fp16 and bf16 their tensor peaks.
pub fn speed_of_light(cost: &ProblemCost, peaks: &Peaks) -> SpeedOfLight {
    let class = match cost.precision.as_str() {
        "fp16" => FlopClass::Fp16Tensor,
        "bf16" => FlopClass::Bf16Tensor,
        _ => FlopClass::Tf32Tensor,
    };
    let peak = peaks.flops(class).unwrap_or(peaks.fp32).max(peaks.fp32);
    let memory_s = cost.bytes() / peaks.dram_bytes_per_s;
    let compute_s = cost.flops / peak;
    SpeedOfLight {
        cost: cost.clone(),
        memory_s,
        compute_s,
        min_s: memory_s.max(compute_s),
        strict_min_s: (cost.input_bytes + cost.weight_bytes) / peaks.dram_bytes_per_s,
        compute_peak: class.to_string(),
        arch: peaks.arch.clone(),
    }
}

impl SpeedOfLight {
    /// measured / minimum: 1.0 is the physical limit, 10 means ten times slower than it.
    /// None when the minimum is zero (nothing to move or compute).
    pub fn ratio(&self, measured_s: f64) -> Option<f64> {
        (self.min_s > 0.0).then(|| measured_s / self.min_s)
    }

    /// True when `measured_s` is below the strict bound ([`Self::strict_min_s`]: the reads
    /// only) by more than `slack` (e.g. 0.1 for 10% measurement noise): a time no
    /// correct kernel can reach — it skipped work, cached results across calls, or the timing
    /// is broken. Only meaningful for times taken with the L2 flushed before each call
    /// (kbench's default; see [`crate::EvalRecord::below_speed_of_light`]).
    pub fn is_impossible(&self, measured_s: f64, slack: f64) -> bool {
        self.strict_min_s > 0.0 && measured_s < self.strict_min_s * (1.0 - slack)
    }
}

impl std::fmt::Display for SpeedOfLight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "speed of light {:.2} us on {} ({:.3} MB at peak bandwidth: {:.2} us; {:.3} GFLOP at {} peak: {:.2} us)",
            self.min_s * 1e6,
            self.arch,
            self.cost.bytes() / 1e6,
            self.memory_s * 1e6,
            self.cost.flops / 1e9,
            self.compute_peak,
            self.compute_s * 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::{assert_abs_diff_eq, assert_relative_eq};

    /// H100 SXM5 as the driver reports it: 132 SMs, 1980 MHz max clock, HBM3 at 2619 MHz
    /// on a 5120-bit bus (3352 GB/s).
    fn h100() -> Peaks {
        let r = ArchRates::for_cc(9, 0).unwrap();
        Peaks::from_rates(&r, 132, 1980.0, 2.0 * 2619e6 * 5120.0 / 8.0)
    }

    #[test]
    fn h100_sxm_matches_nvidia_figures() {
        let p = h100();
        // NVIDIA H100 whitepaper / datasheet (SXM5): TFLOP/s dense.
        assert_relative_eq!(p.bf16_tensor, 989.4e12, max_relative = 0.001);
        assert_relative_eq!(p.fp16_tensor, 989.4e12, max_relative = 0.001);
        assert_relative_eq!(p.fp32, 66.9e12, max_relative = 0.001);
        assert_relative_eq!(p.fp64, 33.5e12, max_relative = 0.002);
        assert_relative_eq!(p.fp64_tensor, 66.9e12, max_relative = 0.001);
        assert_relative_eq!(p.tf32_tensor, 494.7e12, max_relative = 0.001);
        assert_relative_eq!(p.fp8_tensor.unwrap(), 1978.9e12, max_relative = 0.001);
        assert_relative_eq!(p.int8_tensor, 1978.9e12, max_relative = 0.001);
        assert_relative_eq!(p.dram_bytes_per_s, 3.35e12, max_relative = 0.001);
        assert!(
            p.describe().contains("FP16/BF16 989.4 TF"),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn other_architectures_match_their_datasheets() {
        // A100 SXM: 108 SMs, 1410 MHz.
        let a = Peaks::from_rates(&ArchRates::for_cc(8, 0).unwrap(), 108, 1410.0, 2.039e12);
        assert_relative_eq!(a.fp32, 19.5e12, max_relative = 0.002);
        assert_relative_eq!(a.bf16_tensor, 312e12, max_relative = 0.001);
        assert_relative_eq!(a.tf32_tensor, 156e12, max_relative = 0.001);
        assert_relative_eq!(a.fp64, 9.7e12, max_relative = 0.01);
        assert_eq!(a.fp8_tensor, None);
        assert_eq!(a.flops(FlopClass::Fp8Tensor), None);
        // L40S: 142 SMs, 2520 MHz: 91.6 TF FP32, 362 TF FP16 dense, 733 FP8.
        let l = Peaks::from_rates(&ArchRates::for_cc(8, 9).unwrap(), 142, 2520.0, 864e9);
        assert_relative_eq!(l.fp32, 91.6e12, max_relative = 0.002);
        assert_relative_eq!(l.fp16_tensor, 366.4e12, max_relative = 0.001);
        assert_relative_eq!(l.fp8_tensor.unwrap(), 733e12, max_relative = 0.002);
        // A40: 84 SMs, 1740 MHz: 37.4 TF FP32, 149.7 TF FP16 dense.
        let g = Peaks::from_rates(&ArchRates::for_cc(8, 6).unwrap(), 84, 1740.0, 696e9);
        assert_relative_eq!(g.fp32, 37.4e12, max_relative = 0.002);
        assert_relative_eq!(g.fp16_tensor, 149.7e12, max_relative = 0.001);
        // RTX 5090: 170 SMs, 2407 MHz: 104.8 TF FP32, 419 TF FP16 dense.
        let b = Peaks::from_rates(&ArchRates::for_cc(12, 0).unwrap(), 170, 2407.0, 1.79e12);
        assert_relative_eq!(b.fp32, 104.8e12, max_relative = 0.002);
        assert_relative_eq!(b.fp16_tensor, 419e12, max_relative = 0.002);
        assert!(ArchRates::for_cc(10, 0).is_some());
        assert!(ArchRates::for_cc(7, 0).is_none());
        assert!(ArchRates::for_cc(7, 5).is_none());
    }

    fn counters(dur_us: f64, read: f64, write: f64, fp32: f64) -> KernelCounters {
        let mut flops = std::collections::BTreeMap::new();
        if fp32 > 0.0 {
            flops.insert(FlopClass::Fp32, fp32);
        }
        KernelCounters {
            duration_s: dur_us * 1e-6,
            dram_read_bytes: read,
            dram_write_bytes: write,
            flops,
            achieved_occupancy_pct: Some(80.0),
            block_threads: Some(256),
            grid_blocks: Some(4096),
        }
    }

    #[test]
    fn elementwise_add_is_memory_bound() {
        // 2^26 floats: read 2 × 256 MiB... here 2^24 elements: a+b -> c, 3 × 64 MiB.
        let n = (1u64 << 24) as f64;
        let c = counters(70.0, 2.0 * 4.0 * n, 4.0 * n, n);
        let p = h100();
        let v = roofline(&c, &p);
        // 201,326,592 bytes in 70 us = 2876 GB/s = 85.8% of 3352 GB/s.
        let bw = 3.0 * 4.0 * n / 70e-6 / p.dram_bytes_per_s;
        assert_abs_diff_eq!(v.bandwidth_fraction, bw, epsilon = 1e-12);
        assert_abs_diff_eq!(v.bandwidth_fraction, 0.858, epsilon = 0.001);
        // 1 FLOP per 12 bytes.
        assert_abs_diff_eq!(v.arithmetic_intensity.unwrap(), 1.0 / 12.0, epsilon = 1e-12);
        assert_eq!(v.dominant, Some(FlopClass::Fp32));
        // Ridge for fp32: 66.9e12 / 3.352e12 = 19.96 FLOP/byte.
        assert_abs_diff_eq!(v.ridge_intensity, 19.96, epsilon = 0.01);
        assert_eq!(v.bound, Bound::MemoryBound);
        assert!(v.to_string().contains("**memory-bound**"), "{v}");
        assert!(
            v.evidence.iter().any(|e| e.contains("memory side")),
            "{v:?}"
        );
    }

    #[test]
    fn fp16_matmul_on_tensor_cores_is_compute_bound() {
        // 8192^3 matmul: 2·8192^3 = 1.0995e12 FLOP; 1.4 ms -> 785 TF/s = 79% of 989.4.
        let mut c = counters(1400.0, 3.0 * 2.0 * 8192.0 * 8192.0, 0.0, 0.0);
        c.flops.insert(FlopClass::Fp16Tensor, 2.0 * 8192f64.powi(3));
        let v = roofline(&c, &h100());
        assert_abs_diff_eq!(v.compute_fraction, 0.7937, epsilon = 0.001);
        assert_eq!(v.bound, Bound::ComputeBound);
        assert_eq!(v.dominant, Some(FlopClass::Fp16Tensor));
        // Ridge for fp16 tensor: 989.4e12 / 3.352e12 = 295.
        assert_abs_diff_eq!(v.ridge_intensity, 295.1, epsilon = 0.2);
        assert_abs_diff_eq!(v.roofline_min_s, 1.0995e12 / 989.4e12, epsilon = 1e-6);
    }

    #[test]
    fn tiny_kernel_is_latency_bound_and_starved_kernel_is_occupancy_limited() {
        let v = roofline(&counters(3.0, 4096.0, 4096.0, 1024.0), &h100());
        assert_eq!(v.bound, Bound::LatencyBound);
        assert!(v.evidence.iter().any(|e| e.contains("grid 4096 blocks")));
        let mut c = counters(500.0, 1e8, 1e8, 1e6);
        // 2e8 bytes in 500 us = 400 GB/s = 12% of peak: neither roof.
        c.achieved_occupancy_pct = Some(12.5);
        let v = roofline(&c, &h100());
        assert_eq!(v.bound, Bound::OccupancyLimited);
        c.achieved_occupancy_pct = Some(60.0);
        assert_eq!(roofline(&c, &h100()).bound, Bound::Underutilized);
        // No DRAM bytes at all: no intensity, still a verdict.
        let v = roofline(&counters(50.0, 0.0, 0.0, 1e9), &h100());
        assert_eq!(v.arithmetic_intensity, None);
        // No FLOPs at all: +0, never "-0.000" in the evidence.
        let v = roofline(&counters(50.0, 1e6, 0.0, 0.0), &h100());
        assert!(v.compute_fraction == 0.0 && v.compute_fraction.is_sign_positive());
        assert_eq!(v.arithmetic_intensity, Some(0.0));
        assert!(!v.evidence.join(" ").contains("-0.0"), "{:?}", v.evidence);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["bound"], "underutilized");
    }

    #[test]
    fn speed_of_light_of_a_matmul_and_of_an_elementwise_op() {
        let p = h100();
        // fp32 4096^3 matmul: 2·4096^3 FLOP at the TF32 tensor peak; 3 × 64 MiB moved.
        let cost = ProblemCost {
            flops: 2.0 * 4096f64.powi(3),
            precision: "fp32".into(),
            input_bytes: 2.0 * 4.0 * 4096.0 * 4096.0,
            output_bytes: 4.0 * 4096.0 * 4096.0,
            ..Default::default()
        };
        let s = speed_of_light(&cost, &p);
        assert_abs_diff_eq!(s.compute_s, 1.374e11 / 494.7e12, epsilon = 1e-6);
        assert_abs_diff_eq!(s.memory_s, 201_326_592.0 / 3.352e12, epsilon = 1e-7);
        assert_eq!(s.min_s, s.compute_s);
        assert_eq!(s.compute_peak, "tf32 tensor");
        assert_abs_diff_eq!(s.ratio(2.0 * s.min_s).unwrap(), 2.0, epsilon = 1e-12);
        // The strict bound is the reads alone: the matmul's FLOPs bound the reference's
        // algorithm, not every correct kernel's (a diag(A) @ B kernel does N² of them).
        assert_abs_diff_eq!(s.strict_min_s, 134_217_728.0 / 3.352e12, epsilon = 1e-8);
        assert!(s.is_impossible(0.5 * s.strict_min_s, 0.1));
        assert!(!s.is_impossible(0.95 * s.strict_min_s, 0.1));
        // A kernel at a fifth of the matmul's compute time, as an honest diag(A) @ B row
        // scaling can be, is not impossible: it is still above the time its reads take.
        assert!(s.strict_min_s < 0.2 * s.compute_s);
        assert!(!s.is_impossible(0.2 * s.compute_s, 0.1));
        // Elementwise: no counted FLOPs, bounded by bytes.
        let relu = ProblemCost {
            precision: "bf16".into(),
            input_bytes: 2.0 * 1e6,
            output_bytes: 2.0 * 1e6,
            ..Default::default()
        };
        let s = speed_of_light(&relu, &p);
        assert_eq!(s.compute_s, 0.0);
        assert_abs_diff_eq!(s.min_s, 4e6 / (2.0 * 2619e6 * 640.0), epsilon = 1e-15);
        // The impossibility test counts the 2 MB read only: 0.6 of min_s passes it.
        assert_abs_diff_eq!(s.strict_min_s, s.min_s / 2.0, epsilon = 1e-15);
        assert!(!s.is_impossible(0.6 * s.min_s, 0.1));
        assert!(s.is_impossible(0.4 * s.min_s, 0.1));
        assert!(s.to_string().contains("speed of light"), "{s}");
        assert_eq!(speed_of_light(&ProblemCost::default(), &p).ratio(1.0), None);
    }
}
