//! `kbench report` and `kbench leaderboard`: read run directories, hand their records to
//! `kbench-reports`, and write what it renders. Everything is derived from the run logs;
//! nothing else is read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::claims::ClaimsFile;
use kbench_record::EvalRecord;
use kbench_reports::claims::build_claims_report;
use kbench_reports::{RecordExtras, RunInput};
use serde_json::Value;

use crate::cli::{BasisArg, LeaderboardArgs, PickArg, ReportArgs, TableArg};
use crate::exit;
use crate::runlog::{RecordLog, Verifier, MANIFEST, RECORDS};

/// Reads one run: a run directory (its `records.jsonl`, and `run.json` when present) or a
/// records file itself. Records are deduplicated by their key, the last one winning (a log
/// that was resumed after a crash may repeat a key). Each line is verified against the run's
/// secret (`runlog::records`): a line that fails (bad or missing MAC, not JSON, truncated) is
/// named in a warning and skipped, never the whole run.
pub fn read_run(path: &Path) -> Result<RunInput> {
    let (records_path, manifest_path) = if path.is_dir() {
        (path.join(RECORDS), Some(path.join(MANIFEST)))
    } else {
        (path.to_path_buf(), None)
    };
    if !records_path.exists() {
        bail!(
            "{} has no {RECORDS}: pass a run directory written by `kbench run --out DIR` or a records file",
            path.display()
        );
    }
    // A manifest that cannot be read costs its two names only: the records carry them too.
    let manifest = manifest_path.filter(|m| m.exists()).and_then(|m| {
        let v = std::fs::read(&m)
            .map_err(anyhow::Error::from)
            .and_then(|b| Ok(serde_json::from_slice::<Value>(&b)?));
        v.map_err(|e| eprintln!("kbench: warning: {} is not a readable run manifest ({e}); the run's id and agent are taken from its records", m.display()))
            .ok()
    });
    let name = |k: &str| {
        manifest
            .as_ref()
            .and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (run_id, agent) = (name("run_id"), name("agent"));
    let verifier = if path.is_dir() {
        Verifier::of_run(path)
    } else {
        Verifier::of_records_file(&records_path)
    };
    let log = RecordLog::read(&records_path, &verifier)?;
    for w in log.warnings() {
        eprintln!("kbench: warning: {w}");
    }
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut records: Vec<(EvalRecord, RecordExtras)> = Vec::new();
    for line in log.lines {
        // The line parsed when it was read; only the optional fields are read again.
        let value: Value = serde_json::from_str(&line.text).unwrap_or(Value::Null);
        let extras = RecordExtras::from_json(&value);
        let record = line.record;
        let key = record.key();
        match by_key.get(&key) {
            Some(&at) => records[at] = (record, extras),
            None => {
                by_key.insert(key, records.len());
                records.push((record, extras));
            }
        }
    }
    let agent = agent.or_else(|| records.first().map(|(r, _)| r.candidate.agent.clone()));
    let run_id = run_id.or_else(|| records.first().map(|(r, _)| r.run_id.clone()));
    Ok(RunInput {
        label: label_of(path),
        path: path.display().to_string(),
        run_id,
        agent,
        records,
    })
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

/// Reads every run; labels that collide get `#2`, `#3` appended in order.
pub fn read_runs(paths: &[PathBuf]) -> Result<Vec<RunInput>> {
    let mut runs = Vec::with_capacity(paths.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for p in paths {
        let mut run = read_run(p)?;
        let n = seen.entry(run.label.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            run.label = format!("{}#{}", run.label, n);
        }
        runs.push(run);
    }
    if runs.iter().all(|r| r.records.is_empty()) {
        bail!("no eval records in the runs given: nothing to report");
    }
    Ok(runs)
}

/// Writes `text` to `path`, naming the file on failure.
/// `--ignore-flag`: records failed by one of `flags` count as their cases say, their outcome
/// becoming `ok` when every case they ran passed (at least one), with a note naming the flag
/// and its detail. Returns how many records changed. Flags not raised by any record are an
/// error only when unknown to kbench, so a typo is not silently ignored.
pub fn ignore_flags(runs: &mut [RunInput], flags: &[String]) -> Result<usize> {
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

pub fn write_file(path: &Path, text: &str) -> Result<()> {
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
    let mut runs = read_runs(&a.runs)?;
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
    let mut runs = read_runs(&a.runs)?;
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
            run_id: None,
            agent: None,
            records,
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
