//! Nsight Compute's side of a profile: the metrics kbench asks for, ncu's raw CSV parsed into
//! launches, launches aggregated per kernel and per call with a roofline verdict, and what
//! ncu's own output says when it could not profile (no permission, unknown metrics).

use std::collections::BTreeMap;

use kbench_record::perf::{roofline, FlopClass, KernelCounters, Peaks, RooflineVerdict};
use serde::{Deserialize, Serialize};

/// The 24 metrics CudaForge gives its Judge (paper Table 8, `run_ncu.METRICS`).
pub(crate) const CUDAFORGE_METRICS: [&str; 24] = [
    "sm__cycles_active.avg",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__registers_per_thread",
    "sm__inst_executed.sum",
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_sector_hit_rate.pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_active",
    "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct",
    "smsp__sass_average_branch_targets_threads_uniform.pct",
];

/// Duration, FLOPs per precision, and the achieved occupancy (already in CudaForge's list as
/// `sm__warps_active.avg.pct_of_peak_sustained_active`); DRAM bytes are in CudaForge's list.
pub(crate) const ROOFLINE_METRICS: [&str; 17] = [
    "gpu__time_duration.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp64.sum",
    "sm__ops_path_tensor_src_fp8.sum",
    "sm__ops_path_tensor_src_int8.sum",
];

/// How a metric contributes FLOPs: (class, FLOPs per counted unit). SASS thread-instruction
/// counts: an FMA is 2 FLOPs (ncu's own roofline counts the same way; a packed HFMA2 counts as
/// one HFMA here, so half-precision scalar FLOPs are a lower bound). Tensor-pipe `ops` counters count operations (FLOPs) as ncu's
/// own tensor roofline uses them; the GPU script checks this against 2·M·N·K.
pub(crate) fn flop_metric(name: &str) -> Option<(FlopClass, f64)> {
    let op = |s: &str| format!("smsp__sass_thread_inst_executed_op_{s}_pred_on.sum");
    Some(match name {
        n if n == op("fadd") || n == op("fmul") => (FlopClass::Fp32, 1.0),
        n if n == op("ffma") => (FlopClass::Fp32, 2.0),
        n if n == op("dadd") || n == op("dmul") => (FlopClass::Fp64, 1.0),
        n if n == op("dfma") => (FlopClass::Fp64, 2.0),
        n if n == op("hadd") || n == op("hmul") => (FlopClass::Fp16, 1.0),
        n if n == op("hfma") => (FlopClass::Fp16, 2.0),
        "sm__ops_path_tensor_src_fp16_dst_fp16.sum"
        | "sm__ops_path_tensor_src_fp16_dst_fp32.sum" => (FlopClass::Fp16Tensor, 1.0),
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum" => (FlopClass::Bf16Tensor, 1.0),
        "sm__ops_path_tensor_src_tf32_dst_fp32.sum" => (FlopClass::Tf32Tensor, 1.0),
        "sm__ops_path_tensor_src_fp64.sum" => (FlopClass::Fp64Tensor, 1.0),
        "sm__ops_path_tensor_src_fp8.sum" => (FlopClass::Fp8Tensor, 1.0),
        "sm__ops_path_tensor_src_int8.sum" => (FlopClass::Int8Tensor, 1.0),
        _ => return None,
    })
}

/// Every metric `kbench profile` asks ncu for.
pub(crate) fn all_metrics() -> Vec<String> {
    let mut v: Vec<String> = CUDAFORGE_METRICS.iter().map(|s| s.to_string()).collect();
    for m in ROOFLINE_METRICS {
        if !v.iter().any(|x| x == m) {
            v.push(m.to_string());
        }
    }
    v
}

// ---------------------------------------------------------------------------------------------
// ncu's raw CSV.

/// One kernel launch as ncu reported it; metric values converted to base units (bytes,
/// seconds, plain counts, percent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NcuLaunch {
    pub(crate) id: u64,
    pub(crate) kernel: String,
    pub(crate) block_threads: Option<u64>,
    pub(crate) grid_blocks: Option<u64>,
    pub(crate) metrics: BTreeMap<String, f64>,
}

