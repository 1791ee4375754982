//! One eval record as a per-case table (`kbench check`'s output, and what the agents show a
//! model of one checked kernel): each case with its verdict, error statistics, the
//! tolerance it needs and, where a case did not apply or a denormal result was flushed, why;
//! the NaN/Inf rulings (a failed rule's element and values, reference artefacts accepted);
//! then the verdicts under `random` alone and under every family. Formats only: every
//! number is already in the record.

use kbench_record::{CaseFamily, EvalRecord};

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The per-case table and the verdicts under `random` alone and under every family.
pub fn render_case_table(r: &EvalRecord) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "case".into(),
        "verdict".into(),
        "max abs".into(),
        "max rel".into(),
        "tol needed".into(),
        "rel L2 vs f64".into(),
        "note".into(),
    ]];
    // The NaN/Inf rulings, below the table: one line each.
    let mut rulings = Vec::new();
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
        if let Some(d) = &c.detail {
            rulings.push(format!("{}: {d}", c.case));
        }
        if let Some(a) = &c.artefacts {
            rulings.push(format!(
                "{}: {} element(s) accepted as reference artefacts, first at {:?} of output {}: the reference is NaN/Inf there only through its own algorithm (e.g. 0·NaN in a matmul); the element does not depend on the injected NaN/Inf inputs and the candidate matches the reference run with finite probes in their place",
                c.case, a.count, a.first_index, a.output
            ));
        }
        let measured = c.not_applicable.is_none() && c.elements > 0;
        rows.push([
            c.case.to_string(),
            verdict.into(),
            if measured { sci(c.max_abs) } else { "-".into() },
            if measured { sci(c.max_rel) } else { "-".into() },
            c.tol_needed.filter(|_| measured).map_or("-".into(), sci),
            c.rel_l2_vs_f64.filter(|_| measured).map_or("-".into(), sci),
            note,
        ]);
    }
    let widths: Vec<usize> = (0..6)
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
            if i < 6 {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if !rulings.is_empty() {
        out.push('\n');
        for line in &rulings {
            out.push_str(line);
            out.push('\n');
        }
    }
    let random_ok = crate::task::correct_on_random(r);
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
                if r.below_speed_of_light(crate::summary::SOL_SLACK) {
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
        if let Some(d) = &ig.mode_switch {
            out.push_str(&format!("mode-switch: {d}\n"));
            out.push_str(match ig.eval_mode_correct {
                Some(true) => "with both models in eval mode (.eval()) it is correct: correct only in eval mode (kbench run --model-mode eval)\n",
                Some(false) => "with both models in eval mode (.eval()) it is wrong too\n",
                None => "",
            });
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
