//! Validated configuration: `Args` in, checked values and resolved paths out. Everything that
//! can be wrong with the command line is reported here, before any worker starts.

pub mod shard;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kbench_record::{Device, Precision, ToleranceProfile};
use kbench_suites::Problem;

use crate::cli::{
    AgentKind, BuiltinSuite, EvalArgs, PrecisionArg, ProfileArg, PythonArgs, RunArgs, SuiteArgs,
};
use crate::config::shard::Shard;
use crate::gpu;
use crate::worker::python::{self, PythonChoice};

/// Per-phase time limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    pub start: Duration,
    pub load: Duration,
    pub run: Duration,
    pub time: Duration,
}

/// How kernels are timed.
#[derive(Debug, Clone, PartialEq)]
pub struct TimingConfig {
    /// Timed calls per kernel, for the reference and the candidate each.
    pub timed_calls: u32,
    pub warmup: u32,
    /// Interleaving rounds between reference and candidate.
    pub rounds: u32,
    pub l2_flush: bool,
}

/// Where candidate kernels come from.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentConfig {
    Reference,
    Replay {
        dir: PathBuf,
    },
    /// Baseline modes to measure, by problem key (`kbench baselines measure`).
    Baselines {
        plan: std::collections::BTreeMap<String, Vec<kbench_baselines::Mode>>,
    },
    /// Kernels an LLM agent produced, evaluated one call at a time under the agent's name
    /// (`coder-judge`, `kevin`, `cuda-agent`, `command`): (problem key, candidate).
    Given {
        agent: &'static str,
        candidates: Vec<(String, crate::agents::Candidate)>,
    },
}

