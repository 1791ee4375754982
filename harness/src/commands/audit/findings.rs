//! What an audit concludes from the reference worker's measurements: the measurements as the
//! worker reports them, and the flags ([`family_flags`]) and findings ([`findings`]) computed
//! from them. Pure: nothing here prints, reads files or starts processes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

// Measurements, as the worker reports them (read leniently: a missing or mistyped field is
// unknown and raises no flag).

/// A number that may be absent, `null`, or a value. `null` is the worker's "nothing finite to
/// measure"; absent (or of another type) is "unknown".
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
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
pub(crate) struct Sensitivity {
    /// Largest excess of the perturbed output over the unperturbed one (`null`: no element
    /// finite in both).
    pub(crate) max_excess: Num,
    /// Elements that are NaN in one of the two outputs and not in the other.
    pub(crate) nan_mismatch: Option<u64>,
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
    pub(crate) fn unchanged(&self, atol: f64) -> bool {
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
pub(crate) struct OutputMeasure {
    pub(crate) shape: Option<Vec<u64>>,
    pub(crate) dtype: Option<String>,
    pub(crate) elements: Option<u64>,
    pub(crate) max_abs: Option<f64>,
    pub(crate) nonfinite: Option<u64>,
    pub(crate) zeros_excess: Option<Num>,
    pub(crate) constant_excess: Option<Num>,
    /// Per input of `get_inputs()`: the excess of that input taken as the output (`None`:
    /// not comparable, e.g. another shape).
    pub(crate) input_excess: Vec<Option<f64>>,
    pub(crate) input_sensitivity: Vec<Option<Sensitivity>>,
    /// Whether `input_sensitivity` was reported at all.
    pub(crate) has_input_sensitivity: bool,
    pub(crate) weight_sensitivity: BTreeMap<String, Option<Sensitivity>>,
    pub(crate) weights_total: Option<u64>,
}

impl OutputMeasure {
    pub(crate) fn read(v: &Value) -> OutputMeasure {
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
pub(crate) struct FamilyMeasure {
    pub(crate) outputs: Vec<OutputMeasure>,
    pub(crate) seconds: Option<f64>,
    /// Inputs the family changed from the problem's own (0: it is the same case as `random`).
    pub(crate) transformed: Option<u64>,
    /// Whether the batch dimension was cut (`max_rows`).
    pub(crate) rows_cut: Option<bool>,
    /// Why the family could not be measured, when the worker says so.
    pub(crate) error: Option<String>,
}

impl FamilyMeasure {
    pub(crate) fn read(v: &Value) -> FamilyMeasure {
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
    pub(crate) fn usable(&self) -> bool {
        self.error.is_none() && !self.outputs.is_empty()
    }
}

/// The `families` object of an `audit` reply.
pub(crate) fn read_families(v: &Value) -> BTreeMap<String, FamilyMeasure> {
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
pub(crate) enum FlagKind {
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FlagKind::Zeros => "zeros",
            FlagKind::Constant => "constant",
            FlagKind::Identity => "identity",
            FlagKind::IgnoresInput => "ignores-input",
            FlagKind::IgnoresWeight => "ignores-weight",
        }
    }

    pub(crate) const ALL: [FlagKind; 5] = [
        FlagKind::Zeros,
        FlagKind::Constant,
        FlagKind::Identity,
        FlagKind::IgnoresInput,
        FlagKind::IgnoresWeight,
    ];
}

/// One flag of one family: the kind, what it is about, and a sentence with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Flag {
    pub(crate) flag: FlagKind,
    /// The input (0-based, in `get_inputs()` order) for `identity` and `ignores-input`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<usize>,
    /// The parameter's name for `ignores-weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parameter: Option<String>,
    pub(crate) detail: String,
}

impl Flag {
    /// Same kind and subject (the details' numbers may differ between families).
    pub(crate) fn same(&self, other: &Flag) -> bool {
        self.flag == other.flag && self.input == other.input && self.parameter == other.parameter
    }

    /// `identity (input 0)`, `ignores-weight (bias)`, `zeros`.
    pub(crate) fn label(&self) -> String {
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
pub(crate) fn family_flags(f: &FamilyMeasure, atol: f64) -> Vec<Flag> {
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
pub(crate) struct Finding {
    #[serde(flatten)]
    pub(crate) flag: Flag,
    /// Whether the same flag is absent under `signed` (`None`: signed was not measured).
    pub(crate) removed_by_signed: Option<bool>,
    /// A stronger flag of the same family that makes this one redundant (zeros makes a
    /// constant pass; a trivial output passing makes any independence moot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) subsumed_by: Option<FlagKind>,
    /// Listed in the report's table: not subsumed, or still there under `signed` while the
    /// flag subsuming it is not.
    pub(crate) shown: bool,
}

/// What an audit concluded about one problem from its measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Findings {
    /// Flags under `random`, each with whether `signed` removes it.
    pub(crate) weaknesses: Vec<Finding>,
    /// Flags only under `signed` (not weaknesses of KernelBench's check; a note).
    pub(crate) signed_only: Vec<Flag>,
    /// `signed` changed no input (`transformed` 0), so it cannot remove anything.
    pub(crate) signed_unchanged: bool,
    /// Why `signed` has no verdict, when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) signed_unknown: Option<String>,
}

impl Findings {
    pub(crate) fn flagged(&self) -> bool {
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
pub(crate) fn findings(families: &BTreeMap<String, FamilyMeasure>, atol: f64) -> Findings {
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
