//! `--table` presets: a report in the shape of each paper's results table, so a run can be
//! set beside the published numbers. Each preset reads the report; the metric definitions are
//! in [`crate::metrics`].

use crate::export::{pct, records_line, shown_label, speedup, unverified_banner, Grid};
use crate::metrics::ScopeMetrics;
use crate::report::Report;
use crate::task::Baseline;

/// Which paper's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaperTable {
    /// CudaForge (arXiv 2511.01884) Tables 1–2: Correct, Median, 75%, Perf, Fast1 vs eager,
    /// failures as speedup 0; and its cost: dollars and agent minutes per task (from the
    /// records' `cost`, `-` for runs without one).
    CudaForge,
    /// CUDA Agent (arXiv 2602.24286) Table 1: Pass, Faster vs Eager / Compile, Geomean vs
    /// Eager / Compile over correct tasks, Overall weighted by level task counts.
    CudaAgent,
    /// Kevin (arXiv 2507.11948) Table 1: correctness, performance, fast_1 and fast_1.5 as
    /// best@k and avg@k over trajectories.
    Kevin,
    /// KernelBench (`scripts/benchmark_eval_analysis.py`): compiled, correct, fast_p and
    /// geomean over correct, per level and baseline.
    KernelBench,
}

impl PaperTable {
    pub fn name(self) -> &'static str {
        match self {
            PaperTable::CudaForge => "cudaforge",
            PaperTable::CudaAgent => "cuda-agent",
            PaperTable::Kevin => "kevin",
            PaperTable::KernelBench => "kernelbench",
        }
    }

    fn source(self) -> &'static str {
        match self {
            PaperTable::CudaForge => {
                "CudaForge (arXiv 2511.01884), Tables 1-2: per task the fastest correct kernel vs \
                 PyTorch eager, 0 if none; Perf/Median/75% over all tasks; Fast1 = best > 1 over \
                 all tasks; $/task and Min/task = the agent's model spend and wall minutes, mean \
                 over tasks with a recorded cost"
            }
            PaperTable::CudaAgent => {
                "CUDA Agent (arXiv 2602.24286), Table 1: Faster = correct and faster (>) over all \
                 tasks; Geomean over correct tasks; Overall = level geomeans weighted by task count"
            }
            PaperTable::Kevin => {
                "Kevin (arXiv 2507.11948), Table 1: per trajectory the fastest correct kernel vs \
                 eager (0 if none); best@k = max, avg@k = mean over trajectories; mean over tasks; \
                 fast_p uses >= p"
            }
            PaperTable::KernelBench => {
                "KernelBench scripts/benchmark_eval_analysis.py: fast_p = correct and speedup > p \
                 over all tasks; geomean over correct tasks only; pass@k (Chen et al.) over all \
                 samples"
            }
        }
    }
}

/// What a speedup cell of a run made with `--no-timing` says.
const NOT_TIMED: &str = "not timed";

fn scope_name(s: &ScopeMetrics) -> String {
    match s.level {
        Some(l) => format!("Level {l} ({})", s.tasks),
        None => format!("Overall ({})", s.tasks),
    }
}

fn cudaforge(report: &Report) -> Grid {
    let mut g = Grid::new(&[
        "Run", "Level", "Correct", "Median", "75%", "Perf", "Fast1", "$/task", "Min/task",
    ]);
    for run in &report.runs {
        for s in &run.scopes {
            let b = s.baseline(Baseline::Eager);
            let z = b.and_then(|b| b.zero_filled.as_ref());
            let fast1 = b.and_then(|b| b.fast_p.iter().find(|f| f.p == 1.0));
            let num = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.3}"));
            let timed = |v: String| if run.timed { v } else { NOT_TIMED.into() };
            g.row(vec![
                shown_label(run),
                scope_name(s),
                pct(s.correct.value),
                timed(num(z.map(|z| z.median.value))),
                timed(num(z.map(|z| z.p75.value))),
                timed(num(z.map(|z| z.mean.value))),
                timed(fast1.map_or_else(|| "-".into(), |f| pct(f.rate.value))),
                num(s.cost.usd_per_task),
                s.cost
                    .agent_wall_min_per_task
                    .map_or_else(|| "-".into(), |m| format!("{m:.1}")),
            ]);
        }
    }
    g
}

