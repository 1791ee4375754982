//! Claimed vs measured: a published kernel set's claims (`kbench_record::claims`) against
//! the records of a run that evaluated its kernels, one row per kernel with a reason for
//! every disagreement, and the set-level table (fast_1, geomean, median, claims that
//! survive).
//!
//! Pure functions over plain data, like the rest of this crate: [`build_claims_report`]
//! reads the claims and the records and decides; `render` only formats. May import
//! `kbench_record`, and this crate's `stats`, `task`, `basis` and `extras`.

mod render;

use std::collections::HashMap;

use kbench_record::claims::{Claim, ClaimedKernel, ClaimsFile};
use kbench_record::{CaseFamily, EvalRecord, Outcome};
use serde::{Deserialize, Serialize};

use crate::basis::SpeedupBasis;
use crate::extras::RecordExtras;
use crate::stats::{geomean, Statistic};
use crate::task::{correct_on_random, Baseline, Candidate};

pub use render::{
    render_claims_csv, render_claims_html, render_claims_markdown, render_claims_text,
};

/// KernelBench's tolerance (`atol = rtol = 1e-2`), the one a set that claims KernelBench
/// correctness passed when it declares none.
pub const KERNELBENCH_TOLERANCE: f64 = 1e-2;

/// Why a kernel's claim and kbench's measurement disagree. Every disagreement gets one; the
/// first that applies, in this order, is the one reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "category", rename_all = "kebab-case")]
pub enum Reason {
    /// Nothing to compare: no kernel in the set, no record in the run, or the evaluation
    /// did not reach a verdict.
    NotEvaluated { why: String },
    /// An integrity check failed the kernel (which one).
    IntegrityFlag { flag: String },
    /// The kernel is correct only with both models in `.eval()` (the set's convention, not
    /// KernelBench's): it switches its modules to inference behaviour, or its output follows
    /// `self.training`.
    ModelMode,
    /// Fails kbench's tolerance on the problem's own inputs but passes the set's declared
    /// tolerance (KernelBench's when it declares none).
    ToleranceDependent {
        needed: f64,
        declared: f64,
        /// That case's relative L2 error against the float64 reference: small for a kernel
        /// that is nearly right, large for one whose outputs pass only through `atol` (they
        /// are small). A norm, not an element's ratio, which a reference near zero inflates.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rel_l2: Option<f64>,
    },
    /// Fails KernelBench's own check: the `random` cases at KernelBench's tolerance, or does
    /// not load or run.
    FailsKernelbenchCheck { outcome: String },
    /// Its CUDA/C++ extension does not build here (`error`: the compiler's first error, or
    /// what the record says): a claim made with another toolchain or torch, whose API the
    /// source no longer fits, or a source that never built.
    DoesNotBuild { error: String },
    /// Passes the `random` cases and fails only stress families (which).
    StressOnly {
        families: Vec<String>,
        /// The rule the first failing case broke, e.g. `drops-nan`.
        rule: Option<String>,
    },
    /// Correct, but slower than claimed: the measured interval lies below the claim.
    SlowerThanClaimed { claimed: f64, low: f64, high: f64 },
    /// Correct and faster than claimed: the measured interval lies above the claim. Not a
    /// failed claim (it survives), but not a reproduction either.
    FasterThanClaimed { claimed: f64, low: f64, high: f64 },
    /// Slower than claimed, by a kernel whose source times code at run time (the
    /// `times-itself` advisory, `detail` its note): it may choose what it runs by what it
    /// measured, so the path kbench timed need not be the one behind the claim.
    TimesItself {
        claimed: f64,
        low: f64,
        high: f64,
        detail: String,
    },
    /// Slower than claimed under kbench's timing, but at least [`METHOD_REACHES`] of the
    /// claim under another evaluator's timing convention (`--time-as`): the claim depends on
    /// how it is timed. `methods`: every convention timed, with its speedup.
    MethodDependent {
        claimed: f64,
        low: f64,
        high: f64,
        methods: Vec<(String, f64)>,
    },
    /// Slower than claimed, and the profiled call ran none of the kernel's own device code:
    /// only library kernels (cuBLAS, cuDNN, ATen, ...), so what kbench timed is PyTorch's
    /// work, whatever the source defines (`detail`: the profile's breakdown).
    LibraryOnly {
        claimed: f64,
        low: f64,
        high: f64,
        detail: String,
    },
}

