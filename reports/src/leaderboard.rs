//! `kbench leaderboard`: one static HTML page comparing runs side by side. Self-contained:
//! inline CSS, inline JavaScript and inline SVG plots, nothing fetched from a network.
//!
//! The page has a tab per scope (all tasks, then each level) holding a sortable table with
//! one row per run, the plots, the integrity flags, and per run a table of problems whose
//! rows link to an anchor with that problem's record (candidate, outcome, speedup and its
//! interval, flags). Sorting: click a column header (again to reverse). The URL fragment
//! `#tab=L1&sort=correct&dir=desc` opens a tab sorted by a column on load, so a sorted view
//! can be linked.
//!
//! Built with maud's `html!`: every spliced string (run labels, kernel names, outcomes,
//! flags, titles) is escaped by construction; only the page's own CSS and script and the
//! plotters-rendered SVGs (which escape their own text) go in as `PreEscaped`.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::export::{pct, records_line, shown_label, unverified_banner};
use crate::metrics::{ScopeMetrics, FAST_P};
use crate::plot::{file_safe, plots, render_svg, Plot, PlotError};
use crate::report::{Report, RunReport};
use crate::task::Baseline;

const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:24px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
p.note{color:#555;font-size:13px;max-width:980px}
.tabs button{border:1px solid #bbb;background:#f4f4f4;padding:6px 14px;margin-right:4px;cursor:pointer;border-radius:4px 4px 0 0}
.tabs button.active{background:#0072b2;color:#fff;border-color:#0072b2}
.panel{display:none}.panel.active{display:block}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;white-space:nowrap}
th:first-child,td:first-child,td.text{text-align:left}
th{background:#f0f3f6;cursor:pointer;user-select:none}
th.asc::after{content:" \25B2"}th.desc::after{content:" \25BC"}
tr.flagged td:first-child{border-left:4px solid #d55e00}
.flag{color:#d55e00;font-weight:600}
.ci{color:#777;font-size:11px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:8px}
.plots svg{width:100%;height:auto;border:1px solid #eee}
.scroll{overflow-x:auto}
.plots .wide{grid-column:1/-1;overflow-x:auto}.plots .wide svg{width:auto;max-width:none}
details{font-size:13px;margin:2px 0}details:target{background:#fff6d5}
p.unverified{background:#d55e00;color:#fff;font-weight:700;padding:8px 12px;max-width:980px}
p.incomplete{color:#d55e00;font-weight:600}
"#;

const SCRIPT: &str = r#"
function cellValue(td){var v=td.getAttribute('data-v');if(v===null||v===''){return null;}var n=Number(v);return isNaN(n)?v:n;}
function sortBy(th){
  var table=th.closest('table');var tbody=table.tBodies[0];
  var idx=Array.prototype.indexOf.call(th.parentNode.children,th);
  var dir=th.classList.contains('desc')?'asc':(th.classList.contains('asc')?'desc':'desc');
  if(th.getAttribute('data-first')==='asc'&&!th.classList.contains('asc')&&!th.classList.contains('desc')){dir='asc';}
  Array.prototype.forEach.call(th.parentNode.children,function(h){h.classList.remove('asc','desc');});
  th.classList.add(dir);
  var rows=Array.prototype.slice.call(tbody.rows);
  rows.sort(function(a,b){
    var x=cellValue(a.cells[idx]),y=cellValue(b.cells[idx]);
    if(x===null&&y===null){return 0;}if(x===null){return 1;}if(y===null){return -1;}
    var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));
    return dir==='asc'?c:-c;});
  rows.forEach(function(r){tbody.appendChild(r);});
  document.body.setAttribute('data-sorted',(th.getAttribute('data-key')||'')+':'+dir);
}
function showTab(name){
  document.querySelectorAll('.tabs button').forEach(function(b){b.classList.toggle('active',b.getAttribute('data-tab')===name);});
  document.querySelectorAll('.panel').forEach(function(p){p.classList.toggle('active',p.id==='tab-'+name);});
}
document.querySelectorAll('th').forEach(function(th){th.addEventListener('click',function(){sortBy(th);});});
document.querySelectorAll('.tabs button').forEach(function(b){b.addEventListener('click',function(){showTab(b.getAttribute('data-tab'));});});
(function(){
  var q={};location.hash.replace(/^#/,'').split('&').forEach(function(kv){var p=kv.split('=');if(p[0]){q[p[0]]=decodeURIComponent(p[1]||'');}});
  if(q.tab){showTab(q.tab);}
  if(q.sort){var panel=document.querySelector('.panel.active')||document;var th=panel.querySelector('th[data-key="'+q.sort+'"]');
    if(th){th.click();var want=q.dir==='asc'?'asc':'desc';if(!th.classList.contains(want)){th.click();}}}
})();
"#;

/// A header cell: the sort key and label.
pub(crate) fn th(key: &str, label: &str) -> Markup {
    html! { th data-key=(key) { (label) } }
}

/// A numeric cell sorted by `value`, showing `content`.
pub(crate) fn td_num(value: Option<f64>, content: Markup) -> Markup {
    match value {
        Some(v) if v.is_finite() => html! { td data-v=(v) { (content) } },
        _ => html! { td data-v="" { "-" } },
    }
}

/// A text cell, sorted by its text.
pub(crate) fn td_text(text: &str) -> Markup {
    html! { td class="text" data-v=(text) { (text) } }
}

/// A text cell whose text links to `#anchor`.
fn td_link(text: &str, anchor: &str) -> Markup {
    html! { td class="text" data-v=(text) { a href={ "#" (anchor) } { (text) } } }
}

/// A value with its interval below it, small.
fn with_ci(value: String, low: String, high: String) -> Markup {
    html! { (value) br; span class="ci" { "[" (low) ", " (high) "]" } }
}

fn rate_cell(r: &crate::stats::Rate) -> Markup {
    td_num(
        Some(r.value),
        with_ci(
            pct(r.value),
            format!("{:.1}", 100.0 * r.low),
            format!("{:.1}", 100.0 * r.high),
        ),
    )
}

fn speedup_cell(v: Option<f64>, ci: Option<(f64, f64)>) -> Markup {
    let content = match (v, ci) {
        (Some(v), Some((l, h))) => {
            with_ci(format!("{v:.3}x"), format!("{l:.2}"), format!("{h:.2}"))
        }
        (Some(v), None) => html! { (format!("{v:.3}x")) },
        _ => html! {},
    };
    td_num(v, content)
}

fn runs_table(report: &Report, scope: &str) -> Markup {
    html! {
        table class="runs" {
            thead { tr {
                (th("run", "run"))
                (th("agent", "agent"))
                (th("tasks", "tasks"))
                (th("compiled", "compiled"))
                (th("correct", "correct"))
                (th("correct_random", "correct (random only)"))
                @for p in FAST_P { (th(&format!("fast_{p}"), &format!("fast_{p}"))) }
                (th("geomean_eager", "geomean vs eager"))
                (th("geomean_compile", "geomean vs compile"))
                (th("mean_zero", "mean (0 if wrong)"))
                (th("usd_per_task", "$/task"))
                (th("agent_min_per_task", "agent min/task"))
                (th("flags", "integrity flags"))
                (th("missing", "missing records"))
                (th("invalid", "invalid records"))
            } }
            tbody {
                @for run in &report.runs {
                    @if let Some(s) = run.scope(scope) { (run_row(run, s)) }
                }
            }
        }
    }
}

fn run_row(run: &RunReport, s: &ScopeMetrics) -> Markup {
    let flags = run
        .integrity
        .iter()
        .filter(|i| in_scope(run, s, &i.problem))
        .count();
    let eager = s.baseline(Baseline::Eager);
    let z = eager.and_then(|b| b.zero_filled);
    let check = &run.records_check;
    html! {
        tr class=[(flags > 0).then_some("flagged")] {
            (td_link(&shown_label(run), &format!("run-{}", file_safe(&run.label))))
            (td_text(run.agent.as_deref().unwrap_or("?")))
            (td_num(Some(s.tasks as f64), html! { (s.tasks) }))
            (rate_cell(&s.compiled))
            (rate_cell(&s.correct))
            (rate_cell(&s.correct_random))
            @for p in FAST_P {
                @match eager.and_then(|b| b.fast_p.iter().find(|f| f.p == p)) {
                    Some(f) => (td_num(Some(f.rate.value), html! { (pct(f.rate.value)) })),
                    None if !run.timed => td data-v="" { "not timed" },
                    None => (td_num(None, html! {})),
                }
            }
            @for b in [Baseline::Eager, Baseline::Compile] {
                @let g = s.baseline(b).and_then(|m| m.geomean);
                (speedup_cell(g.map(|g| g.value), g.map(|g| (g.low, g.high))))
            }
            (speedup_cell(z.map(|z| z.mean.value), z.map(|z| (z.mean.low, z.mean.high))))
            // The agent's cost per task, where the records carry one (LLM agents).
            (td_num(s.cost.usd_per_task, html! { (format!("{:.3}", s.cost.usd_per_task.unwrap_or(0.0))) }))
            (td_num(s.cost.agent_wall_min_per_task, html! { (format!("{:.1}", s.cost.agent_wall_min_per_task.unwrap_or(0.0))) }))
            (td_num(Some(flags as f64), html! {
                @if flags > 0 { span class="flag" { (flags) } } @else { "0" }
            }))
            @match check.missing {
                Some(m) => (td_num(Some(m as f64), html! { (m) })),
                None => td data-v="" { "not known" },
            }
            (td_num(Some(check.invalid as f64), html! { (check.invalid) }))
        }
    }
}

/// Per run: what checking its records found (planned, missing, invalid, verification), and
/// its notes.
fn records_section(report: &Report) -> Markup {
    html! {
        h2 { "Records checked" }
        @for run in &report.runs {
            @let line = records_line(&run.records_check);
            p class=[line.starts_with("INCOMPLETE").then_some("incomplete")] {
                strong { (shown_label(run)) } ": " (line)
            }
            @for note in &run.notes { p class="note" { (note) } }
        }
    }
}

fn in_scope(run: &RunReport, s: &ScopeMetrics, problem: &str) -> bool {
    match s.level {
        None => true,
        Some(l) => run
            .problems
            .iter()
            .any(|p| p.key == problem && p.level == l),
    }
}

fn record_anchor(run: &RunReport, key: &str) -> String {
    format!("rec-{}-{}", file_safe(&run.label), file_safe(key))
}

fn problems_section(run: &RunReport) -> Markup {
    html! {
        h3 id={ "run-" (file_safe(&run.label)) } { (shown_label(run)) }
        table class="problems" {
            thead { tr {
                @for (k, l) in [
                    ("problem", "problem"),
                    ("name", "name"),
                    ("candidates", "candidates"),
                    ("outcome", "outcome"),
                    ("speedup", "speedup vs eager"),
                    ("compile", "vs compile"),
                    ("flags", "flags"),
                ] { (th(k, l)) }
            } }
            tbody {
                @for p in &run.problems {
                    tr class=[(!p.flags.is_empty()).then_some("flagged")] {
                        (td_link(&p.key, &record_anchor(run, &p.key)))
                        (td_text(&p.name))
                        (td_num(Some(p.candidates as f64), html! { (p.candidates) }))
                        (td_text(&p.outcome))
                        (speedup_cell(p.speedup, p.interval.map(|e| (e.low, e.high))))
                        (speedup_cell(p.compile_speedup, None))
                        (td_text(&p.flags.join(", ")))
                    }
                }
            }
        }
        @for p in &run.problems {
            details id=(record_anchor(run, &p.key)) {
                summary { (p.key) " " (p.name) }
                ul {
                    li { "best candidate: " (p.candidate) " (" (p.outcome) " of " (p.candidates) " candidates)" }
                    li {
                        "compiled: " (p.compiled) ", correct (all families): " (p.correct)
                        ", correct (random only): " (p.correct_random)
                    }
                    li {
                        "speedup vs eager: "
                        @match (p.speedup, p.interval) {
                            (Some(s), Some(e)) => (format!("{s:.3}x (95% CI {:.3}–{:.3})", e.low, e.high)),
                            (Some(s), None) => (format!("{s:.3}x")),
                            _ => "-",
                        }
                    }
                    @if let Some(x) = p.sol_ratio { li { (format!("time / speed of light: {x:.2}x")) } }
                    li {
                        "flags: "
                        @if p.flags.is_empty() { "none" } @else { (p.flags.join(", ")) }
                    }
                }
            }
        }
    }
}

/// One plot as a `div` holding its SVG. The SVG is plotters' output, which escapes its
/// text; per-problem bars grow with the problem count, so they get the full width and
/// scroll rather than being squeezed.
fn plot_div(plot: &Plot) -> Result<Markup, PlotError> {
    let svg = render_svg(plot)?;
    let wide = plot.name.starts_with("problems-");
    Ok(html! {
        div id={ "plot-" (plot.name) } class=[wide.then_some("wide")] { (PreEscaped(svg)) }
        "\n"
    })
}

fn integrity_section(report: &Report) -> Markup {
    let flagged: Vec<&RunReport> = report
        .runs
        .iter()
        .filter(|r| !r.integrity.is_empty())
        .collect();
    html! {
        h2 { "Integrity flags" }
        @if flagged.is_empty() {
            p class="note" { "No candidate raised an integrity flag." }
        } @else {
            table class="integrity" {
                thead { tr { @for k in ["run", "problem", "candidate", "flag"] { (th(k, k)) } } }
                tbody {
                    @for r in flagged {
                        @for i in &r.integrity {
                            tr {
                                (td_text(&r.label))
                                (td_link(&i.problem, &record_anchor(r, &i.problem)))
                                (td_text(&i.candidate))
                                td class="text flag" data-v=(i.flag) { (i.flag) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The leaderboard page for `report`: one HTML document, nothing external.
pub fn render_leaderboard(report: &Report, title: &str) -> Result<String, PlotError> {
    render_leaderboard_with(report, title, &[])
}

/// The page with extra sections (built with maud, e.g. [`crate::claims::render_claims_html`])
/// placed before the per-problem tables.
pub fn render_leaderboard_with(
    report: &Report,
    title: &str,
    sections: &[Markup],
) -> Result<String, PlotError> {
    let mut scopes: Vec<String> = report
        .runs
        .iter()
        .flat_map(|r| r.scopes.iter().map(|s| s.scope.clone()))
        .collect();
    scopes.sort();
    scopes.dedup();
    // "all" first, then the levels.
    scopes.sort_by_key(|s| s != "all");
    let all_plots = plots(report);
    // Each tab holds its runs table and its fast_p curves.
    let mut curves = Vec::with_capacity(scopes.len());
    for s in &scopes {
        let prefix = format!("fast_p-{s}-");
        let divs = all_plots
            .iter()
            .filter(|p| p.name.starts_with(&prefix))
            .map(plot_div)
            .collect::<Result<Vec<_>, _>>()?;
        curves.push(divs);
    }
    let other_plots = all_plots
        .iter()
        .filter(|p| !p.name.starts_with("fast_p-"))
        .map(plot_div)
        .collect::<Result<Vec<_>, _>>()?;
    let note = format!(
        "{} run(s). Speedups: {}; a task's result is its best correct candidate. fast_p = \
         correct and speedup > p over all tasks (KernelBench); geomeans over correct tasks \
         (KernelBench, CUDA Agent); \"0 if wrong\" counts a task without a correct kernel as 0 \
         (CudaForge). Brackets: 95% intervals (Wilson for rates, bootstrap of {} resamples for \
         speedups). Click a column header to sort.",
        report.runs.len(),
        report.basis.describe(),
        report.bootstrap_resamples,
    );
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                "\n" h1 { (title) } "\n"
                @if let Some(b) = unverified_banner(report) { p class="unverified" { (b) } "\n" }
                p class="note" { (note) } "\n"
                div class="tabs" {
                    @for (i, s) in scopes.iter().enumerate() {
                        button data-tab=(s) class=[(i == 0).then_some("active")] {
                            @if s == "all" { "all levels" } @else { (s) }
                        }
                    }
                }
                "\n"
                @for (i, (s, curves)) in scopes.iter().zip(&curves).enumerate() {
                    div class=(if i == 0 { "panel active" } else { "panel" }) id={ "tab-" (s) } {
                        div class="scroll" { (runs_table(report, s)) }
                        div class="plots" { @for c in curves { (c) } }
                    }
                    "\n"
                }
                h2 { "Plots" }
                div class="plots" { "\n" @for c in &other_plots { (c) } }
                "\n"
                (records_section(report))
                "\n"
                (integrity_section(report))
                "\n"
                @for section in sections { (section) }
                h2 { "Problems" } "\n"
                @for run in &report.runs { (problems_section(run)) "\n" }
                script { (PreEscaped(SCRIPT)) }
                "\n"
            }
        }
        "\n"
    };
    Ok(page.into_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::basis::SpeedupBasis;
    use crate::report::{build_report, RunInput};
    use crate::tests::record;
    use crate::RecordExtras;
    use kbench_record::Outcome;

    /// Strings that run script or break out of an attribute if spliced in raw.
    pub(crate) const HOSTILE: [&str; 3] = [
        "<script>alert(1)</script>",
        "\"><img src=x onerror=alert(2)>",
        "x\" onmouseover=\"alert(3)",
    ];

    /// HTML text/attribute escaping, written out here as the test's oracle.
    pub(crate) fn escaped(s: &str) -> String {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    }

    /// Every string a run puts on the page, each carrying `h` under its own tag, so that a
    /// miss says which field leaked.
    fn hostile_run(h: &str) -> RunInput {
        let mut r = record(
            Outcome::Integrity {
                flag: format!("flag{h}"),
                detail: format!("detail{h}"),
            },
            Some((2.0, 2.0)),
        );
        r.problem.suite = format!("suite{h}");
        r.problem.name = format!("kernel{h}");
        r.candidate.name = format!("cand{h}");
        let extras = RecordExtras::from_json(&serde_json::json!({ "flags": [format!("flag{h}")] }));
        RunInput {
            label: format!("run{h}"),
            path: "x".into(),
            run_id: None,
            agent: Some(format!("agent{h}")),
            records: vec![
                (r, extras),
                (record(Outcome::Ok, Some((1.5, 1.5))), Default::default()),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn hostile_strings_come_out_escaped_everywhere() {
        let runs: Vec<RunInput> = HOSTILE.iter().map(|h| hostile_run(h)).collect();
        let report = build_report(&runs, SpeedupBasis::Median);
        let page = render_leaderboard(&report, &format!("title{}", HOSTILE[0])).unwrap();
        for h in HOSTILE {
            assert!(!page.contains(h), "{h} is on the page unescaped");
            // (field, least number of places it shows: text and data-v of a cell, headings)
            for (field, places) in [
                ("run", 5), // runs table (text + data-v), h3, integrity table (text + data-v)
                ("agent", 2),
                ("kernel", 3), // problems table (text + data-v), the record's summary
                ("cand", 3),   // the record, integrity table (text + data-v)
                ("flag", 4),   // problems table, the record, integrity table
                ("suite", 4),  // the problem key: problems table, summary, integrity table
            ] {
                let want = escaped(&format!("{field}{h}"));
                let n = page.matches(&want).count();
                assert!(
                    n >= places,
                    "{field}{h}: {n} escaped occurrences, want {places}"
                );
            }
        }
        let title = escaped(&format!("title{}", HOSTILE[0]));
        assert!(page.contains(&format!("<title>{title}</title>")));
        assert!(page.contains(&format!("<h1>{title}</h1>")));
        // No element or attribute the strings could have made: one script (the page's), no
        // image, no handler attribute (escaped, `onmouseover=&quot;` is only text).
        assert_eq!(page.matches("<script").count(), 1);
        assert!(!page.contains("<img"));
        assert!(!page.contains("onmouseover=\""));
    }

    #[test]
    fn cost_per_task_is_the_sum_over_the_tasks_candidates() {
        let with_cost = |name: &str, usd: f64, wall_s: f64| {
            let mut r = record(Outcome::Ok, Some((2.0, 2.0)));
            r.candidate.name = name.into();
            let json = serde_json::json!({"cost": {"usd": usd, "wall_s": wall_s}});
            (r, crate::extras::RecordExtras::from_json(&json))
        };
        let input = RunInput {
            label: "run".into(),
            path: "x".into(),
            run_id: None,
            agent: Some("coder-judge".into()),
            records: vec![with_cost("a", 0.1, 60.0), with_cost("b", 0.2, 120.0)],
            ..Default::default()
        };
        let report = build_report(&[input], SpeedupBasis::Median);
        let page = render_leaderboard(&report, "t").unwrap();
        assert!(
            page.contains("data-key=\"usd_per_task\">$/task</th>"),
            "{page}"
        );
        assert!(page.contains(">0.300</td>"), "{page}");
        assert!(page.contains(">3.0</td>"), "{page}");
        // A run without costs shows none.
        let input = RunInput {
            label: "run".into(),
            path: "x".into(),
            run_id: None,
            agent: None,
            records: vec![(record(Outcome::Ok, Some((2.0, 2.0))), Default::default())],
            ..Default::default()
        };
        let page = render_leaderboard(&build_report(&[input], SpeedupBasis::Median), "t").unwrap();
        assert!(!page.contains(">0.300</td>"));
    }
}
