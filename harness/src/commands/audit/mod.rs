//! `kbench audit`: which problems of a suite a trivial kernel passes under KernelBench's check.
//!
//! KernelBench compares a kernel's outputs with the reference's on inputs from each problem's
//! own `get_inputs()` (`torch.rand` for 247 of its 250 problems: uniform on [0, 1)) with
//! `allclose` at atol = rtol = 1e-4 (HEAD) or 1e-2 (v0.1, the papers'). On such inputs some
//! problems are passed by kernels that do nothing: ReLU is the identity on [0, 1), a softmax
//! over 393,216 columns is below atol everywhere, so zeros pass.
//!
//! For each problem a trusted reference worker loads the problem (weights from the public
//! weight seed, as `run` does) and answers the `audit` command (PROTOCOL.md): for each input
//! family (`random`: the problem's own inputs; `signed`: the same shapes, signed values) it
//! measures, per output, how far zeros, the best constant and each same-shaped input are from
//! the reference output, and how much the output moves when each input and each parameter is
//! perturbed, all as *excesses* `max(|a − b| − rtol·|b|)`: a quantity passes `allclose` iff
//! its excess is ≤ atol. Which of those are weaknesses is decided here, by the pure functions
//! [`family_flags`] and [`findings`].
//!
//! The seeds are public and derived from each problem's sha256: an audit is reproducible,
//! not secret.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kbench_record::protocol::Frame;
use kbench_record::{Device, Precision, ToleranceProfile};
use kbench_suites::Problem;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::cli::{AuditArgs, AuditProfileArg, EvalArgs, ProfileArg};
use crate::config::{materialize_problem, AgentConfig};
use crate::exec::{error_text, Ctx, Exec};
use crate::measure::reference::load_request;
use crate::runlog::seed::RunSecret;
use crate::worker::python;
use crate::worker::{Role, Worker, WorkerFault};

/// The input families an audit measures: KernelBench's own, and the one that should remove
/// its weaknesses.
pub const FAMILIES: [&str; 2] = ["random", "signed"];
/// Parameters perturbed per problem, at most (the worker picks them; `weights_total` says how
/// many the model has).
pub const MAX_WEIGHTS: u64 = 64;
/// Schema of `audit.json`.
pub const SCHEMA: &str = "kbench-audit/1";

// ---------------------------------------------------------------------------------------------
// Measurements, as the worker reports them (read leniently: a missing or mistyped field is
// unknown and raises no flag).

/// A number that may be absent, `null`, or a value. `null` is the worker's "nothing finite to
/// measure"; absent (or of another type) is "unknown".
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Missing,
    Null,
    Val(f64),
}

impl Num {
    fn read(v: Option<&Value>) -> Num {
        match v {
            Some(Value::Null) => Num::Null,
            Some(v) => v.as_f64().map_or(Num::Missing, Num::Val),
            None => Num::Missing,
        }
    }

    fn value(self) -> Option<f64> {
        match self {
            Num::Val(x) => Some(x),
            _ => None,
        }
    }

    /// A known value that passes: `excess ≤ atol`.
    fn passes(self, atol: f64) -> bool {
        matches!(self, Num::Val(x) if x <= atol)
    }
}

/// How much an output moves when one input or parameter is perturbed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sensitivity {
    /// Largest excess of the perturbed output over the unperturbed one (`null`: no element
    /// finite in both).
    pub max_excess: Num,
    /// Elements that are NaN in one of the two outputs and not in the other.
    pub nan_mismatch: Option<u64>,
}

impl Sensitivity {
    fn read(v: &Value) -> Option<Sensitivity> {
        v.is_object().then(|| Sensitivity {
            max_excess: Num::read(v.get("max_excess")),
            nan_mismatch: v.get("nan_mismatch").and_then(Value::as_u64),
        })
    }

    /// Nothing changed beyond the tolerance: every finite difference within atol (or none
    /// finite at all) and no NaN appeared or vanished.
    pub fn unchanged(&self, atol: f64) -> bool {
        self.nan_mismatch == Some(0)
            && match self.max_excess {
                Num::Val(x) => x <= atol,
                Num::Null => true,
                Num::Missing => false,
            }
    }
}

/// One output of the reference under one family.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OutputMeasure {
    pub shape: Option<Vec<u64>>,
    pub dtype: Option<String>,
    pub elements: Option<u64>,
    pub max_abs: Option<f64>,
    pub nonfinite: Option<u64>,
    pub zeros_excess: Option<Num>,
    pub constant_excess: Option<Num>,
    /// Per input of `get_inputs()`: the excess of that input taken as the output (`None`:
    /// not comparable, e.g. another shape).
    pub input_excess: Vec<Option<f64>>,
    pub input_sensitivity: Vec<Option<Sensitivity>>,
    /// Whether `input_sensitivity` was reported at all.
    pub has_input_sensitivity: bool,
    pub weight_sensitivity: BTreeMap<String, Option<Sensitivity>>,
    pub weights_total: Option<u64>,
}

impl OutputMeasure {
    pub fn read(v: &Value) -> OutputMeasure {
        let list = |k: &str| v.get(k).and_then(Value::as_array).cloned();
        OutputMeasure {
            shape: v
                .get("shape")
                .and_then(|s| serde_json::from_value(s.clone()).ok()),
            dtype: v.get("dtype").and_then(Value::as_str).map(str::to_string),
            elements: v.get("elements").and_then(Value::as_u64),
            max_abs: v.get("max_abs").and_then(Value::as_f64),
            nonfinite: v.get("nonfinite").and_then(Value::as_u64),
            zeros_excess: v.get("zeros_excess").map(|x| Num::read(Some(x))),
            constant_excess: v.get("constant_excess").map(|x| Num::read(Some(x))),
            input_excess: list("input_excess")
                .unwrap_or_default()
                .iter()
                .map(Value::as_f64)
                .collect(),
            input_sensitivity: list("input_sensitivity")
                .unwrap_or_default()
                .iter()
                .map(Sensitivity::read)
                .collect(),
            has_input_sensitivity: list("input_sensitivity").is_some(),
            weight_sensitivity: v
                .get("weight_sensitivity")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, s)| (k.clone(), Sensitivity::read(s)))
                        .collect()
                })
                .unwrap_or_default(),
            weights_total: v.get("weights_total").and_then(Value::as_u64),
        }
    }
}

/// All outputs of the reference under one family.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FamilyMeasure {
    pub outputs: Vec<OutputMeasure>,
    pub seconds: Option<f64>,
    /// Inputs the family changed from the problem's own (0: it is the same case as `random`).
    pub transformed: Option<u64>,
    /// Whether the batch dimension was cut (`max_rows`).
    pub rows_cut: Option<bool>,
    /// Why the family could not be measured, when the worker says so.
    pub error: Option<String>,
}

impl FamilyMeasure {
    pub fn read(v: &Value) -> FamilyMeasure {
        FamilyMeasure {
            outputs: v
                .get("outputs")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(OutputMeasure::read).collect())
                .unwrap_or_default(),
            seconds: v.get("seconds").and_then(Value::as_f64),
            transformed: v.get("transformed").and_then(Value::as_u64),
            rows_cut: v.get("rows_cut").and_then(Value::as_bool),
            error: match v.get("error") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Null) | None => None,
                Some(other) => Some(other.to_string()),
            },
        }
    }

    /// Measured: outputs and no error.
    pub fn usable(&self) -> bool {
        self.error.is_none() && !self.outputs.is_empty()
    }
}

/// The `families` object of an `audit` reply.
pub fn read_families(v: &Value) -> BTreeMap<String, FamilyMeasure> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, f)| (k.clone(), FamilyMeasure::read(f)))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Flags: pure functions of the measurements.

/// What a trivial kernel gets away with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlagKind {
    /// Returning zeros passes.
    Zeros,
    /// Returning some constant passes.
    Constant,
    /// Returning one of the inputs passes.
    Identity,
    /// The output does not depend on one of the inputs within tolerance.
    IgnoresInput,
    /// The output does not depend on one of the parameters within tolerance.
    IgnoresWeight,
}

impl FlagKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FlagKind::Zeros => "zeros",
            FlagKind::Constant => "constant",
            FlagKind::Identity => "identity",
            FlagKind::IgnoresInput => "ignores-input",
            FlagKind::IgnoresWeight => "ignores-weight",
        }
    }

    pub const ALL: [FlagKind; 5] = [
        FlagKind::Zeros,
        FlagKind::Constant,
        FlagKind::Identity,
        FlagKind::IgnoresInput,
        FlagKind::IgnoresWeight,
    ];
}

