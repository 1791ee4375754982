//! `kbench check --problem P --kernel K`: one kernel, every case family, a per-case table —
//! the way a reviewer checks one correctness claim.
//!
//! The kernel goes through the same engine as `kbench run` (separate trusted reference
//! process, verdicts in Rust, the same case families and tolerance profiles); only the
//! output differs: each case with its verdict, error statistics and, where a case did not
//! apply or a denormal result was flushed, why.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kbench_record::{CaseFamily, EvalRecord};

use crate::cli::{CheckArgs, SuiteArgs};
use crate::config::AgentConfig;

/// Runs the check; exit code 0 when the kernel is correct under every family that applies,
/// 3 (kernels failed, as for `kbench run`) otherwise.
pub fn command(a: &CheckArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    if !a.kernel.is_file() {
        bail!(
            "kernel file {} not found: pass the candidate module (defining class ModelNew) with --kernel",
            a.kernel.display()
        );
    }
    let temp = tempfile::tempdir().context("creating a temporary folder")?;
    let out = match &a.out {
        Some(o) => o.clone(),
        None => temp.path().join("run"),
    };
    let suite = SuiteArgs {
        problem: Some(a.problem.clone()),
        ..SuiteArgs::default()
    };
    // The replay agent takes `<id>_<label>.py`: the kernel is copied under that name.
    let replay = temp.path().join("kernel");
    std::fs::create_dir_all(&replay)?;
    let mut config = crate::commands::run_config::build(
        &suite,
        &a.python,
        &a.eval,
        AgentConfig::Replay {
            dir: replay.clone(),
        },
        &out,
        None,
    )?;
    config.quiet = true;
    let problem = config.problems[0].clone();
    let stem = a
        .kernel
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("kernel")
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
    let prefix = format!("{}_", problem.id);
    let name = if stem.starts_with(&prefix) {
        stem
    } else {
        format!("{prefix}{stem}")
    };
    std::fs::copy(&a.kernel, replay.join(format!("{name}.py")))
        .with_context(|| format!("reading {}", a.kernel.display()))?;
    let result = crate::exec::run(&config, stop)?;
    let Some(record) = result.records.last() else {
        bail!("the run recorded nothing (interrupted?)");
    };
    print!("{}", render(record));
    if a.out.is_some() {
        println!("run directory: {}", result.run_dir.display());
    }
    Ok(if record.outcome.is_ok() {
        crate::exit::OK
    } else {
        crate::exit::KERNELS_FAILED
    })
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The per-case table and the verdicts under `random` alone and under every family.
pub fn render(r: &EvalRecord) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "case".into(),
        "verdict".into(),
        "max abs".into(),
        "max rel".into(),
        "rel L2 vs f64".into(),
        "note".into(),
    ]];
    let sci = |x: f64| {
        if x >= f64::MAX {
            "inf".to_string()
        } else {
            format!("{x:.2e}")
        }
    };
    let failing_case = match &r.outcome {
        kbench_record::Outcome::Mismatch { case, rule, .. } => Some((case.clone(), rule.clone())),
        _ => None,
    };
    for c in &r.cases {
        let verdict = if c.not_applicable.is_some() {
            "n/a"
        } else if c.passed {
            "pass"
        } else {
            "FAIL"
        };
        let mut note = c.not_applicable.clone().unwrap_or_default();
        if let Some(f) = &c.flush {
            note = format!(
                "{} of {} subnormal results returned as 0{}",
                f.zeroed,
                f.subnormal,
                if f.flushed() {
                    " (flushed to zero)"
                } else {
                    ""
                }
            );
        }
        if let Some((case, rule)) = &failing_case {
            if *case == c.case && !c.passed {
                note = format!("{rule}{}", if note.is_empty() { "" } else { "; " }) + &note;
            }
        }
        let measured = c.not_applicable.is_none() && c.elements > 0;
        rows.push([
            c.case.to_string(),
            verdict.into(),
            if measured { sci(c.max_abs) } else { "-".into() },
            if measured { sci(c.max_rel) } else { "-".into() },
            c.rel_l2_vs_f64.filter(|_| measured).map_or("-".into(), sci),
            note,
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "{} {} · {} · profile {} · {}\n\n",
        r.problem.key(),
        r.problem.name,
        r.candidate.name,
        r.profile,
        r.precision
    );
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i < 5 {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let random_ok = kbench_reports::correct_on_random(r);
    let mut failing: Vec<String> = r
        .cases
        .iter()
        .filter(|c| !c.passed && c.case.family != CaseFamily::Random)
        .map(|c| c.case.family.to_string())
        .collect();
    failing.dedup();
    let na: Vec<String> = r
        .cases
        .iter()
        .filter(|c| c.not_applicable.is_some())
        .map(|c| c.case.family.to_string())
        .collect();
    out.push('\n');
    out.push_str(&format!("outcome: {}\n", r.outcome));
    out.push_str(&format!(
        "correct under random (KernelBench's check): {}\n",
        yes_no(random_ok)
    ));
    out.push_str(&format!(
        "correct under every family that applies: {}{}\n",
        yes_no(r.outcome.is_ok()),
        if failing.is_empty() {
            String::new()
        } else {
            format!(" (fails: {})", failing.join(", "))
        }
    ));
    if !na.is_empty() {
        out.push_str(&format!("not applicable here: {}\n", na.join(", ")));
    }
    if let Some(t) = &r.timing {
        out.push_str(&format!(
            "speedup over the reference: {:.3}x (median of paired rounds)\n",
            t.speedup
        ));
    }
    if let Some(s) = &r.speed_of_light {
        out.push_str(&format!("{s}\n"));
        if let Some(x) = r.sol_ratio() {
            out.push_str(&format!(
                "this kernel's median time is {x:.2}x the speed of light{}\n",
                if r.below_speed_of_light(kbench_reports::SOL_SLACK) {
                    " (BELOW the physical limit: the kernel skips work or the timing is wrong)"
                } else {
                    ""
                }
            ));
        }
    }
    if let Some(ig) = &r.integrity {
        if !ig.advisories.is_empty() {
            out.push_str(&format!(
                "integrity advisories: {}\n",
                ig.advisories.join(", ")
            ));
        }
        if let Some(k) = &ig.kernels {
            out.push_str(&format!(
                "device time of one call: {:.0}% own kernels, {:.0}% library ({}), {:.0}% other\n",
                100.0 * k.own_fraction,
                100.0 * k.library_fraction,
                k.library
                    .iter()
                    .take(2)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                100.0 * k.other_fraction
            ));
        }
    }
    out
}
