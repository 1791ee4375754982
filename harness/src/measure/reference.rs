//! The trusted reference of one problem: its worker process and the correctness cases it
//! makes, kept in the harness (host memory on CPU, harness-owned GPU buffers on CUDA).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use kbench_record::protocol::{
    reply, Command, Export, Frame, Load, MakeCase, Poison, RunCase, Seeds, TensorSpec,
};
use kbench_record::{CaseFamily, CaseRef, Dtype, HostTensor, ToleranceProfile};
use kbench_suites::Problem;
use serde_json::{json, Value};

use super::ahead_load::ahead_out_of_memory;
use super::kept_cases::KeptCases;
use super::probe::{alt_index, probe_slots};
use super::ref_case::{applicability, case_gate, longest_input_axis};
pub(crate) use super::ref_case::{CaseData, DevTensorOwned, RefCase};
use super::ref_failure::{cap_message, fault_message, WORKER_FAULT};
use super::{Ctx, Station};
use crate::gpu::devmem::{DevBuf, Gpu};
use crate::runlog::sanitize;
use crate::runlog::RunDir;
use crate::worker::error_text;
use crate::worker::{Role, Worker, WorkerFault};

/// The largest device case (all its tensors) that the reference exports in one command; a
/// larger one moves a tensor at a time (see `take_device_case`).
const ONE_EXPORT_MAX_BYTES: usize = 1 << 30;

pub(crate) enum RefFailure {
    Failed(String),
    Interrupted,
}

/// The trusted reference of one problem.
///
/// Cases are made on demand. They are kept while the whole set fits the budget (host memory
/// on CPU, `--case-cache-mb`; a share of GPU memory on CUDA), so the many candidates of a
/// problem share one reference computation; a problem whose cases do not fit keeps none and
/// remakes each case for each candidate (same seeds, same inputs), so memory stays bounded
/// by one case. A reference worker that dies is restarted (twice at most per problem).
pub(crate) struct ReferenceSession {
    pub(crate) worker: Worker,
    cached: KeptCases,
    /// Stress cases found not to apply, by case index: not made again for later candidates
    /// when the cache keeps no case (each took a float64 forward to decide).
    not_applicable: std::collections::HashMap<u32, String>,
    /// Stress cases found to apply: remade without the stability runs, which only decide
    /// that (a second forward and two comparisons, most of a large case's making).
    applicable: std::collections::HashSet<u32>,
    pub(crate) device_name: String,
    pub(crate) notes: Vec<String>,
    problem_file: String,
    problem_key: String,
    problem_sha: String,
    problem_path: PathBuf,
    log: PathBuf,
    gpu: Option<Arc<Gpu>>,
    /// The case the worker holds as its current one (what its timing uses).
    worker_case: Option<u32>,
    /// Gave its GPU memory back while idle ([`Self::release_while_idle`]) and has not been
    /// used since: nothing to give back again.
    released: bool,
    restarts: u32,
    /// Seconds spent making cases, and of those in `get_inputs()`, since the session opened.
    pub(crate) made_s: f64,
    pub(crate) inputs_s: f64,
    /// The problem's cost (FLOPs, bytes), asked once per session (see [`Self::cost`]).
    cost: Option<Option<kbench_record::perf::ProblemCost>>,
    /// Every module of the reference is in training mode (its load reply names none with
    /// `training == False`): the condition of the `mode-switch` advisory.
    pub(crate) trains: bool,
}