/// One flag of one family: the kind, what it is about, and a sentence with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flag {
    pub flag: FlagKind,
    /// The input (0-based, in `get_inputs()` order) for `identity` and `ignores-input`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<usize>,
    /// The parameter's name for `ignores-weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
    pub detail: String,
}

impl Flag {
    /// Same kind and subject (the details' numbers may differ between families).
    pub fn same(&self, other: &Flag) -> bool {
        self.flag == other.flag && self.input == other.input && self.parameter == other.parameter
    }

    /// `identity (input 0)`, `ignores-weight (bias)`, `zeros`.
    pub fn label(&self) -> String {
        match (&self.input, &self.parameter) {
            (Some(i), _) => format!("{} (input {i})", self.flag.as_str()),
            (_, Some(p)) => format!("{} ({p})", self.flag.as_str()),
            _ => self.flag.as_str().to_string(),
        }
    }
}

fn sci(x: f64) -> String {
    format!("{x:.2e}")
}

/// The flags of one family, every one whose condition holds (no deduplication: see
/// [`findings`]). A family that was not measured has none.
///
/// - `zeros`: every output has no NaN/Inf and `zeros_excess ≤ atol`;
/// - `constant`: every output has `constant_excess ≤ atol`, and redrawing any (tensor) input
///   leaves every output unchanged within tolerance, so one fixed constant passes every case;
/// - `identity`: for some input i, every output has `input_excess[i] ≤ atol`;
/// - `ignores-input`: for some input i, every output is unchanged (within atol, NaNs in the
///   same places) when input i is perturbed;
/// - `ignores-weight`: the same for each parameter.
pub fn family_flags(f: &FamilyMeasure, atol: f64) -> Vec<Flag> {
    let mut flags = Vec::new();
    if !f.usable() {
        return flags;
    }
    let outs = &f.outputs;
    let max_abs = outs
        .iter()
        .map(|o| o.max_abs)
        .try_fold(0.0f64, |m, x| x.map(|x| m.max(x)));
    if outs
        .iter()
        .all(|o| o.nonfinite == Some(0) && o.zeros_excess.is_some_and(|e| e.passes(atol)))
    {
        flags.push(Flag {
            flag: FlagKind::Zeros,
            input: None,
            parameter: None,
            detail: match max_abs {
                Some(m) => format!("returning zeros passes (max |output| = {})", sci(m)),
                None => "returning zeros passes".into(),
            },
        });
    }
    // One fixed constant must pass every case, not only this one: the output is constant
    // within tolerance here, and redrawing any input moves no output beyond tolerance. (A
    // single-element output is always "constant" within its case; a loss over a large batch
    // of random inputs may also be the same in every case.)
    let n_inputs = outs
        .iter()
        .map(|o| o.input_excess.len().max(o.input_sensitivity.len()))
        .max()
        .unwrap_or(0);
    let input_unchanged = |i: usize| {
        outs.iter().all(|o| {
            o.input_sensitivity
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|s| s.unchanged(atol))
        })
    };
    // Inputs that were perturbed (tensors): a non-tensor argument has no sensitivity.
    let perturbed = |i: usize| {
        outs.iter()
            .any(|o| o.input_sensitivity.get(i).copied().flatten().is_some())
    };
    let same_every_case = (0..n_inputs).all(|i| !perturbed(i) || input_unchanged(i))
        && outs
            .iter()
            .all(|o| o.has_input_sensitivity && o.input_sensitivity.len() == n_inputs);
    if same_every_case
        && outs
            .iter()
            .all(|o| o.constant_excess.is_some_and(|e| e.passes(atol)))
    {
        let worst = outs
            .iter()
            .filter_map(|o| o.constant_excess.and_then(Num::value))
            .fold(f64::NEG_INFINITY, f64::max);
        flags.push(Flag {
            flag: FlagKind::Constant,
            input: None,
            parameter: None,
            detail: format!(
                "a constant output passes (largest excess over the best constant = {})",
                sci(worst)
            ),
        });
    }
    for i in 0..n_inputs {
        let excess: Option<Vec<f64>> = outs
            .iter()
            .map(|o| o.input_excess.get(i).copied().flatten())
            .collect();
        if let Some(ex) = excess.filter(|ex| ex.iter().all(|&e| e <= atol)) {
            let worst = ex.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            flags.push(Flag {
                flag: FlagKind::Identity,
                input: Some(i),
                parameter: None,
                detail: format!(
                    "returning input {i} passes (largest excess = {})",
                    sci(worst)
                ),
            });
        }
    }
    for i in 0..n_inputs {
        if input_unchanged(i) {
            flags.push(Flag {
                flag: FlagKind::IgnoresInput,
                input: Some(i),
                parameter: None,
                detail: format!("the output does not depend on input {i} within tolerance"),
            });
        }
    }
    let names: BTreeSet<&String> = outs
        .iter()
        .flat_map(|o| o.weight_sensitivity.keys())
        .collect();
    for name in names {
        let unchanged = outs.iter().all(|o| {
            o.weight_sensitivity
                .get(name)
                .copied()
                .flatten()
                .is_some_and(|s| s.unchanged(atol))
        });
        if unchanged {
            flags.push(Flag {
                flag: FlagKind::IgnoresWeight,
                input: None,
                parameter: Some(name.clone()),
                detail: format!("the output does not depend on parameter {name} within tolerance"),
            });
        }
    }
    flags
}

/// A flag found under `random`: a weakness of KernelBench's check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    #[serde(flatten)]
    pub flag: Flag,
    /// Whether the same flag is absent under `signed` (`None`: signed was not measured).
    pub removed_by_signed: Option<bool>,
    /// A stronger flag of the same family that makes this one redundant (zeros makes a
    /// constant pass; a trivial output passing makes any independence moot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subsumed_by: Option<FlagKind>,
    /// Listed in the report's table: not subsumed, or still there under `signed` while the
    /// flag subsuming it is not.
    pub shown: bool,
}

/// What an audit concluded about one problem from its measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Findings {
    /// Flags under `random`, each with whether `signed` removes it.
    pub weaknesses: Vec<Finding>,
    /// Flags only under `signed` (not weaknesses of KernelBench's check; a note).
    pub signed_only: Vec<Flag>,
    /// `signed` changed no input (`transformed` 0), so it cannot remove anything.
    pub signed_unchanged: bool,
    /// Why `signed` has no verdict, when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_unknown: Option<String>,
}

impl Findings {
    pub fn flagged(&self) -> bool {
        self.weaknesses.iter().any(|w| w.shown)
    }
}

fn subsumer(kind: FlagKind, present: &[FlagKind]) -> Option<FlagKind> {
    let stronger: &[FlagKind] = match kind {
        FlagKind::Zeros | FlagKind::Identity => &[],
        FlagKind::Constant => &[FlagKind::Zeros],
        FlagKind::IgnoresInput | FlagKind::IgnoresWeight => {
            &[FlagKind::Zeros, FlagKind::Constant, FlagKind::Identity]
        }
    };
    stronger.iter().copied().find(|k| present.contains(k))
}

/// The findings of a problem: `random`'s flags as weaknesses, each checked against
/// `signed`'s.
pub fn findings(families: &BTreeMap<String, FamilyMeasure>, atol: f64) -> Findings {
    let random = families
        .get("random")
        .map(|f| family_flags(f, atol))
        .unwrap_or_default();
    let signed_family = families.get("signed");
    let signed = signed_family
        .filter(|f| f.usable())
        .map(|f| family_flags(f, atol));
    let signed_unknown = match signed_family {
        None => Some("signed was not measured".to_string()),
        Some(f) if f.usable() => None,
        Some(f) => Some(
            f.error
                .clone()
                .unwrap_or_else(|| "signed reported no outputs".into()),
        ),
    };
    let present: Vec<FlagKind> = random.iter().map(|f| f.flag).collect();
    let removed = |flag: &Flag| signed.as_ref().map(|s| !s.iter().any(|g| g.same(flag)));
    let mut weaknesses: Vec<Finding> = random
        .iter()
        .map(|flag| Finding {
            flag: flag.clone(),
            removed_by_signed: removed(flag),
            subsumed_by: subsumer(flag.flag, &present),
            shown: true,
        })
        .collect();
    // A subsumed flag is shown only when signed removes the flag subsuming it but not this
    // one: then it is the weakness that remains.
    let removed_kind: BTreeMap<FlagKind, Option<bool>> = weaknesses
        .iter()
        .filter(|w| w.subsumed_by.is_none())
        .map(|w| (w.flag.flag, w.removed_by_signed))
        .collect();
    for w in &mut weaknesses {
        if let Some(s) = w.subsumed_by {
            let outer = removed_kind.get(&s).copied().flatten();
            w.shown = outer == Some(true) && w.removed_by_signed == Some(false);
        }
    }
    let signed_only = signed
        .unwrap_or_default()
        .into_iter()
        .filter(|g| !random.iter().any(|f| f.same(g)))
        .collect();
    Findings {
        weaknesses,
        signed_only,
        signed_unchanged: signed_family.and_then(|f| f.transformed) == Some(0),
        signed_unknown,
    }
}

