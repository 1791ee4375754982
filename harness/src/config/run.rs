//! The configuration of a run: [`RunConfig`] and its parts, checked and built from plain
//! values ([`EvalSpec`], [`SuiteSpec`](super::SuiteSpec)), with every flag error reported
//! before any worker starts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kbench_record::{Device, ModelMode, Precision, ToleranceProfile};
use kbench_suites::{BrokenProblem, Problem};

use crate::config::resolve::{
    default_case_cache_bytes, parse_families, resolve_device, resolve_gpus,
};
use crate::config::shard::Shard;
use crate::config::suite::{load_suite, SuiteSpec};
use crate::worker::python::{self, PythonChoice};

/// Per-phase time limits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Timeouts {
    pub(crate) start: Duration,
    pub(crate) load: Duration,
    pub(crate) run: Duration,
    pub(crate) time: Duration,
    /// The load of a baseline mode, which is `torch.compile`'s compile: `--timeout-load`
    /// when given, else [`DEFAULT_COMPILE_LOAD_S`].
    pub(crate) compile: Duration,
}

/// Default `--timeout-load`, seconds: a candidate's load is the import of its module,
/// including a `load_inline` extension's build when it was not built ahead. Such builds took
/// 49-90 s on the H100 host under load (97 s each with 12 at once on 15 cores); 300 s is three
/// times the slowest, while a candidate that hangs at import costs 5 minutes, not 15.
pub(crate) const DEFAULT_LOAD_S: f64 = 300.0;

/// Default load limit of a baseline mode (`torch.compile`, `max-autotune` included), seconds:
/// compiling a level-3 model with autotuning takes many minutes, and the code is PyTorch's
/// own, not a candidate's.
pub(crate) const DEFAULT_COMPILE_LOAD_S: f64 = 900.0;

/// How kernels are timed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TimingConfig {
    /// Timed calls per kernel, for the reference and the candidate each, at most.
    pub(crate) timed_calls: u32,
    /// Timed calls before a timing may stop early (`judge::settle`); `timed_calls` or
    /// fewer: equal, every timing times them all.
    pub(crate) min_timed_calls: u32,
    pub(crate) warmup: u32,
    pub(crate) l2_flush: bool,
    /// Untimed calls opening each timed call's window.
    pub(crate) round_warmup: RoundWarmup,
}

/// Untimed calls opening each timed call's window (`--round-warmup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundWarmup {
    /// One (at most `--warmup`) while the reference's first timed calls are shorter than
    /// [`ROUND_WARMUP_UNTIL_MS`], none for longer calls.
    Auto,
    Calls(u32),
}

/// `--round-warmup auto`: the reference's call time (the shorter of its first round's
/// timed calls) from which rounds open without an untimed call, milliseconds.
///
/// The opening call absorbs the cost of coming back after the other side's round: on an
/// H100 (`bench/round_warmup`, 13 problems from 0.1 to 29 ms, two runs each way) a round's
/// first timed call without it was 4-48 us slower than its second, about the same at every
/// call length (a cold host launch path; the L2 flush written before every call already
/// pays the GPU's switch between the two processes outside the timed region). From 5 ms
/// that is at most 1% of the first call and 0.5% of a round, the same on both sides, and
/// on those problems the reference's self-speedup stayed within 0.985-1.008 either way
/// (0.943 without the opening call at 0.1 ms, L1/12); the opening call is a
/// third of the timing phase's GPU time (each round times two calls): L1/30 Softsign's
/// timing took 4.2 s instead of 6.1 s.
pub(crate) const ROUND_WARMUP_UNTIL_MS: f64 = 5.0;

impl RoundWarmup {
    /// `auto` or a number of calls.
    pub(crate) fn parse(s: &str) -> Result<RoundWarmup> {
        match s.trim() {
            "auto" => Ok(RoundWarmup::Auto),
            n => n.parse::<u32>().map(RoundWarmup::Calls).map_err(|_| {
                anyhow::anyhow!("--round-warmup must be `auto` or a number of calls, got `{s}`")
            }),
        }
    }
}

impl TimingConfig {
    /// Untimed calls opening each timed call's window: `--round-warmup N` as given; `auto`
    /// one (at most `--warmup`) unless the reference's warm-up calls each took at least
    /// [`ROUND_WARMUP_UNTIL_MS`]. Decided on the reference's claims only (it is trusted):
    /// the candidate cannot steer how both sides are timed.
    pub(crate) fn opening_calls(&self, reference_warm: Option<&[f64]>) -> u32 {
        match self.round_warmup {
            RoundWarmup::Calls(n) => n,
            RoundWarmup::Auto => {
                let long = reference_warm.is_some_and(|s| {
                    !s.is_empty() && s.iter().all(|&ms| ms >= ROUND_WARMUP_UNTIL_MS)
                });
                if long {
                    0
                } else {
                    self.warmup.min(1)
                }
            }
        }
    }
}

