//! `kbench profile --problem P --kernel K`: hardware feedback for one kernel.
//!
//! The candidate runs in kbench's own worker (`python -m kbench_worker profile SPEC`, see
//! PROTOCOL.md, "Profiling script mode"): it loads the problem and the kernel as an evaluation
//! does, makes inputs, warms up, and runs `--calls` forwards between cudaProfilerStart/Stop
//! inside an NVTX range, so `ncu --profile-from-start off` captures only the candidate's calls.
//!
//! ncu is run with `--csv --page raw --print-units base`: one CSV row per kernel launch, one
//! column per metric (ncu sorts them by name), a second row giving each metric's unit, and
//! values in base units (bytes, nanoseconds) with `,` as the thousands separator. The parser
//! also accepts scaled units (`Kbyte`, `usecond`, ...) and `==PROF==` lines mixed in. The
//! metrics are CudaForge's 24 ([`CUDAFORGE_METRICS`]) plus the roofline's
//! ([`ROOFLINE_METRICS`]). Launches are aggregated per kernel name and per call, and each gets
//! a roofline verdict ([`kbench_record::perf::roofline`]).
//!
//! Without ncu, on a CPU, or when ncu cannot read the counters (ERR_NVGPUCTRPERM, no kernel
//! captured), it falls back to the PyTorch profiler and says so: CUDA kernels' device times
//! on a GPU, aten operators' CPU times on a CPU, with no counters and no roofline verdict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use kbench_record::perf::{
    roofline, speed_of_light, FlopClass, KernelCounters, Peaks, ProblemCost, RooflineVerdict,
    SpeedOfLight,
};
use kbench_record::Device;
use serde::{Deserialize, Serialize};

use crate::cli::ProfileArgs;