/// [`findings`] from the raw `families` JSON (what `audit.json` keeps per problem).
pub fn findings_from_json(families: &Value, atol: f64) -> Findings {
    findings(&read_families(families), atol)
}

// ---------------------------------------------------------------------------------------------
// The report.

/// One problem's audit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProblemAudit {
    pub level: u8,
    pub id: u32,
    pub name: String,
    pub key: String,
    pub file: String,
    pub sha256: String,
    pub audited: bool,
    /// Why the problem could not be audited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_audited: Option<String>,
    pub seconds: f64,
    pub seed: u64,
    pub forward_seed: u64,
    /// Whether any family had its batch dimension cut (`--max-rows`).
    pub rows_cut: bool,
    pub flagged: bool,
    pub findings: Findings,
    /// The worker's measurements, verbatim (`families` of its `audit` answer), from which
    /// the findings can be recomputed with [`findings_from_json`].
    pub families: Value,
    /// The end of the worker's output, for problems that could not be audited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// Audited with no other problem beside it (after problems ran out of memory beside
    /// each other).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub audited_alone: bool,
    /// The worker's peak resident memory, GiB (sampled every 0.1 s).
    pub peak_rss_gib: f64,
    /// The device the worker ran on, as its `load` answer names it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub device_name: String,
    /// The failure was for memory (worth trying again with nothing beside it).
    #[serde(skip)]
    pub memory_failure: bool,
}

impl ProblemAudit {
    fn new(p: &Problem) -> Self {
        let (seed, forward_seed) = audit_seeds(&p.sha256);
        ProblemAudit {
            level: p.level,
            id: p.id,
            name: p.name.clone(),
            key: p.key(),
            file: p.file.clone(),
            sha256: p.sha256.clone(),
            audited: false,
            not_audited: None,
            seconds: 0.0,
            seed,
            forward_seed,
            rows_cut: false,
            flagged: false,
            findings: Findings::default(),
            families: Value::Null,
            log_tail: None,
            audited_alone: false,
            peak_rss_gib: 0.0,
            device_name: String::new(),
            memory_failure: false,
        }
    }

    fn set_measured(&mut self, families: Value, atol: f64) {
        let parsed = read_families(&families);
        self.memory_failure = parsed
            .values()
            .any(|f| f.error.as_deref().is_some_and(is_oom_text));
        self.rows_cut = parsed.values().any(|f| f.rows_cut == Some(true));
        self.findings = findings(&parsed, atol);
        self.flagged = self.findings.flagged();
        self.audited = parsed.get("random").is_some_and(FamilyMeasure::usable);
        if !self.audited {
            let why = parsed
                .get("random")
                .and_then(|f| f.error.clone())
                .unwrap_or_else(|| "the worker measured no output under random".into());
            self.not_audited = Some(one_line(&why, 300));
        }
        self.families = families;
    }

    /// `19_ReLU`, as KernelBench names its files.
    pub fn label(&self) -> String {
        format!("{}_{}", self.id, self.name)
    }

    fn summary(&self) -> String {
        if let Some(why) = &self.not_audited {
            return format!("not audited: {why}");
        }
        let shown: Vec<String> = self
            .findings
            .weaknesses
            .iter()
            .filter(|w| w.shown)
            .map(|w| {
                format!(
                    "{} [{}]",
                    w.flag.label(),
                    removed_text(w.removed_by_signed, &self.findings)
                )
            })
            .collect();
        if shown.is_empty() {
            "no flag".into()
        } else {
            format!("flagged {}", shown.join(", "))
        }
    }
}

fn removed_text(removed: Option<bool>, f: &Findings) -> String {
    match removed {
        Some(true) => "removed by signed: yes".into(),
        Some(false) if f.signed_unchanged => {
            "removed by signed: no (signed changes no input)".into()
        }
        Some(false) => "removed by signed: no".into(),
        None => format!(
            "removed by signed: unknown ({})",
            f.signed_unknown.as_deref().unwrap_or("signed not measured")
        ),
    }
}

/// The seeds of a problem's audit: public, fixed, from its sha256 (the run-secret
/// derivation with the key sha256("audit")).
pub fn audit_seeds(sha256: &str) -> (u64, u64) {
    let key = RunSecret::from_bytes(Sha256::digest(b"audit").into());
    (
        key.derive(&format!("input/{sha256}/audit")),
        key.derive(&format!("forward/{sha256}/audit")),
    )
}

/// The whole audit: settings, counts and every problem.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub schema: &'static str,
    pub profile: String,
    pub atol: f64,
    pub rtol: f64,
    pub precision: &'static str,
    pub device: String,
    pub device_name: String,
    pub torch: String,
    pub python: String,
    pub kbench: String,
    pub date: String,
    pub command: String,
    pub suite: String,
    pub families: Vec<&'static str>,
    pub weight_seed: u64,
    pub max_weights: u64,
    pub max_rows: Option<u64>,
    pub interrupted: bool,
    pub counts: Counts,
    pub problems: Vec<ProblemAudit>,
}

/// How many problems ended where.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Counts {
    pub problems: usize,
    pub audited: usize,
    pub flagged: usize,
    pub not_audited: usize,
    pub rows_cut: usize,
    /// Problems per flag (as shown in the table), and of those how many `signed` removes.
    pub by_flag: BTreeMap<String, FlagCount>,
}

#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct FlagCount {
    pub problems: usize,
    pub removed_by_signed: usize,
}

pub fn count(problems: &[ProblemAudit]) -> Counts {
    let mut c = Counts {
        problems: problems.len(),
        ..Counts::default()
    };
    for k in FlagKind::ALL {
        c.by_flag.insert(k.as_str().into(), FlagCount::default());
    }
    for p in problems {
        if !p.audited {
            c.not_audited += 1;
            continue;
        }
        c.audited += 1;
        c.flagged += usize::from(p.flagged);
        c.rows_cut += usize::from(p.rows_cut);
        let mut kinds: BTreeMap<FlagKind, bool> = BTreeMap::new();
        for w in p.findings.weaknesses.iter().filter(|w| w.shown) {
            // A problem counts once per kind; removed when signed removes every such flag.
            let e = kinds.entry(w.flag.flag).or_insert(true);
            *e &= w.removed_by_signed == Some(true);
        }
        for (k, removed) in kinds {
            let e = c.by_flag.entry(k.as_str().into()).or_default();
            e.problems += 1;
            e.removed_by_signed += usize::from(removed);
        }
    }
    c
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn one_line(s: &str, max: usize) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string();
    if line.chars().count() > max {
        let mut t: String = line.chars().take(max - 1).collect();
        t.push('…');
        t
    } else {
        line
    }
}

