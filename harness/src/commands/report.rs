//! `kbench report` and `kbench leaderboard`: read run directories, hand their records to
//! `kbench-reports`, and write what it renders. Everything is derived from the run logs;
//! nothing else is read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::claims::ClaimsFile;
use kbench_record::EvalRecord;
use kbench_reports::claims::build_claims_report;
use kbench_reports::completeness::{reconcile, LogCheck, Verification};
use kbench_reports::{RecordExtras, RunInput};
use serde_json::Value;

use crate::cli::{BasisArg, LeaderboardArgs, PickArg, ReportArgs, TableArg};
use crate::exit;
use crate::runlog::read::{read_run_folder, Trust};

#[cfg(test)]
/// Reads one run: a run directory (or its `records.jsonl`), verified against its secret
/// (`runlog::read`: what cannot be verified is refused unless `unverified_ok`), its records
/// matched with the evaluations its `run.json` plans
/// ([`kbench_reports::completeness::reconcile`]): a planned evaluation without a valid record
/// is missing and counts as not correct; an evaluation recorded twice counts once. A line
/// that fails (bad or missing MAC, not JSON, truncated) is named in a warning (the first
/// few of them) and skipped, never the whole run.
pub(crate) fn read_run(path: &Path, unverified_ok: bool) -> Result<RunInput> {
    Ok(read_run_and_shard(path, unverified_ok)?.0)
}

/// [`read_run`], and the shard of a run its `run.json` says the folder holds.
fn read_run_and_shard(path: &Path, unverified_ok: bool) -> Result<(RunInput, Option<String>)> {
    let folder = read_run_folder(path, unverified_ok)?;
    for w in folder.log.warnings() {
        eprintln!("kbench: warning: {w}");
    }
    let (verification, note) = match &folder.trust {
        Trust::Verified => (Verification::Verified, None),
        Trust::Legacy(why) => {
            eprintln!("kbench: note: {why}");
            (Verification::RecordsOnly, Some(why.clone()))
        }
        Trust::Unverified(why) => {
            eprintln!("kbench: warning: UNVERIFIED: {why}; read anyway (--unverified)");
            (Verification::Unverified, Some(why.clone()))
        }
    };
    let log = LogCheck {
        verification,
        note,
        invalid: folder.log.invalid(),
        truncated: usize::from(folder.log.truncated_tail()),
    };
    let lines: Vec<(EvalRecord, RecordExtras)> = folder
        .log
        .lines
        .into_iter()
        .map(|line| {
            // The line parsed when it was read; only the optional fields are read again.
            let value: Value = serde_json::from_str(&line.text).unwrap_or(Value::Null);
            (line.record, RecordExtras::from_json(&value))
        })
        .collect();
    let manifest = folder.manifest.as_ref();
    let agent = manifest
        .map(|m| m.agent.clone())
        .or_else(|| lines.first().map(|(r, _)| r.candidate.agent.clone()));
    let run_id = manifest
        .map(|m| m.run_id.clone())
        .or_else(|| lines.first().map(|(r, _)| r.run_id.clone()));
    let planned = manifest.and_then(|m| m.planned.as_ref());
    let r = reconcile(planned, agent.as_deref().unwrap_or(""), lines, &log);
    if r.check.missing.is_some_and(|m| m > 0) {
        eprintln!(
            "kbench: warning: {}: {} planned evaluation(s) have no valid record; counted as not correct",
            path.display(),
            r.check.missing.unwrap_or(0)
        );
    }
    if r.check.unplanned > 0 {
        eprintln!(
            "kbench: warning: {}: {} valid record(s) of evaluations its run.json does not plan; left out",
            path.display(),
            r.check.unplanned
        );
    }
    let input = RunInput {
        label: label_of(path),
        path: path.display().to_string(),
        run_id,
        agent,
        records: r.records,
        missing: r.missing,
        check: r.check,
        timed: manifest.map(|m| m.timed_calls.is_some()),
    };
    Ok((input, manifest.and_then(|m| m.shard.clone())))
}

