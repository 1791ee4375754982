use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::case::CaseRef;
use crate::outcome::Outcome;

/// Where kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(u32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|i| i.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device '{s}': use cpu, cuda or cuda:N")),
        }
    }
}

impl Serialize for Device {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Working precision: inputs, weights and the model are cast to it, as KernelBench does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    Fp32,
    Fp16,
    Bf16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Named tolerance profiles (see docs/correctness.md, "Tolerance").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum ToleranceProfile {
    /// kbench's default: KernelBench HEAD's elementwise tolerances plus a float64 gate.
    #[default]
    #[serde(rename = "strict")]
    Strict,
    /// KernelBench HEAD: atol = rtol = 1e-4 for fp32, 1e-2 for fp16/bf16.
    #[serde(rename = "kernelbench")]
    KernelBench,
    /// KernelBench v0/v0.1 (the papers' numbers): atol = rtol = 1e-2 everywhere.
    #[serde(rename = "kernelbench-v0.1")]
    KernelBenchV01,
}

impl ToleranceProfile {
    pub fn as_str(self) -> &'static str {
        match self {
            ToleranceProfile::Strict => "strict",
            ToleranceProfile::KernelBench => "kernelbench",
            ToleranceProfile::KernelBenchV01 => "kernelbench-v0.1",
        }
    }
}

impl std::fmt::Display for ToleranceProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The module mode both models run in (`kbench run --model-mode`): `train`, KernelBench's
/// convention (modules as constructed), or `eval` (`.eval()` on both right after
/// construction, as some published sets evaluate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ModelMode {
    #[default]
    Train,
    Eval,
}

impl ModelMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelMode::Train => "train",
            ModelMode::Eval => "eval",
        }
    }
}

impl std::fmt::Display for ModelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which problem was evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProblemRef {
    /// `kernelbench`, `smoke`, or `file` for a single `--problem FILE`.
    pub suite: String,
    pub level: u8,
    pub id: u32,
    /// The file name's part after the id, e.g. `Square_matrix_multiplication_`.
    pub name: String,
    /// File name as in the suite, e.g. `1_Square_matrix_multiplication_.py`.
    pub file: String,
    /// sha256 of the problem source, hex.
    pub sha256: String,
}

impl ProblemRef {
    /// Stable key, e.g. `kernelbench/L1/19`.
    pub fn key(&self) -> String {
        format!("{}/L{}/{}", self.suite, self.level, self.id)
    }
}

/// Which candidate kernel was evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CandidateRef {
    /// Agent that produced it, e.g. `reference`, `replay`.
    pub agent: String,
    /// Name unique within the problem, e.g. a file stem.
    pub name: String,
    pub sample: u32,
    /// Where the source came from, when it is a file.
    pub source_path: Option<String>,
    /// sha256 of the candidate source, hex.
    pub sha256: String,
    /// Set on the records an LLM agent makes while choosing its final kernel: a finalist
    /// re-timed to choose, or the chosen kernel measured afresh (README, "Agents").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
}

/// Why a record re-measures a kernel an agent already wrote: the choice of its final
/// kernel. Picking the fastest of noisy measurements rewards noise (the winner's curse), so
/// the finalists are re-timed together, the fastest there is chosen, and the speedup that
/// counts is a further, fresh measurement of the chosen kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Selection {
    pub role: SelectionRole,
    /// The candidate name of the agent's kernel this record measures again.
    pub of: String,
    /// Finalists (distinct sources) re-timed together to choose.
    pub finalists: u32,
    /// On the final record: what the finalists' re-timing gave, one `name speedup` each
    /// (e.g. `round03 1.021x`), for people reading the record; the finalists' own records
    /// hold the measurements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub session: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionRole {
    /// A finalist's re-timing: used to choose, never the speedup a report shows.
    Finalist,
    /// The chosen kernel's fresh measurement, taken after the choice: the task's result.
    Final,
}

