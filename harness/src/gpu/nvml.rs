//! Live GPU state through NVML (libnvidia-ml, loaded at run time by `nvml-wrapper`).
//!
//! NVML is optional: without it (no NVIDIA driver, a container without the library, no
//! permission) everything here answers `None` and [`unavailable_reason`] says why; nothing
//! panics and nothing is printed. NVML devices are matched to the CUDA driver's by UUID,
//! never by index: the CUDA driver orders devices fastest first and honours
//! `CUDA_VISIBLE_DEVICES`, while NVML sees every GPU in PCI bus order.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::gpu::inventory::cuda_uuid;
use crate::gpu::uuid::{format_uuid, parse_uuid};

/// NVML, initialised once per process, or why it cannot be used.
pub(crate) fn nvml() -> Result<&'static Nvml, &'static str> {
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();
    NVML.get_or_init(|| Nvml::init().map_err(|e| explain(&e)))
        .as_ref()
        .map_err(|e| e.as_str())
}

/// Why NVML cannot be used here, or None when it can.
pub(crate) fn unavailable_reason() -> Option<String> {
    nvml().err().map(str::to_string)
}

/// The NVIDIA driver's version (e.g. "580.65.06"); None without NVML.
pub(crate) fn driver_version() -> Option<String> {
    nvml().ok()?.sys_driver_version().ok()
}

/// A plain sentence for an NVML initialisation error.
fn explain(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => {
            format!("libnvidia-ml could not be loaded: {inner}; is the NVIDIA driver installed?")
        }
        NvmlError::FailedToLoadSymbol(s) => {
            format!("libnvidia-ml is missing a function ({s}); the driver may be too old")
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".into(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".into(),
        other => format!("NVML failed to initialise: {other}"),
    }
}

/// A GPU named by the CUDA driver's ordinal (as `--gpus` and `kbench gpus` number them) or by
/// UUID (`GPU-…` as NVML spells it, or 32 bare hex digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuRef<'a> {
    Ordinal(usize),
    Uuid(&'a str),
}

impl From<usize> for GpuRef<'_> {
    fn from(i: usize) -> Self {
        GpuRef::Ordinal(i)
    }
}

impl From<u32> for GpuRef<'_> {
    fn from(i: u32) -> Self {
        GpuRef::Ordinal(i as usize)
    }
}

impl<'a> From<&'a str> for GpuRef<'a> {
    fn from(s: &'a str) -> Self {
        GpuRef::Uuid(s)
    }
}

impl<'a> From<&'a String> for GpuRef<'a> {
    fn from(s: &'a String) -> Self {
        GpuRef::Uuid(s)
    }
}

impl GpuRef<'_> {
    /// The UUID's bytes: parsed, or asked of the CUDA driver for an ordinal.
    fn uuid(&self) -> Option<[u8; 16]> {
        match self {
            GpuRef::Ordinal(i) => cuda_uuid(*i),
            GpuRef::Uuid(s) => parse_uuid(s),
        }
    }
}

/// NVML's device with these UUID bytes, and its NVML index.
fn find_device(nvml: &'static Nvml, want: &[u8; 16]) -> Option<(u32, Device<'static>)> {
    let count = nvml.device_count().ok()?;
    (0..count).find_map(|i| {
        let d = nvml.device_by_index(i).ok()?;
        let u = d.uuid().ok()?;
        (parse_uuid(&u).as_ref() == Some(want)).then_some((i, d))
    })
}

/// One GPU's state as NVML reports it now. A query the GPU does not support is None.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct LiveState {
    /// NVML's spelling, `GPU-…`.
    pub(crate) uuid: String,
    /// NVML's index, which need not be the CUDA ordinal.
    pub(crate) nvml_index: u32,
    pub(crate) sm_clock_mhz: Option<u32>,
    pub(crate) mem_clock_mhz: Option<u32>,
    pub(crate) temp_c: Option<u32>,
    pub(crate) power_w: Option<f64>,
    /// Percent of the last sample period (1/6 s to 1 s, by GPU) in which a kernel ran.
    pub(crate) util_pct: Option<u32>,
    /// Percent of the last sample period in which device memory was read or written.
    pub(crate) mem_util_pct: Option<u32>,
    pub(crate) mem_used_bytes: Option<u64>,
    pub(crate) mem_total_bytes: Option<u64>,
    pub(crate) driver_version: Option<String>,
}

