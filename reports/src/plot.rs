//! Plots of a [`Report`] with plotters: fast_p curves per level and baseline, speedup
//! distributions per level (log scale), per-problem speedups with their intervals, and
//! correctness by case family.
//!
//! [`plots`] picks the data out of the report (it computes nothing); [`render_svg`] draws a
//! plot into a string (for the leaderboard page) and [`write_png`] into a file — the only
//! I/O in this crate. Text is drawn with DejaVu Sans embedded in the binary (through
//! plotters' `ab_glyph` feature), so a PNG looks the same on a machine without fonts.
//! Font: `reports/assets/DejaVuSans.ttf`, Bitstream Vera license (see the LICENSE beside it).

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::export::shown_label;
use crate::report::Report;
use crate::task::Baseline;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TrueType font shipped with the crate; a failure here would
        // only leave text undrawn, never a wrong number.
        let _ = register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// A point series of a strip plot: `(group index, value)`.
pub type Points = Vec<(usize, f64)>;

/// One bar with an optional 95% interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    /// Which series (colour) it belongs to.
    pub series: usize,
    pub value: f64,
    pub interval: Option<(f64, f64)>,
}

/// What a plot shows.
#[derive(Debug, Clone, PartialEq)]
pub enum PlotData {
    /// Curves `y(x)`, one per series: fast_p over p.
    Lines {
        x_label: String,
        y_label: String,
        series: Vec<(String, Vec<(f64, f64)>)>,
    },
    /// Points per group on a log y axis: the speedup distribution per level.
    Strip {
        y_label: String,
        groups: Vec<String>,
        series: Vec<(String, Points)>,
    },
    /// Bars with intervals; `log` for speedups (with a line at 1).
    Bars {
        y_label: String,
        log: bool,
        series: Vec<String>,
        /// Colour of series 0 (so a run keeps its colour on a plot of its own).
        first_colour: usize,
        bars: Vec<Bar>,
    },
}

/// A plot: file stem, title and data.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// File stem, e.g. `fast_p-all-eager`.
    pub name: String,
    pub title: String,
    pub data: PlotData,
}

