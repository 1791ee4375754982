//! Setting an evaluation up, shared by `kbench run` and the agents' service: the Python
//! worker and its environment, the run folder, the build-ahead pool, one station per device,
//! the GPU sampler, and the executors run over a queue.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use kbench_record::Device;

use super::executor::{executor, Depth, Shared};
use crate::config::{AgentConfig, RunConfig};
use crate::eval::prepare::Prepared;
use crate::measure::{Ctx, Station};
use crate::runlog::RunDir;
use crate::worker::bounds::{MemoryCapChoice, MemoryPlan, WORKERS_PER_DEVICE};
use crate::worker::build::{BuildJob, BuildPool};
use crate::worker::cgroup::CgroupTree;
use crate::worker::pch::{Kind, Pch};
use crate::worker::python::{self, PythonInfo};
use crate::worker::sandbox::{self, Containment, Jail, View};
use crate::worker::{build_niceness, worker_env, Gates, MemoryCap, Role, WorkerSpec};

/// What an evaluation sets up before anything runs.
pub(crate) struct Engine {
    pub(crate) info: PythonInfo,
    pub(crate) worker_script: PathBuf,
    /// The core each station's timing runs on (see `affinity`).
    pub(crate) timing_cores: Vec<Option<usize>>,
    /// `TORCH_CUDA_ARCH_LIST` for builds: the run's GPU architectures only.
    pub(crate) cuda_arch: Option<String>,
    /// The sandbox untrusted workers run in.
    pub(crate) jail: Jail,
    /// The workers' cgroups, or why there are none (workers are then frozen with signals).
    pub(crate) cgroups: Result<Arc<crate::worker::cgroup::CgroupTree>, String>,
    /// Each worker's memory cap, and the cap on all of them together.
    pub(crate) memory: MemoryPlan,
}

impl Engine {
    /// Checks the Python environment and writes the worker out. Call it first, before any
    /// thread or process is started: they inherit the mask that keeps them off the cores
    /// reserved for timing. `cached_probe`: the environment was probed already in this
    /// process (a service started per agent run).
    pub(crate) fn prepare(config: &RunConfig, cached_probe: bool) -> Result<Engine> {
        let timing_cores = timing_cores_of(config);
        let info = if cached_probe {
            python::probe_cached(&config.python)?
        } else {
            crate::worker::probe_cache::probe_persisted(&config.python, &config.cache)?
        };
        check_cuda(config, &info)?;
        crate::worker::light_headers::light_headers()?;
        let worker_script = python::materialize_worker(&config.cache)?;
        let mut jail = jail_of(config, &info)?;
        let kind = if config.gpus.is_empty() {
            Kind::Cpu
        } else {
            Kind::Cuda
        };
        jail.pch = Pch::of(
            &config.cache,
            &info,
            &config.python.python,
            &worker_script,
            kind,
        );
        // The folder every sandbox shows read-only (a bind needs it to exist), made once; a
        // cache where it cannot be made only leaves builds without the headers.
        if let Some(pch) = &jail.pch {
            let _ = pch.make_dir();
        }
        let cgroups =
            crate::worker::cgroup::CgroupTree::open(config.memory_cap != MemoryCapChoice::Off);
        let memory = memory_plan(config, &cgroups);
        Ok(Engine {
            info,
            worker_script,
            timing_cores,
            cuda_arch: cuda_arch_of(config),
            jail,
            cgroups,
            memory,
        })
    }

    /// What records say bounded the workers.
    pub(crate) fn bounds(&self) -> kbench_record::Bounds {
        kbench_record::Bounds {
            memory_cap_bytes: self.memory.each,
            memory_cap_by: self.memory.method(),
            all_workers_cap_bytes: self.memory.all,
            candidate_uid: self.jail.candidate_uid,
        }
    }