/// The factor from a unit ncu printed to kbench's base unit (seconds for time, bytes for
/// sizes). ncu's size prefixes are decimal (Kbyte = 1000 bytes); `--print-units base` makes
/// them all 1 except time, which is in nanoseconds.
pub(crate) fn unit_scale(unit: &str) -> f64 {
    let u = unit.trim();
    let (num, per_second) = match u.strip_suffix("/second") {
        Some(n) => (n, true),
        None => (u, false),
    };
    let size = |s: &str| match s {
        "byte" => Some(1.0),
        "Kbyte" | "KB" => Some(1e3),
        "Mbyte" | "MB" => Some(1e6),
        "Gbyte" | "GB" => Some(1e9),
        "Tbyte" | "TB" => Some(1e12),
        _ => None,
    };
    if let Some(f) = size(num) {
        return f;
    }
    if per_second {
        return 1.0;
    }
    match u {
        "nsecond" | "ns" => 1e-9,
        "usecond" | "us" => 1e-6,
        "msecond" | "ms" => 1e-3,
        "second" | "s" => 1.0,
        _ => 1.0,
    }
}

/// A number as ncu prints it: `1,234,567.5`, `4.0e-05`, `n/a` (None).
pub(crate) fn parse_number(s: &str) -> Option<f64> {
    let t: String = s.trim().chars().filter(|c| *c != ',').collect();
    if t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// `(256, 1, 1)` → 256.
fn dims_product(s: &str) -> Option<u64> {
    let inner = s.trim().trim_start_matches('(').trim_end_matches(')');
    let mut p = 1u64;
    let mut any = false;
    for part in inner.split(',') {
        p = p.checked_mul(part.trim().parse::<u64>().ok()?)?;
        any = true;
    }
    any.then_some(p)
}

/// Splits one CSV line (ncu quotes every field; quotes inside are doubled).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Parses `ncu --csv --page raw` output (a log file or captured stdout). Lines that are not
/// part of the table (`==PROF==`, `==WARNING==`, the program's own output) are skipped. The
/// error names what is missing.
pub(crate) fn parse_ncu_raw_csv(text: &str) -> Result<Vec<NcuLaunch>, String> {
    let mut lines = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.starts_with("==") && !l.trim().is_empty());
    let header = loop {
        match lines.next() {
            None => {
                return Err(
                    "no ncu CSV table found (no line starting with \"ID\"): ncu captured no kernel, or was not run with --csv --page raw"
                        .into(),
                )
            }
            Some(l) if l.starts_with("\"ID\"") => break csv_fields(l),
            Some(_) => continue,
        }
    };
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(c_id), Some(c_kernel)) = (col("ID"), col("Kernel Name")) else {
        return Err("the ncu CSV header has no \"ID\" or \"Kernel Name\" column".into());
    };
    let c_block = col("Block Size");
    let c_grid = col("Grid Size");
    // Metric columns: every header that looks like a metric name (has `__`).
    let metric_cols: Vec<usize> = (0..header.len())
        .filter(|i| header[*i].contains("__"))
        .collect();
    let mut units: Vec<String> = vec![String::new(); header.len()];
    let mut launches = Vec::new();
    for line in lines {
        let f = csv_fields(line);
        if f.len() != header.len() {
            // Interleaved program output that happens to contain commas.
            continue;
        }
        if f[c_id].is_empty() {
            units = f; // the units row
            continue;
        }
        let Ok(id) = f[c_id].trim().parse::<u64>() else {
            continue;
        };
        let mut metrics = BTreeMap::new();
        for &i in &metric_cols {
            if let Some(v) = parse_number(&f[i]) {
                metrics.insert(header[i].clone(), v * unit_scale(&units[i]));
            }
        }
        launches.push(NcuLaunch {
            id,
            kernel: f[c_kernel].clone(),
            block_threads: c_block.and_then(|c| dims_product(&f[c])),
            grid_blocks: c_grid.and_then(|c| dims_product(&f[c])),
            metrics,
        });
    }
    if launches.is_empty() {
        return Err("the ncu CSV table has a header but no kernel rows".into());
    }
    Ok(launches)
}

