//! `kbench leaderboard`: one static HTML page comparing runs side by side. Self-contained:
//! inline CSS, inline JavaScript and inline SVG plots, nothing fetched from a network.
//!
//! The page has a tab per scope (all tasks, then each level) holding a sortable table with
//! one row per run, the plots, the integrity flags, and per run a table of problems whose
//! rows link to an anchor with that problem's record (candidate, outcome, speedup and its
//! interval, flags). Sorting: click a column header (again to reverse). The URL fragment
//! `#tab=L1&sort=correct&dir=desc` opens a tab sorted by a column on load, so a sorted view
//! can be linked.

use crate::export::pct;
use crate::metrics::{ScopeMetrics, FAST_P};
use crate::plot::{file_safe, plots, render_svg, PlotError};
use crate::report::{Report, RunReport};
use crate::task::Baseline;

/// `&`, `<`, `>`, `"` and `'` escaped for HTML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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
pub(crate) fn th(key: &str, label: &str) -> String {
    format!("<th data-key=\"{}\">{}</th>", escape(key), escape(label))
}

/// A numeric cell sorted by `value`, showing `text`.
pub(crate) fn td_num(value: Option<f64>, text: &str) -> String {
    match value {
        Some(v) if v.is_finite() => format!("<td data-v=\"{v}\">{text}</td>"),
        _ => "<td data-v=\"\">-</td>".to_string(),
    }
}

pub(crate) fn td_text(text: &str) -> String {
    format!(
        "<td class=\"text\" data-v=\"{}\">{}</td>",
        escape(text),
        escape(text)
    )
}

fn rate_cell(r: &crate::stats::Rate) -> String {
    td_num(
        Some(r.value),
        &format!(
            "{}<br><span class=\"ci\">[{:.1}, {:.1}]</span>",
            pct(r.value),
            100.0 * r.low,
            100.0 * r.high
        ),
    )
}

fn speedup_cell(v: Option<f64>, ci: Option<(f64, f64)>) -> String {
    let text = match (v, ci) {
        (Some(v), Some((l, h))) => {
            format!("{v:.3}x<br><span class=\"ci\">[{l:.2}, {h:.2}]</span>")
        }
        (Some(v), None) => format!("{v:.3}x"),
        _ => String::new(),
    };
    td_num(v, &text)
}

