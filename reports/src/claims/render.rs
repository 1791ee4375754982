//! The claims report as text, Markdown, CSV and an HTML section of the leaderboard page
//! (maud, escaped by construction, like the page). Formatting only: every decision was made
//! in [`super::build_claims_report`]. JSON is the report's serde form
//! (`serde_json::to_string_pretty`).

use maud::{html, Markup};

use super::{ClaimRow, ClaimsReport};
use crate::export::fmt::{pct, Grid};
use crate::leaderboard::{td_num, td_text, th};

fn problem(r: &ClaimRow) -> String {
    format!("L{}/{} s{}", r.level, r.problem, r.sample)
}

fn claimed(r: &ClaimRow) -> String {
    r.claim.as_ref().map_or_else(
        || "-".to_string(),
        |c| format!("{:.2}x {}", c.speedup, c.baseline),
    )
}

fn measured(r: &ClaimRow) -> String {
    match (r.measured, r.interval) {
        (Some(m), Some((l, h))) => format!("{m:.2}x [{l:.2}, {h:.2}]"),
        (Some(m), None) => format!("{m:.2}x"),
        _ => "-".to_string(),
    }
}

fn reason(r: &ClaimRow) -> String {
    match &r.reason {
        Some(x) => x.describe(),
        None if r.claim.is_some() => "reproduced".to_string(),
        None => "correct (no speedup claimed)".to_string(),
    }
}

/// What the set claims of correctness: "not stated" when it states nothing.
fn claimed_correct(t: &super::SetTable) -> String {
    match t.correct_stated {
        0 => "not stated".to_string(),
        n if n == t.kernels => format!("{}/{}", t.claimed_correct, t.kernels),
        n => format!("{}/{} (stated for {n})", t.claimed_correct, t.kernels),
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}x"))
}

fn rows_grid(report: &ClaimsReport) -> Grid {
    let mut g = Grid::new(&["kernel", "by", "claimed", "measured", "verdict", "reason"]);
    for r in &report.rows {
        g.row(vec![
            problem(r),
            r.label.clone().unwrap_or_default(),
            claimed(r),
            measured(r),
            r.verdict.clone().unwrap_or_else(|| "-".into()),
            reason(r),
        ]);
    }
    g
}

fn set_grid(report: &ClaimsReport) -> Grid {
    let t = &report.table;
    let mut g = Grid::new(&["", "claimed", "measured"]);
    g.row(vec![
        "correct".into(),
        claimed_correct(t),
        format!("{}/{}", t.measured_correct, t.kernels),
    ]);
    g.row(vec![
        "fast_1".into(),
        pct(t.claimed_fast_1),
        pct(t.measured_fast_1),
    ]);
    g.row(vec![
        "geomean speedup (correct)".into(),
        opt(t.claimed_geomean),
        opt(t.measured_geomean),
    ]);
    g.row(vec![
        "median speedup (correct)".into(),
        opt(t.claimed_median),
        opt(t.measured_median),
    ]);
    g
}

fn reasons_grid(report: &ClaimsReport) -> Grid {
    let mut g = Grid::new(&["reason", "kernels"]);
    for (c, n) in &report.table.by_reason {
        g.row(vec![c.clone(), n.to_string()]);
    }
    g
}

fn header(report: &ClaimsReport) -> String {
    let t = &report.table;
    format!(
        "claims of {} ({}) against run {}: {} kernels, {} evaluated; {} of {} claims survive \
         (correct under kbench and the measured speedup reaches the claim); of the correct \
         kernels' claimed speedups {} reproduced, {} faster than claimed, {} slower. \
         Tolerance-dependent is judged at atol=rtol={:.0e}, {}. Speedups: {} basis, 95% \
         bootstrap intervals.{}{}{}",
        report.set_name,
        report.set_format,
        report.run,
        t.kernels,
        t.evaluated,
        t.surviving,
        t.claims,
        t.reproduced,
        t.faster,
        t.slower,
        report.declared_tolerance,
        report.tolerance_source,
        report.basis.as_str(),
        if report.import_errors > 0 {
            format!(
                " The import skipped {} malformed entr{} (see claims.json `errors`).",
                report.import_errors,
                if report.import_errors == 1 {
                    "y"
                } else {
                    "ies"
                }
            )
        } else {
            String::new()
        },
        if report.outside_run > 0 {
            format!(
                " {} claimed kernel(s) of problems the run did not select are left out.",
                report.outside_run
            )
        } else {
            String::new()
        },
        if report.unclaimed_records > 0 {
            format!(
                " {} record(s) of the run match no claimed kernel.",
                report.unclaimed_records
            )
        } else {
            String::new()
        }
    )
}