impl Reason {
    /// The category's name, as tables print it.
    pub fn category(&self) -> &'static str {
        match self {
            Reason::NotEvaluated { .. } => "not evaluated",
            Reason::IntegrityFlag { .. } => "integrity flag",
            Reason::ModelMode => "model-mode dependent",
            Reason::ToleranceDependent { .. } => "tolerance-dependent",
            Reason::FailsKernelbenchCheck { .. } => "fails KernelBench's check",
            Reason::DoesNotBuild { .. } => "does not build here",
            Reason::StressOnly { .. } => "fails only a stress family",
            Reason::SlowerThanClaimed { .. } => "slower than claimed",
            Reason::FasterThanClaimed { .. } => "faster than claimed",
            Reason::TimesItself { .. } => "slower, path chosen at run time",
            Reason::LibraryOnly { .. } => "slower, only library kernels ran",
            Reason::MethodDependent { .. } => "method-dependent",
        }
    }

    /// The category with its particulars, e.g. `integrity flag: output-replayed`.
    pub fn describe(&self) -> String {
        match self {
            Reason::NotEvaluated { why } => format!("not evaluated: {why}"),
            Reason::IntegrityFlag { flag } => format!("integrity flag: {flag}"),
            Reason::ModelMode => "model-mode dependent: correct only in eval mode".into(),
            Reason::ToleranceDependent {
                needed,
                declared,
                rel_l2,
            } => format!(
                "tolerance-dependent: needs atol=rtol={needed:.2e}, passes at {declared:.0e}{}",
                rel_l2
                    .map(|e| format!(" (relative L2 error vs float64 {e:.1e})"))
                    .unwrap_or_default()
            ),
            Reason::FailsKernelbenchCheck { outcome } => {
                format!("fails KernelBench's check: {outcome}")
            }
            Reason::DoesNotBuild { error } => format!("does not build here: {error}"),
            Reason::StressOnly { families, rule } => format!(
                "fails only a stress family: {}{}",
                families.join(", "),
                rule.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
            ),
            Reason::SlowerThanClaimed { claimed, low, high }
            | Reason::FasterThanClaimed { claimed, low, high } => {
                format!(
                    "{}: {}",
                    self.category(),
                    claim_and_interval(*claimed, *low, *high)
                )
            }
            Reason::TimesItself {
                claimed,
                low,
                high,
                detail,
            } => format!(
                "{}: {}; its {}",
                self.category(),
                claim_and_interval(*claimed, *low, *high),
                detail.trim_start_matches("times-itself: ")
            ),
            Reason::MethodDependent {
                claimed,
                low,
                high,
                methods,
            } => format!(
                "{}: claimed {}x; {}; measured [{}, {}] under kbench's",
                self.category(),
                speedup_text(*claimed, *low, *high, *claimed),
                methods
                    .iter()
                    .map(|(m, s)| format!("{s:.2}x under {}", method_name(m)))
                    .collect::<Vec<_>>()
                    .join(", "),
                speedup_text(*claimed, *low, *high, *low),
                speedup_text(*claimed, *low, *high, *high),
            ),
            Reason::LibraryOnly {
                claimed,
                low,
                high,
                detail,
            } => format!(
                "{}: {}; {detail}",
                self.category(),
                claim_and_interval(*claimed, *low, *high)
            ),
        }
    }
}

