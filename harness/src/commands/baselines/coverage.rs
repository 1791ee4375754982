//! `kbench baselines show`'s coverage table: per store file and level, the problems with a
//! time, with a recorded failure (by outcome), stale, and with neither (gaps). The counting
//! is `kbench_baselines::coverage_of`; this file only prints.

use std::path::Path;

use anyhow::{Context, Result};
use kbench_baselines::{coverage_of, entries_of, BaselineFile, LevelCoverage};
use kbench_suites::{load_kernelbench, Problem, KERNELBENCH_LEVELS};

/// The problems of a KernelBench checkout (broken files are not problems a baseline could
/// time; they are named on stderr).
pub(crate) fn kernelbench_problems(dir: &Path) -> Result<Vec<Problem>> {
    let loaded = load_kernelbench(dir, &KERNELBENCH_LEVELS)
        .with_context(|| format!("reading the KernelBench problems in {}", dir.display()))?;
    let mut problems = Vec::new();
    for l in loaded {
        match l {
            kbench_suites::Loaded::Problem(p) => problems.push(p),
            kbench_suites::Loaded::Broken(b) => eprintln!(
                "kbench: {} ({}) is not a problem kbench can load, not counted: {}",
                b.key(),
                b.path.display(),
                b.reason
            ),
        }
    }
    Ok(problems)
}

/// Per file (with its GPU, torch and mode), the coverage of each level.
pub(crate) fn coverage(files: &[(String, BaselineFile)], problems: Option<&[Problem]>) -> Vec<Row> {
    files
        .iter()
        .map(|(path, f)| Row {
            path: path.clone(),
            gpu: f.meta.environment.gpu.clone(),
            torch: f.meta.environment.torch.clone(),
            mode: f.meta.mode.clone(),
            levels: match problems {
                Some(p) => coverage_of(f, p),
                None => entries_of(f),
            },
        })
        .collect()
}

#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Row {
    pub(crate) path: String,
    pub(crate) gpu: String,
    pub(crate) torch: String,
    pub(crate) mode: String,
    pub(crate) levels: Vec<LevelCoverage>,
}

/// The table, then (with `list_gaps`) every gap by name.
pub(crate) fn render(rows: &[Row], problems_from: Option<&Path>, list_gaps: bool) -> String {
    let mut out = String::new();
    match problems_from {
        Some(dir) => out.push_str(&format!(
            "\ncoverage of the problems in {} (measured + failed + stale + gaps = problems)\n",
            dir.display()
        )),
        None => out.push_str(
            "\ncoverage by each file's own entries (give --kernelbench DIR to count the problems with neither a time nor a reason)\n",
        ),
    }
    out.push_str(&format!(
        "{:<28} {:<16} {:<13} {:>5} {:>8} {:>8} {:>6} {:>5} {:>5}  failures\n",
        "gpu", "torch", "mode", "level", "problems", "measured", "failed", "stale", "gaps"
    ));
    let unknown = || "?".to_string();
    for r in rows {
        for c in &r.levels {
            let failures: Vec<String> = c.failed.iter().map(|(o, n)| format!("{o} {n}")).collect();
            out.push_str(
                format!(
                    "{:<28} {:<16} {:<13} {:>5} {:>8} {:>8} {:>6} {:>5} {:>5}  {}",
                    r.gpu,
                    r.torch,
                    r.mode,
                    format!("L{}", c.level),
                    c.problems.map_or_else(unknown, |n| n.to_string()),
                    c.measured,
                    c.failed_total(),
                    c.stale,
                    if c.problems.is_some() {
                        c.gaps.len().to_string()
                    } else {
                        unknown()
                    },
                    failures.join(", ")
                )
                .trim_end(),
            );
            out.push('\n');
        }
    }
    if problems_from.is_some() {
        let gaps: usize = rows
            .iter()
            .flat_map(|r| &r.levels)
            .map(|c| c.gaps.len())
            .sum();
        let stale: usize = rows.iter().flat_map(|r| &r.levels).map(|c| c.stale).sum();
        if rows
            .iter()
            .flat_map(|r| &r.levels)
            .all(LevelCoverage::complete)
        {
            out.push_str("every problem has a time or a recorded reason in every file\n");
        } else {
            out.push_str(&format!(
                "{gaps} gap(s) and {stale} stale entr(ies): `kbench baselines measure --modes MODE` fills them{}\n",
                if list_gaps { "" } else { "; --gaps lists them" }
            ));
        }
    }
    if list_gaps {
        for r in rows {
            for c in r.levels.iter().filter(|c| !c.gaps.is_empty()) {
                out.push_str(&format!(
                    "gaps of {} {} L{} ({}): {}\n",
                    r.gpu,
                    r.mode,
                    c.level,
                    c.gaps.len(),
                    c.gaps.join(" ")
                ));
            }
        }
    }
    out
}