/// `audit.md`.
pub fn render_markdown(r: &AuditReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "# kbench audit: what a trivial kernel passes\n");
    let _ = writeln!(
        s,
        "- profile: `{}` at fp32: atol = {:e}, rtol = {:e} (an element passes when |out − ref| ≤ atol + rtol·|ref|)",
        r.profile, r.atol, r.rtol
    );
    let _ = writeln!(
        s,
        "- device: {} ({}), torch {}, python {}, kbench {}",
        r.device, r.device_name, r.torch, r.python, r.kbench
    );
    let _ = writeln!(s, "- date: {}", r.date);
    let _ = writeln!(s, "- command: `{}`", r.command);
    let _ = writeln!(s, "- suite: {}", r.suite);
    let _ = writeln!(
        s,
        "- inputs: one case per family. `random` = the problem's own `get_inputs()` (what \
         KernelBench checks); `signed` = the same shapes and dtypes, standard normal and \
         mixed-scale signed values. Seeds are public, derived from each problem's sha256 \
         (reproducible); weights from seed {}. Up to {} parameters per problem are perturbed.",
        r.weight_seed, r.max_weights
    );
    match r.max_rows {
        Some(n) => {
            let _ = writeln!(
                s,
                "- batch: audited with the batch dimension cut to {n} rows where the model allows \
                 it (every input whose first dimension is the first input's, when larger than {n}); \
                 properties per row (zeros/identity/constant/dependence) are unchanged by the batch \
                 size. Cut for {} problem(s), marked † below.",
                r.counts.rows_cut
            );
        }
        None => {
            let _ = writeln!(s, "- batch: full inputs (no `--max-rows`).");
        }
    }
    if r.interrupted {
        let _ = writeln!(
            s,
            "- **interrupted**: the problems not reached are listed as not audited."
        );
    }
    let _ = writeln!(s, "\nFlags, per family, over every output of a problem (inputs numbered from 0 in `get_inputs()` order; an excess is max(|a − b| − rtol·|b|), which passes when ≤ atol):\n");
    let _ = writeln!(
        s,
        "- `zeros`: no NaN/Inf and zeros are within tolerance of the output;"
    );
    let _ = writeln!(s, "- `constant`: the best constant is within tolerance of every output element, and redrawing any input changes no output beyond tolerance, so one fixed constant passes every case (not listed when `zeros` is);");
    let _ = writeln!(
        s,
        "- `identity`: input i, returned as the output, is within tolerance;"
    );
    let _ = writeln!(s, "- `ignores-input`: perturbing input i changes no output element beyond tolerance, and no NaN appears or vanishes;");
    let _ = writeln!(
        s,
        "- `ignores-weight`: the same for a parameter of the model."
    );
    let _ = writeln!(s, "\nA flag under `random` is a weakness of KernelBench's check; \"removed by signed\" says whether the same flag is absent under `signed`. Independence flags are not listed when a trivial output (zeros, a constant, an input) already passes, unless `signed` removes that one and not them.\n");

    let c = &r.counts;
    let _ = writeln!(s, "## Counts\n");
    let _ = writeln!(s, "| problems | audited | flagged | not audited |");
    let _ = writeln!(s, "| ---: | ---: | ---: | ---: |");
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} |\n",
        c.problems, c.audited, c.flagged, c.not_audited
    );
    let _ = writeln!(s, "| flag | problems | removed by signed |");
    let _ = writeln!(s, "| --- | ---: | ---: |");
    for k in FlagKind::ALL {
        let fc = c.by_flag.get(k.as_str()).cloned().unwrap_or_default();
        let _ = writeln!(
            s,
            "| `{}` | {} | {} |",
            k.as_str(),
            fc.problems,
            fc.removed_by_signed
        );
    }

    let _ = writeln!(s, "\n## Flagged problems\n");
    let flagged: Vec<&ProblemAudit> = r.problems.iter().filter(|p| p.flagged).collect();
    if flagged.is_empty() {
        let _ = writeln!(s, "None.");
    } else {
        let _ = writeln!(s, "| level | problem | flag | detail | removed by signed |");
        let _ = writeln!(s, "| ---: | --- | --- | --- | --- |");
        for p in flagged {
            for w in p.findings.weaknesses.iter().filter(|w| w.shown) {
                let removed = removed_text(w.removed_by_signed, &p.findings);
                let _ = writeln!(
                    s,
                    "| {} | {}{} | `{}` | {} | {} |",
                    p.level,
                    md_cell(&p.label()),
                    if p.rows_cut { " †" } else { "" },
                    w.flag.label(),
                    md_cell(&w.flag.detail),
                    md_cell(removed.trim_start_matches("removed by signed: "))
                );
            }
        }
    }

    let notes: Vec<&ProblemAudit> = r
        .problems
        .iter()
        .filter(|p| p.audited && !p.findings.signed_only.is_empty())
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(
            s,
            "\n## Found only under `signed` (not weaknesses of KernelBench's check)\n"
        );
        for p in notes {
            let list: Vec<String> = p
                .findings
                .signed_only
                .iter()
                .map(|f| format!("`{}`: {}", f.label(), f.detail))
                .collect();
            let _ = writeln!(
                s,
                "- level {} {}: {}",
                p.level,
                md_cell(&p.label()),
                md_cell(&list.join("; "))
            );
        }
    }

    let _ = writeln!(s, "\n## Not audited\n");
    let missing: Vec<&ProblemAudit> = r.problems.iter().filter(|p| !p.audited).collect();
    if missing.is_empty() {
        let _ = writeln!(s, "None.");
    }
    for p in missing {
        let _ = writeln!(
            s,
            "- level {} {}: {}",
            p.level,
            md_cell(&p.label()),
            md_cell(p.not_audited.as_deref().unwrap_or("unknown"))
        );
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Running it.

/// Watches host memory while workers run: when less than a reserve is left, the worker
/// started last (the one that has done the least work) is stopped, and its problem is then
/// audited again with nothing beside it, or, when it already was, recorded as "not audited:
/// out of host memory"; an audit never takes the machine down. It also keeps each worker's
/// peak resident memory (sampled).
struct MemoryGuard {
    active: Mutex<BTreeMap<i32, Watched>>,
    /// Workers stopped for memory: why, and whether another worker was running beside.
    killed: Mutex<BTreeMap<i32, (String, bool)>>,
    reserve: u64,
    total: u64,
}

struct Watched {
    started: Instant,
    peak: u64,
    stopped: bool,
}

fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

/// Resident bytes of one process.
fn rss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

const GIB: f64 = (1u64 << 30) as f64;

impl MemoryGuard {
    fn new() -> Self {
        let total = meminfo().map_or(8 << 30, |(_, t)| t);
        Self {
            active: Mutex::new(BTreeMap::new()),
            killed: Mutex::new(BTreeMap::new()),
            // 2 GiB on a 24 GiB host, never less than 1 GiB.
            reserve: (total / 12).max(1 << 30),
            total,
        }
    }

    fn register(&self, pgid: i32) {
        let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
        a.insert(
            pgid,
            Watched {
                started: Instant::now(),
                peak: rss_bytes(pgid),
                stopped: false,
            },
        );
    }

    /// Forgets a worker; returns its peak resident memory.
    fn unregister(&self, pgid: i32) -> u64 {
        let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
        a.remove(&pgid).map_or(0, |w| w.peak.max(rss_bytes(pgid)))
    }

    fn killed_why(&self, pgid: i32) -> Option<(String, bool)> {
        let k = self.killed.lock().unwrap_or_else(|e| e.into_inner());
        k.get(&pgid).cloned()
    }

    /// One look: samples every worker, and stops the youngest when memory is short.
    /// Returns whether it stopped one.
    fn check(&self) -> bool {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        for (&pgid, w) in active.iter_mut().filter(|(_, w)| !w.stopped) {
            w.peak = w.peak.max(rss_bytes(pgid));
        }
        let Some((available, _)) = meminfo() else {
            return false;
        };
        if available >= self.reserve {
            return false;
        }
        let Some((&pgid, _)) = active
            .iter()
            .filter(|(_, w)| !w.stopped)
            .max_by_key(|(_, w)| w.started)
        else {
            return false;
        };
        let rss = rss_bytes(pgid);
        let why = format!(
            "out of host memory: the worker held {:.1} GiB with {:.1} GiB left on the host ({:.1} GiB in all); kbench stopped it",
            rss as f64 / GIB,
            available as f64 / GIB,
            self.total as f64 / GIB
        );
        let beside = active.values().filter(|w| !w.stopped).count() > 1;
        self.killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pgid, (why, beside));
        // The worker leads its own process group (started by this audit).
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        // Its entry stays (with its peak) until its job thread takes it out.
        if let Some(w) = active.get_mut(&pgid) {
            w.stopped = true;
        }
        true
    }
}

/// Admits problems to the job threads. After a problem ran out of memory beside another,
/// problems run one at a time ("alone") until three in a row stayed below a quarter of the
/// host's memory; the job threads then share the host again.
struct Admission {
    state: Mutex<AdmissionState>,
    cv: std::sync::Condvar,
    light_limit: u64,
}

#[derive(Default)]
struct AdmissionState {
    running: usize,
    alone: bool,
    light_streak: usize,
}

impl Admission {
    fn new(total_memory: u64) -> Self {
        Self {
            state: Mutex::new(AdmissionState::default()),
            cv: std::sync::Condvar::new(),
            light_limit: total_memory / 4,
        }
    }