/// The claims report for a terminal: the set table, the reasons, then one row per kernel.
pub fn render_claims_text(report: &ClaimsReport) -> String {
    format!(
        "\n{}\n\n{}\n{}\n{}",
        header(report),
        set_grid(report).text(),
        reasons_grid(report).text(),
        rows_grid(report).text()
    )
}

pub fn render_claims_markdown(report: &ClaimsReport) -> String {
    format!(
        "# Claims: {}\n\n{}\n\n## Set\n\n{}\n## Disagreements by reason\n\n{}\n## Kernels\n\n{}",
        report.set_name,
        header(report),
        set_grid(report).markdown(),
        reasons_grid(report).markdown(),
        rows_grid(report).markdown()
    )
}

/// One CSV row per kernel; numbers unformatted, empty when absent.
pub fn render_claims_csv(report: &ClaimsReport) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let num = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
    let _ = w.write_record([
        "level",
        "problem",
        "sample",
        "name",
        "label",
        "claimed_speedup",
        "claimed_baseline",
        "claimed_correct",
        "verdict",
        "correct",
        "measured_speedup",
        "interval_low",
        "interval_high",
        "survives",
        "reason_category",
        "reason",
    ]);
    for r in &report.rows {
        let _ = w.write_record([
            r.level.to_string(),
            r.problem.to_string(),
            r.sample.to_string(),
            r.name.clone(),
            r.label.clone().unwrap_or_default(),
            num(r.claim.as_ref().map(|c| c.speedup)),
            r.claim
                .as_ref()
                .map(|c| c.baseline.clone())
                .unwrap_or_default(),
            r.claimed_correct.map(|b| b.to_string()).unwrap_or_default(),
            r.verdict.clone().unwrap_or_default(),
            r.correct.to_string(),
            num(r.measured),
            num(r.interval.map(|i| i.0)),
            num(r.interval.map(|i| i.1)),
            (r.claim.is_some() && r.survives()).to_string(),
            match &r.reason {
                Some(x) => x.category().to_string(),
                None if r.reproduced() => "reproduced".to_string(),
                None => String::new(),
            },
            r.reason.as_ref().map(|x| x.describe()).unwrap_or_default(),
        ]);
    }
    // Writing into a Vec cannot fail; the bytes are the csv crate's, hence UTF-8.
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The claims section of the leaderboard page (sortable like its other tables).
pub fn render_claims_html(report: &ClaimsReport) -> Markup {
    let t = &report.table;
    // (row, claimed value and text, measured value and text)
    type SetRow<'a> = (&'a str, Option<f64>, String, Option<f64>, String);
    let rows: [SetRow; 4] = [
        (
            "fast_1",
            Some(t.claimed_fast_1),
            pct(t.claimed_fast_1),
            Some(t.measured_fast_1),
            pct(t.measured_fast_1),
        ),
        (
            "geomean",
            t.claimed_geomean,
            opt(t.claimed_geomean),
            t.measured_geomean,
            opt(t.measured_geomean),
        ),
        (
            "median",
            t.claimed_median,
            opt(t.claimed_median),
            t.measured_median,
            opt(t.measured_median),
        ),
        (
            "correct",
            Some(t.claimed_correct as f64),
            t.claimed_correct.to_string(),
            Some(t.measured_correct as f64),
            t.measured_correct.to_string(),
        ),
    ];
    html! {
        h2 { "Claims: " (report.set_name) } "\n"
        p class="note" { (header(report)) } "\n"
        table class="claims-set" {
            thead { tr { @for k in ["", "claimed", "measured"] { (th(k, k)) } } }
            tbody {
                @for (name, cv, ct, mv, mt) in rows {
                    tr { (td_text(name)) (td_num(cv, html! { (ct) })) (td_num(mv, html! { (mt) })) }
                }
            }
        }
        "\n"
        table class="claims" {
            thead { tr {
                @for k in ["kernel", "by", "claimed", "measured", "verdict", "reason"] { (th(k, k)) }
            } }
            tbody {
                @for r in &report.rows {
                    tr class=[r.reason.is_some().then_some("disagrees")] {
                        (td_text(&problem(r)))
                        (td_text(r.label.as_deref().unwrap_or("")))
                        (td_num(r.claim.as_ref().map(|c| c.speedup), html! { (claimed(r)) }))
                        (td_num(r.measured, html! { (measured(r)) }))
                        (td_text(r.verdict.as_deref().unwrap_or("-")))
                        (td_text(&reason(r)))
                    }
                }
            }
        }
        "\n"
    }
}