/// Every plot of the report: fast_p curves per scope and baseline (one curve per run),
/// speedup distributions per baseline, per-problem speedups per run, correctness by case
/// family.
pub fn plots(report: &Report) -> Vec<Plot> {
    let mut out = Vec::new();
    let mut scopes: Vec<String> = report
        .runs
        .iter()
        .flat_map(|r| r.scopes.iter().map(|s| s.scope.clone()))
        .collect();
    scopes.sort();
    scopes.dedup();
    for baseline in Baseline::ALL {
        for scope in &scopes {
            let series: Vec<(String, Vec<(f64, f64)>)> = report
                .runs
                .iter()
                .filter_map(|r| {
                    let b = r.scope(scope)?.baseline(baseline)?;
                    Some((shown_label(r), b.curve.clone()))
                })
                .collect();
            if series.is_empty() {
                continue;
            }
            out.push(Plot {
                name: format!("fast_p-{scope}-{}", baseline.as_str()),
                title: format!("fast_p vs {} ({scope})", baseline.as_str()),
                data: PlotData::Lines {
                    x_label: "p (speedup threshold)".into(),
                    y_label: "share of tasks correct and faster than p".into(),
                    series,
                },
            });
        }
        let groups: Vec<String> = scopes.iter().filter(|s| *s != "all").cloned().collect();
        let series: Vec<(String, Points)> = report
            .runs
            .iter()
            .map(|r| {
                let points = groups
                    .iter()
                    .enumerate()
                    .flat_map(|(g, scope)| {
                        r.scope(scope)
                            .and_then(|s| s.baseline(baseline))
                            .map(|b| b.speedups.iter().map(move |&s| (g, s)).collect())
                            .unwrap_or_else(Vec::new)
                    })
                    .filter(|&(_, s)| s > 0.0)
                    .collect();
                (shown_label(r), points)
            })
            .collect();
        if series.iter().any(|(_, p)| !p.is_empty()) {
            out.push(Plot {
                name: format!("speedups-{}", baseline.as_str()),
                title: format!(
                    "best correct speedup per task vs {}, by level",
                    baseline.as_str()
                ),
                data: PlotData::Strip {
                    y_label: "speedup (log scale)".into(),
                    groups,
                    series,
                },
            });
        }
    }
    for (i, run) in report.runs.iter().enumerate() {
        let bars: Vec<Bar> = run
            .problems
            .iter()
            .filter_map(|p| {
                Some(Bar {
                    label: format!("L{}/{}", p.level, p.id),
                    series: 0,
                    value: p.speedup.filter(|&s| s > 0.0)?,
                    interval: p.interval.map(|e| (e.low, e.high)),
                })
            })
            .collect();
        if !bars.is_empty() {
            out.push(Plot {
                name: format!("problems-{}", file_safe(&run.label)),
                title: format!(
                    "{}: speedup vs eager per problem (95% CI)",
                    shown_label(run)
                ),
                data: PlotData::Bars {
                    y_label: "speedup (log scale)".into(),
                    log: true,
                    series: vec![shown_label(run)],
                    first_colour: i,
                    bars,
                },
            });
        }
    }
    let mut families: Vec<String> = report
        .runs
        .iter()
        .flat_map(|r| r.families.iter().map(|f| f.family.clone()))
        .collect();
    families.sort();
    families.dedup();
    families.sort_by_key(|f| f != "random");
    let mut bars = Vec::new();
    for family in &families {
        for (i, run) in report.runs.iter().enumerate() {
            if let Some(f) = run.families.iter().find(|f| &f.family == family) {
                bars.push(Bar {
                    label: family.clone(),
                    series: i,
                    value: f.passed.value,
                    interval: Some((f.passed.low, f.passed.high)),
                });
            }
        }
    }
    if !bars.is_empty() {
        out.push(Plot {
            name: "families".into(),
            title: "correctness by case family (candidates passing every case)".into(),
            data: PlotData::Bars {
                y_label: "pass rate".into(),
                log: false,
                series: report.runs.iter().map(shown_label).collect(),
                first_colour: 0,
                bars,
            },
        });
    }
    // A plot with a run read unverified says so: a run's own plot when that run is, every
    // plot of several runs when one of them is.
    let own = |p: &Plot| {
        report
            .runs
            .iter()
            .find(|r| p.name == format!("problems-{}", file_safe(&r.label)))
    };
    for p in &mut out {
        let unverified = match own(p) {
            Some(run) => run.records_check.unverified(),
            None => !report.unverified.is_empty(),
        };
        if unverified {
            p.title = format!("UNVERIFIED: {}", p.title);
        }
    }
    out
}

/// A file-name-safe form of a run label.
pub fn file_safe(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A plot rendering failed (a plotters backend error, e.g. an unwritable PNG path).
#[derive(Debug, thiserror::Error)]
#[error("drawing plot {plot}: {message}")]
pub struct PlotError {
    pub plot: String,
    pub message: String,
}

fn size(plot: &Plot) -> (u32, u32) {
    match &plot.data {
        PlotData::Bars {
            bars, log: true, ..
        } => ((220 + 14 * bars.len() as u32).clamp(800, 4000), 480),
        _ => (800, 480),
    }
}

/// The plot as an SVG document.
pub fn render_svg(plot: &Plot) -> Result<String, PlotError> {
    register();
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, size(plot)).into_drawing_area();
        draw(&root, plot).map_err(|message| PlotError {
            plot: plot.name.clone(),
            message,
        })?;
    }
    Ok(buf)
}

/// Draws the plot into a PNG file at `path`.
pub fn write_png(plot: &Plot, path: &Path) -> Result<(), PlotError> {
    register();
    let root = BitMapBackend::new(path, size(plot)).into_drawing_area();
    draw(&root, plot).map_err(|message| PlotError {
        plot: plot.name.clone(),
        message: format!("{message} ({})", path.display()),
    })
}