/// The live state of one GPU, by CUDA ordinal or UUID; None without NVML or when NVML has no
/// GPU with that UUID. Never panics, never prints.
pub(crate) fn live<'a>(gpu: impl Into<GpuRef<'a>>) -> Option<LiveState> {
    let nvml = nvml().ok()?;
    let want = gpu.into().uuid()?;
    let (nvml_index, d) = find_device(nvml, &want)?;
    let util = d.utilization_rates().ok();
    let mem = d.memory_info().ok();
    Some(LiveState {
        uuid: d.uuid().unwrap_or_else(|_| format_uuid(&want)),
        nvml_index,
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
        temp_c: d.temperature(TemperatureSensor::Gpu).ok(),
        power_w: d.power_usage().ok().map(|mw| mw as f64 / 1000.0),
        util_pct: util.as_ref().map(|u| u.gpu),
        mem_util_pct: util.as_ref().map(|u| u.memory),
        mem_used_bytes: mem.as_ref().map(|m| m.used),
        mem_total_bytes: mem.as_ref().map(|m| m.total),
        driver_version: nvml.sys_driver_version().ok(),
    })
}

// ---------------------------------------------------------------------------------------------
// Sampling GPU activity during a run.

/// One line of the sampler's JSON Lines file. A query the GPU refuses is `null`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct GpuSample {
    pub(crate) t_unix_s: f64,
    /// The GPU's position in the list given to [`GpuSampler::start`].
    pub(crate) gpu: usize,
    pub(crate) util_pct: Option<u32>,
    pub(crate) sm_clock_mhz: Option<u32>,
    pub(crate) mem_used_bytes: Option<u64>,
    pub(crate) temp_c: Option<u32>,
}

/// One GPU's activity over the sampler's life.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct GpuBusy {
    /// The GPU's position in the list given to [`GpuSampler::start`].
    pub(crate) gpu: usize,
    pub(crate) uuid: String,
    /// Samples written for this GPU (0 if NVML has no GPU with this UUID).
    pub(crate) samples: u64,
    /// Mean of `util_pct` over the samples that had one; None if none did.
    pub(crate) mean_util_pct: Option<f64>,
}

/// What [`GpuSampler::stop`] returns.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub(crate) struct SamplerSummary {
    pub(crate) gpus: Vec<GpuBusy>,
    /// The first error writing the samples file, after which sampling stopped.
    pub(crate) write_error: Option<String>,
}

/// A thread that samples NVML every `period` and appends one JSON line per GPU and sample
/// ([`GpuSample`]) to a file, buffered and flushed when stopped (or dropped).
pub(crate) struct GpuSampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<SamplerSummary>>,
}

impl GpuSampler {
    /// Starts sampling the GPUs with these UUIDs (in the order the samples' `gpu` field
    /// numbers them). None without NVML, when none of the UUIDs is an NVML device, or when
    /// `path` cannot be opened; [`GpuSampler::try_start`] says which.
    pub(crate) fn start(uuids: Vec<String>, period: Duration, path: PathBuf) -> Option<GpuSampler> {
        Self::try_start(uuids, period, path).ok()
    }