/// Result of one correctness case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub case: CaseRef,
    pub passed: bool,
    /// Largest |candidate - reference| over all outputs (NaN-free elements).
    pub max_abs: f64,
    /// Largest |candidate - reference| / |reference| over all outputs.
    pub max_rel: f64,
    /// Elements outside tolerance over all outputs.
    pub mismatches: u64,
    /// Elements compared over all outputs.
    pub elements: u64,
    /// ‖candidate − ref64‖₂ / ‖ref64‖₂ where a float64 reference was available.
    pub rel_l2_vs_f64: Option<f64>,
    /// Candidate's own wall time for the call, seconds (harness clock).
    pub wall_s: f64,
    /// Why this case was not run against the candidate: the reference itself is unstable
    /// under it, or the family changes none of the problem's inputs. Such a case counts as
    /// passed and is not evidence of correctness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
    /// `denormal` family: how the candidate treated subnormal reference values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush: Option<FlushCount>,
    /// The smallest `t` for which `atol = rtol = t` passes every element where candidate
    /// and reference are both finite: `max |c − r|/(1 + |r|)` over the outputs. `None` where
    /// no tolerance makes the case pass (wrong shape or dtype, a NaN/Inf rule failure) or
    /// nothing was compared. Not a verdict: the strict profile's float64 gate is apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tol_needed: Option<f64>,
    /// `nan-inf` family: finite candidate elements accepted where the reference is NaN/±Inf
    /// only through its own algorithm (README, "NaN and Inf"). `None` when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artefacts: Option<ArtefactCount>,
    /// Why the case failed a NaN/Inf rule, in words: the rule, the first element, the
    /// values there (for `kbench check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Where the case's time went, as the harness measured it (absent in records written
    /// before it was measured, and for cases that did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<CaseTimes>,
}

/// Seconds one case took, by step (harness clock).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseTimes {
    /// Getting the reference's case: made by its worker (inputs, forward, float64 forward,
    /// stability and probe runs, copy out), or taken from the cache.
    pub reference_s: f64,
    /// Sending it to the candidate until its answer (buffers, the call, integrity probes).
    pub candidate_s: f64,
    /// Comparing and judging the answer.
    pub judge_s: f64,
    /// The whole case, from asking the reference to the verdict.
    pub total_s: f64,
}

/// Elements accepted as reference artefacts in one case (see `CaseResult::artefacts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtefactCount {
    /// Over all outputs.
    pub count: u64,
    /// The first output that has any, and the multi-index of its first one.
    pub output: u32,
    pub first_index: Vec<u64>,
}

/// Subnormal values in the reference's outputs (at the working precision) and how many of
/// them the candidate returned as exactly zero: a candidate built with flush-to-zero
/// (`--use_fast_math`) returns most of them as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushCount {
    pub subnormal: u64,
    pub zeroed: u64,
}

impl FlushCount {
    /// At least 16 subnormal reference values, and half or more came back as zero.
    pub fn flushed(&self) -> bool {
        self.subnormal >= 16 && self.zeroed * 2 >= self.subnormal
    }
}

/// Summary of timing samples, all in milliseconds. Samples are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingStats {
    /// `cuda_event` or `perf_counter`.
    pub clock: String,
    pub samples_ms: Vec<f64>,
    pub median_ms: f64,
    pub mean_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub std_ms: f64,
    /// 25th percentile.
    pub p25_ms: f64,
    /// 75th percentile.
    pub p75_ms: f64,
    /// Wall time of the timing phases as the harness measured it, seconds.
    pub wall_s: f64,
}

/// Candidate against reference, both timed by kbench in the same run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingSummary {
    pub reference: TimingStats,
    pub candidate: TimingStats,
    /// kbench's headline speedup: the median over interleaving rounds of (reference mean /
    /// candidate mean) within the round, a paired estimate that cancels host drift lasting
    /// longer than a round (`kbench_reports::paired_speedup`).
    pub speedup: f64,
    /// reference median / candidate median over all samples (unpaired). Absent in records
    /// written before the paired speedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_of_medians: Option<f64>,
    /// reference mean / candidate mean (KernelBench's convention).
    pub speedup_mean: f64,
    pub warmup: u32,
    pub l2_flush: bool,
    /// Timed calls were interleaved between reference and candidate in this many rounds.
    pub rounds: u32,
    /// Untimed calls that opened each round after the first (`warmup` opened the first);
    /// since timed calls are driven one at a time, the untimed calls opening each timed
    /// call's window. Absent in records written before it could be other than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_warmup: Option<u32>,
    /// What the harness's own clock measured of every timed call, and whether it supports
    /// the candidate's claims. Absent in records written before timed calls were driven one
    /// at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_clock: Option<HarnessClock>,
    /// The kernel timed again under other evaluators' conventions (`--time-as`), each side
    /// in its own worker by its own clock: diagnoses for published claims, never kbench's
    /// speedup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub method_timings: Vec<MethodTiming>,
}