fn cuda_agent(report: &Report) -> Grid {
    let mut g = Grid::new(&[
        "Subset",
        "Run",
        "Pass",
        "Faster vs Eager",
        "Faster vs Compile",
        "Geomean vs Eager",
        "Geomean vs Compile",
    ]);
    for run in &report.runs {
        // The paper lists Overall first, then the levels.
        let mut scopes: Vec<&ScopeMetrics> = run.scopes.iter().collect();
        scopes.rotate_right(1);
        for s in scopes {
            let faster = |b: Baseline| {
                s.baseline(b)
                    .and_then(|m| m.fast_p.iter().find(|f| f.p == 1.0))
                    .map_or_else(|| "-".into(), |f| pct(f.rate.value))
            };
            let geomean = |b: Baseline| {
                let m = s.baseline(b);
                let g = match s.level {
                    Some(_) => m.and_then(|m| m.geomean.map(|g| g.value)),
                    None => m.and_then(|m| m.geomean_level_weighted),
                };
                g.map_or_else(|| "-".into(), |g| format!("{g:.2}x"))
            };
            let mut row = vec![scope_name(s), shown_label(run), pct(s.correct.value)];
            if run.timed {
                row.extend([
                    faster(Baseline::Eager),
                    faster(Baseline::Compile),
                    geomean(Baseline::Eager),
                    geomean(Baseline::Compile),
                ]);
            } else {
                row.resize(7, NOT_TIMED.into());
            }
            g.row(row);
        }
    }
    g
}

fn kevin(report: &Report) -> Grid {
    let mut g = Grid::new(&[
        "Run",
        "k",
        "Correct best@k",
        "Correct avg@k",
        "Perf best@k",
        "Perf avg@k",
        "fast1 best",
        "fast1 avg",
        "fast1.5 best",
        "fast1.5 avg",
    ]);
    for run in &report.runs {
        let Some(s) = run.scope("all") else { continue };
        let k = &s.kevin;
        let mut row = vec![
            shown_label(run),
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
            row.resize(10, NOT_TIMED.into());
        }
        g.row(row);
    }
    g
}

fn kernelbench(report: &Report) -> Grid {
    let mut header = vec!["Run", "Level", "vs", "compiled", "correct"];
    let fast: Vec<String> = crate::metrics::FAST_P
        .iter()
        .map(|p| format!("fast_{p}"))
        .collect();
    header.extend(fast.iter().map(String::as_str));
    header.push("geomean (correct)");
    header.push("pass@k (all samples)");
    let mut g = Grid::new(&header);
    for run in &report.runs {
        for s in &run.scopes {
            if !run.timed {
                let mut row = vec![
                    shown_label(run),
                    scope_name(s),
                    "not timed".into(),
                    pct(s.compiled.value),
                    pct(s.correct.value),
                ];
                row.resize(header.len(), NOT_TIMED.into());
                g.row(row);
            }
            for b in &s.baselines {
                let mut row = vec![
                    shown_label(run),
                    scope_name(s),
                    b.baseline.as_str().to_string(),
                    pct(s.compiled.value),
                    pct(s.correct.value),
                ];
                row.extend(b.fast_p.iter().map(|f| pct(f.rate.value)));
                row.push(speedup(b.geomean.map(|g| g.value)));
                row.push(
                    s.pass_at_k
                        .iter()
                        .map(|(k, p)| format!("@{k} {}", pct(*p)))
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                g.row(row);
            }
        }
    }
    g
}

/// The report as `table`'s paper shapes it, with a line naming the definition's source.
pub fn render_paper_table(report: &Report, table: PaperTable, markdown: bool) -> String {
    let grid = match table {
        PaperTable::CudaForge => cudaforge(report),
        PaperTable::CudaAgent => cuda_agent(report),
        PaperTable::Kevin => kevin(report),
        PaperTable::KernelBench => kernelbench(report),
    };
    let body = if markdown {
        grid.markdown()
    } else {
        grid.text()
    };
    let banner = unverified_banner(report)
        .map(|b| format!("{b}\n\n"))
        .unwrap_or_default();
    let checks: String = report
        .runs
        .iter()
        .map(|run| {
            format!(
                "{}: {}\n",
                shown_label(run),
                records_line(&run.records_check)
            )
        })
        .collect();
    format!(
        "{banner}{body}\n{}; speedups on the {} basis; task = {}.\n{checks}",
        table.source(),
        report.basis.as_str(),
        report.pick.as_str()
    )
}