/// The 24 metrics CudaForge gives its Judge (paper Table 8, `run_ncu.METRICS`).
pub const CUDAFORGE_METRICS: [&str; 24] = [
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
pub const ROOFLINE_METRICS: [&str; 17] = [
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
pub fn flop_metric(name: &str) -> Option<(FlopClass, f64)> {
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
pub fn all_metrics() -> Vec<String> {
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
pub struct NcuLaunch {
    pub id: u64,
    pub kernel: String,
    pub block_threads: Option<u64>,
    pub grid_blocks: Option<u64>,
    pub metrics: BTreeMap<String, f64>,
}

/// The factor from a unit ncu printed to kbench's base unit (seconds for time, bytes for
/// sizes). ncu's size prefixes are decimal (Kbyte = 1000 bytes); `--print-units base` makes
/// them all 1 except time, which is in nanoseconds.
pub fn unit_scale(unit: &str) -> f64 {
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
pub fn parse_number(s: &str) -> Option<f64> {
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
pub fn parse_ncu_raw_csv(text: &str) -> Result<Vec<NcuLaunch>, String> {
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
pub fn counters_of(
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
pub struct KernelProfile {
    pub name: String,
    pub launches: u64,
    pub launches_per_call: f64,
    /// This kernel's GPU time per candidate call, seconds.
    pub time_per_call_s: f64,
    /// Its share of the GPU time of a call.
    pub share: f64,
    /// Per-launch means of every metric ncu gave (base units).
    pub metrics: BTreeMap<String, f64>,
    /// Per-launch roofline counters.
    pub counters: KernelCounters,
    /// None without peaks (a GPU outside the spec table).
    pub verdict: Option<RooflineVerdict>,
}

/// ncu's launches aggregated per kernel and per call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcuProfile {
    pub calls: u32,
    pub launches: u64,
    /// Slowest first.
    pub kernels: Vec<KernelProfile>,
    /// Everything a call launched, summed (duration = GPU time per call).
    pub per_call: KernelCounters,
    pub per_call_verdict: Option<RooflineVerdict>,
    /// Metrics this GPU's ncu did not know, left out.
    #[serde(default)]
    pub dropped_metrics: Vec<String>,
}

/// Aggregates `launches` (from `calls` candidate calls) per kernel name and per call.
pub fn aggregate(launches: &[NcuLaunch], calls: u32, peaks: Option<&Peaks>) -> NcuProfile {
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
pub fn cudaforge_metrics_json(p: &NcuProfile) -> serde_json::Value {
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
pub fn ncu_failure(output: &str) -> Option<String> {
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
pub fn unknown_metrics(output: &str, requested: &[String]) -> Vec<String> {
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

// ---------------------------------------------------------------------------------------------
// The PyTorch profiler fallback.

/// One row of the PyTorch profiler's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TorchEvent {
    pub name: String,
    /// `cuda_kernel` (device time) or `cpu_op` (self CPU time of an aten operator).
    pub kind: String,
    pub count: u64,
    pub total_us: f64,
}

// ---------------------------------------------------------------------------------------------
// The report.

/// What `kbench profile` found, as printed (table) or with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    pub problem: String,
    pub kernel: String,
    pub device: String,
    pub device_name: String,
    /// `ncu` or `torch-profiler`.
    pub source: String,
    /// Why ncu was not used (None when it was).
    pub fallback_reason: Option<String>,
    pub calls: u32,
    /// Host wall time per call, measured on a loop of `calls` run before any profiler is
    /// active (so it includes launch overhead and Python, not profiling overhead).
    pub wall_s_per_call: Option<f64>,
    pub ncu: Option<NcuProfile>,
    pub torch_events: Vec<TorchEvent>,
    pub peaks: Option<Peaks>,
    /// The problem's cost counted on the reference (FLOPs, bytes).
    pub cost: Option<ProblemCost>,
    pub speed_of_light: Option<SpeedOfLight>,
    /// Measured time per call / speed of light (GPU time per call under ncu, else wall).
    pub sol_ratio: Option<f64>,
    /// The ncu CSV, when kept (`--keep`).
    pub ncu_csv: Option<PathBuf>,
}

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.3e}")
    }
}

fn us(s: f64) -> String {
    format!("{:.2}", s * 1e6)
}

fn short(name: &str, n: usize) -> String {
    if name.chars().count() <= n {
        name.to_string()
    } else {
        let s: String = name.chars().take(n - 1).collect();
        format!("{s}…")
    }
}

/// The report as text: a per-kernel table, the verdicts, the speed of light.
pub fn render(r: &ProfileReport) -> String {
    let mut out = format!(
        "{} · {} · {} ({}) · {} calls · source: {}\n",
        r.problem, r.kernel, r.device, r.device_name, r.calls, r.source
    );
    if let Some(why) = &r.fallback_reason {
        out.push_str(&format!(
            "NOTE: not profiled with Nsight Compute: {why}. Falling back to the PyTorch profiler: {}; no hardware counters, no roofline verdict.\n",
            if r.device == "cpu" {
                "CPU times of aten operators (these are CPU numbers, not GPU kernels)"
            } else {
                "kernel names and device times only"
            }
        ));
    }
    out.push('\n');
    if let Some(n) = &r.ncu {
        out.push_str(&format!(
            "{:<48} {:>6} {:>10} {:>6} {:>10} {:>10} {:>8} {:>6}  verdict\n",
            "kernel", "n/call", "us/launch", "share", "DRAM MB", "GFLOP", "FLOP/B", "occ%"
        ));
        for k in &n.kernels {
            let c = &k.counters;
            out.push_str(&format!(
                "{:<48} {:>6.1} {:>10} {:>5.1}% {:>10.3} {:>10.4} {:>8} {:>6} {}\n",
                short(&k.name, 48),
                k.launches_per_call,
                us(c.duration_s),
                100.0 * k.share,
                c.dram_bytes() / 1e6,
                c.total_flops() / 1e9,
                k.verdict
                    .as_ref()
                    .and_then(|v| v.arithmetic_intensity)
                    .map_or("-".into(), |x| format!("{x:.2}")),
                c.achieved_occupancy_pct
                    .map_or("-".into(), |x| format!("{x:.1}")),
                k.verdict
                    .as_ref()
                    .map_or("-".to_string(), |v| v.bound.to_string()),
            ));
        }
        out.push_str(&format!(
            "\nper call: {} us of GPU time in {} launches, DRAM {:.3} MB, {:.4} GFLOP\n",
            us(n.per_call.duration_s),
            n.launches as f64 / n.calls.max(1) as f64,
            n.per_call.dram_bytes() / 1e6,
            n.per_call.total_flops() / 1e9
        ));
        for k in &n.kernels {
            if let Some(v) = &k.verdict {
                out.push_str(&format!("\n{}:\n{v}", short(&k.name, 100)));
            }
        }
        if let Some(v) = &n.per_call_verdict {
            out.push_str(&format!("\nwhole call:\n{v}"));
        }
        if !n.dropped_metrics.is_empty() {
            out.push_str(&format!(
                "\nmetrics this ncu does not know (left out): {}\n",
                n.dropped_metrics.join(", ")
            ));
        }
    } else {
        out.push_str(&format!(
            "{:<60} {:>11} {:>7} {:>12} {:>10}\n",
            "name", "kind", "count", "total us", "us/call"
        ));
        for e in &r.torch_events {
            out.push_str(&format!(
                "{:<60} {:>11} {:>7} {:>12.1} {:>10.2}\n",
                short(&e.name, 60),
                e.kind,
                e.count,
                e.total_us,
                e.total_us / r.calls.max(1) as f64
            ));
        }
    }
    if let Some(w) = r.wall_s_per_call {
        out.push_str(&format!(
            "\nwall time per call (host, measured before profiling, no profiler active): {} us\n",
            us(w)
        ));
    }
    if let Some(c) = &r.cost {
        out.push_str(&format!(
            "problem cost (reference, counted once): {} FLOP ({}), {:.3} MB moved (inputs {:.3}, weights {:.3}, outputs {:.3})\n",
            sci(c.flops),
            c.precision,
            c.bytes() / 1e6,
            c.input_bytes / 1e6,
            c.weight_bytes / 1e6,
            c.output_bytes / 1e6
        ));
        if r.peaks.is_none() {
            if let Some(w) = r.wall_s_per_call.filter(|w| *w > 0.0) {
                out.push_str(&format!(
                    "achieved on {}: {} FLOP/s, {:.3} GB/s (problem cost / wall time per call; {} has no peaks in kbench's table, so no speed of light)\n",
                    r.device,
                    sci(c.flops / w),
                    c.bytes() / w / 1e9,
                    if r.device == "cpu" { "a CPU" } else { "this GPU" }
                ));
            }
        }
    }
    if let Some(p) = &r.peaks {
        out.push_str(&format!("peaks: {}\n", p.describe()));
    }
    if let Some(s) = &r.speed_of_light {
        out.push_str(&format!("{s}\n"));
        if let Some(x) = r.sol_ratio {
            out.push_str(&format!(
                "this kernel takes {x:.2}x the speed of light{}\n",
                if r.ncu.is_some() {
                    " (GPU time per call under ncu)"
                } else {
                    " (wall time per call)"
                }
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Running it.

/// Finds `ncu`: `--ncu`, else `PATH`, else the usual CUDA install folders.
pub fn find_ncu(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.into_iter()
        .map(|d| d.join("ncu"))
        .find(|p| p.is_file())
}

struct Spec<'a> {
    python: &'a Path,
    worker: &'a Path,
    dir: &'a Path,
    problem: &'a Path,
    kernel: Option<&'a Path>,
    device: Device,
    precision: &'a str,
    calls: u32,
    warmup: u32,
    /// The candidate's extension build folder: the run's content-addressed build cache
    /// (`engine::extension_build_dir`), so a kernel an evaluation built is not built again.
    build_dir: PathBuf,
    /// TORCH_CUDA_ARCH_LIST as evaluations set it (the GPU's own architecture).
    arch: Option<String>,
}

impl Spec<'_> {
    /// The environment every worker command gets (the same build settings as evaluations,
    /// so their build and this one share a cache entry).
    fn env(&self, c: &mut Command) {
        if let Some(a) = &self.arch {
            if std::env::var_os("TORCH_CUDA_ARCH_LIST").is_none() {
                c.env("TORCH_CUDA_ARCH_LIST", a);
            }
        }
    }

    /// Writes the worker's spec for `mode` and returns (spec path, result path).
    fn write(&self, mode: &str) -> Result<(PathBuf, PathBuf)> {
        let spec = self.dir.join(format!("{mode}.spec.json"));
        let out = self.dir.join(format!("{mode}.result.json"));
        let _ = std::fs::remove_file(&out);
        let v = serde_json::json!({
            "problem_path": self.problem,
            "candidate_path": if mode == "cost" { None } else { self.kernel },
            "device": self.device.to_string(),
            "precision": self.precision,
            "calls": self.calls,
            "warmup": self.warmup,
            "mode": mode,
            "out_path": out,
            "build_dir": self.build_dir,
            "input_seed": 0,
            "forward_seed": 0,
        });
        std::fs::write(&spec, serde_json::to_vec_pretty(&v)?)?;
        Ok((spec, out))
    }

    fn worker_cmd(&self, spec: &Path) -> Command {
        let mut c = Command::new(self.python);
        c.args(crate::worker::python::worker_args(self.worker))
            .arg("profile")
            .arg(spec);
        self.env(&mut c);
        c
    }
}

/// Reads the worker's result file; an `error` in it becomes an `Err` naming the file.
fn read_result(out: &Path, what: &str, log: &str) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(out).with_context(|| {
        format!(
            "{what}: the worker wrote no result ({}); its output:\n{}",
            out.display(),
            tail(log, 3000)
        )
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{what}: {} is not JSON", out.display()))?;
    if let Some(e) = v.get("error") {
        bail!(
            "{what} failed ({}): {}\n{}",
            e["kind"].as_str().unwrap_or("error"),
            e["message"].as_str().unwrap_or(""),
            e["traceback"].as_str().unwrap_or("")
        );
    }
    Ok(v)
}

fn tail(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    chars[chars.len().saturating_sub(n)..].iter().collect()
}

fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs the candidate under ncu; Ok(Err(reason)) when ncu could not profile it.
fn run_ncu(
    ncu: &Path,
    spec: &Spec,
    peaks: Option<&Peaks>,
) -> Result<Result<(NcuProfile, serde_json::Value, PathBuf), String>> {
    let (spec_path, out) = spec.write("ncu")?;
    let csv = spec.dir.join("ncu.csv");
    let mut metrics = all_metrics();
    let mut dropped: Vec<String> = Vec::new();
    // ncu names one unknown metric per failed start; each retry costs a worker start.
    for _attempt in 0..10 {
        let _ = std::fs::remove_file(&csv);
        let mut c = Command::new(ncu);
        spec.env(&mut c);
        c.args([
            "--csv",
            "--page",
            "raw",
            "--print-units",
            "base",
            "--profile-from-start",
            "off",
            "--target-processes",
            "all",
            "--replay-mode",
            "kernel",
            // ncu locks clocks to base by default; the peaks assume the max boost clock, as
            // the kernel runs outside the profiler.
            "--clock-control",
            "none",
            "--launch-count",
            "2000",
        ])
        .arg("--metrics")
        .arg(metrics.join(","))
        .arg("--log-file")
        .arg(&csv)
        .arg(spec.python)
        .args(crate::worker::python::worker_args(spec.worker))
        .arg("profile")
        .arg(&spec_path);
        let o = match c.output() {
            Ok(o) => o,
            Err(e) => return Ok(Err(format!("could not start {}: {e}", ncu.display()))),
        };
        let log = std::fs::read_to_string(&csv).unwrap_or_default();
        let all = format!("{log}\n{}", output_text(&o));
        let unknown = unknown_metrics(&all, &metrics);
        if !unknown.is_empty() {
            metrics.retain(|m| !unknown.contains(m));
            dropped.extend(unknown);
            continue;
        }
        // No result file and an ncu error: ncu could not run it (fall back). A result with
        // an error is the candidate's own failure, not ncu's: report it.
        let result = match read_result(&out, "running the kernel under ncu", &all) {
            Ok(v) => v,
            Err(e) => match ncu_failure(&all) {
                Some(why) if !out.exists() => return Ok(Err(why)),
                _ => return Err(e),
            },
        };
        let launches = match parse_ncu_raw_csv(&log) {
            Ok(l) => l,
            Err(why) => {
                return Ok(Err(ncu_failure(&all).unwrap_or(why)));
            }
        };
        let mut p = aggregate(&launches, spec.calls, peaks);
        p.dropped_metrics = dropped;
        return Ok(Ok((p, result, csv)));
    }
    Ok(Err(format!(
        "ncu kept rejecting metrics (left out so far: {})",
        dropped.join(", ")
    )))
}

/// `kbench profile`: prints [`profile`]'s report as a table, or as JSON with `--json`.
pub fn command(a: &ProfileArgs) -> Result<i32> {
    let report = profile(a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(crate::exit::OK)
}

/// Profiles `a.kernel` on `a.problem` and returns the report (the API the agents' profile
/// tool calls; build a [`ProfileArgs`] with the fields it needs). Errors name the file and
/// the fix; a kernel that fails to load or run is an error, ncu trouble is a fallback.
pub fn profile(a: &ProfileArgs) -> Result<ProfileReport> {
    if !a.problem.is_file() {
        bail!(
            "problem file {} not found: pass a KernelBench problem (class Model, get_inputs, get_init_inputs) with --problem",
            a.problem.display()
        );
    }
    if !a.kernel.is_file() {
        bail!(
            "kernel file {} not found: pass the candidate module (defining class ModelNew) with --kernel",
            a.kernel.display()
        );
    }
    let device = crate::config::resolve_device(&a.device)?;
    let cache = crate::worker::python::cache_dir();
    let choice = crate::worker::python::PythonChoice::resolve(a.python.python.as_deref(), &cache);
    let info = crate::worker::python::probe(&choice)?;
    let worker = crate::worker::python::materialize_worker(&cache)?;
    let arch = match device {
        Device::Cuda(i) => crate::gpu::describe().ok().and_then(|g| {
            g.into_iter()
                .find(|g| g.index == i)
                .map(|g| format!("{}.{}", g.compute_capability.0, g.compute_capability.1))
        }),
        Device::Cpu => None,
    };
    let kernel_source = std::fs::read(&a.kernel)
        .with_context(|| format!("reading kernel file {}", a.kernel.display()))?;
    let build_dir = crate::exec::extension_build_dir(
        &cache,
        &kbench_suites::sha256_hex(&kernel_source),
        &info.torch,
        device,
        arch.as_deref(),
    );
    let temp = tempfile::tempdir().context("creating a temporary folder")?;
    let dir = match &a.keep {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let problem = std::fs::canonicalize(&a.problem)?;
    let kernel = std::fs::canonicalize(&a.kernel)?;
    let spec = Spec {
        python: &choice.python,
        worker: &worker,
        dir: &dir,
        problem: &problem,
        kernel: Some(&kernel),
        device,
        precision: a.precision.as_str(),
        calls: a.calls.max(1),
        warmup: a.warmup,
        build_dir,
        arch,
    };
    let peaks = match device {
        Device::Cuda(i) => crate::gpu::describe()
            .ok()
            .and_then(|g| g.into_iter().find(|g| g.index == i))
            .and_then(|g| g.peaks()),
        Device::Cpu => None,
    };

    // The problem's cost, on the reference (trusted: no candidate code in that process).
    let (cost_spec, cost_out) = spec.write("cost")?;
    let o = spec
        .worker_cmd(&cost_spec)
        .output()
        .context("starting the worker")?;
    let cost: Option<ProblemCost> =
        match read_result(&cost_out, "counting the problem's cost", &output_text(&o)) {
            Ok(v) => serde_json::from_value(v["cost"].clone()).ok(),
            Err(e) => {
                eprintln!("warning: {e:#}");
                None
            }
        };

    // Load (and build) the candidate once outside any profiler: extension builds are not
    // run under ncu, and a kernel that does not load is reported plainly.
    let (load_spec, load_out) = spec.write("load")?;
    let o = spec
        .worker_cmd(&load_spec)
        .output()
        .context("starting the worker")?;
    read_result(
        &load_out,
        &format!("loading {} for {}", a.kernel.display(), a.problem.display()),
        &output_text(&o),
    )?;

    let ncu_path = if a.no_ncu {
        None
    } else {
        find_ncu(a.ncu.as_deref())
    };
    let attempt: Result<(NcuProfile, serde_json::Value, PathBuf), String> =
        match (device, &ncu_path) {
            (_, _) if a.no_ncu => Err("--no-ncu was given".into()),
            (Device::Cpu, _) => Err("the device is the CPU; ncu profiles CUDA kernels only".into()),
            (_, None) => Err(
                "ncu was not found (not on PATH nor in /usr/local/cuda/bin; pass --ncu PATH)"
                    .into(),
            ),
            (Device::Cuda(_), Some(ncu)) => run_ncu(ncu, &spec, peaks.as_ref())?,
        };
    let mut report = ProfileReport {
        problem: a.problem.display().to_string(),
        kernel: a.kernel.display().to_string(),
        device: device.to_string(),
        device_name: String::new(),
        source: String::new(),
        fallback_reason: None,
        calls: spec.calls,
        wall_s_per_call: None,
        ncu: None,
        torch_events: Vec::new(),
        peaks: peaks.clone(),
        speed_of_light: match (&cost, &peaks) {
            (Some(c), Some(p)) => Some(speed_of_light(c, p)),
            _ => None,
        },
        cost,
        sol_ratio: None,
        ncu_csv: None,
    };
    let measured_s = match attempt {
        Ok((p, result, csv)) => {
            report.source = "ncu".into();
            report.device_name = result["device_name"].as_str().unwrap_or("").to_string();
            report.wall_s_per_call = result["wall_s_per_call"].as_f64();
            report.ncu_csv = a.keep.as_ref().map(|_| csv);
            let t = p.per_call.duration_s;
            report.ncu = Some(p);
            Some(t)
        }
        Err(why) => {
            report.source = "torch-profiler".into();
            report.fallback_reason = Some(why);
            let (s, out) = spec.write("torch")?;
            let o = spec
                .worker_cmd(&s)
                .output()
                .context("starting the worker")?;
            let result = read_result(
                &out,
                &format!(
                    "profiling {} on {} with the PyTorch profiler",
                    a.kernel.display(),
                    a.problem.display()
                ),
                &output_text(&o),
            )?;
            report.device_name = result["device_name"].as_str().unwrap_or("").to_string();
            report.wall_s_per_call = result["wall_s_per_call"].as_f64();
            report.torch_events =
                serde_json::from_value(result["events"].clone()).unwrap_or_default();
            // On a GPU, the kernels' device time per call; on a CPU, the wall time.
            let kernel_us: f64 = report
                .torch_events
                .iter()
                .filter(|e| e.kind == "cuda_kernel")
                .map(|e| e.total_us)
                .sum();
            if kernel_us > 0.0 {
                Some(kernel_us * 1e-6 / spec.calls as f64)
            } else {
                report.wall_s_per_call
            }
        }
    };
    report.sol_ratio = match (&report.speed_of_light, measured_s) {
        (Some(s), Some(t)) => s.ratio(t),
        _ => None,
    };
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbench_record::perf::Bound;

    use crate::test_support::{h100, h100_ncu_report};

    const ELEMENTWISE: &str = include_str!("../../../tests/fixtures/ncu/elementwise_add.csv");
    const MATMUL: &str = include_str!("../../../tests/fixtures/ncu/matmul_bf16.csv");
    const TINY: &str = include_str!("../../../tests/fixtures/ncu/tiny_scale_scaled_units.csv");
    const PERM: &str = include_str!("../../../tests/fixtures/ncu/err_nvgpuctrperm.log");

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

    /// Recorded by `tests/gpu/run_issue9.sh` on an H100 80GB HBM3 (ncu 2025.3.1, torch
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
            "../../../tests/fixtures/ncu/recorded_h100_elementwise_add.csv"
        ));
        assert!(e.kernels[0].name.starts_with("elementwise_add_kernel"));
        let v = e.kernels[0].verdict.as_ref().unwrap();
        assert_eq!(v.bound, Bound::MemoryBound);
        assert!(
            (v.bandwidth_fraction - 0.766).abs() < 0.01,
            "{}",
            v.bandwidth_fraction
        );
        assert_eq!(e.per_call.flops[&FlopClass::Fp32], 67_108_864.0);
        // A bf16 4096^3 matmul (cuBLAS): compute-bound, and the tensor pipe's ops are exactly
        // 2·N^3 FLOPs per call.
        let m = rec(include_str!(
            "../../../tests/fixtures/ncu/recorded_h100_matmul_bf16.csv"
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
            "../../../tests/fixtures/ncu/recorded_h100_tiny_scale.csv"
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
        assert!((k.share - 1.0).abs() < 1e-12);
        // Mean duration of the five launches: (70,112 + 70,240 + 69,984 + 70,048 + 70,016)/5 ns.
        assert!(
            (k.counters.duration_s - 70_080e-9).abs() < 1e-12,
            "{}",
            k.counters.duration_s
        );
        // 16,777,216 FADD per launch (pred_on thread instructions).
        assert_eq!(k.counters.flops[&FlopClass::Fp32], 16_777_216.0);
        let v = k.verdict.as_ref().unwrap();
        assert_eq!(v.bound, Bound::MemoryBound);
        // 201,326,592 B / 70.08 us / 3352.32 GB/s = 0.857.
        assert!(
            (v.bandwidth_fraction - 0.857).abs() < 0.001,
            "{}",
            v.bandwidth_fraction
        );
        assert!((p.per_call.duration_s - 70_080e-9).abs() < 1e-12);
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
        assert!(
            (p.per_call.duration_s - (gemm.counters.duration_s + other.counters.duration_s)).abs()
                < 1e-12
        );
        let report = h100_ncu_report("level1/1_Square_matrix_multiplication_.py", p);
        let text = render(&report);
        println!("{text}");
        assert!(text.contains("compute-bound"), "{text}");
        // The JSON keys tests/gpu/run_issue9.sh reads.
        let v = serde_json::to_value(&report).unwrap();
        let k0 = &v["ncu"]["kernels"][0];
        assert_eq!(k0["verdict"]["bound"], "compute-bound");
        assert!(k0["verdict"]["bandwidth_fraction"].is_f64());
        assert!(k0["counters"]["achieved_occupancy_pct"].is_f64());
        assert!(k0["launches_per_call"].is_f64());
        assert_eq!(
            v["ncu"]["per_call"]["flops"]["bf16_tensor"].as_f64(),
            Some(2.0 * 4096f64.powi(3))
        );
        assert!(v["ncu"]["per_call_verdict"]["bound"].is_string());
        assert!(v["ncu"]["dropped_metrics"].is_array());
        if let Some(path) = std::env::var_os("KBENCH_DUMP_PROFILE_JSON") {
            std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        }
        assert!(text.contains("whole call:"), "{text}");
        assert!(!text.contains("NOTE"), "{text}");
    }

    #[test]
    fn scaled_units_and_a_launch_bound_kernel() {
        let l = parse_ncu_raw_csv(TINY).unwrap();
        // Kbyte and usecond are scaled to bytes and seconds.
        assert_eq!(l[0].metrics["dram__bytes_read.sum"], 4_100.0); // "4.10" Kbyte
        assert!((l[0].metrics["gpu__time_duration.sum"] - 2.46e-6).abs() < 1e-15);
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

    /// A stand-in for ncu: rejects the fp8 tensor metric like an ncu that does not know it,
    /// then "profiles" by copying the elementwise fixture to --log-file and writing the
    /// worker's result file; with KBENCH_FAKE_NCU_PERM set it fails like ERR_NVGPUCTRPERM.
    fn fake_ncu(dir: &Path, perm: bool) -> PathBuf {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/ncu")
            .join(if perm {
                "err_nvgpuctrperm.log"
            } else {
                "elementwise_add.csv"
            });
        let script = format!(
            r#"#!/bin/sh
log=""; metrics=""; spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --log-file) log="$2"; shift ;;
    --metrics) metrics="$2"; shift ;;
    profile) spec="$2"; shift ;;
  esac
  shift
done
case "$metrics" in
  *sm__ops_path_tensor_src_fp8.sum*) echo '==ERROR== Failed to find metric regex:^sm__ops_path_tensor_src_fp8\.sum$' > "$log"; exit 1 ;;
esac
cp "{fixture}" "$log"
if [ "{perm}" = "false" ]; then
  out=$(sed -n 's/.*"out_path": "\(.*\)".*/\1/p' "$spec")
  echo '{{"device_name": "fake H100", "wall_s_per_call": 0.0001, "calls": 5}}' > "$out"
fi
"#,
            fixture = fixture.display()
        );
        let path = dir.join("ncu");
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn ncu_runs_retry_without_unknown_metrics_and_fall_back_on_permission_errors() {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec {
            python: Path::new("/nonexistent/python"),
            worker: Path::new("/nonexistent/worker"),
            dir: dir.path(),
            problem: Path::new("/nonexistent/1_Add.py"),
            kernel: Some(Path::new("/nonexistent/k.py")),
            device: Device::Cuda(0),
            precision: "fp32",
            calls: 5,
            warmup: 1,
            build_dir: dir.path().join("build"),
            arch: Some("9.0".into()),
        };
        let ncu = fake_ncu(dir.path(), false);
        let (p, result, csv) = run_ncu(&ncu, &spec, Some(&h100())).unwrap().unwrap();
        assert_eq!(p.dropped_metrics, vec!["sm__ops_path_tensor_src_fp8.sum"]);
        assert_eq!(p.kernels.len(), 1);
        assert_eq!(result["device_name"], "fake H100");
        assert!(csv.is_file());
        let sub = tempfile::tempdir().unwrap();
        let ncu = fake_ncu(sub.path(), true);
        let why = run_ncu(&ncu, &spec, Some(&h100())).unwrap().unwrap_err();
        assert!(why.contains("ERR_NVGPUCTRPERM"), "{why}");
        let why = run_ncu(Path::new("/nonexistent/ncu"), &spec, None)
            .unwrap()
            .unwrap_err();
        assert!(why.contains("could not start /nonexistent/ncu"), "{why}");
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