/// `claimed Cx, measured [L, H]`, each with [`speedup_text`]'s decimals.
fn claim_and_interval(claimed: f64, low: f64, high: f64) -> String {
    format!(
        "claimed {}x, measured [{}, {}]",
        speedup_text(claimed, low, high, claimed),
        speedup_text(claimed, low, high, low),
        speedup_text(claimed, low, high, high),
    )
}

/// The share of a claim another timing convention must reach for a slower-than-claimed
/// kernel to read `method-dependent` (run-to-run noise of a mean over 100 calls).
pub const METHOD_REACHES: f64 = 0.9;

/// A timing convention's name as the report prints it.
fn method_name(method: &str) -> String {
    match method {
        "kernelbench" => "KernelBench's method".into(),
        "kernelbench-v0.1" => "KernelBench v0.1's method".into(),
        "cuda-l1" => "CUDA-L1's method".into(),
        other => format!("the {other} method"),
    }
}

/// `x` with as many decimals (2 to 4) as it takes for the claim and the interval's bounds to
/// read apart: a claim just outside an interval must not print inside it ("claimed 0.12x,
/// measured [0.12, 0.12]").
fn speedup_text(claimed: f64, low: f64, high: f64, x: f64) -> String {
    let apart = |d: usize| {
        let f = |v: f64| format!("{v:.d$}");
        f(claimed) != f(low) && f(claimed) != f(high)
    };
    let d = (2..=4).find(|&d| apart(d)).unwrap_or(4);
    format!("{x:.d$}")
}

/// One kernel of the set: what was claimed, what kbench measured, and why they differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimRow {
    pub level: u8,
    pub problem: u32,
    pub sample: u32,
    pub name: String,
    pub label: Option<String>,
    /// The claim the row compares (eager first, else the first the set makes).
    pub claim: Option<Claim>,
    pub claimed_correct: Option<bool>,
    /// kbench's outcome (`ok`, `mismatch`, ...); `None` when there is no record.
    pub verdict: Option<String>,
    /// The record's outcome message, shortened.
    pub detail: Option<String>,
    /// Correct under kbench (every case family, every integrity check).
    pub correct: bool,
    /// Measured speedup on the claim's baseline, and its 95% interval where samples exist.
    pub measured: Option<f64>,
    pub interval: Option<(f64, f64)>,
    /// `None` when claim and measurement agree.
    pub reason: Option<Reason>,
}

impl ClaimRow {
    /// The claim stands: the kernel is correct under kbench and its measured speedup
    /// reaches the claim (the interval contains it or lies above it). A kernel the set
    /// claims no speedup for survives when it is correct.
    pub fn survives(&self) -> bool {
        self.correct && !self.slower()
    }

    /// Correct but slower than claimed (whatever the diagnosis).
    pub fn slower(&self) -> bool {
        matches!(
            self.reason,
            Some(
                Reason::SlowerThanClaimed { .. }
                    | Reason::MethodDependent { .. }
                    | Reason::TimesItself { .. }
                    | Reason::LibraryOnly { .. }
            )
        )
    }

    /// A correct kernel with a claimed speedup whose measured interval holds it.
    pub fn reproduced(&self) -> bool {
        self.correct && self.claim.is_some() && self.reason.is_none()
    }
}