/// Where candidate kernels come from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AgentConfig {
    Reference,
    Replay {
        dir: PathBuf,
    },
    /// Baseline modes to measure, by problem key (`kbench baselines measure`).
    Baselines {
        plan: std::collections::BTreeMap<String, Vec<kbench_baselines::Mode>>,
        /// The store being filled: its compile times order the problems (cheapest first).
        store: std::path::PathBuf,
    },
    /// Kernels an LLM agent produced, evaluated one call at a time under the agent's name
    /// (`coder-judge`, `kevin`, `cuda-agent`, `command`): (problem key, candidate).
    Given {
        agent: &'static str,
        candidates: Vec<(String, crate::agents::Candidate)>,
    },
}

impl AgentConfig {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            AgentConfig::Reference => "reference",
            AgentConfig::Replay { .. } => "replay",
            AgentConfig::Baselines { .. } => kbench_baselines::AGENT,
            AgentConfig::Given { agent, .. } => agent,
        }
    }
}

/// Everything `kbench run` needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct RunConfig {
    pub(crate) problems: Vec<Problem>,
    /// Problem files of the suite (after `--select` and `--shard`) that could not be loaded:
    /// each gets one `problem_error` record, no worker.
    pub(crate) broken: Vec<BrokenProblem>,
    /// Human description of the problem source, e.g. `smoke` or the KernelBench path.
    pub(crate) suite_label: String,
    pub(crate) agent: AgentConfig,
    /// The first device of the run: `Cuda(g)` for the first of `gpus`, or `Cpu`.
    pub(crate) device: Device,
    /// GPU ordinals the run spreads over (one executor each); empty on CPU.
    pub(crate) gpus: Vec<u32>,
    pub(crate) precision: Precision,
    pub(crate) profile: ToleranceProfile,
    /// The module mode both models run in (`--model-mode`).
    pub(crate) model_mode: ModelMode,
    /// Correctness trials of the `random` family.
    pub(crate) trials: u32,
    /// Stress families, one case each after the random trials (`--families`).
    pub(crate) families: Vec<kbench_record::CaseFamily>,
    pub(crate) timing: Option<TimingConfig>,
    pub(crate) timeouts: Timeouts,
    pub(crate) out: PathBuf,
    pub(crate) resume: bool,
    /// Only this shard of the suite's problems (already applied to `problems`).
    pub(crate) shard: Option<Shard>,
    /// The run's secret seed comes from this file (shared by the shards of one run).
    pub(crate) secret_from: Option<PathBuf>,
    /// Hidden from every sandbox besides the run folder, the cache and the secret file: what
    /// lies beside the run and must not reach a candidate (a service's store and tokens).
    pub(crate) hidden_also: Vec<PathBuf>,
    pub(crate) python: PythonChoice,
    pub(crate) cache: PathBuf,
    pub(crate) cpu_threads: u32,
    /// `OMP_NUM_THREADS` of the workers on a GPU when the user did not export it
    /// ([`super::resolve::gpu_worker_threads`]); `None` on the CPU or when exported.
    pub(crate) gpu_worker_threads: Option<usize>,
    /// Build processes of the compile pipeline (0: build when loading).
    pub(crate) build_jobs: usize,
    /// Host memory for keeping a problem's reference cases between its candidates.
    pub(crate) case_cache_bytes: u64,
    pub(crate) weight_seed: u64,
    pub(crate) quiet: bool,
    /// Baselines each correct kernel's time is compared with (`--baselines`).
    pub(crate) baselines: Option<std::sync::Arc<kbench_baselines::BaselineTable>>,
    /// Problems an executor takes ahead of the one on its GPU; `None` is the engine's
    /// default. `Some(0)` starts nothing ahead, so a problem has its GPU to itself
    /// ([`keeps_gpu_alone`](Self::keeps_gpu_alone)).
    pub(crate) lookahead: Option<usize>,
    /// A CUDA candidate none of whose own kernels ran in a profiled call fails with the
    /// `no-custom-kernel` integrity flag (without it the flag is an advisory).
    pub(crate) require_custom_kernels: bool,
    /// Other evaluators' timing conventions each timed kernel is also timed under
    /// (`kernelbench`, `kernelbench-v0.1`, `cuda-l1`): diagnoses for claims, recorded as `method_timings`.
    pub(crate) time_as: Vec<String>,
    /// Candidates run uncontained (`--no-sandbox`).
    pub(crate) no_sandbox: bool,
    /// `--memory-cap`: each worker's memory cap as asked (`worker::bounds`).
    pub(crate) memory_cap: crate::worker::bounds::MemoryCapChoice,
    /// The unprivileged uid sandboxed candidates run as (`KBENCH_CANDIDATE_UID`; only when
    /// kbench runs as root).
    pub(crate) candidate_uid: Option<u32>,
    /// `--stop-starting-after` (its seconds) and the instant it comes, counted from when the
    /// command's configuration was made: one deadline for every run of the command
    /// (`baselines measure` runs up to three passes).
    pub(crate) stop_starting: Option<(f64, std::time::Instant)>,
}

