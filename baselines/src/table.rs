//! The baselines a run compares against, as plain data: which files were used
//! ([`BaselineTable`], [`UsedFile`]), a candidate's speedups over them, and what
//! `kbench run --baselines` asked for ([`BaselineRequest`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use kbench_record::{BaselineRatio, TimingStats};
use kbench_suites::Problem;

use crate::mode::Mode;
use crate::store::{BaselineFile, Lookup};

/// Agent name of baseline candidates in records.
pub const AGENT: &str = "baseline";

/// `--baselines` named no mode, or one that is not a baseline mode.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(String);

/// One baseline file a run compares against.
#[derive(Debug, Clone)]
pub struct UsedFile {
    pub mode: Mode,
    pub path: PathBuf,
    /// `measured`, `live` or `imported`.
    pub origin: String,
    pub file: BaselineFile,
}

/// The baselines a run's records are compared against.
#[derive(Debug, Clone, Default)]
pub struct BaselineTable {
    pub used: Vec<UsedFile>,
}

impl BaselineTable {
    /// Speedups of a timed candidate over every baseline with a usable time for `problem`.
    pub fn ratios(
        &self,
        problem: &kbench_record::ProblemRef,
        candidate: &TimingStats,
    ) -> BTreeMap<String, BaselineRatio> {
        let mut out = BTreeMap::new();
        for u in &self.used {
            let Lookup::Usable(e) = u.file.lookup(problem.level, &problem.file, &problem.sha256)
            else {
                continue;
            };
            // An imported entry has no median: then both sides use their means.
            let (basis, base, cand) = match e.median {
                Some(m) => ("median", m, candidate.median_ms),
                None => ("mean", e.mean, candidate.mean_ms),
            };
            if !(base > 0.0 && cand > 0.0) {
                continue;
            }
            out.insert(
                u.mode.as_str().to_string(),
                BaselineRatio {
                    speedup: base / cand,
                    speedup_mean: (candidate.mean_ms > 0.0).then(|| e.mean / candidate.mean_ms),
                    baseline_ms: base,
                    basis: basis.into(),
                    origin: u.origin.clone(),
                    file: u.path.display().to_string(),
                },
            );
        }
        out
    }

    /// The modes with no usable time for `problem`, with why: what a record carries as
    /// `baselines_missing`, so reports leave the problem out of those modes' figures.
    pub fn missing(&self, problem: &kbench_record::ProblemRef) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for u in &self.used {
            let why = match u.file.lookup(problem.level, &problem.file, &problem.sha256) {
                Lookup::Usable(_) => continue,
                Lookup::Missing => "missing".to_string(),
                Lookup::Stale(why) => format!("stale: {why}"),
                Lookup::Failed(e) => {
                    let first = e.message.lines().next().unwrap_or("").trim();
                    if first.is_empty() {
                        format!("failed: {}", e.outcome)
                    } else {
                        format!("failed: {}: {first}", e.outcome)
                    }
                }
            };
            out.insert(u.mode.as_str().to_string(), why);
        }
        out
    }

    /// How many of `problems` each file has a usable time for.
    pub fn coverage(&self, problems: &[Problem]) -> Vec<(usize, usize)> {
        self.used
            .iter()
            .map(|u| {
                let measured = crate::coverage::coverage_of(&u.file, problems)
                    .iter()
                    .map(|c| c.measured)
                    .sum();
                (measured, problems.len())
            })
            .collect()
    }

    /// `baselines_used.json` of a run: which file each mode came from and what it covers.
    pub fn manifest(&self, problems: &[Problem]) -> serde_json::Value {
        let cov = self.coverage(problems);
        serde_json::Value::Array(
            self.used
                .iter()
                .zip(cov)
                .map(|(u, (n, total))| {
                    serde_json::json!({
                        "mode": u.mode.as_str(),
                        "file": u.path.display().to_string(),
                        "origin": u.origin,
                        "gpu": u.file.meta.environment.gpu,
                        "torch": u.file.meta.environment.torch,
                        "caveats": u.file.meta.caveats,
                        "problems_with_time": n,
                        "problems": total,
                    })
                })
                .collect(),
        )
    }

    /// Lines for the run's summary: one per baseline file.
    pub fn describe(&self, problems: &[Problem]) -> Vec<String> {
        self.used
            .iter()
            .zip(self.coverage(problems))
            .map(|(u, (n, total))| {
                let mut s = format!(
                    "baseline {:<12} {} ({}; {} torch {}; {n}/{total} problems)",
                    u.mode.as_str(),
                    u.path.display(),
                    u.origin,
                    u.file.meta.environment.gpu,
                    u.file.meta.environment.torch,
                );
                for c in &u.file.meta.caveats {
                    s.push_str(&format!("\n    caveat: {c}"));
                }
                s
            })
            .collect()
    }
}

/// What `kbench run --baselines` asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BaselineRequest {
    pub modes: Vec<Mode>,
    /// Measure every selected problem now, into the run directory, instead of using the
    /// store.
    pub live: bool,
    /// Explicit files, e.g. an imported KernelBench file: mode → path.
    pub files: Vec<(Mode, PathBuf)>,
    /// Use files timed on another GPU or torch version.
    pub force: bool,
    pub store: Option<PathBuf>,
}

impl BaselineRequest {
    /// Parses `--baselines eager,compile` / `live` / `live,max-autotune`: `live` alone means
    /// eager and compile, measured now.
    pub fn parse(spec: &str) -> Result<BaselineRequest, RequestError> {
        let mut live = false;
        let mut rest = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "live" {
                live = true;
            } else {
                rest.push(part);
            }
        }
        let modes = if rest.is_empty() {
            if !live {
                return Err(RequestError(format!("--baselines {spec:?} names no baseline mode: e.g. eager,compile,max-autotune or live")));
            }
            vec![Mode::Eager, Mode::Compile]
        } else {
            Mode::parse_list(&rest.join(","))
                .map_err(|e| RequestError(format!("--baselines: {e}")))?
        };
        Ok(BaselineRequest {
            modes,
            live,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        let r = BaselineRequest::parse("eager,compile,max-autotune").unwrap();
        assert_eq!(r.modes, vec![Mode::Eager, Mode::Compile, Mode::MaxAutotune]);
        assert!(!r.live);
        let r = BaselineRequest::parse("live").unwrap();
        assert_eq!(
            (r.modes.as_slice(), r.live),
            (&[Mode::Eager, Mode::Compile][..], true)
        );
        let r = BaselineRequest::parse("live,max-autotune").unwrap();
        assert_eq!(
            (r.modes.as_slice(), r.live),
            (&[Mode::MaxAutotune][..], true)
        );
        assert!(BaselineRequest::parse("turbo").is_err());
        assert!(BaselineRequest::parse("").is_err());
    }
}