/// Reference and candidate timed under another evaluator's convention (`--time-as`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodTiming {
    /// `kernelbench` or `cuda-l1`.
    pub method: String,
    /// Mean milliseconds per call, as that convention reports them, and the calls behind
    /// each mean.
    pub reference_ms: f64,
    pub candidate_ms: f64,
    pub reference_calls: u32,
    pub candidate_calls: u32,
    /// `reference_ms / candidate_ms`: the speedup that convention would report.
    pub speedup: f64,
}

/// The harness's clock against the times the workers claimed: every timed call's window
/// (from thawing the worker to its confirmed freeze), per side, and the check that the
/// candidate's claims leave no more of its windows unexplained than the reference's do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessClock {
    /// How the workers were frozen between their calls: `cgroup` or `signals`.
    pub freeze: String,
    /// Each timed call's window, milliseconds, in call order.
    pub reference_wall_ms: Vec<f64>,
    pub candidate_wall_ms: Vec<f64>,
    /// The candidate's unexplained time (window minus claim) minus the reference's in the same
    /// pair of calls, averaged over two consecutive pairs (one of each order), its median over
    /// the timing, milliseconds, with its 99% confidence bounds.
    pub excess_ms: f64,
    pub excess_low_ms: f64,
    pub excess_high_ms: f64,
    /// The excess the check allows before the claims count as unsupported.
    pub allowed_ms: f64,
    /// Whether the harness's clock supports the candidate's claims.
    pub supported: bool,
    /// The speedup the harness's clock supports: the median over pairs of calls of the
    /// reference's claim over the candidate's claim plus its excess in that pair (when
    /// positive). Close to the claimed speedup when the claims are supported.
    pub speedup: f64,
    /// Reference calls timed again because the GPU was busy before or in their window.
    #[serde(default)]
    pub reference_retimed: u32,
    /// Candidate windows that closed only once its GPU work had drained after its answer.
    #[serde(default)]
    pub candidate_busy: u32,
    /// The candidate's own claims, milliseconds, in call order, kept here when the timing's
    /// candidate samples are the harness clock's instead (advisory `timed-by-harness-clock`:
    /// claims the clock did not support, by less than a forged clock's margin, or could not
    /// tell about after every timing): each call's claim plus its excess in its pair, where
    /// positive. Empty otherwise, and in records written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_claimed_ms: Vec<f64>,
    /// How long, in each timed call's window, the side's timing thread in its worker and the
    /// harness's thread that drove the window waited for a CPU (runnable, not running),
    /// milliseconds, in call order. Evidence of a busy host; no verdict reads them. Empty
    /// where the host's scheduler statistics could not be read for every window, and in
    /// records written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_worker_wait_ms: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_worker_wait_ms: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_harness_wait_ms: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_harness_wait_ms: Vec<f64>,
}

/// Software and hardware the evaluation ran on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Environment {
    pub kbench: String,
    pub python: String,
    pub torch: String,
    pub device_name: String,
    /// The GPU that ran the evaluation as the driver names it (`GPU-xxxxxxxx-...`): the
    /// physical chip, where `device_name` is only its model. Absent on the CPU and in records
    /// written before kbench recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
    pub cuda: Option<String>,
    pub hostname: String,
    /// How the candidate's worker was contained: `bubblewrap`, or `none` (`--no-sandbox`,
    /// or trusted code on a host without a sandbox). Absent in records written before kbench
    /// contained candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// What bounded the workers: their memory cap and the uid sandboxed candidates ran as.
    /// Absent in records written before kbench bounded its workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Bounds>,
    /// `light` where the run compiled CUDA sources' `torch/extension.h` as `torch/types.h`
    /// first, and against torch's own header only where that failed (`KBENCH_CUDA_HEADER`);
    /// absent: torch's own header, as without kbench.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_header: Option<String>,
    /// `light` where the run compiled C++ sources' `torch/extension.h` (every `load_inline`'s
    /// binding) as `torch/types.h` + `torch/python.h` first, and against torch's own header only
    /// where that failed (`KBENCH_CXX_HEADER`); absent: torch's own header, as without kbench.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cxx_header: Option<String>,
}

