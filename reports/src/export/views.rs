//! The tables of a run's report, as [`Grid`]s, and [`SECTIONS`], the one list of them that the
//! terminal and Markdown renderers walk.

use super::fmt::{pct, rate_ci, speedup, speedup_ci, Grid};
use crate::metrics::FAST_P;
use crate::report::RunReport;

/// One table of a run's report.
pub(crate) struct Section {
    /// Its Markdown heading.
    pub title: &'static str,
    /// Its table, or `None` when the run has nothing for it (the section is then left out).
    pub build: fn(&RunReport) -> Option<Grid>,
    /// Whether the terminal report shows it (the per-problem table is Markdown's alone).
    pub in_terminal: bool,
}

/// A run's tables, in the order both renderers print them (CONTRIBUTING.md, "Adding a
/// report table").
pub(crate) const SECTIONS: &[Section] = &[
    Section {
        title: "Correctness",
        build: |run| Some(correctness(run)),
        in_terminal: true,
    },
    Section {
        title: "Speedups",
        build: |run| Some(speedups(run)),
        in_terminal: true,
    },
    Section {
        title: "Correctness by case family",
        build: families,
        in_terminal: true,
    },
    Section {
        title: "Trajectories (Kevin)",
        build: kevin,
        in_terminal: true,
    },
    Section {
        title: "Cost and time per task",
        build: |run| Some(cost(run)),
        in_terminal: true,
    },
    Section {
        title: "Integrity flags",
        build: integrity,
        in_terminal: true,
    },
    Section {
        title: "Problems",
        build: |run| Some(problems(run)),
        in_terminal: false,
    },
];

/// One line under the run's title: what was evaluated and how.
pub(crate) fn run_line(run: &RunReport) -> String {
    let join = |v: &[String]| {
        if v.is_empty() {
            "-".into()
        } else {
            v.join(",")
        }
    };
    format!(
        "agent {}; device {}; precision {}; profile {}; {} records",
        run.agent.as_deref().unwrap_or("?"),
        join(&run.devices),
        join(&run.precisions),
        join(&run.profiles),
        run.records
    )
}

/// Per scope: task counts and correctness (rates with Wilson intervals).
fn correctness(run: &RunReport) -> Grid {
    let mut g = Grid::new(&[
        "scope",
        "tasks",
        "candidates",
        "compiled",
        "correct (all families)",
        "correct (random only)",
        "pass@k",
    ]);
    for s in &run.scopes {
        let pass = s
            .pass_at_k
            .iter()
            .map(|(k, p)| format!("@{k} {}", pct(*p)))
            .collect::<Vec<_>>()
            .join(", ");
        g.row(vec![
            s.scope.clone(),
            s.tasks.to_string(),
            s.candidates.to_string(),
            pct(s.compiled.value),
            rate_ci(&s.correct),
            rate_ci(&s.correct_random),
            pass,
        ]);
    }
    g
}

/// Per scope and baseline: fast_p, geomean over correct, and CudaForge's zero-filled stats.
fn speedups(run: &RunReport) -> Grid {
    let mut header: Vec<String> = vec!["scope".into(), "vs".into(), "timed".into()];
    header.extend(FAST_P.iter().map(|p| format!("fast_{p}")));
    header.extend(
        [
            "geomean (correct)",
            "mean (0 if wrong)",
            "median (0 if wrong)",
            "p75 (0 if wrong)",
        ]
        .map(String::from),
    );
    let refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut g = Grid::new(&refs);
    for s in &run.scopes {
        if !run.timed {
            let mut row = vec![s.scope.clone(), "-".into(), "not timed".into()];
            row.resize(refs.len(), "not timed".into());
            g.row(row);
        }
        for b in &s.baselines {
            let mut row = vec![
                s.scope.clone(),
                b.baseline.as_str().to_string(),
                b.timed.to_string(),
            ];
            row.extend(b.fast_p.iter().map(|f| pct(f.rate.value)));
            let z = b.zero_filled.as_ref();
            row.push(speedup_ci(b.geomean.as_ref()));
            row.push(speedup_ci(z.map(|z| &z.mean)));
            row.push(speedup_ci(z.map(|z| &z.median)));
            row.push(speedup_ci(z.map(|z| &z.p75)));
            g.row(row);
        }
    }
    g
}

