//! One problem's audit ([`ProblemAudit`]), the whole audit ([`AuditReport`]), its counts and
//! `audit.md` ([`render_markdown`]). Pure: nothing here prints, reads files or starts
//! processes.

use std::collections::BTreeMap;

use kbench_suites::Problem;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::findings::{findings, read_families, FamilyMeasure, Findings, FlagKind};
use crate::runlog::seed::RunSecret;

/// One problem's audit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProblemAudit {
    pub(crate) level: u8,
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) file: String,
    pub(crate) sha256: String,
    pub(crate) audited: bool,
    /// Why the problem could not be audited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) not_audited: Option<String>,
    pub(crate) seconds: f64,
    pub(crate) seed: u64,
    pub(crate) forward_seed: u64,
    /// Whether any family had its batch dimension cut (`--max-rows`).
    pub(crate) rows_cut: bool,
    pub(crate) flagged: bool,
    pub(crate) findings: Findings,
    /// The worker's measurements, verbatim (`families` of its `audit` answer), from which
    /// the findings can be recomputed with [`findings_from_json`].
    pub(crate) families: Value,
    /// The end of the worker's output, for problems that could not be audited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) log_tail: Option<String>,
    /// Audited with no other problem beside it (after problems ran out of memory beside
    /// each other).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) audited_alone: bool,
    /// The worker's peak resident memory, GiB (sampled every 0.1 s).
    pub(crate) peak_rss_gib: f64,
    /// The device the worker ran on, as its `load` answer names it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) device_name: String,
    /// The failure was for memory (worth trying again with nothing beside it).
    #[serde(skip)]
    pub(crate) memory_failure: bool,
}

impl ProblemAudit {
    pub(super) fn new(p: &Problem) -> Self {
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

    pub(super) fn set_measured(&mut self, families: Value, atol: f64) {
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
    pub(crate) fn label(&self) -> String {
        format!("{}_{}", self.id, self.name)
    }

    pub(super) fn summary(&self) -> String {
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

pub(super) fn removed_text(removed: Option<bool>, f: &Findings) -> String {
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
pub(crate) fn audit_seeds(sha256: &str) -> (u64, u64) {
    let key = RunSecret::from_bytes(Sha256::digest(b"audit").into());
    (
        key.derive(&format!("input/{sha256}/audit")),
        key.derive(&format!("forward/{sha256}/audit")),
    )
}

/// The whole audit: settings, counts and every problem.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AuditReport {
    pub(crate) schema: &'static str,
    pub(crate) profile: String,
    pub(crate) atol: f64,
    pub(crate) rtol: f64,
    pub(crate) precision: &'static str,
    pub(crate) device: String,
    pub(crate) device_name: String,
    pub(crate) torch: String,
    pub(crate) python: String,
    pub(crate) kbench: String,
    pub(crate) date: String,
    pub(crate) command: String,
    pub(crate) suite: String,
    pub(crate) families: Vec<&'static str>,
    pub(crate) weight_seed: u64,
    pub(crate) max_weights: u64,
    pub(crate) max_rows: Option<u64>,
    pub(crate) interrupted: bool,
    pub(crate) counts: Counts,
    pub(crate) problems: Vec<ProblemAudit>,
}

/// How many problems ended where.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct Counts {
    pub(crate) problems: usize,
    pub(crate) audited: usize,
    pub(crate) flagged: usize,
    pub(crate) not_audited: usize,
    pub(crate) rows_cut: usize,
    /// Problems per flag (as shown in the table), and of those how many `signed` removes.
    pub(crate) by_flag: BTreeMap<String, FlagCount>,
}

#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub(crate) struct FlagCount {
    pub(crate) problems: usize,
    pub(crate) removed_by_signed: usize,
}

pub(crate) fn count(problems: &[ProblemAudit]) -> Counts {
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

pub(super) fn one_line(s: &str, max: usize) -> String {
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
pub(crate) fn render_markdown(r: &AuditReport) -> String {
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

/// Whether an error message is torch's (or Python's) out-of-memory error.
pub(super) fn is_oom_text(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.contains("out of memory")
        || lower.contains("can't allocate memory")
        || lower.contains("cannot allocate memory")
        || lower.contains("memoryerror")
}