    /// Waits for a turn; returns whether the problem runs alone (`None`: stopped).
    fn enter(&self, stopped: &dyn Fn() -> bool) -> Option<bool> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.alone && s.running > 0 {
            if stopped() {
                return None;
            }
            s = self
                .cv
                .wait_timeout(s, Duration::from_millis(500))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        s.running += 1;
        Some(s.alone)
    }

    fn leave(&self, peak: u64, memory_failure: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.running -= 1;
        if memory_failure {
            s.alone = true;
            s.light_streak = 0;
        } else if s.alone {
            s.light_streak = if peak < self.light_limit {
                s.light_streak + 1
            } else {
                0
            };
            if s.light_streak >= 3 {
                s.alone = false;
                s.light_streak = 0;
            }
        }
        self.cv.notify_all();
    }
}

/// What one audit needs besides the context.
struct Opts {
    atol: f64,
    rtol: f64,
    timeout: Duration,
    max_rows: Option<u64>,
}

fn fault_text(f: &WorkerFault, phase: &str, opts: &Opts) -> String {
    match f {
        WorkerFault::Timeout { .. } => format!(
            "timed out while {phase} (the per-problem limit is {:.0} s, --timeout)",
            opts.timeout.as_secs_f64()
        ),
        WorkerFault::Died {
            signal: Some(9), ..
        } => format!(
            "the worker was killed by signal 9 while {phase} (out of memory: the kernel's OOM killer?)"
        ),
        other => format!("the worker {other} while {phase}"),
    }
}

/// The reason of an `error` frame on one line, naming an out-of-memory error as such.
fn error_reason(reply: &Frame, phase: &str) -> String {
    let kind = reply
        .header
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let text = error_text(reply);
    format!(
        "{}{phase} failed ({kind}): {}",
        if is_oom_text(&text) {
            "out of memory: "
        } else {
            ""
        },
        one_line(&text, 300)
    )
}

/// Whether an error message is torch's (or Python's) out-of-memory error.
fn is_oom_text(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.contains("out of memory")
        || lower.contains("can't allocate memory")
        || lower.contains("cannot allocate memory")
        || lower.contains("memoryerror")
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

enum Outcome {
    Measured(Value),
    Failed(String),
    Interrupted,
}

fn audit_one(
    ctx: &Ctx,
    exec: &Exec,
    problem: &Problem,
    opts: &Opts,
    guard: &MemoryGuard,
    logs: &Path,
) -> (ProblemAudit, Option<String>) {
    let t0 = Instant::now();
    let deadline = t0 + opts.timeout;
    let mut pa = ProblemAudit::new(problem);
    let c = ctx.config;
    let mut tail = None;
    // Some(beside) when the memory guard stopped the worker.
    let mut killed_beside = None;
    let outcome = (|| {
        let path = match materialize_problem(&c.cache, problem) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(format!("{e:#}")),
        };
        let log = logs.join(format!("{}.log", crate::exec::sanitize(&problem.key())));
        let spec = ctx.spec(
            Role::Reference,
            &std::env::temp_dir(),
            Some(log),
            exec.device,
        );
        let mut worker = match Worker::start(&spec, c.timeouts.start.min(remaining(deadline))) {
            Ok(w) => w,
            Err(WorkerFault::Interrupted) => return Outcome::Interrupted,
            Err(f) => return Outcome::Failed(fault_text(&f, "starting", opts)),
        };
        let pgid = worker.pgid();
        guard.register(pgid);
        let result = converse(ctx, exec, &mut worker, &path, &mut pa, opts, deadline);
        pa.peak_rss_gib = (guard.unregister(pgid) as f64 / GIB * 10.0).round() / 10.0;
        let result = match result {
            Outcome::Failed(why) => {
                tail = Some(worker.log_tail());
                match guard.killed_why(pgid) {
                    Some((why, beside)) => {
                        killed_beside = Some(beside);
                        Outcome::Failed(why)
                    }
                    None => Outcome::Failed(why),
                }
            }
            other => other,
        };
        worker.shutdown();
        result
    })();
    match outcome {
        Outcome::Measured(families) => pa.set_measured(families, opts.atol),
        Outcome::Failed(why) => {
            // Worth a try with nothing beside it, unless it had nothing beside it already.
            pa.memory_failure = match killed_beside {
                Some(beside) => beside,
                None => why.starts_with("out of") || why.contains("signal 9"),
            };
            pa.not_audited = Some(one_line(&why, 400));
            pa.log_tail = tail.map(|t| {
                let n = t.chars().count();
                t.chars().skip(n.saturating_sub(2000)).collect()
            });
        }
        Outcome::Interrupted => pa.not_audited = Some("interrupted".into()),
    }
    pa.seconds = t0.elapsed().as_secs_f64();
    let interrupted = matches!(pa.not_audited.as_deref(), Some("interrupted"));
    (pa, interrupted.then(|| "interrupted".to_string()))
}

/// `load`, then `audit`, on a started reference worker.
fn converse(
    ctx: &Ctx,
    exec: &Exec,
    worker: &mut Worker,
    path: &Path,
    pa: &mut ProblemAudit,
    opts: &Opts,
    deadline: Instant,
) -> Outcome {
    let ask = |worker: &mut Worker, frame: Frame, phase: &str, want: &str| match worker
        .request(frame, remaining(deadline))
    {
        Ok(r) if r.kind() == want => Ok(r),
        Ok(r) => Err(Outcome::Failed(error_reason(&r, phase))),
        Err(WorkerFault::Interrupted) => Err(Outcome::Interrupted),
        Err(f) => Err(Outcome::Failed(fault_text(&f, phase, opts))),
    };
    match ask(worker, load_request(ctx, exec, path), "loading", "loaded") {
        Ok(r) => pa.device_name = crate::exec::str_field(&r.header, "device_name"),
        Err(o) => return o,
    }
    let mut cmd = json!({
        "cmd": "audit",
        "seed": pa.seed,
        "forward_seed": pa.forward_seed,
        "families": FAMILIES,
        "rtol": opts.rtol,
        "max_weights": MAX_WEIGHTS,
    });
    if let Some(n) = opts.max_rows {
        cmd["max_rows"] = json!(n);
    }
    match ask(worker, Frame::new(cmd), "measuring", "audit") {
        Ok(r) => Outcome::Measured(r.header.get("families").cloned().unwrap_or(Value::Null)),
        Err(o) => o,
    }
}

fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = crate::commands::baselines::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

fn command_line() -> String {
    let mut args = std::env::args();
    let _ = args.next();
    std::iter::once("kbench".to_string())
        .chain(args.map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./,=:+".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Problems audited so far, one JSON line each after a line of settings, in `--out`: what
/// `--resume` continues from. Removed once the audit is complete.
pub const PROGRESS: &str = "audit.progress.jsonl";

/// The audits an interrupted run with the same `settings` left in `path` (a problem whose
/// audit was interrupted is audited again).
fn read_progress(path: &Path, settings: &Value) -> Result<BTreeMap<String, ProblemAudit>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return Ok(BTreeMap::new());
    };
    let head: Value = serde_json::from_str(first)
        .with_context(|| format!("{}: the first line is not JSON", path.display()))?;
    if head.get("settings") != Some(settings) {
        bail!(
            "{} was written by an audit with other settings ({}), not {settings}: use another --out, or drop --resume to start again",
            path.display(),
            head.get("settings").unwrap_or(&Value::Null)
        );
    }
    let mut done = BTreeMap::new();
    // A line cut short by a kill is the last one; it is left out.
    for line in lines {
        if let Ok(pa) = serde_json::from_str::<ProblemAudit>(line) {
            if !pa
                .not_audited
                .as_deref()
                .unwrap_or("")
                .starts_with("interrupted")
            {
                done.insert(format!("{}/{}", pa.key, pa.sha256), pa);
            }
        }
    }
    Ok(done)
}

fn append_line(file: &Mutex<Option<std::fs::File>>, value: &impl Serialize) -> Result<()> {
    use std::io::Write;
    let mut guard = file.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = guard.as_mut() {
        let mut line = serde_json::to_string(value)?;
        line.push('\n');
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
    }
    Ok(())
}

