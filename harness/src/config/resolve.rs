//! Reading the values of the command line that name devices, GPUs, case families and
//! problems: plain strings in, checked values out (the error texts name the flags).

use anyhow::{bail, Result};
use kbench_record::{CaseFamily, Device};

use crate::gpu;

/// The stress families' names, comma-separated, in the order a run takes them.
fn stress_names() -> String {
    CaseFamily::stress()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The help of `--families`, naming the families of [`kbench_record::FAMILIES`].
pub(crate) fn families_help() -> String {
    format!(
        "Stress case families run after the random trials, one case each: `all` ({}), \
         `random` (none: the KernelBench-compatible check alone), or a comma-separated list of \
         families",
        stress_names()
    )
}

/// `--families`: `all`, `random` or a list of stress families (`random` may be named in a
/// list; it always runs).
pub(crate) fn parse_families(spec: &str) -> Result<Vec<CaseFamily>> {
    let known: Vec<CaseFamily> = CaseFamily::stress().collect();
    match spec.trim() {
        "all" => return Ok(known),
        "random" | "none" => return Ok(Vec::new()),
        _ => {}
    }
    let mut out = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let f = CaseFamily::from(name);
        if f == CaseFamily::Random {
            continue;
        }
        if !known.contains(&f) {
            bail!(
                "--families: unknown case family `{name}`; known: random, {}, or `all`",
                stress_names()
            );
        }
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

/// Physical memory (`MemTotal` in /proc/meminfo), bytes; `None` when unknown.
fn mem_total_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    })
}

/// A quarter of physical memory, or 4 GiB when unknown.
pub(crate) fn default_case_cache_bytes() -> u64 {
    mem_total_bytes().map_or(4 << 30, |b| b / 4)
}

/// The memory limit of this process's cgroup (v2: the smallest `memory.max` from its own
/// cgroup up to the root; v1: `memory.limit_in_bytes`), `None` when there is none. A Slurm
/// job's `--mem` is such a limit, well below the node's `MemTotal`. Read by hand: two files
/// of one number each, where a cgroup crate would bring a whole API for them.
fn cgroup_limit_bytes() -> Option<u64> {
    let read = |p: &std::path::Path| std::fs::read_to_string(p).ok();
    let number = |s: String| s.trim().parse::<u64>().ok();
    if let Some(own) = read("/proc/self/cgroup".as_ref()).and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_string))
    }) {
        let mut path = std::path::PathBuf::from(own.trim());
        let mut limit: Option<u64> = None;
        loop {
            let file = std::path::Path::new("/sys/fs/cgroup")
                .join(path.strip_prefix("/").unwrap_or(&path))
                .join("memory.max");
            if let Some(v) = read(&file).and_then(number) {
                limit = Some(limit.map_or(v, |l| l.min(v)));
            }
            if !path.pop() {
                break;
            }
        }
        return limit;
    }
    // v1: "unlimited" reads as a huge number, which the min with MemTotal drops.
    read("/sys/fs/cgroup/memory/memory.limit_in_bytes".as_ref()).and_then(number)
}

/// Host memory a build job is given room for: its worker (torch imported) and its two
/// compilers on torch's headers (nvcc's front ends and g++), each about a GiB.
pub(crate) const BUILD_JOB_BYTES: u64 = 4 << 30;

/// `--build-jobs` on a GPU by default: a build per core but one (the harness keeps a core
/// per GPU for timing and the builds stay off those; one spare core on a one-GPU host), as
/// many as three quarters of the memory has room for ([`BUILD_JOB_BYTES`] each; the rest is
/// for the reference cases kbench keeps, a quarter by default, and the workers), at least
/// one. The builds needed first run at a higher priority (`worker::build_niceness`).
pub(crate) fn default_build_jobs(cores: usize, mem_bytes: Option<u64>) -> usize {
    let by_memory = mem_bytes.map_or(usize::MAX, |b| {
        usize::try_from(b / 4 * 3 / BUILD_JOB_BYTES).unwrap_or(usize::MAX)
    });
    cores.saturating_sub(1).min(by_memory).max(1)
}