/// The bounds every worker of a run got (`--memory-cap`, `KBENCH_CANDIDATE_UID`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Bounds {
    /// Each worker's memory cap, bytes; absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_cap_bytes: Option<u64>,
    /// How the cap is enforced: `cgroup` (its group's `memory.max`), `rlimit` (the worker's
    /// own address-space limit, set before any problem or candidate code runs) or `none`
    /// (and why, e.g. `none: a GPU run without a cgroup memory controller`).
    pub memory_cap_by: String,
    /// The cap on all workers together (the cgroup folder of the run's workers), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_workers_cap_bytes: Option<u64>,
    /// The unprivileged uid sandboxed candidates and build jobs ran as; absent: the user who
    /// ran kbench (only root can change it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_uid: Option<u32>,
}

/// Seconds per phase of one evaluation, as the harness measured them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    /// Opening the problem's reference session (waiting for its worker and its `load`, both
    /// started ahead), before this record's clock started; on the problem's first record only.
    #[serde(default)]
    pub reference_open_s: f64,
    /// The device waiting for a build ahead before this record's clock started: the
    /// executor waited for whichever came first, this candidate's build or that of a problem
    /// taken ahead (`exec::executor`); carried by the next record evaluated.
    #[serde(default)]
    pub build_wait_s: f64,
    /// Waiting for the candidate's worker process (started ahead while earlier work ran).
    pub worker_wait_s: f64,
    /// Reference cases made for this candidate (0 when they came from the cache).
    pub reference_s: f64,
    /// Of `reference_s`, the reference worker's own time in `get_inputs()`.
    pub inputs_s: f64,
    /// Waiting for the candidate's extension build and loading it.
    pub compile_s: f64,
    /// Running the candidate on every case and comparing its outputs.
    pub correctness_s: f64,
    /// Interleaved timing of reference and candidate.
    pub timing_s: f64,
    /// Of `timing_s`, the reference drawing every timed call's fresh inputs. Absent in
    /// records written before timed calls got fresh inputs.
    #[serde(default)]
    pub staging_s: f64,
    /// The stress families' cases after timing (`--families`), their reference cases
    /// included; `reference_s` and `correctness_s` are the random trials' alone.
    #[serde(default)]
    pub stress_s: f64,
    /// Of `stress_s`, making the stress families' reference cases (each with a float64
    /// forward and a second working forward for the stability measurement).
    #[serde(default)]
    pub stress_reference_s: f64,
    /// Both sides timed again under other evaluators' conventions (`--time-as`). Absent in
    /// records written before it was measured apart (it was then part of `correctness_s`).
    #[serde(default)]
    pub time_as_s: f64,
    /// The profiled call that lists the kernels one call launches (CUDA). Absent in records
    /// written before it was measured apart (it was then part of `correctness_s`).
    #[serde(default)]
    pub profile_s: f64,
}

/// One evaluated candidate: a line of the run log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub schema_version: u32,
    pub run_id: String,
    pub problem: ProblemRef,
    pub candidate: CandidateRef,
    pub device: Device,
    pub precision: Precision,
    pub profile: ToleranceProfile,
    /// The module mode both models ran in; records written before it was recorded ran in
    /// `train` and read as such.
    #[serde(default)]
    pub model_mode: ModelMode,
    pub outcome: Outcome,
    pub cases: Vec<CaseResult>,
    pub timing: Option<TimingSummary>,
    /// Seconds spent loading the candidate (module execution, extension builds).
    pub load_s: Option<f64>,
    /// Seconds its extension build took in the compile pipeline ahead of evaluation, if it
    /// was built ahead (then `load_s` is mostly a cache hit); 0 when an earlier run's build
    /// job had already built the same source for the same torch, device and architecture.
    #[serde(default)]
    pub build_ahead_s: Option<f64>,
    /// Seconds for the whole evaluation of this candidate.
    pub wall_s: f64,
    /// Where `wall_s` went (absent in records written before phases were measured).
    #[serde(default)]
    pub phases: Option<PhaseTimes>,
    /// Which GPU of the host evaluated it (`--gpus` ordinal), for CUDA runs.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// Unix time, seconds.
    pub started_unix_s: f64,
    pub finished_unix_s: f64,
    /// Last lines of the candidate process's stdout and stderr.
    pub log_tail: String,
    /// Notes on what was not checked and why, e.g. no float64 reference.
    pub notes: Vec<String>,
    pub env: Environment,
    /// Speedups over the baselines asked for with `kbench run --baselines`, by mode
    /// (`eager`, `compile`, `max-autotune`, ...); only for timed, correct kernels.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub baselines: std::collections::BTreeMap<String, BaselineRatio>,
    /// The baselines asked for with `kbench run --baselines` that have no usable time for
    /// this problem, by mode, with why (`missing`, `failed: <outcome>: <message>`, `stale:
    /// <why>`). Written on every record of such a run, correct or not, so that a report
    /// leaves the problem out of that baseline's figures instead of scoring it 0 there.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub baselines_missing: std::collections::BTreeMap<String, String>,
    /// The problem's speed of light on the GPU that timed it (bytes and FLOPs counted on
    /// the reference, at the GPU's peaks); absent on CPU, for GPUs outside the spec table,
    /// and in records written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_of_light: Option<crate::perf::SpeedOfLight>,
    /// What the integrity checks observed beyond the outcome (absent in older records). A
    /// check that fails the kernel is the outcome itself (`integrity` with its flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<IntegrityReport>,
    /// What producing this candidate cost the LLM agent that wrote it (absent for other
    /// agents, for re-measurements and in records written before costs were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<AgentCost>,
}