/// Claimed vs measured over the whole set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetTable {
    pub kernels: usize,
    pub evaluated: usize,
    pub claimed_correct: usize,
    /// Kernels whose correctness the set states at all (0: the set states none, and its
    /// "claimed correct" is "not stated", not 0).
    #[serde(default)]
    pub correct_stated: usize,
    pub measured_correct: usize,
    pub claimed_fast_1: f64,
    pub measured_fast_1: f64,
    pub claimed_geomean: Option<f64>,
    pub measured_geomean: Option<f64>,
    pub claimed_median: Option<f64>,
    pub measured_median: Option<f64>,
    /// Kernels with a claim, and how many of those claims survive.
    pub claims: usize,
    pub surviving: usize,
    /// Correct kernels with a claimed speedup: the interval holds it, lies above, lies below.
    #[serde(default)]
    pub reproduced: usize,
    #[serde(default)]
    pub faster: usize,
    #[serde(default)]
    pub slower: usize,
    /// Rows per reason category, in [`Reason`]'s order.
    pub by_reason: Vec<(String, usize)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimsReport {
    pub set_name: String,
    pub set_format: String,
    pub run: String,
    pub basis: SpeedupBasis,
    /// The tolerance the tolerance-dependent category is judged at, and where it came from.
    pub declared_tolerance: f64,
    pub tolerance_source: String,
    pub rows: Vec<ClaimRow>,
    pub table: SetTable,
    /// Entries of the source the importer could not read (not kernels, not counted).
    pub import_errors: usize,
    /// Records of the run that match no claimed kernel.
    pub unclaimed_records: usize,
    /// Claimed kernels of problems the run did not select (a run over part of a set): left
    /// out of the rows and the table, counted here.
    #[serde(default)]
    pub outside_run: usize,
}

/// Matches every claimed kernel with the run's record of it (by level, problem and sample)
/// and decides each row.
pub fn build_claims_report(
    claims: &ClaimsFile,
    run_label: &str,
    records: &[(EvalRecord, RecordExtras)],
    basis: SpeedupBasis,
) -> ClaimsReport {
    let (declared, source) = match claims.set.tolerance {
        Some(t) => (
            t.atol.min(t.rtol),
            "the set's declared tolerance".to_string(),
        ),
        None => (
            KERNELBENCH_TOLERANCE,
            "KernelBench's (the set declares none)".to_string(),
        ),
    };
    let by_key: HashMap<(u8, u32, u32), &(EvalRecord, RecordExtras)> = records
        .iter()
        .map(|r| ((r.0.problem.level, r.0.problem.id, r.0.candidate.sample), r))
        .collect();
    // A run over part of the set (`--select`) answers for the problems it ran only.
    let problems: std::collections::HashSet<(u8, u32)> =
        by_key.keys().map(|&(l, p, _)| (l, p)).collect();
    let (inside, outside): (Vec<&ClaimedKernel>, Vec<&ClaimedKernel>) = claims
        .kernels
        .iter()
        .partition(|k| problems.contains(&(k.level, k.problem)));
    let rows: Vec<ClaimRow> = inside
        .into_iter()
        .map(|k| {
            let rec = by_key.get(&(k.level, k.problem, k.sample)).copied();
            claim_row(k, rec, basis, declared)
        })
        .collect();
    let claimed: std::collections::HashSet<(u8, u32, u32)> = claims
        .kernels
        .iter()
        .map(|k| (k.level, k.problem, k.sample))
        .collect();
    let unclaimed_records = by_key.keys().filter(|k| !claimed.contains(k)).count();
    let table = set_table(&rows);
    ClaimsReport {
        set_name: claims.set.name.clone(),
        set_format: claims.set.format.clone(),
        run: run_label.to_string(),
        basis,
        declared_tolerance: declared,
        tolerance_source: source,
        rows,
        table,
        import_errors: claims.errors.len(),
        unclaimed_records,
        outside_run: outside.len(),
    }
}

/// The claim a row compares: eager first (what kbench times live), else the first.
fn primary_claim(k: &ClaimedKernel) -> Option<&Claim> {
    k.claims
        .iter()
        .find(|c| c.baseline == "eager")
        .or_else(|| k.claims.first())
}