impl AgentConfig {
    pub fn name(&self) -> &'static str {
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
pub struct RunConfig {
    pub problems: Vec<Problem>,
    /// Human description of the problem source, e.g. `smoke` or the KernelBench path.
    pub suite_label: String,
    pub agent: AgentConfig,
    /// The first device of the run: `Cuda(g)` for the first of `gpus`, or `Cpu`.
    pub device: Device,
    /// GPU ordinals the run spreads over (one executor each); empty on CPU.
    pub gpus: Vec<u32>,
    pub precision: Precision,
    pub profile: ToleranceProfile,
    /// Correctness trials of the `random` family.
    pub trials: u32,
    /// Stress families, one case each after the random trials (`--families`).
    pub families: Vec<kbench_record::CaseFamily>,
    pub timing: Option<TimingConfig>,
    pub timeouts: Timeouts,
    pub out: PathBuf,
    pub resume: bool,
    /// Only this shard of the suite's problems (already applied to `problems`).
    pub shard: Option<Shard>,
    /// The run's secret seed comes from this file (shared by the shards of one run).
    pub secret_from: Option<PathBuf>,
    pub python: PythonChoice,
    pub cache: PathBuf,
    pub cpu_threads: u32,
    /// Build processes of the compile pipeline (0: build when loading).
    pub build_jobs: usize,
    /// Host memory for keeping a problem's reference cases between its candidates.
    pub case_cache_bytes: u64,
    pub weight_seed: u64,
    pub quiet: bool,
    /// Baselines each correct kernel's time is compared with (`--baselines`).
    pub baselines: Option<std::sync::Arc<kbench_baselines::BaselineTable>>,
    /// Problems an executor takes ahead of the one on its GPU; `None` is the engine's
    /// default. `Some(1)` starts nothing ahead, so a problem has its GPU to itself
    /// (baselines measured again after running out of memory beside loads sent ahead).
    pub lookahead: Option<usize>,
    /// A CUDA candidate none of whose own kernels ran in a profiled call fails with the
    /// `no-custom-kernel` integrity flag (without it the flag is an advisory).
    pub require_custom_kernels: bool,
}

/// `--families`: `all`, `random` or a list of stress families (`random` may be named in a
/// list; it always runs).
pub fn parse_families(spec: &str) -> Result<Vec<kbench_record::CaseFamily>> {
    use kbench_record::CaseFamily;
    let known = kbench_adversarial::STRESS_FAMILIES;
    let names = || {
        known
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match spec.trim() {
        "all" => return Ok(known.to_vec()),
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
                names()
            );
        }
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

impl RunConfig {
    /// Cases per candidate: the random trials, then one per stress family.
    pub fn cases_total(&self) -> u32 {
        self.trials + self.families.len() as u32
    }

    /// Case `t` of [`cases_total`](Self::cases_total), in the order they run.
    pub fn case_ref(&self, t: u32) -> kbench_record::CaseRef {
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

impl TryFrom<RunArgs> for RunConfig {
    type Error = anyhow::Error;

    fn try_from(a: RunArgs) -> Result<Self> {
        let agent = match a.agent {
            AgentKind::Reference => {
                if a.replay_dir.is_some() {
                    bail!("--replay-dir is only for --agent replay");
                }
                AgentConfig::Reference
            }
            AgentKind::Replay => {
                let dir = a
                    .replay_dir
                    .clone()
                    .context("--agent replay needs --replay-dir DIR (a folder of kernel files)")?;
                if !dir.is_dir() {
                    bail!(
                        "replay folder {} does not exist or is not a directory",
                        dir.display()
                    );
                }
                AgentConfig::Replay { dir }
            }
            AgentKind::CoderJudge
            | AgentKind::Kevin
            | AgentKind::CudaAgent
            | AgentKind::Command => {
                if a.replay_dir.is_some() {
                    bail!("--replay-dir is only for --agent replay (replaying model replies is --llm-replay RUN_DIR)");
                }
                AgentConfig::Given {
                    agent: agent_kind(a.agent).name(),
                    candidates: Vec::new(),
                }
            }
        };
        let mut c = RunConfig::build(&a.suite, &a.python, &a.eval, agent, &a.out, a.shard)?;
        c.resume = a.resume;
        c.secret_from = a
            .secret_from
            .as_deref()
            .map(std::path::absolute)
            .transpose()
            .context("resolving --secret-from")?;
        Ok(c)
    }
}

/// The LLM agent kind of `--agent`, for the agent kinds that loop with feedback.
pub fn agent_kind(k: AgentKind) -> crate::llm::Kind {
    use crate::llm::Kind;
    match k {
        AgentKind::Kevin => Kind::Kevin,
        AgentKind::CudaAgent => Kind::CudaAgent,
        AgentKind::Command => Kind::Command,
        _ => Kind::CoderJudge,
    }
}

/// The options of an LLM or command agent run, checked.
pub fn agent_options(kind: AgentKind, a: &crate::cli::AgentArgs) -> Result<crate::llm::Options> {
    let kind = agent_kind(kind);
    for (name, v) in [
        ("--max-cost-usd", a.max_cost_usd),
        ("--max-task-cost-usd", a.max_task_cost_usd),
        ("--max-minutes", a.max_minutes),
        ("--max-task-minutes", a.max_task_minutes),
    ] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{name} must be a non-negative number, got {v}");
            }
        }
    }
    if a.trajectories == 0 {
        bail!("--trajectories must be at least 1");
    }
    if let Some(r) = &a.llm_replay {
        if !r.is_dir() {
            bail!("--llm-replay {}: no such run directory", r.display());
        }
    }
    Ok(crate::llm::Options {
        kind,
        llm_config: Some(a.llm_config.clone()),
        model: a.model.clone(),
        coder: a.coder.clone(),
        judge: a.judge.clone(),
        max_rounds: a.max_rounds,
        trajectories: a.trajectories,
        trajectory_jobs: a.trajectory_jobs,
        kevin_format_checks: a.kevin_format_checks,
        context_tokens: a.context_tokens,
        max_cost_usd: a.max_cost_usd,
        max_task_cost_usd: a.max_task_cost_usd,
        max_minutes: a.max_minutes,
        max_task_minutes: a.max_task_minutes,
        jobs: a.jobs,
        llm_replay: a.llm_replay.clone(),
        command: a.command.clone(),
        runs_name: a.runs_name.clone(),
        gpu: a.target_gpu.clone(),
    })
}

impl RunConfig {
    /// The checked configuration of an evaluation of `agent` over `suite` into `out`.
    pub fn build(
        suite: &SuiteArgs,
        python: &PythonArgs,
        a: &EvalArgs,
        agent: AgentConfig,
        out: &Path,
        shard: Option<Shard>,
    ) -> Result<Self> {
        let mut problems = load_suite(suite)?;
        if let Some(shard) = shard {
            // A shard may be left with no problem (more shards than problems): it records
            // nothing, which merges fine.
            problems = shard.select(problems);
        }
        let suite_label = suite_label(suite);
        let device = resolve_device(&a.device)?;
        let gpus = resolve_gpus(&a.device, device, a.gpus.as_deref())?;
        let device = gpus.first().map_or(device, |g| Device::Cuda(*g));
        for (name, v) in [
            ("--timeout-start", a.timeout_start),
            ("--timeout-load", a.timeout_load),
            ("--timeout-run", a.timeout_run),
            ("--timeout-time", a.timeout_time),
        ] {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a positive number of seconds, got {v}");
            }
        }
        if a.trials == 0 {
            bail!("--trials must be at least 1");
        }
        let timing = if a.no_timing {
            None
        } else {
            if a.timed_calls == 0 || a.rounds == 0 {
                bail!("--timed-calls and --rounds must be at least 1 (or pass --no-timing)");
            }
            Some(TimingConfig {
                timed_calls: a.timed_calls,
                warmup: a.warmup,
                rounds: a.rounds.min(a.timed_calls),
                l2_flush: !a.no_l2_flush,
            })
        };
        if a.cpu_threads == 0 {
            bail!("--cpu-threads must be at least 1");
        }
        let cache = python::cache_dir();
        Ok(RunConfig {
            problems,
            suite_label,
            agent,
            device,
            gpus,
            precision: match a.precision {
                PrecisionArg::Fp32 => Precision::Fp32,
                PrecisionArg::Fp16 => Precision::Fp16,
                PrecisionArg::Bf16 => Precision::Bf16,
            },
            profile: match a.profile {
                ProfileArg::Strict => ToleranceProfile::Strict,
                ProfileArg::Kernelbench => ToleranceProfile::KernelBench,
                ProfileArg::KernelbenchV01 => ToleranceProfile::KernelBenchV01,
            },
            trials: a.trials,
            families: parse_families(&a.families)?,
            timing,
            timeouts: Timeouts {
                start: Duration::from_secs_f64(a.timeout_start),
                load: Duration::from_secs_f64(a.timeout_load),
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
            python: PythonChoice::resolve(python.python.as_deref(), &cache),
            cache,
            cpu_threads: a.cpu_threads,
            build_jobs: a.build_jobs.unwrap_or(match device {
                Device::Cpu => 0,
                // Each load_inline build runs two compilers at once (the binding and the
                // kernel source): half as many builds as cores keeps every core busy, and
                // the builds at the head of the queue finish in about the time of one
                // build instead of all finishing together (12 at once on 15 cores took
                // 97 s each on the H100 host, where one alone takes about 45 s).
                Device::Cuda(_) => {
                    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
                }
            }),
            case_cache_bytes: a
                .case_cache_mb
                .map_or_else(default_case_cache_bytes, |mb| mb.saturating_mul(1 << 20)),
            weight_seed: a.weight_seed,
            quiet: a.quiet,
            baselines: None,
            lookahead: None,
            require_custom_kernels: a.require_custom_kernels,
        })
    }
}

/// A quarter of physical memory (`MemTotal` in /proc/meminfo), or 4 GiB when unknown.
pub fn default_case_cache_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(4 << 30, |kb| kb * 1024 / 4)
}

