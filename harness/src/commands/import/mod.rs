//! `kbench import`: a published kernel set into kbench's replay layout
//! (`level_<L>_problem_<P>_sample_<S>_kernel.py` in --out, which `kbench run --agent replay`
//! evaluates), the set's own reference code under `refs/`, and `claims.json`
//! (`kbench_record::claims`: what the set says of each kernel).
//!
//! One file per source layout reads it into [`Entry`]s (`kernelbench_runs`, `jsonl`,
//! `leaderboard`), every file of the set through `agents::untrusted_file` (no link out of
//! the set's folder, no `..`, sizes capped); `write` turns entries into files and
//! `out_folder` checks --out first (an import removes only what an earlier import wrote). A
//! bad entry costs itself only: it is an `errors` entry of the claims file naming its line,
//! key or file. Empty and placeholder kernels get no file and a `no_kernel` reason. The
//! command fails only when SRC cannot be read, nothing in it could be imported, or --out
//! holds something of the user's where the import would write.

mod jsonl;
mod kernelbench_runs;
mod leaderboard;
mod out_folder;
mod write;

use std::path::Path;

use anyhow::{bail, Context, Result};
use kbench_record::claims::{Claim, ClaimSet, DeclaredTolerance, ImportError};

use crate::cli::{ImportFormat, ImportSetArgs, ModelModeArg};
use crate::exit;

/// One kernel as a source describes it, before it gets its sample and files.
#[derive(Debug, Clone, Default)]
pub(crate) struct Entry {
    /// Where in the source, for messages: `line 3`, `key "Level 1: 3_X" [0]`, a file name.
    pub(crate) at: String,
    pub(crate) level: u8,
    pub(crate) problem: u32,
    /// The source's own sample number; `None`: the next free one of its problem, in order.
    pub(crate) sample: Option<u32>,
    pub(crate) label: Option<String>,
    /// The kernel's source; `None` with `missing` saying why.
    pub(crate) kernel: Option<String>,
    pub(crate) missing: Option<String>,
    pub(crate) claims: Vec<Claim>,
    pub(crate) claimed_correct: Option<bool>,
    /// The set's own reference code for the problem, when it ships one.
    pub(crate) reference: Option<String>,
    /// The problem's name (`Square_matrix_multiplication_`), when the source gives it: names
    /// the reference's copy in the suite layout (`problems/level<L>/<P>_<name>.py`).
    pub(crate) problem_name: Option<String>,
}

/// What a reader got from a source.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub(crate) entries: Vec<Entry>,
    pub(crate) errors: Vec<ImportError>,
    /// Worth saying, not wrong (printed, not in the claims file).
    pub(crate) notes: Vec<String>,
}

impl Parsed {
    pub(crate) fn error(&mut self, at: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ImportError {
            at: at.into(),
            message: message.into(),
        });
    }
}

/// The baseline a claimed-speedup field is against, from its name: `autotune` →
/// max-autotune, `compile` or `inductor` → compile, `eager`, `torch` or `default` (CUDA-L1's
/// `score_default`, a speedup over PyTorch as it runs by default) → eager, else unknown
/// (`--claim-baseline` names it).
pub(crate) fn baseline_of(field: &str) -> &'static str {
    let f = field.to_ascii_lowercase();
    if f.contains("autotune") {
        "max-autotune"
    } else if f.contains("compile") || f.contains("inductor") {
        "compile"
    } else if f.contains("eager") || f.contains("torch") || f.contains("default") {
        "eager"
    } else {
        "unknown"
    }
}

/// The baselines a claim can be against, as `--claim-baseline` and claims files name them.
pub(crate) const CLAIM_BASELINES: [&str; 3] = ["eager", "compile", "max-autotune"];

/// `--claim-baseline FIELD=BASELINE` values: (field, baseline) pairs.
pub(crate) fn parse_claim_baselines(specs: &[String]) -> Result<Vec<(String, &'static str)>> {
    specs
        .iter()
        .map(|s| {
            let (field, baseline) = s.split_once('=').ok_or_else(|| {
                anyhow::anyhow!(
                    "--claim-baseline wants FIELD=BASELINE (e.g. score_default=eager), got `{s}`"
                )
            })?;
            let baseline = CLAIM_BASELINES
                .into_iter()
                .find(|b| *b == baseline.trim())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--claim-baseline {s}: the baseline must be one of {}",
                        CLAIM_BASELINES.join(", ")
                    )
                })?;
            let field = field.trim();
            if field.is_empty() {
                bail!("--claim-baseline {s}: the field name is empty");
            }
            Ok((field.to_string(), baseline))
        })
        .collect()
}

