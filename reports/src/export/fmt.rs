//! Number formats and an aligned grid shared by the text renderers.

use crate::stats::{Estimate, Rate};

/// `57.6%`.
pub(crate) fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// `57.6% [51.4, 63.6]`: a rate with its Wilson interval, in percent.
pub(crate) fn rate_ci(r: &Rate) -> String {
    format!(
        "{:.1}% [{:.1}, {:.1}]",
        100.0 * r.value,
        100.0 * r.low,
        100.0 * r.high
    )
}

/// `1.677x`, or `-` when there is none.
pub(crate) fn speedup(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_string(), |s| format!("{s:.3}x"))
}

/// `1.677x [1.52, 1.84]`, or `-`.
pub(crate) fn speedup_ci(e: Option<&Estimate>) -> String {
    e.map_or_else(
        || "-".to_string(),
        |e| format!("{:.3}x [{:.2}, {:.2}]", e.value, e.low, e.high),
    )
}

/// Rows of cells under a header, rendered as aligned text or as a Markdown table.
pub(crate) struct Grid {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Grid {
    pub(crate) fn new(header: &[&str]) -> Grid {
        Grid {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        (0..self.header.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.header[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Aligned columns: the first left-aligned, the rest right-aligned; no trailing spaces.
    pub(crate) fn text(&self) -> String {
        let w = self.widths();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = w[i] - c.chars().count();
                if i == 0 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str("  ");
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.header);
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    /// A GitHub-flavoured Markdown table, numbers right-aligned.
    pub(crate) fn markdown(&self) -> String {
        let esc = |c: &String| c.replace('|', "\\|");
        let mut out = format!(
            "| {} |\n",
            self.header.iter().map(esc).collect::<Vec<_>>().join(" | ")
        );
        out.push('|');
        for i in 0..self.header.len() {
            out.push_str(if i == 0 { " --- |" } else { " ---: |" });
        }
        out.push('\n');
        for r in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                r.iter().map(esc).collect::<Vec<_>>().join(" | ")
            ));
        }
        out
    }
}
