//! How worker processes are launched: the allow-listed environment, the payload bound and
//! the niceness of build jobs.

use std::path::Path;

use kbench_record::Device;

/// Largest payload accepted from a worker: generous, but bounded so that a hostile length
/// prefix cannot make the harness allocate without limit.
pub(crate) const MAX_PAYLOAD: u64 = 256 << 30;

/// Niceness of build-ahead jobs and their compilers: of the first of them, of the precompiled
/// header helper, and the least any build job gets ([`build_niceness`]).
pub(crate) const BUILD_NICENESS: u32 = 10;

/// Niceness of a build job that starts with `ahead` builds already running (all of them taken
/// from the queue before it, so needed before it): [`BUILD_NICENESS`], one more for each
/// build ahead, at most 19.
///
/// Builds that start together share the host's cores evenly and end together, and the GPU's
/// queue waits for the last of them: on one H200 with 16 cores (2026-12-06, cold level 1,
/// both light headers) 15 builds started within 4.5 s and ended 35-40 s later, within 8 s of
/// each other, while the GPU had run through the kernels built before and waited 22 s. Niced
/// by how many are ahead, the builds needed first get more of the cores and end first; the
/// host builds as much as before. An unprivileged process cannot lower its niceness, so the
/// order holds until each ends; a build that starts as another ends, with the rest running,
/// gets 19, as do others started the same way, and they share evenly.
pub(crate) fn build_niceness(ahead: usize) -> u32 {
    let extra = u32::try_from(ahead).unwrap_or(u32::MAX);
    BUILD_NICENESS.saturating_add(extra).min(19)
}

/// A fixed bound, in bytes, on the free GPU memory a worker's allocator keeps cached between
/// commands, in place of the workers' rule (unset: 1 GiB, and the reference's worker more
/// while the GPU has room for it, see the worker's `session.fixed_bound` and
/// `should_release`); 1073741824 is the rule before 2026-11-28. For
/// measuring what giving memory back to the driver costs with several GPUs busy. Passed to
/// the workers as exported; checked by [`check_keep_cached`] before a run starts.
pub(crate) const KEEP_CACHED_ENV: &str = "KBENCH_KEEP_CACHED_BYTES";

/// `Err` with what to do when [`KEEP_CACHED_ENV`]'s value is not whole bytes (the workers
/// would each refuse to start with it).
pub(crate) fn check_keep_cached(value: Option<&str>) -> Result<(), String> {
    match value {
        None | Some("") => Ok(()),
        Some(v) if v.bytes().all(|b| b.is_ascii_digit()) && v.parse::<u64>().is_ok() => Ok(()),
        Some(v) => Err(format!(
            "{KEEP_CACHED_ENV}={v:?}: not a whole number of bytes; unset it for the default \
             (1 GiB, and the reference's worker more while the GPU has room), or give bytes \
             such as 1073741824"
        )),
    }
}

