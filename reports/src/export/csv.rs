//! `--export-csv`: every headline metric as one tidy row (`run, scope, baseline, metric,
//! value, low, high, count, n`), ready for pandas or a spreadsheet. Rates are fractions in
//! [0, 1]; `low`/`high` are 95% intervals (Wilson for rates, bootstrap for speedups);
//! `count`/`n` are the numerator and denominator of a rate. Empty cells mean "not defined".

use super::shown_label;
use crate::completeness::Verification;
use crate::metrics::ScopeMetrics;
use crate::report::{Report, RunReport};
use crate::stats::{Estimate, Rate};

/// One CSV row before writing.
struct Row<'a> {
    run: &'a str,
    scope: &'a str,
    baseline: &'a str,
    metric: String,
    value: Option<f64>,
    low: Option<f64>,
    high: Option<f64>,
    count: Option<usize>,
    n: Option<usize>,
}

fn rate<'a>(run: &'a str, scope: &'a str, baseline: &'a str, metric: String, r: &Rate) -> Row<'a> {
    Row {
        run,
        scope,
        baseline,
        metric,
        value: Some(r.value),
        low: Some(r.low),
        high: Some(r.high),
        count: Some(r.count),
        n: Some(r.n),
    }
}

fn estimate<'a>(
    run: &'a str,
    scope: &'a str,
    baseline: &'a str,
    metric: &str,
    e: Option<&Estimate>,
) -> Row<'a> {
    Row {
        run,
        scope,
        baseline,
        metric: metric.to_string(),
        value: e.map(|e| e.value),
        low: e.map(|e| e.low),
        high: e.map(|e| e.high),
        count: None,
        n: None,
    }
}

fn value<'a>(run: &'a str, scope: &'a str, metric: &str, v: Option<f64>) -> Row<'a> {
    Row {
        run,
        scope,
        baseline: "",
        metric: metric.to_string(),
        value: v,
        low: None,
        high: None,
        count: None,
        n: None,
    }
}

fn scope_rows<'a>(run: &'a str, s: &'a ScopeMetrics, timed: bool, out: &mut Vec<Row<'a>>) {
    let scope = s.scope.as_str();
    out.push(value(run, scope, "tasks", Some(s.tasks as f64)));
    out.push(value(run, scope, "candidates", Some(s.candidates as f64)));
    out.push(rate(run, scope, "", "compiled".into(), &s.compiled));
    out.push(rate(run, scope, "", "correct".into(), &s.correct));
    out.push(rate(
        run,
        scope,
        "",
        "correct_random".into(),
        &s.correct_random,
    ));
    for b in &s.baselines {
        let name = b.baseline.as_str();
        for f in &b.fast_p {
            out.push(rate(run, scope, name, format!("fast_{}", f.p), &f.rate));
        }
        out.push(estimate(
            run,
            scope,
            name,
            "geomean_correct",
            b.geomean.as_ref(),
        ));
        if s.level.is_none() {
            out.push(Row {
                baseline: name,
                ..value(
                    run,
                    scope,
                    "geomean_level_weighted",
                    b.geomean_level_weighted,
                )
            });
        }
        let z = b.zero_filled.as_ref();
        out.push(estimate(
            run,
            scope,
            name,
            "mean_zero_filled",
            z.map(|z| &z.mean),
        ));
        out.push(estimate(
            run,
            scope,
            name,
            "median_zero_filled",
            z.map(|z| &z.median),
        ));
        out.push(estimate(
            run,
            scope,
            name,
            "p75_zero_filled",
            z.map(|z| &z.p75),
        ));
    }
    let k = &s.kevin;
    out.push(value(run, scope, "kevin_k", Some(k.k as f64)));
    out.push(value(
        run,
        scope,
        "kevin_correct_best",
        Some(k.correct_best),
    ));
    out.push(value(run, scope, "kevin_correct_avg", Some(k.correct_avg)));
    // An untimed run has no speedups: no rows of them, never zeros.
    let fast = if timed { &k.fast[..] } else { &[] };
    let perf = |v: f64| timed.then_some(v);
    out.push(value(run, scope, "kevin_perf_best", perf(k.perf_best)));
    out.push(value(run, scope, "kevin_perf_avg", perf(k.perf_avg)));
    for (p, best, avg) in fast {
        out.push(value(
            run,
            scope,
            &format!("kevin_fast_{p}_best"),
            Some(*best),
        ));
        out.push(value(
            run,
            scope,
            &format!("kevin_fast_{p}_avg"),
            Some(*avg),
        ));
    }
    let c = &s.cost;
    out.push(value(run, scope, "tokens_per_task", c.tokens_per_task));
    out.push(value(run, scope, "usd_per_task", c.usd_per_task));
    out.push(value(
        run,
        scope,
        "agent_wall_min_per_task",
        c.agent_wall_min_per_task,
    ));
    out.push(value(run, scope, "gpu_min_per_task", c.gpu_min_per_task));
    out.push(value(run, scope, "eval_min_per_task", c.eval_min_per_task));
}