/// The roofline counters of one launch (or of a per-launch mean).
pub(crate) fn counters_of(
    metrics: &BTreeMap<String, f64>,
    block: Option<u64>,
    grid: Option<u64>,
) -> KernelCounters {
    let mut flops: BTreeMap<FlopClass, f64> = BTreeMap::new();
    for (name, v) in metrics {
        if let Some((class, per)) = flop_metric(name) {
            if *v > 0.0 {
                *flops.entry(class).or_default() += v * per;
            }
        }
    }
    KernelCounters {
        duration_s: metrics
            .get("gpu__time_duration.sum")
            .copied()
            .unwrap_or(0.0),
        dram_read_bytes: metrics.get("dram__bytes_read.sum").copied().unwrap_or(0.0),
        dram_write_bytes: metrics.get("dram__bytes_write.sum").copied().unwrap_or(0.0),
        flops,
        achieved_occupancy_pct: metrics
            .get("sm__warps_active.avg.pct_of_peak_sustained_active")
            .copied(),
        block_threads: block,
        grid_blocks: grid,
    }
}

/// One kernel (by name) over all its launches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KernelProfile {
    pub(crate) name: String,
    pub(crate) launches: u64,
    pub(crate) launches_per_call: f64,
    /// This kernel's GPU time per candidate call, seconds.
    pub(crate) time_per_call_s: f64,
    /// Its share of the GPU time of a call.
    pub(crate) share: f64,
    /// Per-launch means of every metric ncu gave (base units).
    pub(crate) metrics: BTreeMap<String, f64>,
    /// Per-launch roofline counters.
    pub(crate) counters: KernelCounters,
    /// None without peaks (a GPU outside the spec table).
    pub(crate) verdict: Option<RooflineVerdict>,
}

/// ncu's launches aggregated per kernel and per call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NcuProfile {
    pub(crate) calls: u32,
    pub(crate) launches: u64,
    /// Slowest first.
    pub(crate) kernels: Vec<KernelProfile>,
    /// Everything a call launched, summed (duration = GPU time per call).
    pub(crate) per_call: KernelCounters,
    pub(crate) per_call_verdict: Option<RooflineVerdict>,
    /// Metrics this GPU's ncu did not know, left out.
    #[serde(default)]
    pub(crate) dropped_metrics: Vec<String>,
}

/// Aggregates `launches` (from `calls` candidate calls) per kernel name and per call.
pub(crate) fn aggregate(launches: &[NcuLaunch], calls: u32, peaks: Option<&Peaks>) -> NcuProfile {
    let calls_f = calls.max(1) as f64;
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, Vec<&NcuLaunch>> = BTreeMap::new();
    for l in launches {
        if !groups.contains_key(&l.kernel) {
            order.push(l.kernel.clone());
        }
        groups.entry(l.kernel.clone()).or_default().push(l);
    }
    let mut kernels = Vec::new();
    let mut per_call = KernelCounters::default();
    for name in order {
        let g = &groups[&name];
        let n = g.len() as f64;
        let mut sums: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for l in g {
            for (k, v) in &l.metrics {
                let e = sums.entry(k.clone()).or_default();
                e.0 += v;
                e.1 += 1.0;
            }
        }
        let metrics: BTreeMap<String, f64> =
            sums.into_iter().map(|(k, (s, c))| (k, s / c)).collect();
        let counters = counters_of(&metrics, g[0].block_threads, g[0].grid_blocks);
        let per_call_factor = n / calls_f;
        per_call.duration_s += counters.duration_s * per_call_factor;
        per_call.dram_read_bytes += counters.dram_read_bytes * per_call_factor;
        per_call.dram_write_bytes += counters.dram_write_bytes * per_call_factor;
        for (c, v) in &counters.flops {
            *per_call.flops.entry(*c).or_default() += v * per_call_factor;
        }
        kernels.push(KernelProfile {
            name,
            launches: g.len() as u64,
            launches_per_call: per_call_factor,
            time_per_call_s: counters.duration_s * per_call_factor,
            share: 0.0,
            verdict: peaks.map(|p| roofline(&counters, p)),
            metrics,
            counters,
        });
    }
    let total = per_call.duration_s;
    for k in &mut kernels {
        k.share = if total > 0.0 {
            k.time_per_call_s / total
        } else {
            0.0
        };
    }
    kernels.sort_by(|a, b| b.time_per_call_s.total_cmp(&a.time_per_call_s));
    NcuProfile {
        calls,
        launches: launches.len() as u64,
        per_call_verdict: peaks.map(|p| roofline(&per_call, p)),
        kernels,
        per_call,
        dropped_metrics: Vec::new(),
    }
}