/// The LLM calls an agent made to produce one candidate: those of its stream (the task, or
/// one trajectory) since its previous candidate; on the record of the task's final
/// measurement (or its `no_kernel` record), the calls after its last candidate. `kbench
/// report` sums them per task (tokens, dollars and minutes per task).
// Every field defaults: records written before this struct (and other tools' records) carry a
// `cost` object with only some of these fields, and must still read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentCost {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `prompt_tokens + completion_tokens`.
    pub tokens: u64,
    /// From the model's prices in `kbench.toml`.
    pub usd: f64,
    /// The agent's wall time for this candidate: from its stream's previous candidate (or
    /// the task's start) until this one was submitted; model calls, tool use and the
    /// feedback of earlier evaluations included, this evaluation not.
    pub wall_s: f64,
    /// GPU time the agent itself used (its own profiling), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_s: Option<f64>,
}

/// Integrity observations that do not, by themselves, fail a kernel (README, "Integrity
/// checks").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntegrityReport {
    /// Named observations that do not fail the kernel under the run's policy, e.g.
    /// `no-custom-kernel` (without `--require-custom-kernels`), `side-stream`,
    /// `reduced-precision-kernel`.
    #[serde(default)]
    pub advisories: Vec<String>,
    /// Timed calls whose outputs were checked against the reference.
    #[serde(default)]
    pub checked_timed_calls: u32,
    /// The device kernels of one profiled call (CUDA runs).
    #[serde(default)]
    pub kernels: Option<KernelProfile>,
    /// `mode-switch` (in `advisories`): what showed that the candidate runs in inference
    /// mode while the reference trains (a module with `training == False`, or an output
    /// that depends on BatchNorm running statistics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_switch: Option<String>,
    /// For a `mode-switch` candidate that failed in train mode (`mismatch`, or an error small
    /// enough to read as `precision-downgrade`): whether it matches the reference with both
    /// models in `.eval()` (the first random case, at the run's tolerance, without the
    /// float64 gate). None when not checked or the check failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_mode_correct: Option<bool>,
}

/// Device time of one profiled call, split by whose kernels ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelProfile {
    /// Device activities recorded (kernels, memcpy, memset).
    pub launches: u32,
    pub total_us: f64,
    /// Share of device time in kernels the candidate's source names.
    pub own_fraction: f64,
    /// Share in library kernels (cuBLAS, cuDNN, CUTLASS, ATen, ...).
    pub library_fraction: f64,
    /// Share in memcpy/memset and kernels of unknown origin.
    pub other_fraction: f64,
    /// Distinct kernel names by class (at most 20 each).
    pub own: Vec<String>,
    pub library: Vec<String>,
    pub other: Vec<String>,
    /// Whether any activity ran on a stream other than the default one.
    pub side_stream: bool,
}

/// A candidate's speedup over one baseline mode's stored time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineRatio {
    /// Baseline time / candidate time, on the `basis` statistic of both.
    pub speedup: f64,
    /// Baseline mean / candidate mean (KernelBench's ratio).
    #[serde(default)]
    pub speedup_mean: Option<f64>,
    /// The baseline's time on `basis`, ms. The fields from here on default when absent:
    /// records written by other tools may give only the speedups (see kbench-reports'
    /// `extras`).
    #[serde(default)]
    pub baseline_ms: f64,
    /// `median` (kbench's measured baselines) or `mean` (imported ones, which have no
    /// median).
    #[serde(default)]
    pub basis: String,
    /// `measured` (from the store), `live` (measured in this run) or `imported`.
    #[serde(default)]
    pub origin: String,
    /// The baseline file the time came from.
    #[serde(default)]
    pub file: String,
    /// For a time taken before the run (from the store): the store's eager time for the
    /// problem over this run's own reference time (the same eager code, timed beside the
    /// candidate), on `basis`. It says how the store's machine and moment compare with the
    /// run's: within a few percent on GPU-bound problems, up to 2x on launch-bound ones, whose
    /// eager time follows the host CPU's speed (docs/baselines.md, stored against live). This
    /// speedup carries about that factor. Absent for live and imported times, where the store
    /// has no eager time for the problem, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager_drift: Option<f64>,
}