    /// One line on how the workers are bounded, for the start of a run.
    pub(crate) fn bounds_line(&self) -> String {
        let memory = match self.memory.each {
            Some(b) => format!(
                "each worker's memory capped at {} ({}{})",
                kbench_record::human_bytes(b),
                if self.memory.by_cgroup {
                    "cgroup memory.max"
                } else {
                    "address-space limit beyond torch's own mappings"
                },
                self.memory.all.map_or(String::new(), |a| format!(
                    ", all workers together at {}",
                    kbench_record::human_bytes(a)
                ))
            ),
            None => format!(
                "NO memory cap on the workers ({})",
                self.memory.none_why.as_deref().unwrap_or("")
            ),
        };
        let uid = match (&self.jail.containment, self.jail.candidate_uid) {
            (Containment::None, _) => String::new(),
            (_, Some(uid)) => format!("; sandboxed candidates run as uid {uid}"),
            (_, None) => "; sandboxed candidates run as the invoking user".into(),
        };
        format!("{memory}{uid}")
    }

    /// The context of the evaluations (no build pool yet).
    pub(crate) fn ctx<'a>(&'a self, config: &'a RunConfig, stop: &Arc<AtomicBool>) -> Ctx<'a> {
        Ctx {
            config,
            python: &config.python.python,
            info: &self.info,
            worker_script: &self.worker_script,
            stop: Arc::clone(stop),
            cuda_arch: self.cuda_arch.clone(),
            builds: None,
            gates: Gates::default(),
            jail: self.jail.clone(),
            cgroups: self.cgroups.as_ref().ok().cloned(),
            memory: self.worker_memory(),
        }
    }

    /// The memory cap each worker gets.
    fn worker_memory(&self) -> Option<MemoryCap> {
        self.memory.each.map(|bytes| MemoryCap {
            bytes,
            rlimit_fallback: self.memory.rlimit_fallback,
        })
    }

    /// Starts the build-ahead pool with `jobs` processes.
    pub(crate) fn build_pool(
        &self,
        config: &RunConfig,
        stop: &Arc<AtomicBool>,
        jobs: usize,
    ) -> BuildPool {
        start_build_pool(
            &self.jail,
            config,
            &self.worker_script,
            self.cuda_arch.clone(),
            stop,
            jobs,
            (self.cgroups.as_ref().ok().cloned(), self.worker_memory()),
        )
    }

    /// One station per `--gpus` entry, or the CPU, with the GPU sampler of a CUDA run.
    pub(crate) fn stations(
        &self,
        config: &RunConfig,
        run_dir: &RunDir,
    ) -> Result<(Vec<Station>, Option<crate::gpu::nvml::GpuSampler>)> {
        let stations = open_stations(config, self.timing_cores.clone())?;
        Ok((stations, start_sampler(config, run_dir)))
    }
}

/// Runs one executor per station until the queue is done (or the run stops), with `beside`
/// on the calling thread meanwhile (the service's intake). The first executor error stops
/// every executor (`on_error` hears of it at once) and is returned.
pub(crate) fn run_executors(
    ctx: &Ctx,
    stations: &[Station],
    depth: Depth,
    shared: &Shared,
    on_error: &(dyn Fn(&anyhow::Error) + Sync),
    beside: impl FnOnce(),
) -> Option<anyhow::Error> {
    let error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for (idx, station) in stations.iter().enumerate() {
            let error = &error;
            scope.spawn(move || {
                if let Err(e) = executor(ctx, station, idx, depth, shared) {
                    on_error(&e);
                    super::queue::lock(error).get_or_insert(e);
                    shared.queue.fail();
                }
                shared.alive.fetch_sub(1, Ordering::SeqCst);
            });
        }
        beside();
    });
    error.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// A `--device cuda` run needs a torch that can use CUDA.
fn check_cuda(config: &RunConfig, info: &PythonInfo) -> Result<()> {
    if matches!(config.device, Device::Cuda(_)) && !info.cuda_available {
        anyhow::bail!(
            "--device {}: torch {} in {} cannot use CUDA (torch.cuda.is_available() is False); use --device cpu or an interpreter with a CUDA build of torch",
            config.device,
            info.torch,
            info.executable
        );
    }
    Ok(())
}

/// `TORCH_CUDA_ARCH_LIST` for the run's GPUs, e.g. `9.0`; `None` on the CPU.
fn cuda_arch_of(config: &RunConfig) -> Option<String> {
    if config.gpus.is_empty() {
        return None;
    }
    crate::gpu::describe().ok().map(|gpus| {
        let mut archs: Vec<String> = config
            .gpus
            .iter()
            .filter_map(|g| gpus.get(*g as usize))
            .map(|g| format!("{}.{}", g.compute_capability.0, g.compute_capability.1))
            .collect();
        archs.sort();
        archs.dedup();
        archs.join(";")
    })
}