    /// [`GpuSampler::start`], with the reason when there is no sampler.
    pub(crate) fn try_start(
        uuids: Vec<String>,
        period: Duration,
        path: PathBuf,
    ) -> Result<GpuSampler, String> {
        let nvml = nvml().map_err(|e| format!("NVML: not available ({e})"))?;
        let devices: Vec<Option<Device<'static>>> = uuids
            .iter()
            .map(|u| {
                parse_uuid(u)
                    .and_then(|b| find_device(nvml, &b))
                    .map(|(_, d)| d)
            })
            .collect();
        if devices.iter().all(Option::is_none) {
            return Err(format!("NVML has no GPU with the UUIDs {uuids:?}"));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let (tx, rx) = mpsc::channel();
        let period = period.max(Duration::from_millis(1));
        let thread = std::thread::Builder::new()
            .name("kbench-gpu-sampler".into())
            .spawn(move || sample_loop(uuids, devices, period, file, rx))
            .map_err(|e| format!("cannot start the sampler thread: {e}"))?;
        Ok(GpuSampler {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// Stops sampling, flushes the file and returns each GPU's sample count and mean
    /// utilisation.
    pub(crate) fn stop(mut self) -> SamplerSummary {
        self.finish()
    }

    fn finish(&mut self) -> SamplerSummary {
        drop(self.stop.take());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(summary)) => summary,
            Some(Err(_)) => SamplerSummary {
                gpus: Vec::new(),
                write_error: Some("the sampler thread panicked".into()),
            },
            None => SamplerSummary::default(),
        }
    }
}

impl Drop for GpuSampler {
    fn drop(&mut self) {
        self.finish();
    }
}

fn sample_loop(
    uuids: Vec<String>,
    devices: Vec<Option<Device<'static>>>,
    period: Duration,
    file: std::fs::File,
    stop: mpsc::Receiver<()>,
) -> SamplerSummary {
    let mut out = std::io::BufWriter::new(file);
    let mut counts = vec![0u64; devices.len()];
    let mut util_sum = vec![0u64; devices.len()];
    let mut util_n = vec![0u64; devices.len()];
    let mut write_error = None;
    let mut next = Instant::now();
    'run: loop {
        let t_unix_s = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for (gpu, d) in devices.iter().enumerate() {
            let Some(d) = d else { continue };
            let sample = GpuSample {
                t_unix_s,
                gpu,
                util_pct: d.utilization_rates().ok().map(|u| u.gpu),
                sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                mem_used_bytes: d.memory_info().ok().map(|m| m.used),
                temp_c: d.temperature(TemperatureSensor::Gpu).ok(),
            };
            let written = serde_json::to_writer(&mut out, &sample)
                .map_err(|e| e.to_string())
                .and_then(|()| out.write_all(b"\n").map_err(|e| e.to_string()));
            if let Err(e) = written {
                write_error = Some(e);
                break 'run;
            }
            counts[gpu] += 1;
            if let Some(u) = sample.util_pct {
                util_sum[gpu] += u as u64;
                util_n[gpu] += 1;
            }
        }
        // Keep to the schedule; after a stall, start it again from now rather than catch up.
        next += period;
        let now = Instant::now();
        if next < now {
            next = now + period;
        }
        match stop.recv_timeout(next - now) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Err(e) = out.flush() {
        write_error.get_or_insert(e.to_string());
    }
    SamplerSummary {
        gpus: uuids
            .into_iter()
            .enumerate()
            .map(|(gpu, uuid)| GpuBusy {
                gpu,
                uuid,
                samples: counts[gpu],
                mean_util_pct: (util_n[gpu] > 0).then(|| util_sum[gpu] as f64 / util_n[gpu] as f64),
            })
            .collect(),
        write_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809";

    #[test]
    fn a_missing_library_is_an_error_with_a_reason_not_a_panic() {
        let e = Nvml::builder()
            .lib_path(std::ffi::OsStr::new("/nonexistent/libnvidia-ml.so.1"))
            .init()
            .expect_err("no library at that path");
        let why = explain(&e);
        assert!(why.contains("libnvidia-ml could not be loaded"), "{why}");
        assert!(why.contains("/nonexistent/libnvidia-ml.so.1"), "{why}");
    }

    #[test]
    fn without_nvml_everything_is_none_with_a_reason() {
        match nvml() {
            Ok(n) => {
                println!(
                    "NVML present: driver {:?}, {:?} devices",
                    n.sys_driver_version(),
                    n.device_count()
                );
                assert!(unavailable_reason().is_none());
                assert!(driver_version().is_some());
            }
            Err(why) => {
                println!("NVML not available here: {why}");
                assert!(!why.is_empty());
                assert_eq!(unavailable_reason().as_deref(), Some(why));
                assert_eq!(driver_version(), None);
                assert_eq!(live(0usize), None);
                assert_eq!(live(SAMPLE), None);
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("samples.jsonl");
                let r = GpuSampler::try_start(
                    vec![SAMPLE.into()],
                    Duration::from_millis(10),
                    path.clone(),
                );
                let e = r.err().expect("no sampler without NVML");
                assert!(e.starts_with("NVML: not available ("), "{e}");
                assert!(
                    GpuSampler::start(vec![SAMPLE.into()], Duration::from_millis(10), path)
                        .is_none()
                );
            }
        }
        // A UUID no GPU has is None with or without NVML.
        assert_eq!(live("GPU-00000000-0000-0000-0000-000000000000"), None);
        assert_eq!(live("not a uuid"), None);
    }

    #[test]
    fn live_state_matches_the_cuda_device_by_uuid() {
        let Ok(gpus) = crate::gpu::inventory::describe() else {
            println!("skipped: no CUDA device");
            return;
        };
        if let Some(why) = unavailable_reason() {
            println!("skipped: NVML: not available ({why})");
            return;
        }
        for g in &gpus {
            let by_uuid = live(g.uuid.as_str()).expect("NVML knows every CUDA device");
            let by_ordinal = live(g.index).expect("by ordinal too");
            println!("GPU {} ({}): {by_uuid:?}", g.index, g.uuid);
            assert_eq!(by_uuid.uuid, g.uuid);
            assert_eq!(by_ordinal.uuid, g.uuid);
            assert_eq!(by_uuid.nvml_index, by_ordinal.nvml_index);
            assert!(by_uuid.sm_clock_mhz.is_some_and(|c| c > 0));
            assert!(by_uuid.temp_c.is_some_and(|t| t > 0 && t < 120));
            assert!(by_uuid.util_pct.is_some_and(|u| u <= 100));
            let (used, total) = (
                by_uuid.mem_used_bytes.unwrap(),
                by_uuid.mem_total_bytes.unwrap(),
            );
            assert!(used <= total && total > 0);
            assert!(by_uuid.driver_version.is_some());
        }
    }

    #[test]
    fn sampler_writes_lines_and_summarises() {
        let Ok(gpus) = crate::gpu::inventory::describe() else {
            println!("skipped: no CUDA device");
            return;
        };
        if let Some(why) = unavailable_reason() {
            println!("skipped: NVML: not available ({why})");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu_samples.jsonl");
        let mut uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
        // A UUID NVML does not know is kept in its place with no samples.
        uuids.push("GPU-00000000-0000-0000-0000-000000000000".into());
        let sampler = GpuSampler::try_start(uuids.clone(), Duration::from_millis(50), path.clone())
            .expect("sampler starts");
        std::thread::sleep(Duration::from_millis(300));
        let summary = sampler.stop();
        println!("{summary:?}");
        assert_eq!(summary.write_error, None);
        assert_eq!(summary.gpus.len(), uuids.len());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<GpuSample> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON sample"))
            .collect();
        println!(
            "{} lines, first: {}",
            lines.len(),
            text.lines().next().unwrap()
        );
        for (i, g) in gpus.iter().enumerate() {
            let mine: Vec<&GpuSample> = lines.iter().filter(|s| s.gpu == i).collect();
            assert!(mine.len() >= 2, "GPU {i}: {} samples in 300 ms", mine.len());
            assert_eq!(summary.gpus[i].samples, mine.len() as u64);
            assert_eq!(summary.gpus[i].uuid, g.uuid);
            let m = summary.gpus[i].mean_util_pct.expect("utilisation sampled");
            assert!((0.0..=100.0).contains(&m));
            assert!(mine.windows(2).all(|w| w[1].t_unix_s > w[0].t_unix_s));
            assert!(mine
                .iter()
                .all(|s| s.sm_clock_mhz.is_some() && s.temp_c.is_some()));
        }
        let last = summary.gpus.last().unwrap();
        assert_eq!((last.samples, last.mean_util_pct), (0, None));
        // The raw keys are the documented ones.
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for k in [
            "t_unix_s",
            "gpu",
            "util_pct",
            "sm_clock_mhz",
            "mem_used_bytes",
            "temp_c",
        ] {
            assert!(v.get(k).is_some(), "{k} missing from {v}");
        }
    }
}