fn claim_row(
    k: &ClaimedKernel,
    rec: Option<&(EvalRecord, RecordExtras)>,
    basis: SpeedupBasis,
    declared: f64,
) -> ClaimRow {
    let claim = primary_claim(k).cloned();
    let mut row = ClaimRow {
        level: k.level,
        problem: k.problem,
        sample: k.sample,
        name: k.name.clone(),
        label: k.label.clone(),
        claim: claim.clone(),
        claimed_correct: k.claimed_correct,
        verdict: None,
        detail: None,
        correct: false,
        measured: None,
        interval: None,
        reason: None,
    };
    let Some((r, extras)) = rec else {
        row.reason = Some(Reason::NotEvaluated {
            why: match &k.no_kernel {
                Some(why) => format!("no kernel in the set ({why})"),
                None => "no record in the run".into(),
            },
        });
        return row;
    };
    let cand = Candidate::from_record(r, extras, basis);
    row.verdict = Some(r.outcome.kind().to_string());
    if !r.outcome.is_ok() {
        row.detail = Some(shorten(&r.outcome.to_string(), 160));
    }
    row.correct = cand.correct;
    let baseline = match claim.as_ref().map(|c| c.baseline.as_str()) {
        Some("compile") => Baseline::Compile,
        Some("max-autotune") => Baseline::MaxAutotune,
        _ => Baseline::Eager,
    };
    row.measured = cand.speedups.get(&baseline).copied();
    if baseline == Baseline::Eager && cand.correct {
        row.interval = cand.speedup_interval(basis).map(|e| (e.low, e.high));
    }
    row.reason = failure_reason(r, &cand, declared)
        .or_else(|| speed_reason(claim.as_ref(), row.measured, row.interval))
        .map(|reason| diagnose_slower(reason, r));
    row
}

/// A slower-than-claimed kernel, diagnosed by the first of these that applies: it reaches
/// its claim under another timing convention (`method-dependent`), it times code at run time
/// (`times-itself`), or its profiled call ran only library kernels. Any other reason stands.
fn diagnose_slower(reason: Reason, r: &EvalRecord) -> Reason {
    let Reason::SlowerThanClaimed { claimed, low, high } = reason else {
        return reason;
    };
    method_dependent(claimed, low, high, r)
        .or_else(|| times_itself(claimed, low, high, r))
        .or_else(|| library_only(claimed, low, high, r))
        .unwrap_or(reason)
}

/// `method-dependent`, with every convention's speedup, when one the run recorded
/// (`--time-as`) reaches [`METHOD_REACHES`] of the claim and kbench's own interval does not:
/// a kernel kbench measures at 97% of its claim is slower than claimed under any method, and
/// naming a method for it would say the claim hangs on one (on KernelBenchLeaderboard's
/// level 1, six such rows on an H200).
fn method_dependent(claimed: f64, low: f64, high: f64, r: &EvalRecord) -> Option<Reason> {
    let timings = r.timing.as_ref()?.method_timings.as_slice();
    (high < METHOD_REACHES * claimed
        && timings
            .iter()
            .any(|m| m.speedup >= METHOD_REACHES * claimed))
    .then(|| Reason::MethodDependent {
        claimed,
        low,
        high,
        methods: timings
            .iter()
            .map(|m| (m.method.clone(), m.speedup))
            .collect(),
    })
}

/// `times-itself`, with its note, when the record has the advisory.
fn times_itself(claimed: f64, low: f64, high: f64, r: &EvalRecord) -> Option<Reason> {
    let flagged = r
        .integrity
        .as_ref()
        .is_some_and(|i| i.advisories.iter().any(|a| a == "times-itself"));
    let note = r.notes.iter().find(|n| n.starts_with("times-itself: "))?;
    flagged.then(|| Reason::TimesItself {
        claimed,
        low,
        high,
        detail: note.clone(),
    })
}

/// Only library kernels ran (the `no-custom-kernel` advisory, with the record's kernel
/// profile): the diagnosis with the profile's breakdown.
fn library_only(claimed: f64, low: f64, high: f64, r: &EvalRecord) -> Option<Reason> {
    let i = r.integrity.as_ref()?;
    let advised = i
        .advisories
        .iter()
        .any(|a| a.split(':').next() == Some("no-custom-kernel"));
    let p = i.kernels.as_ref().filter(|p| advised && p.own.is_empty())?;
    Some(Reason::LibraryOnly {
        claimed,
        low,
        high,
        detail: format!(
            "the profiled call spent {:.0}% of its device time in library kernels ({}), none in the kernel's own",
            100.0 * p.library_fraction,
            p.library.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        ),
    })
}