impl RunConfig {
    /// Whether an evaluation on a GPU (`on_gpu`) has the GPU to itself: nothing taken ahead
    /// (`lookahead` 0, `baselines measure --lookahead 0` and its out-of-memory pass), so no
    /// other problem's or mode's worker is loaded beside it. Its records say so, and a
    /// failure of its load is its own (not loaded again).
    pub(crate) fn keeps_gpu_alone(&self, on_gpu: bool) -> bool {
        on_gpu && self.lookahead == Some(0)
    }

    /// Cases per candidate: the random trials, then one per stress family.
    pub(crate) fn cases_total(&self) -> u32 {
        self.trials + self.families.len() as u32
    }

    /// Case `t` of [`cases_total`](Self::cases_total), in the order they run.
    pub(crate) fn case_ref(&self, t: u32) -> kbench_record::CaseRef {
        if t < self.trials {
            kbench_record::CaseRef {
                family: kbench_record::CaseFamily::Random,
                index: t,
            }
        } else {
            kbench_record::CaseRef {
                family: self.families[(t - self.trials) as usize].clone(),
                index: 0,
            }
        }
    }
}

/// The timing conventions of other evaluators that `--time-as` knows (the worker's
/// `time_as` command: PROTOCOL.md).
pub(crate) const TIME_AS_METHODS: [&str; 3] = ["kernelbench", "kernelbench-v0.1", "cuda-l1"];

/// How kernels are evaluated and timed, as asked: shared by `run` and `baselines measure`,
/// checked by [`RunConfig::build`]. The fields are those of the flags of the same names.
#[derive(Debug, Clone)]
pub(crate) struct EvalSpec {
    /// auto, cpu, cuda or cuda:N.
    pub(crate) device: String,
    /// `--gpus`: a comma-separated list of GPU ordinals.
    pub(crate) gpus: Option<String>,
    pub(crate) precision: Precision,
    pub(crate) profile: ToleranceProfile,
    pub(crate) model_mode: ModelMode,
    pub(crate) trials: u32,
    /// `--families`: `all`, `random` or a comma-separated list.
    pub(crate) families: String,
    pub(crate) timed_calls: u32,
    pub(crate) min_timed_calls: u32,
    pub(crate) warmup: u32,
    /// `--round-warmup`: `auto` or a number.
    pub(crate) round_warmup: String,
    pub(crate) no_timing: bool,
    pub(crate) require_custom_kernels: bool,
    pub(crate) no_l2_flush: bool,
    /// `--time-as`: other evaluators' timing conventions, as named.
    pub(crate) time_as: Vec<String>,
    pub(crate) no_sandbox: bool,
    /// `--memory-cap`: `auto`, `none` or a size.
    pub(crate) memory_cap: String,
    /// Seconds.
    pub(crate) timeout_start: f64,
    /// `None`: [`DEFAULT_LOAD_S`] for kernels, [`DEFAULT_COMPILE_LOAD_S`] for baseline modes.
    pub(crate) timeout_load: Option<f64>,
    pub(crate) timeout_run: f64,
    pub(crate) timeout_time: f64,
    /// `--stop-starting-after`, seconds.
    pub(crate) stop_starting_after: Option<f64>,
    pub(crate) build_jobs: Option<usize>,
    pub(crate) case_cache_mb: Option<u64>,
    pub(crate) cpu_threads: u32,
    pub(crate) weight_seed: u64,
    pub(crate) quiet: bool,
}