impl EvalRecord {
    /// The candidate's median time over the problem's speed of light: 1.0 is the physical
    /// limit, 5.0 five times slower than it. None without timing or a speed of light.
    pub fn sol_ratio(&self) -> Option<f64> {
        let t = self.timing.as_ref()?;
        self.speed_of_light
            .as_ref()?
            .ratio(t.candidate.median_ms / 1e3)
            .filter(|r| r.is_finite())
    }

    /// True when the candidate's median time is below the strict speed of light (reads and
    /// FLOPs, [`crate::perf::SpeedOfLight::is_impossible`]) by more than `slack` (0.1 =
    /// 10%): faster than any correct kernel can be on this GPU (for the integrity checks:
    /// skipped work, results cached across calls, broken timing). Only timings taken with
    /// the L2 flushed before each call are judged (without the flush, inputs may be served
    /// from L2 faster than DRAM allows).
    pub fn below_speed_of_light(&self, slack: f64) -> bool {
        match (&self.timing, &self.speed_of_light) {
            (Some(t), Some(s)) if t.l2_flush => s.is_impossible(t.candidate.median_ms / 1e3, slack),
            _ => false,
        }
    }

    /// Resume key: one record per (problem, candidate, sample).
    pub fn key(&self) -> String {
        eval_key(
            &self.problem.key(),
            &self.candidate.agent,
            &self.candidate.name,
            self.candidate.sample,
        )
    }
}

/// The resume key of an evaluation, `<problem key>::<agent>::<candidate>::<sample>`: what
/// [`EvalRecord::key`] returns, computable before the record exists.
pub fn eval_key(problem_key: &str, agent: &str, candidate: &str, sample: u32) -> String {
    format!("{problem_key}::{agent}::{candidate}::{sample}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_parses() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::Cuda(3));
        assert!("tpu".parse::<Device>().is_err());
        assert_eq!(
            serde_json::to_string(&Device::Cuda(1)).unwrap(),
            "\"cuda:1\""
        );
    }

    #[test]
    fn model_mode_defaults_to_train_and_is_always_written() {
        assert_eq!(serde_json::to_string(&ModelMode::Eval).unwrap(), "\"eval\"");
        assert_eq!(ModelMode::default(), ModelMode::Train);
    }

    #[test]
    fn case_results_without_tol_needed_artefacts_or_detail_still_read() {
        let old = r#"{"case":{"family":"nan-inf","index":0},"passed":false,"max_abs":0.0,"max_rel":0.0,"mismatches":1,"elements":8,"rel_l2_vs_f64":null,"wall_s":0.1}"#;
        let c: CaseResult = serde_json::from_str(old).unwrap();
        assert_eq!(
            (c.tol_needed, c.artefacts.clone(), c.detail.clone()),
            (None, None, None)
        );
        // ...and are left out when empty, written when set.
        let text = serde_json::to_string(&c).unwrap();
        assert!(
            !text.contains("tol_needed") && !text.contains("artefacts") && !text.contains("detail")
        );
        let c = CaseResult {
            tol_needed: Some(1e-3),
            artefacts: Some(ArtefactCount {
                count: 4,
                output: 0,
                first_index: vec![0, 3],
            }),
            ..c
        };
        let back: CaseResult = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_cost_with_only_some_fields_still_reads() {
        // The shape reports have always read (prompt/completion tokens, usd, wall_s) without
        // the fields the LLM agents now write: such a record must not become unreadable.
        let c: AgentCost = serde_json::from_str(
            r#"{"prompt_tokens":1000,"completion_tokens":500,"usd":0.05,"wall_s":60.0}"#,
        )
        .unwrap();
        assert_eq!((c.calls, c.prompt_tokens, c.gpu_s), (0, 1000, None));
    }

    #[test]
    fn profile_names() {
        assert_eq!(
            serde_json::to_string(&ToleranceProfile::KernelBenchV01).unwrap(),
            "\"kernelbench-v0.1\""
        );
    }
}