/// Why a record that is not `ok` disagrees with a claim of correctness; `None` for `ok`.
fn failure_reason(r: &EvalRecord, cand: &Candidate, declared: f64) -> Option<Reason> {
    match &r.outcome {
        Outcome::Ok => return None,
        Outcome::Integrity { flag, .. } => {
            return Some(Reason::IntegrityFlag { flag: flag.clone() })
        }
        o if o.unjudged() || matches!(o, Outcome::NoKernel { .. }) => {
            return Some(Reason::NotEvaluated {
                why: format!("no verdict ({})", shorten(&o.to_string(), 120)),
            })
        }
        _ => {}
    }
    if let Outcome::CompileError { message } = &r.outcome {
        if let Some(error) = extension_build_error(message) {
            return Some(Reason::DoesNotBuild { error });
        }
    }
    // Correct with both models in eval mode: the advisory saw it switch, or the re-check of
    // its mismatch found its output follows the module mode.
    if r.integrity.as_ref().and_then(|i| i.eval_mode_correct) == Some(true) {
        return Some(Reason::ModelMode);
    }
    if !correct_on_random(r) {
        // Failing random cases within the declared tolerance: the verdict depends on the
        // tolerance, not on a defect KernelBench's check would see. Only an elementwise
        // miss qualifies (a shape, dtype or NaN/Inf failure is not a tolerance matter).
        let elementwise =
            matches!(&r.outcome, Outcome::Mismatch { rule, .. } if rule == "elementwise");
        let failing: Vec<_> = r
            .cases
            .iter()
            .filter(|c| c.case.family == CaseFamily::Random && !c.passed)
            .collect();
        let needed = failing
            .iter()
            .map(|c| c.tol_needed)
            .try_fold(0.0f64, |acc, t| t.map(|t| acc.max(t)));
        return Some(match needed {
            Some(needed) if elementwise && needed > 0.0 && needed <= declared => {
                // The case that needs the most tolerance says how far off the kernel is.
                let worst = failing.iter().find(|c| c.tol_needed == Some(needed));
                Reason::ToleranceDependent {
                    needed,
                    declared,
                    rel_l2: worst.and_then(|c| c.rel_l2_vs_f64),
                }
            }
            _ => Reason::FailsKernelbenchCheck {
                outcome: shorten(&r.outcome.to_string(), 120),
            },
        });
    }
    let families: Vec<String> = cand
        .families
        .iter()
        .filter(|(f, ok)| !**ok && f.as_str() != "random")
        .map(|(f, _)| f.clone())
        .collect();
    let rule = match &r.outcome {
        Outcome::Mismatch { rule, .. } => Some(rule.clone()),
        o => Some(o.kind().to_string()),
    };
    Some(Reason::StressOnly { families, rule })
}

/// For a compile error that is an extension build's (the worker's message begins "extension
/// build failed while"): the compiler's first error line, its path cut to the file name (a
/// build folder says nothing to a reader), or torch's line when the record holds no
/// compiler output. Only the message before the traceback is read. `None` for other compile
/// errors (a syntax error, an import). A candidate can raise torch's error itself and be
/// told "does not build here": about its own kernel, as a failing `#error` could.
fn extension_build_error(message: &str) -> Option<String> {
    if !message.starts_with("extension build failed while") {
        return None;
    }
    let message = message
        .split("Traceback (most recent call last)")
        .next()
        .unwrap_or(message);
    let compiler = message
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("error:") || l.contains(" error: ") || l.contains(": error"))
        .map(|l| match l.split_once(": ") {
            // `/build/folder/name/cuda.cu(59): error: ...` (also `fatal error`,
            // `catastrophic error`): the file name and what follows.
            Some((path, rest)) if path.contains('/') && !path.contains(' ') => {
                format!("{}: {rest}", path.rsplit('/').next().unwrap_or(path))
            }
            _ => l.to_string(),
        });
    Some(match compiler {
        Some(line) => shorten(&line, 160),
        None => {
            let torch = message
                .lines()
                .find_map(|l| l.split_once("RuntimeError: ").map(|(_, r)| r.trim()))
                .unwrap_or("the extension build failed");
            format!(
                "{} (the record holds no compiler output)",
                shorten(torch, 100)
            )
        }
    })
}