/// The evaluation settings of an audit's workers, through `run`'s own parser so that every
/// setting an audit does not name keeps `run`'s default.
fn eval_args(a: &AuditArgs, profile: ProfileArg, cpu_threads: u32) -> Result<EvalArgs> {
    #[derive(clap::Parser)]
    struct Eval {
        #[command(flatten)]
        eval: EvalArgs,
    }
    let profile = match profile {
        ProfileArg::Kernelbench => "kernelbench",
        ProfileArg::KernelbenchV01 => "kernelbench-v0.1",
        ProfileArg::Strict => "strict",
    };
    let secs = |x: f64| format!("{x}");
    let argv: Vec<String> = vec![
        "kbench-audit".into(),
        "--device".into(),
        a.device.clone(),
        "--precision".into(),
        "fp32".into(),
        "--profile".into(),
        profile.into(),
        "--no-timing".into(),
        "--timeout-start".into(),
        secs(120f64.min(a.timeout)),
        "--timeout-load".into(),
        secs(a.timeout),
        "--timeout-run".into(),
        secs(a.timeout),
        "--build-jobs".into(),
        "0".into(),
        "--cpu-threads".into(),
        cpu_threads.to_string(),
        "--weight-seed".into(),
        a.weight_seed.to_string(),
        "--quiet".into(),
    ];
    use clap::Parser;
    Ok(Eval::try_parse_from(argv)
        .context("the audit's evaluation settings")?
        .eval)
}

/// `kbench audit`.
pub fn command(a: &AuditArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        bail!(
            "--timeout must be a positive number of seconds, got {}",
            a.timeout
        );
    }
    if a.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    if a.max_rows == Some(0) {
        bail!("--max-rows must be at least 1");
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu_threads = a
        .cpu_threads
        .unwrap_or_else(|| (cores / a.jobs).max(1) as u32);
    let profile = match a.profile {
        AuditProfileArg::Kernelbench => ProfileArg::Kernelbench,
        AuditProfileArg::KernelbenchV01 => ProfileArg::KernelbenchV01,
    };
    let eval = eval_args(a, profile, cpu_threads)?;
    let out_dir = a.out.clone().unwrap_or_else(|| PathBuf::from("."));
    let config = crate::commands::run_config::build(
        &a.suite,
        &a.python,
        &eval,
        AgentConfig::Reference,
        &out_dir,
        None,
    )?;
    let tol = kbench_adversarial::tolerance(config.profile, Precision::Fp32);
    let info = python::probe(&config.python)?;
    if matches!(config.device, Device::Cuda(_)) && !info.cuda_available {
        bail!(
            "--device {}: torch {} in {} cannot use CUDA; use --device cpu",
            config.device,
            info.torch,
            info.executable
        );
    }
    let script = python::materialize_worker(&config.cache)?;
    let ctx = Ctx::for_reference_workers(&config, &info, &script, Arc::clone(&stop));
    let logs = tempfile::Builder::new()
        .prefix("kbench-audit-logs")
        .tempdir()
        .context("creating a folder for worker logs")?;
    let opts = Opts {
        atol: tol.atol,
        rtol: tol.rtol,
        timeout: Duration::from_secs_f64(a.timeout),
        max_rows: a.max_rows,
    };
    let guard = MemoryGuard::new();
    let total = config.problems.len();
    let settings = json!({
        "profile": profile_name(config.profile),
        "atol": tol.atol,
        "rtol": tol.rtol,
        "device": config.device.to_string(),
        "torch": info.torch,
        "families": FAMILIES,
        "max_weights": MAX_WEIGHTS,
        "max_rows": a.max_rows,
        "weight_seed": config.weight_seed,
        "kbench": env!("CARGO_PKG_VERSION"),
    });
    let mut resumed: BTreeMap<String, ProblemAudit> = BTreeMap::new();
    let progress_file: Mutex<Option<std::fs::File>> = Mutex::new(None);
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let path = out.join(PROGRESS);
        if a.resume {
            resumed = read_progress(&path, &settings)?;
        }
        let f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        *progress_file.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
        append_line(&progress_file, &json!({ "settings": settings }))?;
    }
    eprintln!(
        "kbench audit: {total} problem(s) on {} ({} job(s), {cpu_threads} thread(s) each), profile {} (atol = rtol = {:e}){}",
        config.device,
        a.jobs,
        profile_name(config.profile),
        tol.atol,
        a.max_rows
            .map(|n| format!(", batch cut to {n} rows"))
            .unwrap_or_default()
    );
    let mut prefilled: Vec<Option<ProblemAudit>> = vec![None; total];
    for (i, p) in config.problems.iter().enumerate() {
        if let Some(pa) = resumed.remove(&format!("{}/{}", p.key(), p.sha256)) {
            append_line(&progress_file, &pa)?;
            prefilled[i] = Some(pa);
        }
    }
    let reused = prefilled.iter().filter(|p| p.is_some()).count();
    if a.resume {
        eprintln!(
            "kbench audit: resuming: {reused} problem(s) already audited, {} to go",
            total - reused
        );
    }
    let queue = Mutex::new(
        (0..total)
            .filter(|&i| prefilled[i].is_none())
            .collect::<VecDeque<usize>>(),
    );
    let results: Mutex<Vec<Option<ProblemAudit>>> = Mutex::new(prefilled);
    let attempts: Mutex<Vec<u32>> = Mutex::new(vec![0; total]);
    let admission = Admission::new(guard.total);
    let done = AtomicUsize::new(reused);
    let finished = AtomicBool::new(false);
    let interrupted = AtomicBool::new(false);
    let device_name = Mutex::new(
        results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flatten()
            .map(|p| p.device_name.clone())
            .find(|d| !d.is_empty())
            .unwrap_or_default(),
    );
    let jobs = a.jobs.min(total.max(1));
    let stopped = || stop.load(Ordering::SeqCst) || interrupted.load(Ordering::SeqCst);
    // Audits problem i and records it, or puts it back at the head of the queue when it ran
    // out of memory beside another problem (it is then audited alone).
    let audit_and_record = |i: usize, exec: &Exec| {
        let problem = &config.problems[i];
        let Some(alone) = admission.enter(&stopped) else {
            return;
        };
        let alone = alone || jobs == 1;
        let (mut pa, halted) = audit_one(&ctx, exec, problem, &opts, &guard, logs.path());
        admission.leave((pa.peak_rss_gib * GIB) as u64, pa.memory_failure);
        if halted.is_some() {
            interrupted.store(true, Ordering::SeqCst);
        }
        let tries = {
            let mut t = attempts.lock().unwrap_or_else(|e| e.into_inner());
            t[i] += 1;
            t[i]
        };
        if !alone && pa.memory_failure && halted.is_none() && tries < 3 {
            eprintln!(
                "kbench audit: level {} {}: {}; audited again with nothing beside it",
                pa.level,
                pa.label(),
                pa.not_audited.as_deref().unwrap_or("out of memory")
            );
            queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_front(i);
            return;
        }
        pa.audited_alone = alone && jobs > 1;
        let n = done.fetch_add(1, Ordering::SeqCst) + 1;
        eprintln!(
            "kbench audit: [{n}/{total}] level {} {}: {} ({:.1} s, {:.1} GiB)",
            pa.level,
            pa.label(),
            pa.summary(),
            pa.seconds,
            pa.peak_rss_gib
        );
        if !pa.device_name.is_empty() {
            let mut d = device_name.lock().unwrap_or_else(|e| e.into_inner());
            if d.is_empty() {
                d.push_str(&pa.device_name);
            }
        }
        if halted.is_none() {
            if let Err(e) = append_line(&progress_file, &pa) {
                eprintln!(
                    "kbench audit: could not record {} for --resume: {e:#}",
                    pa.key
                );
            }
        }
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(pa);
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !finished.load(Ordering::SeqCst) {
                let pause = if guard.check() { 2000 } else { 100 };
                std::thread::sleep(Duration::from_millis(pause));
            }
        });
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let exec = Exec {
                        device: config.device,
                        gpu: None,
                        cmp: None,
                        timing_cpu: None,
                    };
                    while !stopped() {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                        let Some(i) = next else { break };
                        audit_and_record(i, &exec);
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Ordering::SeqCst);
    });
    let was_interrupted = interrupted.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst);
    let mut problems: Vec<ProblemAudit> = results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .zip(&config.problems)
        .map(|(r, p)| {
            r.unwrap_or_else(|| {
                let mut pa = ProblemAudit::new(p);
                pa.not_audited = Some("interrupted before it was reached".into());
                pa
            })
        })
        .collect();
    problems.sort_by(|x, y| (x.level, x.id, &x.file).cmp(&(y.level, y.id, &y.file)));
    let device_name = device_name.into_inner().unwrap_or_else(|e| e.into_inner());
    let report = AuditReport {
        schema: SCHEMA,
        profile: profile_name(config.profile).into(),
        atol: tol.atol,
        rtol: tol.rtol,
        precision: "fp32",
        device: config.device.to_string(),
        device_name: if device_name.is_empty() {
            "unknown".into()
        } else {
            device_name
        },
        torch: info.torch.clone(),
        python: info.python.clone(),
        kbench: env!("CARGO_PKG_VERSION").into(),
        date: utc_now(),
        command: command_line(),
        suite: format!("{} ({} problems)", config.suite_label, total),
        families: FAMILIES.to_vec(),
        weight_seed: config.weight_seed,
        max_weights: MAX_WEIGHTS,
        max_rows: a.max_rows,
        interrupted: was_interrupted,
        counts: count(&problems),
        problems,
    };
    let md = render_markdown(&report);
    print!("{md}");
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let mut js = serde_json::to_string_pretty(&report)?;
        js.push('\n');
        crate::runlog::write_atomic(&out.join("audit.json"), js.as_bytes())?;
        crate::runlog::write_atomic(&out.join("audit.md"), md.as_bytes())?;
        if !was_interrupted {
            drop(
                progress_file
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
            let _ = std::fs::remove_file(out.join(PROGRESS));
        }
        eprintln!(
            "kbench audit: wrote {} and {}",
            out.join("audit.json").display(),
            out.join("audit.md").display()
        );
    }
    let c = &report.counts;
    eprintln!(
        "kbench audit: {} audited, {} flagged, {} not audited",
        c.audited, c.flagged, c.not_audited
    );
    Ok(if was_interrupted {
        crate::exit::INTERRUPTED
    } else {
        crate::exit::OK
    })
}