/// A run's short name: the directory's name, or a records file's stem (`x_records.jsonl`
/// gives `x`).
fn label_of(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    let name = name
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| path.display().to_string());
    match name.strip_suffix("_records") {
        Some(s) if !s.is_empty() => s.to_string(),
        _ if name == "records" => path
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or(name),
        _ => name,
    }
}

/// The folder a run argument stands for, for telling two arguments that name one run apart:
/// a run folder, or the folder of its `records.jsonl`, links resolved.
fn run_identity(path: &Path) -> PathBuf {
    let p = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if p.is_file() && p.file_name().is_some_and(|n| n == crate::runlog::RECORDS) {
        if let Some(d) = p
            .parent()
            .filter(|d| d.join(crate::runlog::MANIFEST).exists())
        {
            return d.to_path_buf();
        }
    }
    p
}

/// Reads every run; labels that collide get `#2`, `#3` appended in order. The same folder
/// given again (by any path: another spelling, a link, its `records.jsonl`) is read once,
/// with a note. Two folders that hold one run are refused, since they would count every
/// evaluation twice: two copies of one run (the same run id), or a merged run beside one of
/// its shards; only distinct shards of one run may be reported side by side.
pub fn read_runs(paths: &[PathBuf], unverified_ok: bool) -> Result<Vec<RunInput>> {
    let mut runs: Vec<RunInput> = Vec::with_capacity(paths.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut folders: HashMap<PathBuf, &Path> = HashMap::new();
    let mut ids: HashMap<String, Vec<(Option<String>, &Path)>> = HashMap::new();
    for p in paths {
        let folder = run_identity(p);
        if let Some(first) = folders.get(&folder) {
            eprintln!(
                "kbench: note: {} and {} are the same run folder ({}): counted once",
                first.display(),
                p.display(),
                folder.display()
            );
            continue;
        }
        folders.insert(folder, p);
        let (mut run, shard) = read_run_and_shard(p, unverified_ok)?;
        if let Some(id) = run.run_id.clone().filter(|id| !id.is_empty()) {
            let same = ids.entry(id.clone()).or_default();
            let overlap = same
                .iter()
                .find(|(s, _)| shard.is_none() || s.is_none() || *s == shard);
            if let Some((_, first)) = overlap {
                bail!(
                    "{} and {} hold records of the same run (run id {id}): each run is reported once (distinct shards of one run aside); drop one of them",
                    first.display(),
                    p.display()
                );
            }
            same.push((shard, p));
        }
        let n = seen.entry(run.label.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            run.label = format!("{}#{}", run.label, n);
        }
        runs.push(run);
    }
    if runs
        .iter()
        .all(|r| r.records.is_empty() && r.missing.is_empty())
    {
        bail!("no eval records in the runs given: nothing to report");
    }
    Ok(runs)
}

/// Writes `text` to `path`, naming the file on failure.
/// `--ignore-flag`: records failed by one of `flags` count as their cases say, their outcome
/// becoming `ok` when every case they ran passed (at least one), with a note naming the flag
/// and its detail. Returns how many records changed. Flags not raised by any record are an
/// error only when unknown to kbench, so a typo is not silently ignored.
pub(crate) fn ignore_flags(runs: &mut [RunInput], flags: &[String]) -> Result<usize> {
    let known = crate::judge::integrity::FLAGS;
    for f in flags {
        if !known.contains(&f.as_str()) {
            anyhow::bail!(
                "--ignore-flag {f}: not an integrity flag kbench raises (known: {})",
                known.join(", ")
            );
        }
    }
    let mut changed = 0;
    for run in runs {
        for (r, _) in &mut run.records {
            let kbench_record::Outcome::Integrity { flag, detail } = &r.outcome else {
                continue;
            };
            if !flags.iter().any(|f| f == flag)
                || r.cases.is_empty()
                || r.cases.iter().any(|c| !c.passed)
            {
                continue;
            }
            r.notes.push(format!(
                "integrity flag {flag} ignored by --ignore-flag: {detail}"
            ));
            r.outcome = kbench_record::Outcome::Ok;
            changed += 1;
        }
    }
    Ok(changed)
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `kbench report`: the table of the runs (or one of a paper's), and the exports and plots
/// asked for.
pub fn command(a: ReportArgs) -> Result<i32> {
    use kbench_reports::task::Pick;
    use kbench_reports::{export, papers, plot};
    let mut runs = read_runs(&a.runs, a.unverified)?;
    ignore_flags_said(&mut runs, &a.ignore_flags)?;
    let default = if a.table.is_some() {
        BasisArg::Mean
    } else {
        BasisArg::Median
    };
    let pick = match a.pick {
        Some(PickArg::First) => Pick::FirstSample,
        Some(PickArg::Best) => Pick::BestCorrect,
        None if a.table == Some(TableArg::Kernelbench) => Pick::FirstSample,
        None => Pick::BestCorrect,
    };
    let report =
        kbench_reports::build_report_picking(&runs, basis(a.basis.unwrap_or(default)), pick);
    match a.table {
        Some(t) => {
            let table = match t {
                TableArg::Cudaforge => papers::PaperTable::CudaForge,
                TableArg::CudaAgent => papers::PaperTable::CudaAgent,
                TableArg::Kevin => papers::PaperTable::Kevin,
                TableArg::Kernelbench => papers::PaperTable::KernelBench,
            };
            print!("{}", papers::render_paper_table(&report, table, false));
        }
        None => print!("{}", export::render_terminal(&report)),
    }
    let exports = [
        (a.export_csv, export::render_csv as fn(&_) -> String),
        (a.export_json, export::render_json),
        (a.export_markdown, export::render_markdown),
    ];
    for (path, render) in exports {
        if let Some(path) = path {
            write_file(&path, &render(&report))?;
        }
    }
    if let Some(path) = &a.claims {
        claims_reports(&runs, path, report.basis, a.claims_out.as_deref())?;
    }
    if let Some(dir) = a.plots {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for p in plot::plots(&report) {
            let svg = plot::render_svg(&p)?;
            write_file(&dir.join(format!("{}.svg", p.name)), &svg)?;
            plot::write_png(&p, &dir.join(format!("{}.png", p.name)))?;
        }
    }
    Ok(exit::OK)
}

/// `kbench leaderboard`: the runs as one HTML page.
pub fn leaderboard(a: LeaderboardArgs) -> Result<i32> {
    let mut runs = read_runs(&a.runs, a.unverified)?;
    ignore_flags_said(&mut runs, &a.ignore_flags)?;
    let report = kbench_reports::build_report(&runs, basis(a.basis));
    let sections = match &a.claims {
        Some(path) => {
            let claims = read_claims(path)?;
            runs.iter()
                .map(|run| {
                    let c = build_claims_report(&claims, &run.label, &run.records, report.basis);
                    kbench_reports::claims::render_claims_html(&c)
                })
                .collect()
        }
        None => Vec::new(),
    };
    let page = kbench_reports::leaderboard::render_leaderboard_with(&report, &a.title, &sections)?;
    write_file(&a.out, &page)?;
    println!("leaderboard: {}", a.out.display());
    Ok(exit::OK)
}

fn read_claims(path: &Path) -> Result<ClaimsFile> {
    ClaimsFile::read(path).map_err(anyhow::Error::msg)
}

/// `--claims`: each run's claims report on stdout, and its files in `out` when asked.
fn claims_reports(
    runs: &[RunInput],
    path: &Path,
    basis: kbench_reports::SpeedupBasis,
    out: Option<&Path>,
) -> Result<()> {
    use kbench_reports::claims::{render_claims_csv, render_claims_markdown, render_claims_text};
    let claims = read_claims(path)?;
    for run in runs {
        let c = build_claims_report(&claims, &run.label, &run.records, basis);
        print!("{}", render_claims_text(&c));
        if let Some(dir) = out {
            let prefix = if runs.len() > 1 {
                format!("{}.", crate::runlog::sanitize(&run.label))
            } else {
                String::new()
            };
            let json = serde_json::to_string_pretty(&c)? + "\n";
            for (ext, text) in [
                ("md", render_claims_markdown(&c)),
                ("csv", render_claims_csv(&c)),
                ("json", json),
            ] {
                write_file(&dir.join(format!("{prefix}claims.{ext}")), &text)?;
            }
        }
    }
    if let Some(dir) = out {
        eprintln!("kbench: claims report written to {}", dir.display());
    }
    Ok(())
}

fn basis(b: BasisArg) -> kbench_reports::SpeedupBasis {
    match b {
        BasisArg::Median => kbench_reports::SpeedupBasis::Median,
        BasisArg::Mean => kbench_reports::SpeedupBasis::Mean,
    }
}

/// `--ignore-flag`, said on stderr so a table is never silently more generous.
fn ignore_flags_said(runs: &mut [RunInput], flags: &[String]) -> Result<()> {
    if flags.is_empty() {
        return Ok(());
    }
    let n = ignore_flags(runs, flags)?;
    eprintln!(
        "kbench: --ignore-flag {}: {n} flagged kernel(s) counted as their cases and timing say",
        flags.join(",")
    );
    Ok(())
}

#[cfg(test)]
mod ignore_flag_tests {
    use super::*;
    use kbench_record::{EvalRecord, Outcome};

    fn run() -> RunInput {
        let records: Vec<(EvalRecord, RecordExtras)> = crate::test_support::one_shot_records()
            .into_iter()
            .filter(|r| r.outcome.is_ok() && !r.cases.is_empty())
            .take(2)
            .map(|r| (r, RecordExtras::default()))
            .collect();
        assert_eq!(records.len(), 2);
        RunInput {
            label: "t".into(),
            path: "t".into(),
            records,
            ..RunInput::default()
        }
    }

    #[test]
    fn ignored_flags_count_as_the_cases_say_and_the_summary_counts_flags() {
        let mut runs = vec![run()];
        let flag = |r: &mut EvalRecord, f: &str| {
            r.outcome = Outcome::Integrity {
                flag: f.into(),
                detail: "none of the candidate's own kernels ran".into(),
            }
        };
        flag(&mut runs[0].records[0].0, "no-custom-kernel");
        flag(&mut runs[0].records[1].0, "no-custom-kernel");
        runs[0].records[1].0.cases[0].passed = false;

        let records: Vec<EvalRecord> = runs[0].records.iter().map(|(r, _)| r.clone()).collect();
        let s = kbench_reports::summarize(&records);
        assert_eq!(s.correct, 0);
        assert_eq!(s.flagged.get("no-custom-kernel"), Some(&2));
        let text = kbench_reports::render_summary(&s);
        assert!(
            text.contains(
                "flagged: 2 kernel(s), never counted correct or fast: no-custom-kernel (2)"
            ),
            "{text}"
        );

        assert_eq!(
            ignore_flags(&mut runs, &["output-replayed".into()]).unwrap(),
            0
        );
        assert_eq!(
            ignore_flags(&mut runs, &["no-custom-kernel".into()]).unwrap(),
            1
        );
        let (ok, _) = &runs[0].records[0];
        assert!(ok.outcome.is_ok());
        assert!(ok
            .notes
            .iter()
            .any(|n| n.starts_with("integrity flag no-custom-kernel ignored")));
        // A failed case keeps it failed, flag and all.
        assert!(!runs[0].records[1].0.outcome.is_ok());

        let e = ignore_flags(&mut runs, &["no-such-flag".into()]).unwrap_err();
        assert!(e.to_string().contains("not an integrity flag"), "{e}");
    }
}