/// The environment of a worker: an allow-list. Nothing of kbench's own state (the run
/// directory, seeds) is passed; the interpreter's folder goes first on PATH so that `ninja`
/// from kbench's environment is found by torch's extension builder.
pub(crate) fn worker_env(
    python: &Path,
    device: Device,
    cuda_arch: Option<&str>,
    cache: &Path,
) -> Vec<(String, String)> {
    const PASS: &[&str] = &[
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "CUDA_HOME",
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
        "CC",
        "CXX",
        "MAX_JOBS",
        "TORCH_CUDA_ARCH_LIST",
        // A CUDA and a C++ source's torch/extension.h, light first or torch's own
        // (`worker::light_headers`).
        crate::worker::light_headers::CUDA_HEADER_ENV,
        crate::worker::light_headers::CXX_HEADER_ENV,
        "NVIDIA_VISIBLE_DEVICES",
        "NCCL_NVLS_ENABLE",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        // inductor's compile parallelism (1: no pool of compile processes), for baselines.
        "TORCHINDUCTOR_COMPILE_THREADS",
        "KBENCH_WORKER_TRACE",
        KEEP_CACHED_ENV,
        // torch's CPU threads per worker (its default: one per core in every worker), when
        // the user or a job script exports it (Slurm does not set it from cpus-per-task); on
        // the CPU device the run's own --cpu-threads still decides (`set_num_threads`).
        "OMP_NUM_THREADS",
    ];
    let mut env: Vec<(String, String)> = PASS
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let mut path = python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if let Ok(p) = std::env::var("PATH") {
        path = format!("{path}:{p}");
    }
    env.push(("PATH".into(), path));
    env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    if let Some(arch) = cuda_arch {
        if std::env::var_os("TORCH_CUDA_ARCH_LIST").is_none() {
            // Same value for build jobs and evaluating workers, so both produce the same
            // ninja file and a build ahead is a cache hit.
            env.push(("TORCH_CUDA_ARCH_LIST".into(), arch.to_string()));
        }
    }
    // Bytecode: read from kbench's own cache (`pycache_dir`), written there only by the
    // trusted reference (`allow_bytecode_writes`) and kbench's probe of the interpreter,
    // never beside a source. On the GPU host
    // the interpreter's packages have no compiled files, and compiling torch's modules from
    // source was most of the 4-14 s a worker took to start.
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    env.push((
        "PYTHONPYCACHEPREFIX".into(),
        super::python::pycache_dir(cache).display().to_string(),
    ));
    // The worker says when torch is imported, before it touches a GPU: a GPU's start gate
    // pauses only what follows (see `StartGate`).
    env.push(("KBENCH_IMPORTED_FRAME".into(), "1".into()));
    // torch.compile's caches (baseline modes) in kbench's own cache, not a shared /tmp
    // folder: inductor's FX graph and autotuning caches make a repeated compile a hit.
    for (var, sub) in [
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
        ("TRITON_CACHE_DIR", "triton"),
    ] {
        if std::env::var_os(var).is_none() {
            env.push((var.into(), cache.join(sub).display().to_string()));
        }
    }
    match device {
        Device::Cuda(i) => {
            // Each worker sees exactly its GPU, as cuda:0.
            let visible = std::env::var("CUDA_VISIBLE_DEVICES")
                .ok()
                .and_then(|v| v.split(',').nth(i as usize).map(str::to_string))
                .unwrap_or_else(|| i.to_string());
            env.push(("CUDA_VISIBLE_DEVICES".into(), visible));
            // The CUDA context and the profiler are made while the worker starts (ahead,
            // behind earlier problems), not in the evaluation (see kbench_worker/integrity.py, _warm_cuda).
            env.push(("KBENCH_WARM_CUDA".into(), "1".into()));
        }
        Device::Cpu => {
            env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
            // Triton kernels run on the CPU only under Triton's interpreter (its kernels
            // then execute through numpy): without it a Triton candidate on --device cpu
            // fails looking for a GPU driver.
            env.push(("TRITON_INTERPRET".into(), "1".into()));
        }
    }
    env
}

/// Lets a trusted worker (the reference, which runs only the problem file) write compiled
/// bytecode into [`super::python::pycache_dir`]; candidates only read it.
pub(crate) fn allow_bytecode_writes(env: &mut Vec<(String, String)>) {
    env.retain(|(k, _)| k != "PYTHONDONTWRITEBYTECODE");
}

#[cfg(test)]
mod tests {
    use super::{build_niceness, check_keep_cached, worker_env, BUILD_NICENESS, KEEP_CACHED_ENV};
    use kbench_record::Device;
    use std::path::Path;

    #[test]
    fn the_keep_cached_bound_reaches_the_workers_as_exported() {
        // Process-wide, but read by no other test of this binary.
        std::env::set_var(KEEP_CACHED_ENV, "4096");
        let env = worker_env(
            Path::new("/usr/bin/python3"),
            Device::Cpu,
            None,
            Path::new("/c"),
        );
        std::env::remove_var(KEEP_CACHED_ENV);
        assert!(
            env.iter().any(|(k, v)| k == KEEP_CACHED_ENV && v == "4096"),
            "{env:?}"
        );
    }

    #[test]
    fn builds_needed_first_are_niced_least() {
        assert_eq!(build_niceness(0), BUILD_NICENESS);
        assert_eq!(build_niceness(3), BUILD_NICENESS + 3);
        // Never past the most a process can be niced, however many are ahead.
        assert_eq!(build_niceness(9), 19);
        assert_eq!(build_niceness(14), 19);
        assert_eq!(build_niceness(usize::MAX), 19);
    }

    #[test]
    fn the_keep_cached_bound_is_whole_bytes_or_unset() {
        assert!(check_keep_cached(None).is_ok());
        assert!(check_keep_cached(Some("")).is_ok());
        assert!(check_keep_cached(Some("0")).is_ok());
        assert!(check_keep_cached(Some("8589934592")).is_ok());
        for bad in ["8GiB", "-1", "1e9", " 1", "1.5", "99999999999999999999999"] {
            let err = check_keep_cached(Some(bad)).unwrap_err();
            assert!(
                err.contains("KBENCH_KEEP_CACHED_BYTES") && err.contains(bad),
                "{err}"
            );
        }
    }
}