fn profile_name(p: ToleranceProfile) -> &'static str {
    match p {
        ToleranceProfile::KernelBench => "kernelbench",
        ToleranceProfile::KernelBenchV01 => "kernelbench-v0.1",
        ToleranceProfile::Strict => "strict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATOL: f64 = 1e-4;

    fn out(v: Value) -> Value {
        v
    }

    /// ReLU on [0, 1): the output is its input; under signed it is not.
    /// Level 1 problem 19, ReLU, as a suite would hold it (no source needed here).
    fn relu_problem() -> Problem {
        Problem {
            suite: "kernelbench".into(),
            level: 1,
            id: 19,
            name: "ReLU".into(),
            file: "19_ReLU.py".into(),
            source: String::new(),
            origin: None,
            sha256: "ab".into(),
        }
    }

    fn relu_like() -> Value {
        json!({
            "random": {"outputs": [out(json!({
                "shape": [16, 16], "dtype": "f32", "elements": 256, "max_abs": 0.99,
                "nonfinite": 0, "zeros_excess": 0.99, "constant_excess": 0.49,
                "input_excess": [0.0],
                "input_sensitivity": [{"max_excess": 0.3, "nan_mismatch": 0}],
                "weight_sensitivity": {}
            }))], "seconds": 0.1, "transformed": 0, "rows_cut": false},
            "signed": {"outputs": [out(json!({
                "shape": [16, 16], "dtype": "f32", "elements": 256, "max_abs": 3.1,
                "nonfinite": 0, "zeros_excess": 3.1, "constant_excess": 1.5,
                "input_excess": [2.9],
                "input_sensitivity": [{"max_excess": 0.5, "nan_mismatch": 0}],
                "weight_sensitivity": {}
            }))], "seconds": 0.1, "transformed": 1, "rows_cut": false}
        })
    }

    #[test]
    fn identity_under_random_is_removed_by_signed() {
        let f = findings_from_json(&relu_like(), ATOL);
        assert_eq!(f.weaknesses.len(), 1, "{f:?}");
        let w = &f.weaknesses[0];
        assert_eq!(w.flag.flag, FlagKind::Identity);
        assert_eq!(w.flag.input, Some(0));
        assert_eq!(w.removed_by_signed, Some(true));
        assert!(w.shown && f.flagged());
        assert!(f.signed_only.is_empty());
        assert!(w.flag.detail.starts_with("returning input 0 passes"));
    }

    #[test]
    fn tiny_outputs_pass_as_zeros_and_subsume_constant_and_independence() {
        let fam = |max: f64, zx: f64| {
            json!({"outputs": [{
                "max_abs": max, "nonfinite": 0, "zeros_excess": zx, "constant_excess": zx / 2.0,
                "input_excess": [0.9],
                "input_sensitivity": [{"max_excess": zx, "nan_mismatch": 0}],
                "weight_sensitivity": {}
            }], "transformed": 1})
        };
        let f = findings_from_json(
            &json!({"random": fam(2.6e-6, 2.6e-6), "signed": fam(4e-4, 4e-4)}),
            ATOL,
        );
        let kinds: Vec<(FlagKind, bool, Option<bool>)> = f
            .weaknesses
            .iter()
            .map(|w| (w.flag.flag, w.shown, w.removed_by_signed))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (FlagKind::Zeros, true, Some(true)),
                (FlagKind::Constant, false, Some(true)),
                (FlagKind::IgnoresInput, false, Some(true)),
            ]
        );
        assert!(
            f.weaknesses[0].flag.detail.contains("2.60e-6"),
            "{:?}",
            f.weaknesses[0]
        );
        // Still tiny under signed: not removed.
        let f = findings_from_json(
            &json!({"random": fam(2.6e-6, 2.6e-6), "signed": fam(5e-5, 5e-5)}),
            ATOL,
        );
        assert_eq!(f.weaknesses[0].removed_by_signed, Some(false));
        // At the v0.1 tolerance the signed output is small enough too.
        let f = findings_from_json(
            &json!({"random": fam(2.6e-6, 2.6e-6), "signed": fam(4e-4, 4e-4)}),
            1e-2,
        );
        assert_eq!(f.weaknesses[0].removed_by_signed, Some(false));
    }

    #[test]
    fn a_subsumed_flag_that_survives_signed_is_shown() {
        // Zeros pass under random but not under signed, where a constant still passes.
        let fam = |zx: f64, cx: f64| {
            json!({"outputs": [{"max_abs": zx, "nonfinite": 0, "zeros_excess": zx, "constant_excess": cx,
                                "input_sensitivity": [{"max_excess": 0.0, "nan_mismatch": 0}]}]})
        };
        let f = findings_from_json(
            &json!({"random": fam(1e-5, 1e-6), "signed": fam(0.5, 1e-6)}),
            ATOL,
        );
        let c = f
            .weaknesses
            .iter()
            .find(|w| w.flag.flag == FlagKind::Constant)
            .unwrap();
        assert_eq!(c.subsumed_by, Some(FlagKind::Zeros));
        assert!(c.shown);
        assert_eq!(c.removed_by_signed, Some(false));
    }

    #[test]
    fn a_constant_must_also_be_the_same_in_every_case() {
        // A scalar loss: one element is always within tolerance of itself.
        let fam = |sens: f64| {
            json!({"outputs": [{"shape": [], "elements": 1, "max_abs": 2.3, "nonfinite": 0,
                "zeros_excess": 2.3, "constant_excess": -2.3e-4, "input_excess": [null, null],
                "input_sensitivity": [{"max_excess": sens, "nan_mismatch": 0}, null]}]})
        };
        let f = findings_from_json(&json!({"random": fam(3e-3)}), ATOL);
        assert!(f.weaknesses.is_empty(), "{f:?}");
        // Over a large batch of random inputs the loss is the same in every case.
        let f = findings_from_json(&json!({"random": fam(-1e-4), "signed": fam(0.2)}), ATOL);
        let kinds: Vec<_> = f
            .weaknesses
            .iter()
            .map(|w| (w.flag.label(), w.shown, w.removed_by_signed))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("constant".to_string(), true, Some(true)),
                ("ignores-input (input 0)".to_string(), false, Some(true)),
            ]
        );
        // No sensitivity reported: unknown, no flag.
        let f = findings_from_json(
            &json!({"random": {"outputs": [{"nonfinite": 0, "zeros_excess": 1.0, "constant_excess": 0.0}]}}),
            ATOL,
        );
        assert!(f.weaknesses.is_empty(), "{f:?}");
    }

    #[test]
    fn nonfinite_outputs_never_pass_as_zeros() {
        let f = findings_from_json(
            &json!({"random": {"outputs": [{"nonfinite": 3, "zeros_excess": 0.0}]}}),
            ATOL,
        );
        assert!(f.weaknesses.is_empty(), "{f:?}");
    }

    #[test]
    fn independence_of_inputs_and_weights() {
        let fam = |s1: Value, w: Value| {
            json!({"outputs": [{
                "max_abs": 5.0, "nonfinite": 0, "zeros_excess": 5.0, "constant_excess": 2.0,
                "input_excess": [3.0, null],
                "input_sensitivity": [{"max_excess": 0.7, "nan_mismatch": 0}, s1],
                "weight_sensitivity": w,
            }], "transformed": 2})
        };
        let random = fam(
            json!({"max_excess": -0.5, "nan_mismatch": 0}),
            json!({"linear.weight": {"max_excess": 0.2, "nan_mismatch": 0},
                   "unused": {"max_excess": null, "nan_mismatch": 0},
                   "nanny": {"max_excess": 0.0, "nan_mismatch": 2},
                   "unknown": null}),
        );
        let signed = fam(
            json!({"max_excess": 0.0, "nan_mismatch": 0}),
            json!({"linear.weight": {"max_excess": 0.2, "nan_mismatch": 0},
                   "unused": {"max_excess": 0.0, "nan_mismatch": 0}}),
        );
        let f = findings_from_json(&json!({"random": random, "signed": signed}), ATOL);
        let got: Vec<(String, Option<bool>)> = f
            .weaknesses
            .iter()
            .map(|w| (w.flag.label(), w.removed_by_signed))
            .collect();
        assert_eq!(
            got,
            vec![
                ("ignores-input (input 1)".to_string(), Some(false)),
                ("ignores-weight (unused)".to_string(), Some(false)),
            ]
        );
        assert!(f.weaknesses.iter().all(|w| w.shown));
    }

    #[test]
    fn every_output_must_qualify_and_missing_fields_raise_nothing() {
        let f = findings_from_json(
            &json!({"random": {"outputs": [
                {"nonfinite": 0, "zeros_excess": 0.0, "constant_excess": 0.0, "input_excess": [0.0]},
                {"nonfinite": 0, "zeros_excess": 0.5, "input_excess": [null]}
            ]}}),
            ATOL,
        );
        assert!(f.weaknesses.is_empty(), "{f:?}");
        // Nothing but garbage: no flag, no panic.
        for v in [
            json!(null),
            json!({"random": 3}),
            json!({"random": {"outputs": [7, {"zeros_excess": "x"}]}}),
        ] {
            assert!(findings_from_json(&v, ATOL).weaknesses.is_empty());
        }
    }

    #[test]
    fn signed_unmeasured_or_unchanged_is_said() {
        let fam = json!({"outputs": [{"nonfinite": 0, "zeros_excess": 0.0, "max_abs": 0.0}], "transformed": 0});
        let f = findings_from_json(&json!({"random": fam.clone()}), ATOL);
        assert_eq!(f.weaknesses[0].removed_by_signed, None);
        assert!(removed_text(None, &f).contains("unknown"));
        let f = findings_from_json(&json!({"random": fam.clone(), "signed": fam}), ATOL);
        assert_eq!(f.weaknesses[0].removed_by_signed, Some(false));
        assert!(f.signed_unchanged);
        assert!(removed_text(Some(false), &f).contains("changes no input"));
        let f = findings_from_json(
            &json!({"random": {"outputs": [{"nonfinite": 0, "zeros_excess": 0.0}]}, "signed": {"error": "boom", "outputs": []}}),
            ATOL,
        );
        assert_eq!(f.signed_unknown.as_deref(), Some("boom"));
    }

    #[test]
    fn signed_only_flags_are_notes() {
        let f = findings_from_json(
            &json!({
                "random": {"outputs": [{"nonfinite": 0, "zeros_excess": 1.0, "constant_excess": 1.0, "input_excess": [0.5]}]},
                "signed": {"outputs": [{"nonfinite": 0, "zeros_excess": 1.0, "constant_excess": 1.0, "input_excess": [0.0]}]}
            }),
            ATOL,
        );
        assert!(f.weaknesses.is_empty());
        assert_eq!(f.signed_only.len(), 1);
        assert!(!f.flagged());
    }

    #[test]
    fn counts_and_markdown() {
        let p = relu_problem();
        let mut a = ProblemAudit::new(&p);
        a.set_measured(relu_like(), ATOL);
        let mut b = ProblemAudit::new(&p);
        b.id = 20;
        b.not_audited = Some("out of memory: load failed".into());
        let counts = count(&[a.clone(), b.clone()]);
        assert_eq!(
            (counts.audited, counts.flagged, counts.not_audited),
            (1, 1, 1)
        );
        assert_eq!(
            counts.by_flag["identity"],
            FlagCount {
                problems: 1,
                removed_by_signed: 1
            }
        );
        let report = AuditReport {
            schema: SCHEMA,
            profile: "kernelbench".into(),
            atol: ATOL,
            rtol: ATOL,
            precision: "fp32",
            device: "cpu".into(),
            device_name: "x".into(),
            torch: "2".into(),
            python: "3".into(),
            kbench: "0".into(),
            date: utc_now(),
            command: "kbench audit".into(),
            suite: "t".into(),
            families: FAMILIES.to_vec(),
            weight_seed: 42,
            max_weights: MAX_WEIGHTS,
            max_rows: Some(64),
            interrupted: false,
            counts,
            problems: vec![a, b],
        };
        let md = render_markdown(&report);
        assert!(
            md.contains("| 1 | 19_ReLU | `identity (input 0)` | returning input 0 passes"),
            "{md}"
        );
        assert!(md.contains("| yes |"), "{md}");
        assert!(
            md.contains("- level 1 20_ReLU: out of memory: load failed"),
            "{md}"
        );
        assert!(md.contains("cut to 64 rows"), "{md}");
        // The JSON keeps what the flags are recomputed from.
        let js = serde_json::to_value(&report).unwrap();
        let fams = &js["problems"][0]["families"];
        assert_eq!(
            findings_from_json(fams, js["atol"].as_f64().unwrap()),
            report.problems[0].findings
        );
    }

    #[test]
    fn after_a_memory_failure_problems_run_alone_until_three_light_ones() {
        let a = Admission::new(16 << 30);
        let go_on = || false;
        let stop = || true;
        assert_eq!(a.enter(&go_on), Some(false));
        assert_eq!(a.enter(&go_on), Some(false));
        // One ran out of memory beside the other: the next waits for the other to end.
        a.leave(1 << 30, true);
        assert_eq!(a.enter(&stop), None, "waits while another problem runs");
        a.leave(8 << 30, false);
        // Alone now; a heavy problem keeps it so, three light ones end it.
        for peak in [1u64 << 30, 5 << 30, 1 << 30, 1 << 30] {
            assert_eq!(a.enter(&go_on), Some(true));
            a.leave(peak, false);
        }
        assert_eq!(a.enter(&go_on), Some(true));
        a.leave(1 << 30, false);
        assert_eq!(a.enter(&go_on), Some(false));
        assert_eq!(a.enter(&go_on), Some(false));
    }

    #[test]
    fn resume_reads_back_what_was_audited_with_the_same_settings() {
        let p = relu_problem();
        let mut done = ProblemAudit::new(&p);
        done.set_measured(relu_like(), ATOL);
        let mut cut = ProblemAudit::new(&p);
        cut.id = 20;
        cut.key = "kernelbench/L1/20".into();
        cut.not_audited = Some("interrupted".into());
        let settings = json!({"profile": "kernelbench", "max_rows": 64});
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROGRESS);
        let text = format!(
            "{}\n{}\n{}\n{{\"level\": 1, \"id\"",
            json!({ "settings": settings }),
            serde_json::to_string(&done).unwrap(),
            serde_json::to_string(&cut).unwrap()
        );
        std::fs::write(&path, text).unwrap();
        let back = read_progress(&path, &settings).unwrap();
        assert_eq!(
            back.len(),
            1,
            "the interrupted one and the cut line are left out"
        );
        let r = &back["kernelbench/L1/19/ab"];
        assert_eq!(r.findings, done.findings);
        assert!(r.audited && r.flagged);
        let e =
            read_progress(&path, &json!({"profile": "kernelbench", "max_rows": 8})).unwrap_err();
        assert!(e.to_string().contains("other settings"), "{e}");
        assert!(read_progress(&dir.path().join("none"), &settings)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn seeds_are_public_and_per_problem() {
        assert_eq!(audit_seeds("a"), audit_seeds("a"));
        assert_ne!(audit_seeds("a").0, audit_seeds("b").0);
        assert_ne!(audit_seeds("a").0, audit_seeds("a").1);
    }
}