/// `auto` picks the first GPU when the CUDA driver sees one, else the CPU.
pub fn resolve_device(spec: &str) -> Result<Device> {
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
pub fn resolve_gpus(spec: &str, device: Device, gpus: Option<&str>) -> Result<Vec<u32>> {
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

fn suite_label(s: &SuiteArgs) -> String {
    if let Some(p) = &s.problem {
        return format!("file {}", p.display());
    }
    if let Some(d) = &s.kernelbench {
        return format!("kernelbench {} levels {:?}", d.display(), s.levels);
    }
    "smoke".into()
}

/// Loads the problems the suite arguments name, filtered by `--select`.
pub fn load_suite(s: &SuiteArgs) -> Result<Vec<Problem>> {
    let mut problems = if let Some(p) = &s.problem {
        vec![kbench_suites::load_problem_file(p)?]
    } else if let Some(d) = &s.kernelbench {
        for l in &s.levels {
            if !(1..=3).contains(l) {
                bail!("--levels: level {l} is not one of 1, 2, 3");
            }
        }
        kbench_suites::load_kernelbench(d, &s.levels)?
    } else {
        match s.suite {
            Some(BuiltinSuite::Smoke) | None => kbench_suites::smoke(),
        }
    };
    if let Some(spec) = &s.select {
        let sel = Selection::parse(spec)?;
        problems.retain(|p| sel.matches(p.level, p.id));
        if problems.is_empty() {
            bail!("--select {spec} matches no problem of the suite");
        }
    }
    Ok(problems)
}

/// A parsed `--select` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection(Vec<(Option<u8>, u32, u32)>);

impl Selection {
    pub fn parse(spec: &str) -> Result<Self> {
        let mut items = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
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
        if items.is_empty() {
            bail!("--select is empty");
        }
        Ok(Self(items))
    }

    pub fn matches(&self, level: u8, id: u32) -> bool {
        self.0
            .iter()
            .any(|&(l, a, b)| l.is_none_or(|l| l == level) && (a..=b).contains(&id))
    }
}

/// The problem file handed to workers: the exact bytes that were hashed, in the cache.
pub fn materialize_problem(cache: &Path, p: &Problem) -> Result<PathBuf> {
    python::write_content_addressed(&cache.join("problems"), &p.file, p.source.as_bytes())
        .with_context(|| format!("writing problem {} to the cache", p.file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_parses_and_matches() {
        let s = Selection::parse("1/19, 2/1-5,7").unwrap();
        assert!(s.matches(1, 19));
        assert!(!s.matches(2, 19));
        assert!(s.matches(2, 3));
        assert!(s.matches(3, 7));
        assert!(!s.matches(1, 6));
        for bad in ["", "x", "1/", "5-2", "a/3"] {
            assert!(Selection::parse(bad).is_err(), "{bad}");
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