/// The metrics as CudaForge pastes them into its Judge prompt: `{kernel name: {metric:
/// value}}` over its 24 metrics, values rounded to 3 decimals. CudaForge keeps the last
/// launch of each kernel; here each value is the mean over the profiled launches (base
/// units: bytes, and percent where the metric is a percentage).
pub(crate) fn cudaforge_metrics_json(p: &NcuProfile) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for k in &p.kernels {
        let mut m = serde_json::Map::new();
        for name in CUDAFORGE_METRICS {
            if let Some(v) = k.metrics.get(name) {
                m.insert(
                    name.to_string(),
                    serde_json::json!((v * 1000.0).round() / 1000.0),
                );
            }
        }
        out.insert(k.name.clone(), serde_json::Value::Object(m));
    }
    serde_json::Value::Object(out)
}

/// What ncu said went wrong, when its output shows it could not profile.
pub(crate) fn ncu_failure(output: &str) -> Option<String> {
    if output.contains("ERR_NVGPUCTRPERM") {
        return Some(
            "ncu cannot read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root or allow profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)"
                .into(),
        );
    }
    let errors: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("==ERROR=="))
        .collect();
    if !errors.is_empty() {
        return Some(format!("ncu failed: {}", errors.join(" | ")));
    }
    if output.contains("No kernels were profiled") {
        return Some("ncu captured no kernel (the candidate launched none on the GPU)".into());
    }
    None
}