/// The run's records check (scope `all`): `records_planned` and `records_missing` (empty
/// without a plan), `records_recorded`, `records_invalid`, `records_truncated`,
/// `records_duplicate`, `records_unplanned`, and `verified` (1: run.json and every line;
/// 0.5: record lines only, an older run.json; 0: UNVERIFIED, nothing checked); `timed` (0 for
/// a run made with --no-timing, which has no speedup rows).
fn check_rows<'a>(run: &'a str, r: &RunReport, out: &mut Vec<Row<'a>>) {
    let c = &r.records_check;
    let n = |v: usize| Some(v as f64);
    out.push(value(
        run,
        "all",
        "records_planned",
        c.planned.map(|v| v as f64),
    ));
    out.push(value(run, "all", "records_recorded", n(c.recorded)));
    out.push(value(
        run,
        "all",
        "records_missing",
        c.missing.map(|v| v as f64),
    ));
    out.push(value(run, "all", "records_invalid", n(c.invalid)));
    out.push(value(run, "all", "records_truncated", n(c.truncated)));
    out.push(value(run, "all", "records_duplicate", n(c.duplicates)));
    out.push(value(run, "all", "records_unplanned", n(c.unplanned)));
    let verified = match c.verification {
        Verification::Verified => 1.0,
        Verification::RecordsOnly => 0.5,
        Verification::Unverified => 0.0,
    };
    out.push(value(run, "all", "verified", Some(verified)));
    out.push(value(
        run,
        "all",
        "timed",
        Some(f64::from(u8::from(r.timed))),
    ));
}

/// The report's metrics as CSV (RFC 4180 quoting through the `csv` crate). A run read
/// unverified is labelled `<label> (UNVERIFIED)` in every row.
pub fn render_csv(report: &Report) -> String {
    let labels: Vec<String> = report.runs.iter().map(shown_label).collect();
    let mut rows = Vec::new();
    for (run, label) in report.runs.iter().zip(&labels) {
        check_rows(label, run, &mut rows);
        for s in &run.scopes {
            scope_rows(label, s, run.timed, &mut rows);
        }
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    let cell = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let count = |v: Option<usize>| v.map(|v| v.to_string()).unwrap_or_default();
    let header = [
        "run", "scope", "baseline", "metric", "value", "low", "high", "count", "n",
    ];
    w.write_record(header).expect("writing to memory");
    for r in rows {
        w.write_record([
            r.run.to_string(),
            r.scope.to_string(),
            r.baseline.to_string(),
            r.metric,
            cell(r.value),
            cell(r.low),
            cell(r.high),
            count(r.count),
            count(r.n),
        ])
        .expect("writing to memory");
    }
    String::from_utf8(w.into_inner().expect("writing to memory")).expect("CSV of UTF-8 cells")
}