/// The pool that builds candidate extensions ahead on the CPU, each build job in a cgroup of
/// its own under `bounds`' tree with the workers' memory cap.
fn start_build_pool(
    jail: &Jail,
    config: &RunConfig,
    worker_script: &Path,
    arch: Option<String>,
    stop: &Arc<AtomicBool>,
    jobs: usize,
    bounds: (Option<Arc<CgroupTree>>, Option<MemoryCap>),
) -> BuildPool {
    let (cgroups, memory) = bounds;
    let python = config.python.python.clone();
    let script = worker_script.to_path_buf();
    let cache = config.cache.clone();
    let interrupt = Arc::clone(stop);
    let jail = jail.clone();
    let spec_for: Arc<crate::worker::build::SpecFor> = Arc::new(move |job: &BuildJob, ahead| {
        let mut spec = WorkerSpec {
            python: python.clone(),
            script: script.clone(),
            role: Role::Candidate,
            cwd: job.build_dir.clone(),
            // No GPU: builds need only the compiler. Niced: the evaluation's own processes
            // (and the timed ones above all) come first on a host whose cores the builds fill,
            // and among the builds those needed first (`build_niceness`).
            env: {
                let mut env = worker_env(&python, Device::Cpu, arch.as_deref(), &cache);
                env.push(("KBENCH_NICE".into(), build_niceness(ahead).to_string()));
                env
            },
            log_path: Some(job.log_path.clone()),
            max_payload: 1 << 20,
            interrupt: Some(Arc::clone(&interrupt)),
            gate: None,
            sandbox: None,
            cgroups: cgroups.clone(),
            memory,
        };
        // A build job imports the candidate's code: it is contained like the candidate.
        jail.apply(
            &mut spec,
            &[&job.problem_path, &job.candidate_path],
            &[],
            false,
            false,
        );
        spec
    });
    let pool = BuildPool::start(jobs, spec_for, config.timeouts.start, config.timeouts.load);
    pool.stop_starting_on(Arc::clone(stop));
    pool
}

/// The build-ahead job of a prepared candidate whose source builds an extension.
pub(crate) fn build_job(run_dir: &RunDir, problem_path: &Path, prep: &Prepared) -> BuildJob {
    BuildJob {
        build_dir: prep.build_dir.clone(),
        problem_path: problem_path.to_path_buf(),
        candidate_path: prep.source_path.clone(),
        log_path: run_dir.logs_dir().join(format!("{}.build.log", prep.key)),
    }
}

/// The timing cores of the run (before any thread or process starts; see `affinity`).
fn timing_cores_of(config: &RunConfig) -> Vec<Option<usize>> {
    if config.gpus.is_empty() {
        vec![None]
    } else {
        crate::exec::affinity::reserve_timing_cores(config.gpus.len())
    }
}

/// One executor device per `--gpus` entry, or the CPU.
fn open_stations(config: &RunConfig, timing_cores: Vec<Option<usize>>) -> Result<Vec<Station>> {
    let devices: Vec<Device> = if config.gpus.is_empty() {
        vec![Device::Cpu]
    } else {
        config.gpus.iter().map(|g| Device::Cuda(*g)).collect()
    };
    let mut execs = Vec::with_capacity(devices.len());
    for (d, core) in devices.into_iter().zip(timing_cores) {
        execs.push(Station::open(d, core)?);
    }
    Ok(execs)
}