impl RunConfig {
    /// The checked configuration of an evaluation of `agent` over `suite` into `out`.
    pub(crate) fn build(
        suite: &SuiteSpec,
        python: Option<&Path>,
        a: &EvalSpec,
        agent: AgentConfig,
        out: &Path,
        shard: Option<Shard>,
    ) -> Result<Self> {
        let mut loaded = load_suite(suite)?;
        if let Some(shard) = shard {
            // A shard may be left with no problem (more shards than problems): it records
            // nothing, which merges fine.
            loaded = shard.select_suite(loaded);
        }
        if out.exists() && !out.is_dir() {
            bail!(
                "--out {} is a file, not a run folder: choose another --out (a new folder, or a run folder with --resume), or remove the file",
                out.display()
            );
        }
        let suite_label = suite.label();
        let device = resolve_device(&a.device)?;
        let gpus = resolve_gpus(&a.device, device, a.gpus.as_deref())?;
        let device = gpus.first().map_or(device, |g| Device::Cuda(*g));
        for (name, v) in [
            ("--timeout-start", a.timeout_start),
            ("--timeout-load", a.timeout_load.unwrap_or(DEFAULT_LOAD_S)),
            ("--timeout-run", a.timeout_run),
            ("--timeout-time", a.timeout_time),
        ] {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a positive number of seconds, got {v}");
            }
        }
        if let Some(v) = a.stop_starting_after {
            if !(v.is_finite() && v >= 0.0) {
                bail!("--stop-starting-after must be a number of seconds, 0 or more, got {v}");
            }
        }
        if a.trials == 0 {
            bail!("--trials must be at least 1");
        }
        let mut time_as: Vec<String> = Vec::new();
        for m in &a.time_as {
            if !TIME_AS_METHODS.contains(&m.as_str()) {
                bail!(
                    "--time-as {m}: unknown timing convention; choose from {}",
                    TIME_AS_METHODS.join(", ")
                );
            }
            if !time_as.contains(m) {
                time_as.push(m.clone());
            }
        }
        let timing = if a.no_timing {
            None
        } else {
            if a.timed_calls == 0 {
                bail!("--timed-calls must be at least 1 (or pass --no-timing)");
            }
            Some(TimingConfig {
                timed_calls: a.timed_calls,
                min_timed_calls: a.min_timed_calls.clamp(1, a.timed_calls),
                warmup: a.warmup,
                l2_flush: !a.no_l2_flush,
                round_warmup: RoundWarmup::parse(&a.round_warmup)?,
            })
        };
        if a.cpu_threads == 0 {
            bail!("--cpu-threads must be at least 1");
        }
        crate::worker::check_keep_cached(
            std::env::var(crate::worker::KEEP_CACHED_ENV)
                .ok()
                .as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
        let memory_cap =
            crate::worker::bounds::parse_memory_cap(&a.memory_cap).map_err(anyhow::Error::msg)?;
        let candidate_uid = crate::worker::bounds::candidate_uid(
            std::env::var(crate::worker::bounds::CANDIDATE_UID_ENV)
                .ok()
                .as_deref(),
            nix::unistd::geteuid().as_raw(),
        )
        .map_err(anyhow::Error::msg)?;
        let cache = python::cache_dir();
        let gpu_worker_threads = match device {
            Device::Cpu => None,
            Device::Cuda(_) => super::resolve::host_gpu_worker_threads(gpus.len()),
        };
        Ok(RunConfig {
            problems: loaded.problems,
            broken: loaded.broken,
            suite_label,
            agent,
            device,
            gpus,
            precision: a.precision,
            profile: a.profile,
            model_mode: a.model_mode,
            trials: a.trials,
            families: parse_families(&a.families)?,
            timing,
            timeouts: Timeouts {
                start: Duration::from_secs_f64(a.timeout_start),
                load: Duration::from_secs_f64(a.timeout_load.unwrap_or(DEFAULT_LOAD_S)),
                compile: Duration::from_secs_f64(a.timeout_load.unwrap_or(DEFAULT_COMPILE_LOAD_S)),
                run: Duration::from_secs_f64(a.timeout_run),
                time: Duration::from_secs_f64(a.timeout_time),
            },
            // Workers run in private working directories: every path handed to them, and so
            // the run directory holding candidate sources, must be absolute.
            out: std::path::absolute(out)
                .with_context(|| format!("resolving --out {}", out.display()))?,
            resume: false,
            shard,
            secret_from: None,
            hidden_also: Vec::new(),
            python: PythonChoice::resolve(python, &cache),
            cache,
            cpu_threads: a.cpu_threads,
            gpu_worker_threads,
            build_jobs: a.build_jobs.unwrap_or(match device {
                Device::Cpu => 0,
                // A cold run is bound by how many builds the host gets through: a build per
                // core but one, within memory (the builds needed first at a higher priority,
                // so they are not slowed by a full host; see worker::build_niceness).
                Device::Cuda(_) => super::resolve::host_build_jobs(),
            }),
            case_cache_bytes: a
                .case_cache_mb
                .map_or_else(default_case_cache_bytes, |mb| mb.saturating_mul(1 << 20)),
            weight_seed: a.weight_seed,
            quiet: a.quiet,
            baselines: None,
            lookahead: None,
            require_custom_kernels: a.require_custom_kernels,
            time_as,
            no_sandbox: a.no_sandbox,
            memory_cap,
            candidate_uid,
            // A deadline too far off to represent is no deadline.
            stop_starting: a.stop_starting_after.and_then(|s| {
                let after = Duration::try_from_secs_f64(s).ok()?;
                Some((s, std::time::Instant::now().checked_add(after)?))
            }),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn tc(warmup: u32, round_warmup: RoundWarmup) -> TimingConfig {
        TimingConfig {
            timed_calls: 100,
            min_timed_calls: 100,
            warmup,
            l2_flush: true,
            round_warmup,
        }
    }

    #[test]
    fn calls_open_with_a_call_until_the_reference_is_long() {
        let auto = tc(3, RoundWarmup::Auto);
        assert_eq!(auto.opening_calls(None), 1);
        assert_eq!(auto.opening_calls(Some(&[0.08, 0.09])), 1);
        let long = ROUND_WARMUP_UNTIL_MS;
        assert_eq!(auto.opening_calls(Some(&[long * 0.99, 14.9])), 1);
        assert_eq!(auto.opening_calls(Some(&[long, 14.9])), 0);
        assert_eq!(tc(0, RoundWarmup::Auto).opening_calls(Some(&[0.08])), 0);
        assert_eq!(
            tc(3, RoundWarmup::Calls(2)).opening_calls(Some(&[14.9, 15.0])),
            2
        );
    }

    /// The settings of a CPU run with the flags' defaults (tests elsewhere build on it).
    pub(crate) fn spec(timeout_load: Option<f64>) -> EvalSpec {
        EvalSpec {
            device: "cpu".into(),
            gpus: None,
            precision: Precision::Fp32,
            profile: ToleranceProfile::Strict,
            model_mode: ModelMode::Train,
            trials: 5,
            families: "all".into(),
            timed_calls: 10,
            min_timed_calls: 10,
            warmup: 1,
            round_warmup: "auto".into(),
            no_timing: false,
            require_custom_kernels: false,
            no_l2_flush: false,
            time_as: Vec::new(),
            no_sandbox: false,
            memory_cap: "auto".into(),
            timeout_start: 120.0,
            timeout_load,
            timeout_run: 120.0,
            timeout_time: 300.0,
            build_jobs: None,
            case_cache_mb: None,
            stop_starting_after: None,
            cpu_threads: 1,
            weight_seed: 42,
            quiet: true,
        }
    }

    /// A candidate hanging at import costs 5 minutes by default, not 15; a baseline mode's
    /// torch.compile keeps its longer limit; `--timeout-load` sets both.
    #[test]
    fn load_timeouts_default_short_for_kernels_and_long_for_compiles() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let build = |load| {
            let suite = SuiteSpec::default();
            RunConfig::build(
                &suite,
                None,
                &spec(load),
                AgentConfig::Reference,
                &out,
                None,
            )
            .unwrap()
            .timeouts
        };
        let t = build(None);
        assert_eq!(t.load, Duration::from_secs(300));
        assert_eq!(t.compile, Duration::from_secs(900));
        let t = build(Some(60.0));
        assert_eq!(
            (t.load, t.compile),
            (Duration::from_secs(60), Duration::from_secs(60))
        );
        let e = RunConfig::build(
            &SuiteSpec::default(),
            None,
            &spec(Some(0.0)),
            AgentConfig::Reference,
            &out,
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("--timeout-load"), "{e}");
    }

    /// Only `lookahead` 0 on a GPU keeps the GPU alone: on the CPU workers always start
    /// ahead, and lookahead 1 still loads one problem beside the one evaluated.
    #[test]
    fn only_lookahead_zero_on_a_gpu_keeps_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = RunConfig::build(
            &SuiteSpec::default(),
            None,
            &spec(None),
            AgentConfig::Reference,
            &dir.path().join("run"),
            None,
        )
        .unwrap();
        for (lookahead, on_gpu, alone) in [
            (None, true, false),
            (Some(1), true, false),
            (Some(0), false, false),
            (Some(0), true, true),
        ] {
            c.lookahead = lookahead;
            assert_eq!(c.keeps_gpu_alone(on_gpu), alone, "{lookahead:?} {on_gpu}");
        }
    }
}