fn runs_table(report: &Report, scope: &str) -> String {
    let mut h = String::from("<table class=\"runs\"><thead><tr>");
    h.push_str(&th("run", "run"));
    h.push_str(&th("agent", "agent"));
    h.push_str(&th("tasks", "tasks"));
    h.push_str(&th("compiled", "compiled"));
    h.push_str(&th("correct", "correct"));
    h.push_str(&th("correct_random", "correct (random only)"));
    for p in FAST_P {
        h.push_str(&th(&format!("fast_{p}"), &format!("fast_{p}")));
    }
    h.push_str(&th("geomean_eager", "geomean vs eager"));
    h.push_str(&th("geomean_compile", "geomean vs compile"));
    h.push_str(&th("mean_zero", "mean (0 if wrong)"));
    h.push_str(&th("usd_per_task", "$/task"));
    h.push_str(&th("agent_min_per_task", "agent min/task"));
    h.push_str(&th("flags", "integrity flags"));
    h.push_str("</tr></thead><tbody>");
    for run in &report.runs {
        let Some(s) = run.scope(scope) else { continue };
        let flags = run
            .integrity
            .iter()
            .filter(|i| in_scope(run, s, &i.problem))
            .count();
        h.push_str(if flags > 0 {
            "<tr class=\"flagged\">"
        } else {
            "<tr>"
        });
        h.push_str(&format!(
            "<td class=\"text\" data-v=\"{0}\"><a href=\"#run-{1}\">{0}</a></td>",
            escape(&run.label),
            escape(&file_safe(&run.label))
        ));
        h.push_str(&td_text(run.agent.as_deref().unwrap_or("?")));
        h.push_str(&td_num(Some(s.tasks as f64), &s.tasks.to_string()));
        h.push_str(&rate_cell(&s.compiled));
        h.push_str(&rate_cell(&s.correct));
        h.push_str(&rate_cell(&s.correct_random));
        let eager = s.baseline(Baseline::Eager);
        for p in FAST_P {
            match eager.and_then(|b| b.fast_p.iter().find(|f| f.p == p)) {
                Some(f) => h.push_str(&td_num(Some(f.rate.value), &pct(f.rate.value))),
                None => h.push_str(&td_num(None, "")),
            }
        }
        for b in [Baseline::Eager, Baseline::Compile] {
            let g = s.baseline(b).and_then(|m| m.geomean);
            h.push_str(&speedup_cell(
                g.map(|g| g.value),
                g.map(|g| (g.low, g.high)),
            ));
        }
        let z = eager.and_then(|b| b.zero_filled);
        h.push_str(&speedup_cell(
            z.map(|z| z.mean.value),
            z.map(|z| (z.mean.low, z.mean.high)),
        ));
        // The agent's cost per task, where the records carry one (LLM agents).
        let usd = s.cost.usd_per_task;
        h.push_str(&td_num(
            usd,
            &usd.map_or(String::new(), |v| format!("{v:.3}")),
        ));
        let min = s.cost.agent_wall_min_per_task;
        h.push_str(&td_num(
            min,
            &min.map_or(String::new(), |v| format!("{v:.1}")),
        ));
        h.push_str(&td_num(
            Some(flags as f64),
            &if flags > 0 {
                format!("<span class=\"flag\">{flags}</span>")
            } else {
                "0".to_string()
            },
        ));
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table>");
    h
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

fn problems_section(run: &RunReport) -> String {
    let mut h = format!(
        "<h3 id=\"run-{}\">{}</h3><table class=\"problems\"><thead><tr>",
        escape(&file_safe(&run.label)),
        escape(&run.label)
    );
    for (k, l) in [
        ("problem", "problem"),
        ("name", "name"),
        ("candidates", "candidates"),
        ("outcome", "outcome"),
        ("speedup", "speedup vs eager"),
        ("compile", "vs compile"),
        ("flags", "flags"),
    ] {
        h.push_str(&th(k, l));
    }
    h.push_str("</tr></thead><tbody>");
    for p in &run.problems {
        h.push_str(if p.flags.is_empty() {
            "<tr>"
        } else {
            "<tr class=\"flagged\">"
        });
        h.push_str(&format!(
            "<td class=\"text\" data-v=\"{0}\"><a href=\"#{1}\">{0}</a></td>",
            escape(&p.key),
            record_anchor(run, &p.key)
        ));
        h.push_str(&td_text(&p.name));
        h.push_str(&td_num(
            Some(p.candidates as f64),
            &p.candidates.to_string(),
        ));
        h.push_str(&td_text(&p.outcome));
        h.push_str(&speedup_cell(
            p.speedup,
            p.interval.map(|e| (e.low, e.high)),
        ));
        h.push_str(&speedup_cell(p.compile_speedup, None));
        h.push_str(&td_text(&p.flags.join(", ")));
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table>");
    for p in &run.problems {
        h.push_str(&format!(
            "<details id=\"{}\"><summary>{} {}</summary><ul>\
             <li>best candidate: {} ({} of {} candidates)</li>\
             <li>compiled: {}, correct (all families): {}, correct (random only): {}</li>\
             <li>speedup vs eager: {}</li>{}<li>flags: {}</li></ul></details>",
            record_anchor(run, &p.key),
            escape(&p.key),
            escape(&p.name),
            escape(&p.candidate),
            escape(&p.outcome),
            p.candidates,
            p.compiled,
            p.correct,
            p.correct_random,
            match (p.speedup, p.interval) {
                (Some(s), Some(e)) => format!("{s:.3}x (95% CI {:.3}–{:.3})", e.low, e.high),
                (Some(s), None) => format!("{s:.3}x"),
                _ => "-".into(),
            },
            p.sol_ratio.map_or(String::new(), |x| format!(
                "<li>time / speed of light: {x:.2}x</li>"
            )),
            if p.flags.is_empty() {
                "none".to_string()
            } else {
                escape(&p.flags.join(", "))
            },
        ));
    }
    h
}

/// The leaderboard page for `report`: one HTML document, nothing external.
pub fn render_leaderboard(report: &Report, title: &str) -> Result<String, PlotError> {
    render_leaderboard_with(report, title, &[])
}

/// The page with extra sections (already HTML, e.g. [`crate::claims::render_claims_html`])
/// placed before the per-problem tables.
pub fn render_leaderboard_with(
    report: &Report,
    title: &str,
    sections: &[String],
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
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{0}</title><style>{STYLE}</style></head><body>\n<h1>{0}</h1>\n",
        escape(title)
    );
    h.push_str(&format!(
        "<p class=\"note\">{} run(s). Speedups: {basis}; a \
         task's result is its best correct candidate. fast_p = correct and speedup &gt; p over \
         all tasks (KernelBench); geomeans over correct tasks (KernelBench, CUDA Agent); \
         \"0 if wrong\" counts a task without a correct kernel as 0 (CudaForge). Brackets: 95% \
         intervals (Wilson for rates, bootstrap of {} resamples for speedups). Click a column \
         header to sort.</p>\n",
        report.runs.len(),
        report.bootstrap_resamples,
        basis = report.basis.describe()
    ));
    h.push_str("<div class=\"tabs\">");
    for (i, s) in scopes.iter().enumerate() {
        h.push_str(&format!(
            "<button data-tab=\"{0}\"{1}>{2}</button>",
            escape(s),
            if i == 0 { " class=\"active\"" } else { "" },
            if s == "all" {
                "all levels".to_string()
            } else {
                escape(s)
            }
        ));
    }
    h.push_str("</div>\n");
    let all_plots = plots(report);
    let plot_div = |plot: &crate::plot::Plot| -> Result<String, PlotError> {
        // Per-problem bars grow with the problem count: full width, scrolled, not squeezed.
        let wide = plot.name.starts_with("problems-");
        Ok(format!(
            "<div id=\"plot-{}\"{}>{}</div>\n",
            escape(&plot.name),
            if wide { " class=\"wide\"" } else { "" },
            render_svg(plot)?
        ))
    };
    for (i, s) in scopes.iter().enumerate() {
        // Each tab holds its runs table and its fast_p curves.
        let prefix = format!("fast_p-{s}-");
        let mut curves = String::new();
        for plot in all_plots.iter().filter(|p| p.name.starts_with(&prefix)) {
            curves.push_str(&plot_div(plot)?);
        }
        h.push_str(&format!(
            "<div class=\"panel{}\" id=\"tab-{}\"><div class=\"scroll\">{}</div><div class=\"plots\">{curves}</div></div>\n",
            if i == 0 { " active" } else { "" },
            escape(s),
            runs_table(report, s)
        ));
    }
    h.push_str("<h2>Plots</h2><div class=\"plots\">\n");
    for plot in all_plots.iter().filter(|p| !p.name.starts_with("fast_p-")) {
        h.push_str(&plot_div(plot)?);
    }
    h.push_str("</div>\n<h2>Integrity flags</h2>\n");
    let flagged: Vec<&RunReport> = report
        .runs
        .iter()
        .filter(|r| !r.integrity.is_empty())
        .collect();
    if flagged.is_empty() {
        h.push_str("<p class=\"note\">No candidate raised an integrity flag.</p>\n");
    } else {
        h.push_str("<table class=\"integrity\"><thead><tr>");
        for k in ["run", "problem", "candidate", "flag"] {
            h.push_str(&th(k, k));
        }
        h.push_str("</tr></thead><tbody>");
        for r in flagged {
            for i in &r.integrity {
                h.push_str(&format!(
                    "<tr>{}<td class=\"text\" data-v=\"{1}\"><a href=\"#{2}\">{1}</a></td>{3}<td class=\"text flag\" data-v=\"{4}\">{4}</td></tr>",
                    td_text(&r.label),
                    escape(&i.problem),
                    record_anchor(r, &i.problem),
                    td_text(&i.candidate),
                    escape(&i.flag),
                ));
            }
        }
        h.push_str("</tbody></table>\n");
    }
    for section in sections {
        h.push_str(section);
    }
    h.push_str("<h2>Problems</h2>\n");
    for run in &report.runs {
        h.push_str(&problems_section(run));
        h.push('\n');
    }
    h.push_str(&format!("<script>{SCRIPT}</script>\n</body></html>\n"));
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::basis::SpeedupBasis;
    use crate::report::{build_report, RunInput};
    use crate::tests::record;
    use kbench_record::Outcome;

    #[test]
    fn run_labels_and_record_text_are_escaped() {
        let mut r = record(Outcome::Ok, Some((2.0, 2.0)));
        r.problem.name = "<img src=x onerror=alert(1)>".into();
        let input = RunInput {
            label: "<script>alert('run')</script>".into(),
            path: "x".into(),
            run_id: None,
            agent: Some("a&b".into()),
            records: vec![(r, Default::default())],
        };
        let report = build_report(&[input], SpeedupBasis::Median);
        let page = render_leaderboard(&report, "t<i>tle").unwrap();
        assert!(!page.contains("<script>alert"));
        assert!(!page.contains("<img src=x"));
        assert!(page.contains("&lt;script&gt;alert(&#39;run&#39;)&lt;/script&gt;"));
        assert!(page.contains("<title>t&lt;i&gt;tle</title>"));
        assert!(page.contains(">a&amp;b</td>"));
        // Exactly one script element: the page's own.
        assert_eq!(page.matches("<script>").count(), 1);
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
        };
        let page = render_leaderboard(&build_report(&[input], SpeedupBasis::Median), "t").unwrap();
        assert!(!page.contains(">0.300</td>"));
    }
}