/// Per case family, over candidates that ran it; `None` when no candidate ran one.
fn families(run: &RunReport) -> Option<Grid> {
    if run.families.is_empty() {
        return None;
    }
    let mut g = Grid::new(&["case family", "passed", "ran", "pass rate"]);
    for f in &run.families {
        g.row(vec![
            f.family.clone(),
            f.passed.count.to_string(),
            f.passed.n.to_string(),
            rate_ci(&f.passed),
        ]);
    }
    Some(g)
}

/// Kevin's best@k / avg@k, for runs with more than one trajectory per task.
fn kevin(run: &RunReport) -> Option<Grid> {
    if run.scopes.iter().all(|s| s.kevin.k <= 1) {
        return None;
    }
    let mut g = Grid::new(&[
        "scope",
        "k",
        "correct best@k",
        "correct avg@k",
        "perf best@k",
        "perf avg@k",
        "fast_1 best@k",
        "fast_1 avg@k",
        "fast_1.5 best@k",
        "fast_1.5 avg@k",
    ]);
    for s in &run.scopes {
        let k = &s.kevin;
        let mut row = vec![
            s.scope.clone(),
            k.k.to_string(),
            pct(k.correct_best),
            pct(k.correct_avg),
        ];
        if run.timed {
            row.extend([speedup(Some(k.perf_best)), speedup(Some(k.perf_avg))]);
            for (_, best, avg) in &k.fast {
                row.push(pct(*best));
                row.push(pct(*avg));
            }
        } else {
            row.resize(10, "not timed".into());
        }
        g.row(row);
    }
    Some(g)
}

/// Time per task: the harness's evaluation minutes always, and the agent's tokens, dollars,
/// wall and GPU minutes when its records carry a `cost`.
fn cost(run: &RunReport) -> Grid {
    let any_cost = run.scopes.iter().any(|s| s.cost.tasks_with_cost > 0);
    let mut header = vec!["scope", "eval min/task"];
    if any_cost {
        header.extend([
            "tasks with cost",
            "tokens/task",
            "$/task",
            "agent min/task",
            "GPU min/task",
        ]);
    }
    let mut g = Grid::new(&header);
    let num = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
    };
    for s in &run.scopes {
        let c = &s.cost;
        let mut row = vec![s.scope.clone(), num(c.eval_min_per_task, 2)];
        if any_cost {
            row.extend([
                c.tasks_with_cost.to_string(),
                num(c.tokens_per_task, 0),
                num(c.usd_per_task, 3),
                num(c.agent_wall_min_per_task, 1),
                num(c.gpu_min_per_task, 1),
            ]);
        }
        g.row(row);
    }
    g
}

/// Integrity flags, one per candidate and flag.
fn integrity(run: &RunReport) -> Option<Grid> {
    if run.integrity.is_empty() {
        return None;
    }
    let mut g = Grid::new(&["problem", "candidate", "flag"]);
    for i in &run.integrity {
        g.row(vec![i.problem.clone(), i.candidate.clone(), i.flag.clone()]);
    }
    Some(g)
}

/// Per problem: outcome and speedups, with the eager speedup's interval from its samples.
fn problems(run: &RunReport) -> Grid {
    let mut g = Grid::new(&[
        "problem",
        "name",
        "candidates",
        "outcome",
        "speedup vs eager [95% CI]",
        "vs compile",
        "vs max-autotune",
        "flags",
    ]);
    for p in &run.problems {
        let eager = match (p.speedup, p.interval) {
            (Some(_), Some(e)) => speedup_ci(Some(&e)),
            (s, _) => speedup(s),
        };
        g.row(vec![
            p.key.clone(),
            p.name.clone(),
            p.candidates.to_string(),
            p.outcome.clone(),
            eager,
            speedup(p.compile_speedup),
            speedup(p.max_autotune_speedup),
            p.flags.join(","),
        ]);
    }
    g
}
