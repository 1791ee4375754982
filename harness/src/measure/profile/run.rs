//! Running a profile: the worker's profiling modes (`python -m kbench_worker profile SPEC`: the problem's
//! cost, loading the kernel, the PyTorch profiler) and the candidate under ncu, retried
//! without the metrics this ncu does not know, into a [`ProfileReport`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use kbench_record::perf::{speed_of_light, Peaks, ProblemCost, SpeedOfLight};
use kbench_record::{Device, Precision};
use serde::{Deserialize, Serialize};

use super::ncu::{
    aggregate, all_metrics, ncu_failure, parse_ncu_raw_csv, unknown_metrics, NcuProfile,
};

/// What to profile and how: `kbench profile`'s options as plain values
/// (`commands::profile` builds it from the command line; the agents' profile tool builds it
/// directly).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProfileConfig {
    /// The problem file (class Model, get_inputs, get_init_inputs).
    pub(crate) problem: PathBuf,
    /// The kernel to profile: a module defining class ModelNew.
    pub(crate) kernel: PathBuf,
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    pub(crate) device: String,
    pub(crate) precision: Precision,
    /// Profiled calls of the kernel (after the warm-up).
    pub(crate) calls: u32,
    /// Unprofiled warm-up calls.
    pub(crate) warmup: u32,
    /// The ncu executable (default: `ncu` on PATH, else /usr/local/cuda/bin/ncu).
    pub(crate) ncu: Option<PathBuf>,
    /// Use the PyTorch profiler even where ncu is available.
    pub(crate) no_ncu: bool,
    /// Keep the worker's specs, results and ncu's CSV in this folder.
    pub(crate) keep: Option<PathBuf>,
    /// Python interpreter with torch (default: $KBENCH_PYTHON, else kbench's own environment).
    pub(crate) python: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------------
// The PyTorch profiler fallback.

/// One row of the PyTorch profiler's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TorchEvent {
    pub(crate) name: String,
    /// `cuda_kernel` (device time) or `cpu_op` (self CPU time of an aten operator).
    pub(crate) kind: String,
    pub(crate) count: u64,
    pub(crate) total_us: f64,
}

// ---------------------------------------------------------------------------------------------
// The report.

/// What `kbench profile` found, as printed (table) or with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ProfileReport {
    pub(crate) problem: String,
    pub(crate) kernel: String,
    pub(crate) device: String,
    pub(crate) device_name: String,
    /// `ncu` or `torch-profiler`.
    pub(crate) source: String,
    /// Why ncu was not used (None when it was).
    pub(crate) fallback_reason: Option<String>,
    pub(crate) calls: u32,
    /// Host wall time per call, measured on a loop of `calls` run before any profiler is
    /// active (so it includes launch overhead and Python, not profiling overhead).
    pub(crate) wall_s_per_call: Option<f64>,
    pub(crate) ncu: Option<NcuProfile>,
    pub(crate) torch_events: Vec<TorchEvent>,
    pub(crate) peaks: Option<Peaks>,
    /// The problem's cost counted on the reference (FLOPs, bytes).
    pub(crate) cost: Option<ProblemCost>,
    pub(crate) speed_of_light: Option<SpeedOfLight>,
    /// Measured time per call / speed of light (GPU time per call under ncu, else wall).
    pub(crate) sol_ratio: Option<f64>,
    /// The ncu CSV, when kept (`--keep`).
    pub(crate) ncu_csv: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------------
// Running it.

/// Finds `ncu`: `--ncu`, else `PATH`, else the usual CUDA install folders.
pub(crate) fn find_ncu(flag: Option<&Path>) -> Option<PathBuf> {
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

/// Profiles `a.kernel` on `a.problem` and returns the report (the API the agents' profile
/// tool calls; build a [`ProfileConfig`] with the fields it needs). Errors name the file and
/// the fix; a kernel that fails to load or run is an error, ncu trouble is a fallback.
pub(crate) fn profile(a: &ProfileConfig) -> Result<ProfileReport> {
    check_files(a)?;
    let device = crate::config::resolve_device(&a.device)?;
    let cache = crate::worker::python::cache_dir();
    let choice = crate::worker::python::PythonChoice::resolve(a.python.as_deref(), &cache);
    let info = crate::worker::probe_cache::probe_persisted(&choice, &cache)?;
    let worker = crate::worker::python::materialize_worker(&cache)?;
    let arch = gpu_arch(device);
    let build_dir = kernel_build_dir(a, &cache, &info.torch, device, arch.as_deref())?;
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
    let peaks = gpu_peaks(device);
    let cost = problem_cost(&spec)?;
    load_kernel(a, &spec)?;
    let attempt = ncu_attempt(a, device, &spec, peaks.as_ref())?;
    let mut report = blank_report(a, device, &spec, peaks, cost);
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
        Err(why) => torch_profile(a, &spec, &mut report, why)?,
    };
    report.sol_ratio = match (&report.speed_of_light, measured_s) {
        (Some(s), Some(t)) => s.ratio(t),
        _ => None,
    };
    Ok(report)
}