impl ReferenceSession {
    /// Opens the session, using `prestarted` (a worker started ahead) when given.
    pub(crate) fn open(
        ctx: &Ctx,
        exec: &Station,
        problem: &Problem,
        problem_path: &Path,
        run_dir: &RunDir,
        prestarted: Option<Result<Worker, WorkerFault>>,
        load_reply: Option<Result<Frame, WorkerFault>>,
    ) -> Result<Self, RefFailure> {
        let log = run_dir.logs_dir().join(format!(
            "{}__reference.log",
            sanitize(&problem.to_ref().key())
        ));
        let budget = match &exec.gpu {
            // The cases of one problem may take up to a fifth of the GPU: the candidate
            // process needs the rest for its own copies, outputs and workspace.
            Some(_) => exec.gpu_memory() / 5,
            None => ctx.config.case_cache_bytes,
        };
        let mut s = Self {
            worker: start_reference(ctx, exec, problem, &log, prestarted)?,
            cached: KeptCases::new(budget),
            not_applicable: Default::default(),
            applicable: Default::default(),
            device_name: String::new(),
            notes: Vec::new(),
            problem_file: problem.file.clone(),
            problem_key: problem.to_ref().key(),
            problem_sha: problem.sha256.clone(),
            problem_path: problem_path.to_path_buf(),
            log,
            gpu: exec.gpu.clone(),
            worker_case: None,
            released: false,
            restarts: 0,
            made_s: 0.0,
            inputs_s: 0.0,
            cost: None,
            trains: true,
        };
        let out_of_memory = match &load_reply {
            Some(Ok(reply)) => ahead_out_of_memory(reply),
            _ => None,
        };
        match (load_reply, out_of_memory) {
            (_, Some(why)) => {
                // The load sent ahead ran beside other work on this GPU (the previous
                // problem's workers), whose memory, cached blocks included, has gone back
                // since: loaded once more by a fresh worker, so that what another problem held
                // never costs this one its reference or its float64 copy. A second failure is
                // the problem's own.
                s.notes.push(format!(
                    "the reference's load sent ahead ran out of GPU memory beside other work on the GPU; loaded again by a fresh worker ({why})"
                ));
                s.fresh_worker(ctx, exec, problem).map_err(|e| match e {
                    RefFailure::Failed(m) => RefFailure::Failed(format!(
                        "{m}\n(the second load: the one sent ahead had run out of GPU memory too: {why})"
                    )),
                    other => other,
                })?
            }
            (Some(reply), None) => s.loaded(ctx, reply)?,
            (None, None) => s.load(ctx, exec)?,
        }
        Ok(s)
    }

    fn load(&mut self, ctx: &Ctx, exec: &Station) -> Result<(), RefFailure> {
        let load = Frame::command(&load_request(ctx, exec, &self.problem_path));
        let reply = self.worker.request(load, ctx.config.timeouts.load);
        self.loaded(ctx, reply)
    }

