//! What every measurement needs: the run's settings, the Python worker to start, the build
//! pool, the stop flag and the start gates.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use kbench_record::protocol::Load;
use kbench_record::Device;

use crate::config::RunConfig;
use crate::worker::build::BuildPool;
use crate::worker::python::PythonInfo;
use crate::worker::sandbox::Jail;
use crate::worker::{
    allow_bytecode_writes, device_for_worker, worker_env, Gates, Role, WorkerSpec, MAX_PAYLOAD,
};

/// Things every evaluation needs.
pub(crate) struct Ctx<'a> {
    pub(crate) config: &'a RunConfig,
    pub(crate) python: &'a Path,
    pub(crate) info: &'a PythonInfo,
    pub(crate) worker_script: &'a Path,
    pub(crate) stop: Arc<AtomicBool>,
    /// `TORCH_CUDA_ARCH_LIST` for builds: the run's GPU architectures only, e.g. `9.0`.
    pub(crate) cuda_arch: Option<String>,
    pub(crate) builds: Option<BuildPool>,
    /// Pause workers still starting for a device while a kernel is timed on it.
    pub(crate) gates: Gates,
    /// The sandbox untrusted workers run in.
    pub(crate) jail: Jail,
    /// Each worker's own cgroup (freezing it whole while the other side is timed); `None`
    /// where the host has no writable cgroup v2 folder: workers are frozen with signals.
    pub(crate) cgroups: Option<Arc<crate::worker::cgroup::CgroupTree>>,
    /// Each worker's memory cap (`--memory-cap`); `None`: no cap.
    pub(crate) memory: Option<crate::worker::MemoryCap>,
}

impl<'a> Ctx<'a> {
    /// The context of a command that starts only trusted reference workers, one problem at
    /// a time (`kbench audit`): no candidate builds, no timing.
    pub(crate) fn for_reference_workers(
        config: &'a RunConfig,
        info: &'a PythonInfo,
        worker_script: &'a Path,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Ctx {
            config,
            python: &config.python.python,
            info,
            worker_script,
            stop,
            cuda_arch: None,
            builds: None,
            gates: Gates::default(),
            jail: Jail::none(&config.cache),
            cgroups: None,
            memory: None,
        }
    }
}

impl Ctx<'_> {
    pub(crate) fn spec(
        &self,
        role: Role,
        cwd: &Path,
        log_path: Option<PathBuf>,
        device: Device,
    ) -> WorkerSpec {
        let mut env = worker_env(
            self.python,
            device,
            self.cuda_arch.as_deref(),
            &self.config.cache,
        );
        if role == Role::Reference {
            allow_bytecode_writes(&mut env);
        }
        if let (Device::Cuda(_), Some(n)) = (device, self.config.gpu_worker_threads) {
            env.retain(|(k, _)| k != "OMP_NUM_THREADS");
            env.push(("OMP_NUM_THREADS".into(), n.to_string()));
        }
        WorkerSpec {
            python: self.python.to_path_buf(),
            script: self.worker_script.to_path_buf(),
            role,
            cwd: cwd.to_path_buf(),
            env,
            log_path,
            max_payload: MAX_PAYLOAD,
            interrupt: Some(Arc::clone(&self.stop)),
            gate: Some(self.gates.of(device)),
            sandbox: None,
            cgroups: self.cgroups.clone(),
            memory: self.memory,
        }
    }

    /// The `load` of `problem_path` on `device` with the run's settings, for either role
    /// (the fields of one role only left out).
    pub(crate) fn load(&self, device: Device, problem_path: &Path) -> Load {
        let c = self.config;
        Load {
            problem_path: problem_path.to_path_buf(),
            candidate_path: None,
            device: device_for_worker(device).into(),
            precision: c.precision.as_str().into(),
            model_mode: c.model_mode.as_str().into(),
            weight_seed: c.weight_seed,
            want_f64: None,
            cpu_threads: self.cpu_threads(device),
            build_dir: None,
            warm_up: None,
            gate_device_work: false,
        }
    }

    /// The workers' CPU intra-op threads on `device` (none on a GPU).
    pub(crate) fn cpu_threads(&self, device: Device) -> Option<u32> {
        match device {
            Device::Cpu => Some(self.config.cpu_threads),
            Device::Cuda(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{AgentConfig, SuiteSpec};
    use crate::worker::python::PythonInfo;

    /// A GPU worker gets the run's `OMP_NUM_THREADS` in place of any other; a CPU worker
    /// keeps what the user exported (its threads are `--cpu-threads`, sent in `load`).
    #[test]
    fn gpu_workers_get_the_runs_cpu_threads() {
        let dir = tempfile::tempdir().unwrap();
        let spec = crate::config::run::tests::spec(None);
        let mut config = RunConfig::build(
            &SuiteSpec::default(),
            None,
            &spec,
            AgentConfig::Reference,
            &dir.path().join("run"),
            None,
        )
        .unwrap();
        assert_eq!(config.gpu_worker_threads, None, "a CPU run sets none");
        config.gpu_worker_threads = Some(3);
        let info = PythonInfo {
            executable: "python3".into(),
            python: "3".into(),
            torch: "2".into(),
            torch_cuda: None,
            cuda_available: false,
            device_count: 0,
            ninja: None,
            paths: vec![],
        };
        let ctx = Ctx::for_reference_workers(
            &config,
            &info,
            Path::new("worker.py"),
            Arc::new(AtomicBool::new(false)),
        );
        let omp = |device| {
            let env = ctx.spec(Role::Candidate, dir.path(), None, device).env;
            env.iter()
                .filter(|(k, _)| k == "OMP_NUM_THREADS")
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(omp(Device::Cuda(0)), vec!["3".to_string()]);
        let exported = std::env::var("OMP_NUM_THREADS")
            .ok()
            .into_iter()
            .collect::<Vec<_>>();
        assert_eq!(omp(Device::Cpu), exported);
    }
}