/// The GPU sampler of a CUDA run (`gpu_samples.jsonl`).
fn start_sampler(config: &RunConfig, run_dir: &RunDir) -> Option<crate::gpu::nvml::GpuSampler> {
    // Position k of the sampler's list is CUDA ordinal k (empty: not sampled), so a sample's
    // `gpu` field is the same number as a record's `gpu`.
    let gpu_uuids: Vec<String> = match crate::gpu::describe() {
        Ok(all) => all
            .iter()
            .map(|i| {
                if config.gpus.contains(&i.index) {
                    i.uuid.clone()
                } else {
                    String::new()
                }
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    (!config.gpus.is_empty() && !gpu_uuids.is_empty())
        .then(|| {
            crate::gpu::nvml::GpuSampler::start(
                gpu_uuids,
                std::time::Duration::from_millis(100),
                run_dir.root.join("gpu_samples.jsonl"),
            )
        })
        .flatten()
}

/// Each worker's memory cap and the cap on all of them (`--memory-cap`, see
/// `worker::bounds`), with the cap on all of them set on the cgroup folder. The workers alive
/// at once: four a device, and the build jobs where no cgroup caps them all together.
fn memory_plan(config: &RunConfig, cgroups: &Result<Arc<CgroupTree>, String>) -> MemoryPlan {
    let cgroup_memory = cgroups.as_ref().is_ok_and(|t| t.has_memory());
    let no_memory_why = match cgroups {
        Ok(t) => t.no_memory_why().unwrap_or_default().to_string(),
        Err(why) => why.clone(),
    };
    let devices = config.gpus.len().max(1) as u64;
    let builds = if cgroup_memory {
        0
    } else {
        config.build_jobs as u64
    };
    let mut plan = MemoryPlan::decide(
        config.memory_cap,
        crate::config::resolve::host_memory_bytes(),
        WORKERS_PER_DEVICE * devices + builds,
        cgroup_memory,
        &no_memory_why,
        !config.gpus.is_empty(),
    );
    if let (Ok(tree), Some(all)) = (cgroups, plan.all) {
        if tree.cap_all(all).is_err() {
            plan.all = None;
        }
    }
    plan
}

/// The sandbox of a run's untrusted workers. Without `--no-sandbox`, a run of untrusted
/// kernels (replayed files, an agent's) on a host where bubblewrap cannot make a sandbox is
/// refused; a run of trusted code only (the reference agent, baseline modes) goes on
/// uncontained, and its records say so.
fn jail_of(config: &RunConfig, info: &PythonInfo) -> Result<Jail> {
    if config.no_sandbox {
        return Ok(Jail::none(&config.cache));
    }
    let untrusted = matches!(
        config.agent,
        AgentConfig::Replay { .. } | AgentConfig::Given { .. }
    );
    let bwrap = sandbox::find_bwrap(&info.paths)
        .ok_or_else(|| "bubblewrap (bwrap) was not found".to_string())
        .and_then(|b| sandbox::check(&b).map(|()| b));
    let bwrap = match bwrap {
        Ok(b) => b,
        Err(why) if untrusted => anyhow::bail!(
            "candidates must run in a sandbox and none can be made: {why}; {}",
            sandbox::INSTALL_HINT
        ),
        Err(_) => return Ok(Jail::none(&config.cache)),
    };
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut read_only = sandbox::python_roots(&info.paths);
    // Libraries and the CUDA toolkit the worker's environment names.
    for var in ["LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            read_only.extend(std::env::split_paths(&v).filter(|p| p.is_absolute()));
        }
    }
    // Compiled bytecode the reference wrote: read-only inside kbench's hidden cache.
    let pycache = crate::worker::pycache_dir(&config.cache);
    let _ = std::fs::create_dir_all(&pycache);
    read_only.push(abs(&pycache));
    // A folder of a service's files that is also one candidates must see (the Python
    // environment in `/usr/local`, with `--store sqlite:/usr/local/kbench.db`) cannot be both.
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| abs(p));
    for h in config.hidden_also.iter().map(|p| real(p)) {
        if let Some(r) = read_only.iter().find(|r| real(r) == h) {
            anyhow::bail!(
                "{} holds the service's files, which candidates must not see, and is the folder {} they must see: keep the service's store and tokens in a folder of their own",
                h.display(),
                r.display()
            );
        }
    }
    let mut hidden = vec![abs(&config.out), abs(&config.cache)];
    hidden.extend(config.secret_from.as_deref().map(abs));
    hidden.extend(config.hidden_also.iter().map(|p| abs(p)));
    let base = View {
        read_only,
        hidden,
        ..View::default()
    };
    // Checked now, once: a sandbox that cannot change uid, or a Python environment the uid
    // cannot read, would fail every candidate alike.
    if let Some(uid) = config.candidate_uid {
        sandbox::check_uid(&bwrap, &base, &config.python.python, uid)
            .map_err(anyhow::Error::msg)?;
    }
    Ok(Jail {
        containment: Containment::Bubblewrap(bwrap),
        base,
        cache: config.cache.clone(),
        candidate_uid: config.candidate_uid,
        pch: None,
    })
}