/// The problem and kernel files must exist: each missing one is an error naming the fix.
fn check_files(a: &ProfileConfig) -> Result<()> {
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
    Ok(())
}

/// The compute capability of the GPU of `device` ("9.0"); `None` on the CPU.
fn gpu_arch(device: Device) -> Option<String> {
    match device {
        Device::Cuda(i) => crate::gpu::describe().ok().and_then(|g| {
            g.into_iter()
                .find(|g| g.index == i)
                .map(|g| format!("{}.{}", g.compute_capability.0, g.compute_capability.1))
        }),
        Device::Cpu => None,
    }
}

/// The GPU's peak rates, for the speed of light; `None` on the CPU or an unknown GPU.
fn gpu_peaks(device: Device) -> Option<Peaks> {
    match device {
        Device::Cuda(i) => crate::gpu::describe()
            .ok()
            .and_then(|g| g.into_iter().find(|g| g.index == i))
            .and_then(|g| g.peaks()),
        Device::Cpu => None,
    }
}

/// Where the kernel's extensions are built, by its source's hash (shared with other runs).
fn kernel_build_dir(
    a: &ProfileConfig,
    cache: &Path,
    torch: &str,
    device: Device,
    arch: Option<&str>,
) -> Result<PathBuf> {
    let kernel_source = std::fs::read(&a.kernel)
        .with_context(|| format!("reading kernel file {}", a.kernel.display()))?;
    // A bad KBENCH_CUDA_HEADER is refused here as by `kbench run`, not built the other way.
    crate::worker::light_headers::light_headers()?;
    Ok(crate::worker::build::extension_build_dir(
        cache,
        &kbench_suites::sha256_hex(&kernel_source),
        torch,
        device,
        arch,
        // `kbench profile` runs the user's own kernel as the user.
        None,
    ))
}

/// The problem's cost, on the reference (trusted: no candidate code in that process);
/// `None`, with a warning, where it could not be counted.
fn problem_cost(spec: &Spec) -> Result<Option<ProblemCost>> {
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
    Ok(cost)
}

/// Loads (and builds) the candidate once outside any profiler: extension builds are not
/// run under ncu, and a kernel that does not load is reported plainly.
fn load_kernel(a: &ProfileConfig, spec: &Spec) -> Result<()> {
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
    Ok(())
}

/// The kernel profiled under ncu, or why it was not (the reason for the fallback).
fn ncu_attempt(
    a: &ProfileConfig,
    device: Device,
    spec: &Spec,
    peaks: Option<&Peaks>,
) -> Result<Result<(NcuProfile, serde_json::Value, PathBuf), String>> {
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
            (Device::Cuda(_), Some(ncu)) => run_ncu(ncu, spec, peaks)?,
        };
    Ok(attempt)
}

/// The report before anything is measured: the problem's cost and speed of light.
fn blank_report(
    a: &ProfileConfig,
    device: Device,
    spec: &Spec,
    peaks: Option<Peaks>,
    cost: Option<ProblemCost>,
) -> ProfileReport {
    ProfileReport {
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
    }
}

/// The fallback: the kernel profiled with the PyTorch profiler (`why`: ncu was not used),
/// into `report`. The time per call it measured: on a GPU, the kernels' device time per
/// call; on a CPU, the wall time.
fn torch_profile(
    a: &ProfileConfig,
    spec: &Spec,
    report: &mut ProfileReport,
    why: String,
) -> Result<Option<f64>> {
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
    report.torch_events = serde_json::from_value(result["events"].clone()).unwrap_or_default();
    // On a GPU, the kernels' device time per call; on a CPU, the wall time.
    let kernel_us: f64 = report
        .torch_events
        .iter()
        .filter(|e| e.kind == "cuda_kernel")
        .map(|e| e.total_us)
        .sum();
    Ok(if kernel_us > 0.0 {
        Some(kernel_us * 1e-6 / spec.calls as f64)
    } else {
        report.wall_s_per_call
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::h100;

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
}