/// Requested metrics that an `==ERROR==` line names (ncu rejects the whole run when one
/// metric does not exist on this GPU or ncu version). ncu names them as a regex, e.g.
/// `==ERROR== Failed to find metric regex:^flop_count_sp\.(sum|min|max|avg|pct|ratio|max_rate)$`:
/// a requested metric matches when its base name (before the first `.`) appears there as a
/// whole word, backslashes ignored.
pub(crate) fn unknown_metrics(output: &str, requested: &[String]) -> Vec<String> {
    let errs: Vec<String> = output
        .lines()
        .filter(|l| l.starts_with("==ERROR==") && l.to_lowercase().contains("metric"))
        .map(|l| l.replace('\\', ""))
        .collect();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let names = |line: &str, base: &str| {
        line.match_indices(base).any(|(i, _)| {
            !word(line[..i].chars().next_back()) && !word(line[i + base.len()..].chars().next())
        })
    };
    requested
        .iter()
        .filter(|m| {
            let base = m.split('.').next().unwrap_or(m);
            errs.iter().any(|l| names(l, base))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;
    use kbench_record::perf::Bound;

    use crate::test_support::h100;

    const ELEMENTWISE: &str = include_str!("../../../../tests/fixtures/ncu/elementwise_add.csv");
    const MATMUL: &str = include_str!("../../../../tests/fixtures/ncu/matmul_bf16.csv");
    const TINY: &str = include_str!("../../../../tests/fixtures/ncu/tiny_scale_scaled_units.csv");
    const PERM: &str = include_str!("../../../../tests/fixtures/ncu/err_nvgpuctrperm.log");

    #[test]
    fn numbers_and_units_as_ncu_prints_them() {
        assert_eq!(parse_number("1,234,567.5"), Some(1_234_567.5));
        assert_eq!(parse_number("4.0e-05"), Some(4.0e-5));
        assert_eq!(parse_number("n/a"), None);
        assert_eq!(parse_number(""), None);
        assert_eq!(unit_scale("byte"), 1.0);
        assert_eq!(unit_scale("Mbyte"), 1e6);
        assert_eq!(unit_scale("nsecond"), 1e-9);
        assert_eq!(unit_scale("usecond"), 1e-6);
        assert_eq!(unit_scale("Gbyte/second"), 1e9);
        assert_eq!(unit_scale("%"), 1.0);
        assert_eq!(dims_product("(256, 1, 1)"), Some(256));
        assert_eq!(dims_product("(16, 8, 2)"), Some(256));
        assert_eq!(
            csv_fields(r#""0","a ""q"" b","(1, 2, 3)","1,024""#),
            vec!["0", "a \"q\" b", "(1, 2, 3)", "1,024"]
        );
    }

    /// Recorded by `tests/gpu/profiling.sh ncu` on an H100 80GB HBM3 (ncu 2025.3.1, torch
    /// 2.11.0+cu130, 3 profiled calls each); the figures asserted are the ones that run
    /// printed.
    #[test]
    fn recorded_h100_profiles_parse_and_get_the_verdicts_the_gpu_run_showed() {
        let rec = |text: &str| {
            let l = parse_ncu_raw_csv(text).unwrap();
            assert_eq!(l.len(), 3, "three calls, one launch each");
            aggregate(&l, 3, Some(&h100()))
        };
        let missing = |p: &NcuProfile| -> Vec<&str> {
            CUDAFORGE_METRICS
                .iter()
                .copied()
                .filter(|m| !p.kernels[0].metrics.contains_key(*m))
                .collect()
        };
        // A CUDA add of 2^26 floats: memory-bound at 76.6% of peak bandwidth, 2^26 FADDs.
        let e = rec(include_str!(
            "../../../../tests/fixtures/ncu/recorded_h100_elementwise_add.csv"
        ));
        assert!(e.kernels[0].name.starts_with("elementwise_add_kernel"));
        let v = e.kernels[0].verdict.as_ref().unwrap();
        assert_eq!(v.bound, Bound::MemoryBound);
        assert_abs_diff_eq!(v.bandwidth_fraction, 0.766, epsilon = 0.01);
        assert_eq!(e.per_call.flops[&FlopClass::Fp32], 67_108_864.0);
        // A bf16 4096^3 matmul (cuBLAS): compute-bound, and the tensor pipe's ops are exactly
        // 2·N^3 FLOPs per call.
        let m = rec(include_str!(
            "../../../../tests/fixtures/ncu/recorded_h100_matmul_bf16.csv"
        ));
        assert!(
            m.kernels[0].name.starts_with("nvjet_sm90"),
            "{}",
            m.kernels[0].name
        );
        assert_eq!(
            m.kernels[0].verdict.as_ref().unwrap().bound,
            Bound::ComputeBound
        );
        assert_eq!(
            m.per_call.flops[&FlopClass::Bf16Tensor],
            2.0 * 4096f64.powi(3)
        );
        // A 1024-element scale: 2.7 us, launch/latency-bound.
        let t = rec(include_str!(
            "../../../../tests/fixtures/ncu/recorded_h100_tiny_scale.csv"
        ));
        assert_eq!(
            t.kernels[0].verdict.as_ref().unwrap().bound,
            Bound::LatencyBound
        );
        assert!(t.per_call.duration_s < 10e-6, "{}", t.per_call.duration_s);
        // CudaForge's metric set as this ncu names it: at most two of the 24 absent.
        for p in [&e, &m, &t] {
            let gone = missing(p);
            assert!(gone.len() <= 2, "{gone:?}");
        }
        println!(
            "CudaForge metrics this ncu does not print: {:?}",
            missing(&e)
        );
    }

    #[test]
    fn elementwise_fixture_is_one_memory_bound_kernel_per_call() {
        let l = parse_ncu_raw_csv(ELEMENTWISE).unwrap();
        assert_eq!(l.len(), 5);
        assert!(l
            .iter()
            .all(|x| x.kernel.starts_with("elementwise_add_kernel")));
        assert_eq!(l[0].block_threads, Some(256));
        assert_eq!(l[0].grid_blocks, Some(65536));
        // Base units: 134,217,728 bytes read, 67,108,864 written, duration in ns.
        assert_eq!(l[0].metrics["dram__bytes_read.sum"], 134_217_728.0);
        let p = aggregate(&l, 5, Some(&h100()));
        assert_eq!(p.kernels.len(), 1);
        let k = &p.kernels[0];
        assert_eq!(k.launches_per_call, 1.0);
        assert_abs_diff_eq!(k.share, 1.0, epsilon = 1e-12);
        // Mean duration of the five launches: (70,112 + 70,240 + 69,984 + 70,048 + 70,016)/5 ns.
        assert_abs_diff_eq!(k.counters.duration_s, 70_080e-9, epsilon = 1e-12);
        // 16,777,216 FADD per launch (pred_on thread instructions).
        assert_eq!(k.counters.flops[&FlopClass::Fp32], 16_777_216.0);
        let v = k.verdict.as_ref().unwrap();
        assert_eq!(v.bound, Bound::MemoryBound);
        // 201,326,592 B / 70.08 us / 3352.32 GB/s = 0.857.
        assert_abs_diff_eq!(v.bandwidth_fraction, 0.857, epsilon = 0.001);
        assert_abs_diff_eq!(p.per_call.duration_s, 70_080e-9, epsilon = 1e-12);
        let j = cudaforge_metrics_json(&p);
        let m = &j[k.name.as_str()];
        assert_eq!(m.as_object().unwrap().len(), 24);
        assert_eq!(m["dram__bytes_read.sum"], 134_217_728.0);
        assert_eq!(m["sm__warps_active.avg.pct_of_peak_sustained_active"], 86.4);
        assert!(m.get("gpu__time_duration.sum").is_none());
        // Every CudaForge metric is present in the fixture (ncu prints all requested).
        for m in CUDAFORGE_METRICS {
            assert!(k.metrics.contains_key(m), "{m}");
        }
    }

    #[test]
    fn matmul_fixture_aggregates_two_kernels_per_call() {
        let l = parse_ncu_raw_csv(MATMUL).unwrap();
        let p = aggregate(&l, 3, Some(&h100()));
        assert_eq!(p.calls, 3);
        assert_eq!(p.kernels.len(), 2);
        let gemm = &p.kernels[0];
        assert!(gemm.name.contains("gemm"), "{}", gemm.name);
        // 2·4096^3 bf16 tensor FLOPs per launch.
        assert_eq!(
            gemm.counters.flops[&FlopClass::Bf16Tensor],
            2.0 * 4096f64.powi(3)
        );
        assert_eq!(gemm.verdict.as_ref().unwrap().bound, Bound::ComputeBound);
        assert_eq!(
            gemm.verdict.as_ref().unwrap().dominant,
            Some(FlopClass::Bf16Tensor)
        );
        let other = &p.kernels[1];
        assert_eq!(other.launches_per_call, 1.0);
        assert!(gemm.share > 0.9 && gemm.share < 1.0);
        // Per call: the sum of both kernels' times.
        assert_abs_diff_eq!(
            p.per_call.duration_s,
            (gemm.counters.duration_s + other.counters.duration_s),
            epsilon = 1e-12
        );
    }

    #[test]
    fn scaled_units_and_a_launch_bound_kernel() {
        let l = parse_ncu_raw_csv(TINY).unwrap();
        // Kbyte and usecond are scaled to bytes and seconds.
        assert_eq!(l[0].metrics["dram__bytes_read.sum"], 4_100.0); // "4.10" Kbyte
        assert_abs_diff_eq!(
            l[0].metrics["gpu__time_duration.sum"],
            2.46e-6,
            epsilon = 1e-15
        );
        let p = aggregate(&l, 10, Some(&h100()));
        assert_eq!(
            p.kernels[0].verdict.as_ref().unwrap().bound,
            Bound::LatencyBound
        );
        assert_eq!(
            p.per_call_verdict.as_ref().unwrap().bound,
            Bound::LatencyBound
        );
    }

    #[test]
    fn permission_errors_and_unknown_metrics_are_recognised() {
        assert!(parse_ncu_raw_csv(PERM).is_err());
        let why = ncu_failure(PERM).unwrap();
        assert!(why.contains("ERR_NVGPUCTRPERM"), "{why}");
        let asked = all_metrics();
        // As ncu prints it: the metric as a regex, dots escaped.
        let out = "==PROF== Connected to process 1\n==ERROR== Failed to find metric regex:^sm__ops_path_tensor_src_fp8\\.sum$\n";
        assert_eq!(
            unknown_metrics(out, &asked),
            vec!["sm__ops_path_tensor_src_fp8.sum".to_string()]
        );
        let out = "==ERROR== Failed to find metric regex:^sm__ops_path_tensor_src_fp16_dst_fp32\\.(sum|min|max|avg|pct|ratio|max_rate)$";
        assert_eq!(
            unknown_metrics(out, &asked),
            vec!["sm__ops_path_tensor_src_fp16_dst_fp32.sum".to_string()]
        );
        // A base name that is a prefix of the one named does not match.
        let out =
            "==ERROR== Failed to find metric regex:^sm__ops_path_tensor_src_fp8_dst_fp16\\.sum$";
        assert!(unknown_metrics(out, &asked).is_empty());
        assert!(unknown_metrics("==ERROR== something else", &asked).is_empty());
        assert!(ncu_failure("==WARNING== No kernels were profiled.").is_some());
        assert_eq!(ncu_failure("==PROF== Disconnected from process 1"), None);
        assert_eq!(all_metrics().len(), 24 + 17);
    }
}