fn colour(i: usize) -> RGBColor {
    // Okabe–Ito, distinguishable with colour-vision deficiencies.
    const C: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(213, 94, 0),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(120, 120, 120),
    ];
    C[i % C.len()]
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plot: &Plot) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&plot.title, (FAMILY, 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64);
    match &plot.data {
        PlotData::Lines {
            x_label,
            y_label,
            series,
        } => {
            let x_max = series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|&(x, _)| x))
                .fold(1.0f64, f64::max);
            let mut chart = builder
                .build_cartesian_2d(0.0..x_max, 0.0..1.0f64)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .label_style((FAMILY, 13))
                .axis_desc_style((FAMILY, 14))
                .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
                .draw()
                .map_err(err)?;
            for (i, (name, points)) in series.iter().enumerate() {
                let c = colour(i);
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
            legend(&mut chart)?;
        }
        PlotData::Strip {
            y_label,
            groups,
            series,
        } => {
            let values = series.iter().flat_map(|(_, p)| p.iter().map(|&(_, v)| v));
            let (lo, hi) = log_range(values);
            let n = groups.len().max(1);
            let mut chart = builder
                .build_cartesian_2d(-0.5..n as f64 - 0.5, (lo..hi).log_scale())
                .map_err(err)?;
            let label = |x: &f64| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    groups.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n + 1)
                .x_label_formatter(&label)
                .y_desc(y_label)
                .label_style((FAMILY, 13))
                .axis_desc_style((FAMILY, 14))
                .y_label_formatter(&|v| format!("{v:.2}x"))
                .draw()
                .map_err(err)?;
            unity_line(&mut chart, -0.5, n as f64 - 0.5)?;
            let runs = series.len().max(1) as f64;
            for (si, (name, points)) in series.iter().enumerate() {
                let c = colour(si);
                let offset = (si as f64 + 0.5) / runs * 0.6 - 0.3;
                chart
                    .draw_series(points.iter().enumerate().map(|(k, &(g, v))| {
                        // Deterministic jitter so equal speedups stay visible.
                        let jitter = ((k * 7919) % 11) as f64 / 11.0 * 0.12 - 0.06;
                        Circle::new((g as f64 + offset + jitter, v), 3, c.mix(0.7).filled())
                    }))
                    .map_err(err)?
                    .label(name)
                    .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
            }
            legend(&mut chart)?;
        }
        PlotData::Bars {
            y_label,
            log,
            series,
            first_colour,
            bars,
        } => {
            let mut labels: Vec<String> = Vec::new();
            for b in bars {
                if !labels.contains(&b.label) {
                    labels.push(b.label.clone());
                }
            }
            let n = labels.len().max(1);
            let per = series.len().max(1) as f64;
            let width = 0.8 / per;
            let x_of = |b: &Bar| {
                let g = labels.iter().position(|l| l == &b.label).unwrap_or(0) as f64;
                g - 0.4 + width * (b.series as f64 + 0.5)
            };
            let label = |x: &f64| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            let x_range = -0.5..n as f64 - 0.5;
            if *log {
                let values = bars
                    .iter()
                    .flat_map(|b| {
                        [
                            Some(b.value),
                            b.interval.map(|i| i.0),
                            b.interval.map(|i| i.1),
                        ]
                    })
                    .flatten();
                let (lo, hi) = log_range(values);
                let mut chart = builder
                    .build_cartesian_2d(x_range, (lo..hi).log_scale())
                    .map_err(err)?;
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(n.min(60) + 1)
                    .x_label_formatter(&label)
                    .y_desc(y_label)
                    .label_style((FAMILY, 12))
                    .axis_desc_style((FAMILY, 14))
                    .y_label_formatter(&|v| format!("{v:.2}x"))
                    .draw()
                    .map_err(err)?;
                for b in bars {
                    let (x, c) = (x_of(b), colour(b.series + first_colour));
                    chart
                        .draw_series([Rectangle::new(
                            [(x - width * 0.45, lo), (x + width * 0.45, b.value)],
                            c.mix(0.8).filled(),
                        )])
                        .map_err(err)?;
                    if let Some((l, h)) = b.interval {
                        chart
                            .draw_series([ErrorBar::new_vertical(
                                x,
                                l,
                                b.value,
                                h,
                                BLACK.stroke_width(1),
                                6,
                            )])
                            .map_err(err)?;
                    }
                }
                unity_line(&mut chart, -0.5, n as f64 - 0.5)?;
            } else {
                let mut chart = builder
                    .build_cartesian_2d(x_range, 0.0..1.0f64)
                    .map_err(err)?;
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(n + 1)
                    .x_label_formatter(&label)
                    .y_desc(y_label)
                    .label_style((FAMILY, 13))
                    .axis_desc_style((FAMILY, 14))
                    .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
                    .draw()
                    .map_err(err)?;
                for (si, name) in series.iter().enumerate() {
                    let c = colour(si + first_colour);
                    chart
                        .draw_series(bars.iter().filter(|b| b.series == si).map(|b| {
                            let x = x_of(b);
                            Rectangle::new(
                                [(x - width * 0.45, 0.0), (x + width * 0.45, b.value)],
                                c.mix(0.8).filled(),
                            )
                        }))
                        .map_err(err)?
                        .label(name)
                        .legend(move |(x, y)| {
                            Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled())
                        });
                    chart
                        .draw_series(bars.iter().filter(|b| b.series == si).filter_map(|b| {
                            let (l, h) = b.interval?;
                            Some(ErrorBar::new_vertical(
                                x_of(b),
                                l,
                                b.value,
                                h,
                                BLACK.stroke_width(1),
                                6,
                            ))
                        }))
                        .map_err(err)?;
                }
                legend(&mut chart)?;
            }
        }
    }
    root.present().map_err(err)
}