    /// Takes the worker's answer to `load` (sent here or ahead, see [`load_request`]).
    fn loaded(&mut self, ctx: &Ctx, reply: Result<Frame, WorkerFault>) -> Result<(), RefFailure> {
        let c = ctx.config;
        let reply = reply.map_err(|f| self.fail("loading the problem", "--timeout-load", f))?;
        if reply.kind() != "loaded" {
            let text = error_text(&reply);
            if let Some(cap) = self.worker.memory_cap_met(&text) {
                let doing = "loading the problem";
                return Err(RefFailure::Failed(cap_message(
                    &self.problem_file,
                    doing,
                    &cap,
                    &text,
                )));
            }
            return Err(RefFailure::Failed(format!(
                "problem {} could not be loaded: {text}",
                self.problem_file,
            )));
        }
        let loaded: reply::Loaded = reply.reply();
        self.device_name = loaded.device_name.unwrap_or_default();
        let eval_modules = loaded
            .integrity
            .as_ref()
            .and_then(|i| i.get("eval_module_count"));
        self.trains = eval_modules.and_then(Value::as_u64).unwrap_or(0) == 0;
        if c.profile == ToleranceProfile::Strict && loaded.f64_available != Some(true) {
            let note = format!(
                "no float64 reference ({}); the strict profile's float64 gate was skipped",
                loaded.f64_error.unwrap_or_default()
            );
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        self.worker_case = None;
        Ok(())
    }

    /// The failure of the worker with `fault` while `doing`, under the limit `option` sets.
    fn fail(&self, doing: &str, option: &str, fault: WorkerFault) -> RefFailure {
        if fault == WorkerFault::Interrupted {
            return RefFailure::Interrupted;
        }
        let tail = self.worker.log_tail();
        let cap = self.worker.memory_cap_met(&tail);
        RefFailure::Failed(fault_message(
            &format!("{} ({})", self.problem_file, self.problem_key),
            doing,
            &fault,
            option,
            cap,
            &tail,
        ))
    }

    /// Replaces a dead or hung reference worker (at most twice per problem).
    fn restart(&mut self, ctx: &Ctx, exec: &Station, problem: &Problem) -> Result<(), RefFailure> {
        if self.restarts >= 2 {
            return Err(RefFailure::Failed(format!(
                "reference worker for {} failed {} times; giving up on this problem",
                self.problem_file,
                self.restarts + 1
            )));
        }
        self.restarts += 1;
        self.fresh_worker(ctx, exec, problem)
    }

    /// Kills the worker and loads the problem in a fresh one.
    fn fresh_worker(
        &mut self,
        ctx: &Ctx,
        exec: &Station,
        problem: &Problem,
    ) -> Result<(), RefFailure> {
        self.worker.kill();
        self.worker = start_reference(ctx, exec, problem, &self.log, None)?;
        self.load(ctx, exec)
    }

    /// Case `t` of the `random` family: from the cache, or made now by the reference worker
    /// (which then holds it as its current case, the one timing uses).
    pub(crate) fn case(
        &mut self,
        ctx: &Ctx,
        exec: &Station,
        problem: &Problem,
        run_dir: &RunDir,
        t: u32,
    ) -> Result<Arc<RefCase>, RefFailure> {
        self.released = false;
        if let Some(rc) = self.cached.get(t) {
            return Ok(Arc::clone(rc));
        }
        if let Some(why) = self.not_applicable.get(&t) {
            // Decided by the reference alone on the run's seeds: the same for every candidate.
            // Kept in order with the others (no tensors), so that a cache dropped while the
            // session was idle fills again past it.
            let rc = Arc::new(RefCase::not_applicable(ctx.config.case_ref(t), why.clone()));
            self.cached.offer(t, &rc, 0, ctx.config.cases_total());
            return Ok(rc);
        }
        let rc = self
            .make_restarting(ctx, exec, problem, run_dir, t, true)?
            .expect("a kept case");
        if let Some(why) = &rc.not_applicable {
            self.not_applicable.insert(t, why.clone());
        }
        let rc = Arc::new(rc);
        self.cached
            .offer(t, &rc, rc.bytes(), ctx.config.cases_total());
        Ok(rc)
    }

    /// Makes sure the worker's current case is case `t` (timing uses it), remaking it when
    /// the worker was restarted since.
    pub(crate) fn hold_case(
        &mut self,
        ctx: &Ctx,
        exec: &Station,
        problem: &Problem,
        run_dir: &RunDir,
        t: u32,
    ) -> Result<(), RefFailure> {
        self.released = false;
        if self.worker_case == Some(t) {
            return Ok(());
        }
        self.make_restarting(ctx, exec, problem, run_dir, t, false)
            .map(|_| ())
    }

    /// [`Self::make`], once more on a fresh worker when the worker itself failed.
    fn make_restarting(
        &mut self,
        ctx: &Ctx,
        exec: &Station,
        problem: &Problem,
        run_dir: &RunDir,
        t: u32,
        keep: bool,
    ) -> Result<Option<RefCase>, RefFailure> {
        match self.make(ctx, run_dir, t, keep) {
            Err(RefFailure::Failed(msg)) if msg.starts_with(WORKER_FAULT) => {
                self.restart(ctx, exec, problem)?;
                self.make(ctx, run_dir, t, keep)
            }
            other => other,
        }
    }

    /// The problem's FLOPs and bytes (the worker's `cost` command, on inputs from a seed
    /// derived from the run secret), asked once per session. None when the worker could not
    /// count them; a note on the record says why. Leaves the worker's current case alone.
    pub(crate) fn cost(
        &mut self,
        ctx: &Ctx,
        run_dir: &RunDir,
    ) -> Option<kbench_record::perf::ProblemCost> {
        if let Some(c) = &self.cost {
            return c.clone();
        }
        let sha = &self.problem_sha;
        let seed = run_dir.secret.derive(&format!("cost-input/{sha}"));
        let forward_seed = run_dir.secret.derive(&format!("cost-forward/{sha}"));
        let request = Command::Cost(Seeds { seed, forward_seed });
        let counted = match self
            .worker
            .request(Frame::command(&request), ctx.config.timeouts.run)
        {
            Ok(r) if r.kind() == "cost" => {
                serde_json::from_value::<kbench_record::perf::ProblemCost>(r.header.clone())
                    .map_err(|e| format!("unreadable cost reply: {e}"))
            }
            Ok(r) => Err(error_text(&r)),
            Err(f) => {
                // The worker may be dead: the next case restarts it.
                self.worker_case = None;
                Err(f.to_string())
            }
        };
        let cost = match counted {
            Ok(c) => Some(c),
            Err(why) => {
                let note = format!("speed of light not computed: counting the reference's FLOPs and bytes failed ({why})");
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
                None
            }
        };
        self.cost = Some(cost.clone());
        cost
    }

    /// After a timing failure: the worker may be dead; the next case or timing restarts it.
    pub(crate) fn forget_worker_case(&mut self) {
        self.worker_case = None;
    }

    fn make(
        &mut self,
        ctx: &Ctx,
        run_dir: &RunDir,
        t: u32,
        keep: bool,
    ) -> Result<Option<RefCase>, RefFailure> {
        let c = ctx.config;
        let sha = &self.problem_sha;
        let case = c.case_ref(t);
        let seed = run_dir
            .secret
            .derive(&format!("input/{sha}/{}/{t}", case.family));
        let forward_seed = run_dir
            .secret
            .derive(&format!("forward/{sha}/{}/{t}", case.family));
        let device_io = self.gpu.is_some();
        let t0 = Instant::now();
        self.worker_case = None;
        let tol = kbench_adversarial::tolerance(c.profile, c.precision);
        let stress = case.family != CaseFamily::Random;
        // Same seeds, same inputs: a case that applied for one candidate applies for all.
        let known = self.applicable.contains(&t);
        let probes = case.family == CaseFamily::NanInf;
        let request = Frame::command(&Command::MakeCase(MakeCase {
            seed,
            forward_seed,
            device_io,
            family: stress.then(|| case.family.to_string()),
            stability_rtol: (stress && !known).then_some(tol.rtol),
            probe_rtol: probes.then_some(tol.rtol),
            probe_atol: probes.then_some(tol.atol),
        }));
        let reply = match self.worker.request(request, c.timeouts.run) {
            Ok(r) => r,
            Err(f) => return Err(self.fail(&format!("making case {case}"), "--timeout-run", f)),
        };
        if reply.kind() != "case" {
            let text = error_text(&reply);
            if let Some(cap) = self.worker.memory_cap_met(&text) {
                let doing = format!("making case {case}");
                return Err(RefFailure::Failed(cap_message(
                    &self.problem_file,
                    &doing,
                    &cap,
                    &text,
                )));
            }
            return Err(RefFailure::Failed(format!(
                "reference of {} failed on case {case}: {text}",
                self.problem_file,
            )));
        }
        self.worker_case = Some(t);
        let made: reply::Case = reply.reply();
        self.inputs_s += made.inputs_s.unwrap_or(0.0);
        if let Some(e) = &made.f64_error {
            let note = format!("case {case}: float64 reference failed ({e}); gate skipped");
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        if let Some(e) = &made.probe_error {
            let note = format!("case {case}: the reference's probe runs failed ({e}); the strict NaN/Inf rules applied");
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        let longest_axis = longest_input_axis(&reply, made.device_tensors.as_deref());
        let floor = (c.profile == ToleranceProfile::Strict)
            .then(|| case_gate(c.precision, &case, longest_axis).floor);
        let not_applicable = (!known)
            .then(|| applicability(&case, &made, tol, floor))
            .flatten();
        if stress && not_applicable.is_none() {
            self.applicable.insert(t);
        }
        let arg_list = made.inputs.clone().unwrap_or(json!([]));
        // Only the timed case stays the worker's current case (timing runs on it): the
        // others' inputs go with their export, so that the reference holds no case while
        // the candidate runs beside it (level-1 problem 38's 8 GiB inputs: an honest
        // candidate ran out of memory on its nan-inf case beside the reference's copy).
        let drop_case = device_io && (c.timing.is_none() || t + 1 != c.trials);
        let result = if !keep || not_applicable.is_some() {
            if device_io {
                // Drop the worker's pending copy; it keeps the inputs as its current case
                // only when timing will use them.
                self.export(ctx, Vec::new(), false, drop_case)?;
            }
            // A case that does not apply is kept without its tensors: none is run on it.
            not_applicable
                .clone()
                .filter(|_| keep)
                .map(|why| RefCase::not_applicable(case.clone(), why))
        } else if device_io {
            Some(self.take_device_case(ctx, &reply, case, forward_seed, arg_list, drop_case)?)
        } else {
            Some(take_host_case(&reply, case, forward_seed, arg_list)?)
        }
        .map(|mut rc| {
            rc.not_applicable = not_applicable;
            let changed = made.inputs_changed.unwrap_or_default();
            rc.mutated_inputs = changed.iter().filter_map(Value::as_u64).collect();
            rc.longest_input_axis = longest_axis;
            rc
        });
        if drop_case {
            self.worker_case = None;
        }
        self.made_s += t0.elapsed().as_secs_f64();
        Ok(result)
    }

    /// Makes the worker drop its current case and give every cached block back to the driver
    /// (after a candidate or its buffers ran out of GPU memory beside it); timing remakes the
    /// case when it needs it. Sent even when the worker holds no case: between commands it
    /// may keep free blocks cached. A worker that cannot answer is left to the
    /// next case, which restarts it.
    pub(crate) fn drop_worker_case(&mut self, ctx: &Ctx) {
        if self.gpu.is_some() {
            let _ = self.export(ctx, Vec::new(), false, true);
        }
        self.worker_case = None;
    }

    /// Gives back the GPU memory this session holds while another problem's candidate is
    /// evaluated beside it: its worker's current case and cached blocks, and the cases kept
    /// for later candidates (the next one caches them again, from its first case). Called
    /// on an idle session only, by an evaluation on the same GPU that needs most of its
    /// memory or ran out of it. Whether there was anything to give back: `false` when the
    /// session did so already and has not been used since.
    pub(crate) fn release_while_idle(&mut self, ctx: &Ctx) -> bool {
        if self.released {
            return false;
        }
        self.drop_worker_case(ctx);
        self.cached.clear();
        self.released = true;
        true
    }

    /// Drops the cases kept for this problem's later candidates (they are remade per
    /// candidate from now on): their GPU memory goes back.
    fn drop_cached_cases(&mut self) {
        self.cached.stop();
    }

    fn export(
        &mut self,
        ctx: &Ctx,
        targets: Vec<TensorSpec>,
        partial: bool,
        drop_case: bool,
    ) -> Result<(), RefFailure> {
        let cmd = Command::Export(Export {
            targets,
            partial,
            drop_case,
        });
        let reply = match self
            .worker
            .request(Frame::command(&cmd), ctx.config.timeouts.run)
        {
            Ok(r) => r,
            Err(f) => return Err(self.fail("exporting a case", "--timeout-run", f)),
        };
        if reply.kind() != "exported" {
            return Err(RefFailure::Failed(format!(
                "reference of {} could not export its case: {}",
                self.problem_file,
                error_text(&reply)
            )));
        }
        Ok(())
    }

    /// A buffer for a case tensor. When the GPU is short of memory, the cases kept for later
    /// candidates are dropped first (this problem then remakes them per candidate), and the
    /// memory of workers that just exited, which the driver frees asynchronously, is waited
    /// for (while it still comes back, up to 20 s) before giving up. Seen on an H100: level-1 problems with 6–17 GB
    /// cases failed to allocate right after the previous problem's workers were killed.
    fn alloc_case_buffer(&mut self, gpu: &Arc<Gpu>, nbytes: usize) -> anyhow::Result<DevBuf> {
        match gpu.alloc(nbytes) {
            Ok(b) => return Ok(b),
            Err(_) if !self.cached.is_empty() => self.drop_cached_cases(),
            Err(_) => {}
        }
        // Waited for while the free memory still rises: a case that does not fit even when
        // nothing else is freed (the nan-inf case of a 6.4 GB-per-tensor problem on an 80 GB
        // GPU) gives up after 2 s without a rise, not after 20 s.
        let began = Instant::now();
        let free = || gpu.mem_info().map(|(f, _)| f).unwrap_or(0);
        let (mut most, mut rose_at) = (free(), Instant::now());
        loop {
            match gpu.alloc(nbytes) {
                Ok(b) => return Ok(b),
                Err(e) if began.elapsed().as_secs() >= 20 || rose_at.elapsed().as_secs() >= 2 => {
                    return Err(e)
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(250)),
            }
            let now = free();
            if now > most {
                (most, rose_at) = (now, Instant::now());
            }
        }
    }

    fn take_device_case(
        &mut self,
        ctx: &Ctx,
        reply: &Frame,
        case: CaseRef,
        forward_seed: u64,
        args: Value,
        drop_case: bool,
    ) -> Result<RefCase, RefFailure> {
        let gpu = Arc::clone(self.gpu.as_ref().expect("device case without a GPU"));
        let specs = reply
            .reply::<reply::Case>()
            .device_tensors
            .unwrap_or_default();
        let mut described = Vec::with_capacity(specs.len());
        for spec in specs {
            let bad = |why: &str| {
                RefFailure::Failed(format!(
                    "reference of {} described a bad device tensor ({why}): {spec}",
                    self.problem_file
                ))
            };
            let name = spec
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("no name"))?
                .to_string();
            let dtype: Dtype = spec
                .get("dtype")
                .cloned()
                .and_then(|d| serde_json::from_value(d).ok())
                .ok_or_else(|| bad("dtype"))?;
            let shape: Vec<u64> = spec
                .get("shape")
                .cloned()
                .and_then(|d| serde_json::from_value(d).ok())
                .ok_or_else(|| bad("shape"))?;
            described.push((name, dtype, shape));
        }
        let nbytes =
            |dtype: Dtype, shape: &[u64]| shape.iter().product::<u64>() as usize * dtype.size();
        let total: usize = described.iter().map(|(_, d, s)| nbytes(*d, s)).sum();
        // A small case moves in one `export`; a large one a tensor at a time, the worker
        // freeing its copy before the next buffer is allocated here, so the GPU holds the
        // case once plus one tensor. Each export is a round trip with a device sync, IPC
        // mappings and a release of the worker's cached memory: one per tensor cost
        // 2.6 exports a case, and on 4 GPUs at once each export took 1.7x as long.
        let whole = total <= ONE_EXPORT_MAX_BYTES;
        let mut made = Vec::with_capacity(described.len());
        let mut targets = Vec::new();
        for (name, dtype, shape) in described {
            let buf = self
                .alloc_case_buffer(&gpu, nbytes(dtype, &shape))
                .map_err(|e| {
                    RefFailure::Failed(format!(
                        "keeping case {case} of {} on GPU {}: {e:#}",
                        self.problem_file, gpu.ordinal
                    ))
                })?;
            let t = DevTensorOwned { buf, dtype, shape };
            let mut target = t.spec();
            target.name = Some(name.clone());
            if whole {
                targets.push(target);
            } else {
                self.export(ctx, vec![target], true, drop_case)?;
            }
            made.push((name, t));
        }
        if !targets.is_empty() {
            self.export(ctx, targets, false, drop_case)?;
        }
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        let mut outputs_f64 = Vec::new();
        let mut alts = Vec::new();
        for (name, t) in made {
            if name.starts_with("in:") {
                inputs.push((name, t));
            } else if name.starts_with("out64:") {
                outputs_f64.push(t);
            } else if let Some(k) = alt_index(&name) {
                alts.push((k, t));
            } else if name.starts_with("out:") {
                outputs.push(t);
            }
        }
        let outputs_f64 =
            (outputs_f64.len() == outputs.len() && !outputs_f64.is_empty()).then_some(outputs_f64);
        let outputs_alt = probe_slots(alts, outputs.len());
        Ok(RefCase {
            case,
            forward_seed,
            not_applicable: None,
            mutated_inputs: Vec::new(),
            longest_input_axis: 0,
            data: CaseData::Device {
                args,
                inputs,
                outputs,
                outputs_f64,
                outputs_alt,
            },
        })
    }
}

fn take_host_case(
    reply: &Frame,
    case: CaseRef,
    forward_seed: u64,
    arg_list: Value,
) -> Result<RefCase, RefFailure> {
    let tensors = reply
        .tensors()
        .map_err(|e| RefFailure::Failed(format!("reference sent a malformed case: {e}")))?;
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut outputs_f64 = Vec::new();
    let mut alts = Vec::new();
    for (name, t) in tensors {
        if name.starts_with("in:") {
            inputs.push((name, t));
        } else if name.starts_with("out64:") {
            outputs_f64.push(t);
        } else if let Some(k) = alt_index(&name) {
            alts.push((k, t));
        } else if name.starts_with("out:") {
            outputs.push(t);
        }
    }
    let refs: Vec<(String, &HostTensor)> = inputs.iter().map(|(n, t)| (n.clone(), t)).collect();
    // The sizes the candidate worker poisons before the call, so that an output left
    // unwritten is caught (the unwritten-output flag).
    let poison = outputs
        .iter()
        .map(|o| Poison {
            dtype: o.dtype().as_str().into(),
            nbytes: o.data().len() as u64,
        })
        .collect();
    let run_case = Command::RunCase(RunCase {
        forward_seed,
        inputs: arg_list,
        poison,
        device_inputs: None,
        device_outputs: None,
        release_case: None,
        return_inputs: None,
    });
    let run_frame = Arc::new(Frame::command_with_tensors(&run_case, &refs));
    let outputs_f64 =
        (outputs_f64.len() == outputs.len() && !outputs_f64.is_empty()).then_some(outputs_f64);
    let outputs_alt = probe_slots(alts, outputs.len());
    Ok(RefCase {
        case,
        forward_seed,
        not_applicable: None,
        mutated_inputs: Vec::new(),
        longest_input_axis: 0,
        data: CaseData::Host {
            run_frame,
            outputs,
            outputs_f64,
            outputs_alt,
        },
    })
}

/// Starts (or takes the prestarted) reference worker.
fn start_reference(
    ctx: &Ctx,
    exec: &Station,
    problem: &Problem,
    log: &Path,
    prestarted: Option<Result<Worker, WorkerFault>>,
) -> Result<Worker, RefFailure> {
    let started = match prestarted {
        Some(w) => w,
        None => Worker::start(
            &ctx.spec(
                Role::Reference,
                &std::env::temp_dir(),
                Some(log.to_path_buf()),
                exec.device,
            ),
            ctx.config.timeouts.start,
        ),
    };
    match started {
        Ok(w) => Ok(w),
        Err(WorkerFault::Interrupted) => Err(RefFailure::Interrupted),
        Err(f @ WorkerFault::Timeout { .. }) => Err(RefFailure::Failed(fault_message(
            &format!("{} ({})", problem.file, problem.to_ref().key()),
            "starting (python and torch's import)",
            &f,
            "--timeout-start",
            None,
            "",
        ))),
        Err(f) => Err(RefFailure::Failed(format!(
            "reference worker for {} ({}) did not start: {f}",
            problem.file,
            problem.to_ref().key()
        ))),
    }
}

/// The `load` command of a problem's reference worker. The executor sends it ahead, while
/// earlier problems run, so that building the model (seconds on the CPU for large level-3
/// models) is off the critical path.
pub(crate) fn load_request(ctx: &Ctx, exec: &Station, problem_path: &Path) -> Command {
    Command::Load(Load {
        want_f64: Some(ctx.config.profile == ToleranceProfile::Strict),
        ..ctx.load(exec.device, problem_path)
    })
}