/// Gives every claim read from a mapped field (names compared without case) the baseline
/// `--claim-baseline` names for it. A mapped field no entry has is an error that lists the
/// fields the set does have: a misspelt name must not leave claims on a guessed baseline.
pub(crate) fn apply_claim_baselines(
    entries: &mut [Entry],
    map: &[(String, &'static str)],
) -> Result<()> {
    for (field, baseline) in map {
        let mut found = false;
        for c in entries.iter_mut().flat_map(|e| e.claims.iter_mut()) {
            if c.field.eq_ignore_ascii_case(field) {
                c.baseline = (*baseline).to_string();
                found = true;
            }
        }
        if !found {
            let mut seen: Vec<&str> = entries
                .iter()
                .flat_map(|e| e.claims.iter().map(|c| c.field.as_str()))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            bail!(
                "--claim-baseline {field}={baseline}: no claim of the set is read from a field `{field}`; its speedup fields are: {}",
                if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
            );
        }
    }
    Ok(())
}

pub fn command(a: &ImportSetArgs) -> Result<i32> {
    let tolerance = a.tolerance.as_deref().map(parse_tolerance).transpose()?;
    if a.baseline_json.is_some() && a.format != ImportFormat::KernelbenchRuns {
        bail!("--baseline-json is for kernelbench-runs only: the other formats carry their own speedups");
    }
    let claim_baselines = parse_claim_baselines(&a.claim_baseline)?;
    let mut parsed = match a.format {
        ImportFormat::KernelbenchRuns => {
            kernelbench_runs::read(&a.src, a.baseline_json.as_deref())?
        }
        ImportFormat::Jsonl => jsonl::read(&a.src)?,
        ImportFormat::Leaderboard => leaderboard::read(&a.src)?,
    };
    apply_claim_baselines(&mut parsed.entries, &claim_baselines)?;
    let source =
        std::path::absolute(&a.src).with_context(|| format!("resolving {}", a.src.display()))?;
    let set = ClaimSet {
        name: a
            .name
            .clone()
            .unwrap_or_else(|| default_name(a.format, &source)),
        format: a.format.as_str().into(),
        source: source.display().to_string(),
        tolerance,
        model_mode: a.model_mode.map(|m| match m {
            ModelModeArg::Train => "train".into(),
            ModelModeArg::Eval => "eval".into(),
        }),
    };
    let planned = write::plan(set, parsed);
    let prepared = out_folder::prepare_out(&a.out, a.force, &planned.paths())?;
    write::commit(&a.out, &planned)?;
    let claims = &planned.claims;
    let kernels = claims.kernels.iter().filter(|k| k.kernel.is_some()).count();
    let no_kernel = claims.kernels.len() - kernels;
    if prepared.removed_kernels > 0 {
        println!(
            "replaced {} kernel file(s) of the earlier import in {}",
            prepared.removed_kernels,
            a.out.display()
        );
    }
    if !prepared.kept_changed.is_empty() {
        println!(
            "note: kept {} file(s) of the earlier import that changed since it wrote them: {}",
            prepared.kept_changed.len(),
            prepared.kept_changed.join(", ")
        );
    }
    for e in claims.errors.iter().take(20) {
        eprintln!("kbench: import: {}: {}", e.at, e.message);
    }
    if claims.errors.len() > 20 {
        eprintln!(
            "kbench: import: ... and {} more error(s), all in claims.json",
            claims.errors.len() - 20
        );
    }
    for n in &planned.notes {
        println!("note: {n}");
    }
    println!(
        "imported {} ({}): {kernels} kernel(s), {no_kernel} no_kernel, {} error(s); wrote {} and {}",
        claims.set.name,
        claims.set.format,
        claims.errors.len(),
        a.out.display(),
        a.out.join(out_folder::CLAIMS).display()
    );
    if claims.kernels.is_empty() {
        eprintln!(
            "kbench: error: nothing could be imported from {}: see the errors above",
            a.src.display()
        );
        return Ok(exit::HARNESS_ERROR);
    }
    println!(
        "evaluate it: kbench run --kernelbench KernelBench --agent replay --replay-dir {} --out RUN_DIR",
        a.out.display()
    );
    let levels = planned.problem_levels();
    if !levels.is_empty() {
        let levels: Vec<String> = levels.iter().map(u8::to_string).collect();
        println!(
            "or on the problems the set was written for (its own references): kbench run --kernelbench {} --levels {} --agent replay --replay-dir {} --out RUN_DIR",
            a.out.join(out_folder::PROBLEMS).display(),
            levels.join(","),
            a.out.display()
        );
    }
    Ok(exit::OK)
}

/// `ATOL,RTOL`, both finite and non-negative.
fn parse_tolerance(s: &str) -> Result<DeclaredTolerance> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let nums: Option<Vec<f64>> = parts.iter().map(|p| p.parse::<f64>().ok()).collect();
    match nums.as_deref() {
        Some(&[atol, rtol]) if [atol, rtol].iter().all(|x| x.is_finite() && *x >= 0.0) => {
            Ok(DeclaredTolerance { atol, rtol })
        }
        _ => {
            bail!("--tolerance {s:?}: expected ATOL,RTOL, two non-negative numbers, e.g. 1e-2,1e-2")
        }
    }
}

/// The set's name from its source: the folder's name (the repository's, for a leaderboard
/// given as its docs/assets folder), or a file's stem.
fn default_name(format: ImportFormat, source: &Path) -> String {
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| p.display().to_string())
    };
    match format {
        ImportFormat::Jsonl => source
            .file_stem()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| name(source)),
        ImportFormat::Leaderboard if source.ends_with("docs/assets") => source
            .parent()
            .and_then(Path::parent)
            .map(name)
            .unwrap_or_else(|| name(source)),
        _ => name(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_are_named_from_fields() {
        assert_eq!(baseline_of("score_compile"), "compile");
        assert_eq!(baseline_of("score_eager"), "eager");
        assert_eq!(baseline_of("torch_speedup"), "eager");
        assert_eq!(baseline_of("score_default"), "eager");
        assert_eq!(baseline_of("speedup_max_autotune"), "max-autotune");
        assert_eq!(baseline_of("inductor_speedup"), "compile");
        assert_eq!(baseline_of("score"), "unknown");
    }

    fn entry(fields: &[&str]) -> Entry {
        Entry {
            claims: fields
                .iter()
                .map(|f| Claim {
                    speedup: 2.0,
                    baseline: baseline_of(f).into(),
                    field: f.to_string(),
                })
                .collect(),
            ..Entry::default()
        }
    }

    #[test]
    fn claim_baselines_map_fields_and_refuse_what_the_set_lacks() {
        let map =
            parse_claim_baselines(&["Score=compile".into(), "score_x = eager".into()]).unwrap();
        assert_eq!(
            map,
            vec![
                ("Score".to_string(), "compile"),
                ("score_x".to_string(), "eager")
            ]
        );
        let mut entries = vec![entry(&["score", "score_eager"]), entry(&["SCORE_X"])];
        apply_claim_baselines(&mut entries, &map).unwrap();
        assert_eq!(
            entries[0].claims[0].baseline, "compile",
            "names compared without case"
        );
        assert_eq!(
            entries[0].claims[1].baseline, "eager",
            "an unmapped field keeps its own"
        );
        assert_eq!(entries[1].claims[0].baseline, "eager");
        let missing = parse_claim_baselines(&["speedup=eager".into()]).unwrap();
        let e = apply_claim_baselines(&mut entries, &missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`speedup`") && e.contains("SCORE_X, score, score_eager"),
            "{e}"
        );
        for bad in ["score", "score=fast", "=eager"] {
            let e = parse_claim_baselines(&[bad.into()])
                .unwrap_err()
                .to_string();
            assert!(e.contains("--claim-baseline"), "{e}");
        }
    }

    #[test]
    fn tolerance_parses_or_says_what_it_wants() {
        let t = parse_tolerance("1e-2, 0.001").unwrap();
        assert_eq!((t.atol, t.rtol), (0.01, 0.001));
        for bad in ["0.01", "a,b", "-1,1", "1,2,3"] {
            let e = parse_tolerance(bad).unwrap_err().to_string();
            assert!(e.contains("ATOL,RTOL"), "{e}");
        }
    }
}