/// A log axis range around positive values, at least [0.5, 2] so that 1 is always shown.
fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (0.5f64, 2.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo / 1.25, hi * 1.25)
}

type LogChart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::combinators::LogCoord<f64>,
    >,
>;

/// A dashed-looking grey line at speedup 1.
fn unity_line<'a, DB: DrawingBackend + 'a>(
    chart: &mut LogChart<'a, DB>,
    x0: f64,
    x1: f64,
) -> Result<(), String> {
    chart
        .draw_series(LineSeries::new(
            [(x0, 1.0), (x1, 1.0)],
            RGBColor(90, 90, 90).stroke_width(1),
        ))
        .map_err(err)?;
    Ok(())
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completeness::{RecordsCheck, Verification};
    use crate::report::{build_report, RunInput};
    use crate::tests::record;
    use crate::SpeedupBasis;
    use kbench_record::Outcome;

    #[test]
    fn plots_showing_a_run_read_unverified_say_so_in_their_title() {
        let run = |label: &str, verification| RunInput {
            label: label.into(),
            path: label.into(),
            records: vec![(record(Outcome::Ok, Some((2.0, 2.0))), Default::default())],
            check: RecordsCheck {
                verification,
                ..RecordsCheck::default()
            },
            ..RunInput::default()
        };
        let report = build_report(
            &[
                run("checked", Verification::Verified),
                run("copied", Verification::Unverified),
            ],
            SpeedupBasis::Median,
        );
        let all = plots(&report);
        let title = |name: &str| &all.iter().find(|p| p.name == name).unwrap().title;
        assert!(title("problems-copied").starts_with("UNVERIFIED: copied (UNVERIFIED)"));
        assert!(!title("problems-checked").contains("UNVERIFIED"));
        assert!(title("fast_p-all-eager").starts_with("UNVERIFIED: "));
        let PlotData::Lines { series, .. } = &all
            .iter()
            .find(|p| p.name == "fast_p-all-eager")
            .unwrap()
            .data
        else {
            panic!("fast_p is a line plot")
        };
        assert_eq!(series[1].0, "copied (UNVERIFIED)");
    }
}