/// The cores this process may run on (its CPU affinity), at least one.
pub(crate) fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The memory kbench may use on this host: the smaller of its physical memory and its
/// cgroup's limit (a Slurm job's `--mem`); `None` when neither is known.
pub(crate) fn host_memory_bytes() -> Option<u64> {
    match (mem_total_bytes(), cgroup_limit_bytes()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// [`default_build_jobs`] of this host: its cores, and the smaller of its memory and its
/// cgroup's limit.
pub(crate) fn host_build_jobs() -> usize {
    default_build_jobs(host_cores(), host_memory_bytes())
}

/// torch's CPU threads in each worker of a GPU run, when `OMP_NUM_THREADS` is not exported:
/// the host's cores shared among the workers alive at once, about four a GPU (the reference,
/// the candidate and those started ahead), at least one. torch's own default is a thread per
/// core in every worker, and the workers' CPU work (a problem's weight initialisation above
/// all) then fights over the cores: on 4 H100s with 64 cores, 4 threads a worker loaded the
/// references 3x faster than 64 did and made a 40-problem run 9% shorter
/// (archive/runs/2026-11-27-h100x4-worker-threads-full250).
pub(crate) fn gpu_worker_threads(cores: usize, gpus: usize) -> usize {
    (cores / (4 * gpus.max(1))).max(1)
}

/// [`gpu_worker_threads`] of this host's cores (its CPU affinity), or `None` when the user
/// exported `OMP_NUM_THREADS` (it reaches the workers as it is).
pub(crate) fn host_gpu_worker_threads(gpus: usize) -> Option<usize> {
    if std::env::var_os("OMP_NUM_THREADS").is_some() {
        return None;
    }
    Some(gpu_worker_threads(host_cores(), gpus))
}

/// `auto` picks the first GPU when the CUDA driver sees one, else the CPU.
pub(crate) fn resolve_device(spec: &str) -> Result<Device> {
    if spec == "auto" {
        let inv = gpu::inventory();
        return Ok(if inv.count() > 0 {
            Device::Cuda(0)
        } else {
            Device::Cpu
        });
    }
    let device: Device = spec.parse().map_err(anyhow::Error::msg)?;
    if let Device::Cuda(i) = device {
        let inv = gpu::inventory();
        if inv.count() == 0 {
            bail!("--device {spec}: {}", inv.why_none());
        }
        if i as usize >= inv.count() {
            bail!(
                "--device {spec}: only {} GPU(s) are visible (cuda:0..cuda:{})",
                inv.count(),
                inv.count() - 1
            );
        }
    }
    Ok(device)
}

/// The GPUs of a run: `--gpus` when given, else every visible GPU for `cuda`/`auto`, else
/// the one of `cuda:N`; nothing on CPU.
pub(crate) fn resolve_gpus(spec: &str, device: Device, gpus: Option<&str>) -> Result<Vec<u32>> {
    let Device::Cuda(first) = device else {
        if gpus.is_some() {
            bail!("--gpus needs a CUDA device (--device cuda), but the run is on the CPU");
        }
        return Ok(Vec::new());
    };
    let visible = gpu::inventory().count() as u32;
    let list: Vec<u32> = match gpus {
        Some(list) => {
            let mut v = Vec::new();
            for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let g: u32 = part.parse().map_err(|_| {
                    anyhow::anyhow!("--gpus {list}: {part:?} is not a GPU number (e.g. --gpus 0,1)")
                })?;
                if g >= visible {
                    bail!(
                        "--gpus {list}: GPU {g} does not exist ({visible} visible; see `kbench gpus`)"
                    );
                }
                if v.contains(&g) {
                    bail!("--gpus {list}: GPU {g} is named twice");
                }
                v.push(g);
            }
            if v.is_empty() {
                bail!("--gpus {list:?} names no GPU");
            }
            v
        }
        None if spec.starts_with("cuda:") => vec![first],
        None => (0..visible).collect(),
    };
    Ok(list)
}

/// A parsed `--select` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selection(Vec<(Option<u8>, u32, u32)>);

impl Selection {
    pub(crate) fn parse(spec: &str) -> Result<Self> {
        let mut items = Vec::new();
        if spec.trim().is_empty() {
            bail!("--select is empty: name problems as ID, A-B, L/ID or L/A-B, e.g. 1/19,2/1-5");
        }
        for (i, part) in spec.split(',').map(str::trim).enumerate() {
            if part.is_empty() {
                bail!(
                    "--select {spec}: element {} is empty; separate problems with one comma, e.g. 1,2 or 1/19,2/1-5",
                    i + 1
                );
            }
            let bad =
                || anyhow::anyhow!("--select: cannot read '{part}'; use ID, A-B, L/ID or L/A-B");
            let (level, range) = match part.split_once('/') {
                Some((l, r)) => (Some(l.trim().parse::<u8>().map_err(|_| bad())?), r),
                None => (None, part),
            };
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                ),
                None => {
                    let v = range.trim().parse().map_err(|_| bad())?;
                    (v, v)
                }
            };
            if a > b {
                return Err(bad());
            }
            items.push((level, a, b));
        }
        Ok(Self(items))
    }

    pub(crate) fn matches(&self, level: u8, id: u32) -> bool {
        self.0
            .iter()
            .any(|&(l, a, b)| l.is_none_or(|l| l == level) && (a..=b).contains(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_jobs_fill_the_cores_but_one_within_memory() {
        let gib = 1u64 << 30;
        // The 16-core, 128 GiB H100 host: 15.
        assert_eq!(default_build_jobs(16, Some(128 * gib)), 15);
        // Memory bounds it: 64 cores with 32 GiB (a Slurm --mem), 3/4 of it at 4 GiB a job.
        assert_eq!(default_build_jobs(64, Some(32 * gib)), 6);
        // Unknown memory: cores only; one core or too little memory: still one job.
        assert_eq!(default_build_jobs(8, None), 7);
        assert_eq!(default_build_jobs(1, Some(128 * gib)), 1);
        assert_eq!(default_build_jobs(16, Some(gib)), 1);
        assert!(host_build_jobs() >= 1);
        // This host's cgroup limit, when it has one, is a number of bytes above zero.
        assert!(cgroup_limit_bytes().is_none_or(|b| b > 0));
    }

    #[test]
    fn gpu_workers_share_the_cores() {
        // 4 H100s with 64 cores, and the 16-core one-GPU host: 4 threads a worker.
        assert_eq!(gpu_worker_threads(64, 4), 4);
        assert_eq!(gpu_worker_threads(16, 1), 4);
        assert_eq!(gpu_worker_threads(32, 2), 4);
        // Few cores: never below one; no GPU named counts as one.
        assert_eq!(gpu_worker_threads(8, 4), 1);
        assert_eq!(gpu_worker_threads(2, 1), 1);
        assert_eq!(gpu_worker_threads(8, 0), 2);
    }

    #[test]
    fn selection_parses_and_matches() {
        let s = Selection::parse("1/19, 2/1-5,7").unwrap();
        assert!(s.matches(1, 19));
        assert!(!s.matches(2, 19));
        assert!(s.matches(2, 3));
        assert!(s.matches(3, 7));
        assert!(!s.matches(1, 6));
        for bad in ["", " ", "x", "1/", "5-2", "a/3"] {
            assert!(Selection::parse(bad).is_err(), "{bad}");
        }
        // An empty element is a typo, not nothing: it is named, never skipped.
        for (bad, element) in [
            ("1,,2", "element 2"),
            ("1,", "element 2"),
            (",1", "element 1"),
        ] {
            let e = Selection::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(bad) && e.contains(element) && e.contains("empty"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn gpus_are_checked_against_the_device() {
        // On the CPU no GPU list is made, and asking for one is a clear error.
        assert_eq!(
            resolve_gpus("cpu", Device::Cpu, None).unwrap(),
            Vec::<u32>::new()
        );
        let e = resolve_gpus("cpu", Device::Cpu, Some("0")).unwrap_err();
        assert!(e.to_string().contains("--gpus needs a CUDA device"), "{e}");
        let visible = crate::gpu::inventory().count() as u32;
        let e = resolve_gpus("cuda", Device::Cuda(0), Some("x")).unwrap_err();
        assert!(e.to_string().contains("is not a GPU number"), "{e}");
        let e = resolve_gpus("cuda", Device::Cuda(0), Some(&visible.to_string())).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        if visible > 0 {
            assert_eq!(
                resolve_gpus("cuda", Device::Cuda(0), Some("0")).unwrap(),
                vec![0]
            );
            let e = resolve_gpus("cuda", Device::Cuda(0), Some("0,0")).unwrap_err();
            assert!(e.to_string().contains("named twice"), "{e}");
            assert_eq!(
                resolve_gpus("cuda", Device::Cuda(0), None).unwrap(),
                (0..visible).collect::<Vec<_>>()
            );
            assert_eq!(
                resolve_gpus("cuda:0", Device::Cuda(0), None).unwrap(),
                vec![0]
            );
        }
    }

    #[test]
    fn cpu_device_needs_no_gpu() {
        assert_eq!(resolve_device("cpu").unwrap(), Device::Cpu);
        assert!(resolve_device("tpu").is_err());
    }
}
