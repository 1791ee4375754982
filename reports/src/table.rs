//! Plain-text rendering of a [`RunSummary`]. Formats only: every number is already in the
//! summary.

use crate::summary::RunSummary;

/// Renders the summary `kbench run` ends with, as an aligned two-column table:
///
/// ```text
/// evaluated                 6
/// compiled          5 (83.3%)
/// correct           4 (66.7%)
/// fast_1            2 (33.3%)  correct and speedup > 1, over all evaluated
/// median speedup        2.00x  median basis, over 3 timed correct
///
/// outcome               count
/// compile_error             1
/// mismatch                  1
/// ok                        4
/// ```
pub fn render_summary(s: &RunSummary) -> String {
    let rows: Vec<(String, String, String)> = vec![
        ("evaluated".into(), s.evaluated.to_string(), String::new()),
        (
            "compiled".into(),
            count_of(s.compiled, s.evaluated),
            String::new(),
        ),
        (
            "correct".into(),
            count_of(s.correct, s.evaluated),
            String::new(),
        ),
        (
            "correct random".into(),
            count_of(s.correct_random, s.evaluated),
            "KernelBench's check: the random family alone".into(),
        ),
        (
            "fast_1".into(),
            count_of(s.fast_1_count, s.evaluated),
            "correct and speedup > 1, over all evaluated".into(),
        ),
        (
            "median speedup".into(),
            s.median_speedup
                .map_or_else(|| "-".into(), |m| format!("{m:.2}x")),
            format!("{} basis, over {} timed correct", s.basis.as_str(), s.timed),
        ),
    ];
    // Correct kernels and not one timed (`--no-timing`): no speedup figure, not 0.
    let not_timed = s.timed == 0 && s.correct > 0;
    let rows: Vec<(String, String, String)> = if not_timed {
        rows.into_iter()
            .map(|(name, value, note)| match name.as_str() {
                "fast_1" | "median speedup" => (
                    name,
                    "not timed".into(),
                    "no correct kernel was timed (--no-timing)".into(),
                ),
                _ => (name, value, note),
            })
            .collect()
    } else {
        rows
    };
    let mut rows = rows;
    if let Some(m) = s.median_sol_ratio {
        rows.push((
            "x speed of light".into(),
            format!("{m:.2}x"),
            format!(
                "median time / physical limit, over {} timed correct{}",
                s.sol_timed,
                if s.below_sol > 0 {
                    format!("; {} BELOW the limit (impossible: check them)", s.below_sol)
                } else {
                    String::new()
                }
            ),
        ));
    }
    if s.correct_random != s.correct || !s.family_failures.is_empty() {
        // `correct` then holds every case family: say so, and which families failed.
        rows[2].2 = "under every case family that applies".into();
    }
    if s.unjudged > 0 {
        // Kernels never judged did not fail to compile either: say how many were judged.
        rows[1].2 = format!(
            "of {} judged; {} not judged (below)",
            s.evaluated - s.unjudged,
            s.unjudged
        );
        rows.push((
            "not judged".into(),
            count_of(s.unjudged, s.evaluated),
            "the problem failed (reference_error, problem_error): kernel not run, not correct"
                .into(),
        ));
    }
    if s.no_kernel > 0 {
        rows.push((
            "no kernel".into(),
            count_of(s.no_kernel, s.evaluated),
            "the agent gave none: counted not compiled, not correct".into(),
        ));
    }
    let mut out = String::new();
    push_rows(&mut out, &rows);
    if !s.family_failures.is_empty() {
        let named: Vec<String> = s
            .family_failures
            .iter()
            .map(|(f, n)| format!("{f} ({n})"))
            .collect();
        out.push_str(&format!("failing families: {}\n", named.join(", ")));
    }
    if !s.flagged.is_empty() {
        let named: Vec<String> = s
            .flagged
            .iter()
            .map(|(f, n)| format!("{f} ({n})"))
            .collect();
        out.push_str(&format!(
            "flagged: {} kernel(s), never counted correct or fast: {}\n",
            s.flagged.values().sum::<usize>(),
            named.join(", ")
        ));
    }
    if s.uncontained > 0 {
        out.push_str(&format!(
            "NOT CONTAINED: {} of {} record(s) ran their candidate without a sandbox (--no-sandbox, or no bubblewrap for trusted code): such a candidate could reach the harness, the run folder and the other workers\n",
            s.uncontained, s.evaluated
        ));
    }
    if s.model_modes.len() > 1 {
        let named: Vec<String> = s
            .model_modes
            .iter()
            .map(|(m, n)| format!("{n} in {m}"))
            .collect();
        out.push_str(&format!(
            "MIXED MODEL MODES: {} (--model-mode): these records were not judged under one convention\n",
            named.join(", ")
        ));
    }
    if s.torches.len() > 1 {
        let named: Vec<String> = s
            .torches
            .iter()
            .map(|(t, n)| format!("{n} with torch {t}"))
            .collect();
        out.push_str(&format!(
            "MIXED TORCH VERSIONS: {}: their times, and speedups against baselines, compare different torches\n",
            named.join(", ")
        ));
    }
    if s.eval_mode_only > 0 {
        out.push_str(&format!(
            "mode-switch: {} kernel(s) fail in train mode but are correct only in eval mode (both models in .eval())\n",
            s.eval_mode_only
        ));
    }
    if !s.outcomes.is_empty() {
        out.push('\n');
        let mut outcome_rows = vec![("outcome".to_string(), "count".to_string(), String::new())];
        outcome_rows.extend(
            s.outcomes
                .iter()
                .map(|(kind, n)| (kind.clone(), n.to_string(), String::new())),
        );
        push_rows(&mut out, &outcome_rows);
    }
    out
}

/// `n (p%)`, or `n` alone when the total is zero.
fn count_of(n: usize, total: usize) -> String {
    if total == 0 {
        n.to_string()
    } else {
        format!("{n} ({:.1}%)", 100.0 * n as f64 / total as f64)
    }
}

/// Left-aligned labels, right-aligned values, optional notes; no trailing spaces.
fn push_rows(out: &mut String, rows: &[(String, String, String)]) {
    const LABEL_WIDTH: usize = 14;
    const VALUE_WIDTH: usize = 12;
    for (label, value, note) in rows {
        let line = format!("{label:<LABEL_WIDTH$} {value:>VALUE_WIDTH$}  {note}");
        out.push_str(line.trim_end());
        out.push('\n');
    }
}