/// A correct kernel's claim against its measured interval (or value when no samples).
fn speed_reason(
    claim: Option<&Claim>,
    measured: Option<f64>,
    interval: Option<(f64, f64)>,
) -> Option<Reason> {
    let claimed = claim?.speedup;
    let (low, high) = interval.or(measured.map(|m| (m, m)))?;
    if claimed > high {
        Some(Reason::SlowerThanClaimed { claimed, low, high })
    } else if claimed < low {
        Some(Reason::FasterThanClaimed { claimed, low, high })
    } else {
        None
    }
}

fn set_table(rows: &[ClaimRow]) -> SetTable {
    let n = rows.len();
    let frac = |k: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
    let claimed_ok = |r: &&ClaimRow| r.claimed_correct != Some(false);
    let claimed_speedups: Vec<f64> = rows
        .iter()
        .filter(claimed_ok)
        .filter_map(|r| r.claim.as_ref().map(|c| c.speedup))
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    let measured_speedups: Vec<f64> = rows
        .iter()
        .filter(|r| r.correct)
        .filter_map(|r| r.measured)
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    let mut by_reason: Vec<(String, usize)> = Vec::new();
    for r in rows.iter().filter_map(|r| r.reason.as_ref()) {
        match by_reason.iter_mut().find(|(c, _)| c == r.category()) {
            Some((_, k)) => *k += 1,
            None => by_reason.push((r.category().to_string(), 1)),
        }
    }
    SetTable {
        kernels: n,
        evaluated: rows.iter().filter(|r| r.verdict.is_some()).count(),
        claimed_correct: rows
            .iter()
            .filter(|r| r.claimed_correct == Some(true))
            .count(),
        correct_stated: rows.iter().filter(|r| r.claimed_correct.is_some()).count(),
        measured_correct: rows.iter().filter(|r| r.correct).count(),
        claimed_fast_1: frac(
            rows.iter()
                .filter(claimed_ok)
                .filter(|r| r.claim.as_ref().is_some_and(|c| c.speedup > 1.0))
                .count(),
        ),
        measured_fast_1: frac(
            rows.iter()
                .filter(|r| r.correct && r.measured.is_some_and(|s| s > 1.0))
                .count(),
        ),
        claimed_geomean: (!claimed_speedups.is_empty()).then(|| geomean(&claimed_speedups)),
        measured_geomean: (!measured_speedups.is_empty()).then(|| geomean(&measured_speedups)),
        claimed_median: median(&claimed_speedups),
        measured_median: median(&measured_speedups),
        claims: rows.iter().filter(|r| r.claim.is_some()).count(),
        surviving: rows
            .iter()
            .filter(|r| r.claim.is_some() && r.survives())
            .count(),
        reproduced: rows.iter().filter(|r| r.reproduced()).count(),
        faster: rows
            .iter()
            .filter(|r| matches!(r.reason, Some(Reason::FasterThanClaimed { .. })))
            .count(),
        slower: rows.iter().filter(|r| r.correct && r.slower()).count(),
        by_reason,
    }
}

fn median(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| Statistic::Median.of(&mut v.to_vec()))
}

fn shorten(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() <= max {
        return line.to_string();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests;
