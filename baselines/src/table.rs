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

    /// `baselines_used.json` of a run: which file each mode came from, what it covers, and
    /// which physical GPUs timed the times used (`timed_on`: entries per GPU UUID;
    /// `timed_on_unrecorded`: entries that do not say).
    pub fn manifest(&self, problems: &[Problem]) -> serde_json::Value {
        let cov = self.coverage(problems);
        serde_json::Value::Array(
            self.used
                .iter()
                .zip(cov)
                .map(|(u, (n, total))| {
                    let (on, unrecorded) = u.timed_on(problems);
                    serde_json::json!({
                        "mode": u.mode.as_str(),
                        "file": u.path.display().to_string(),
                        "origin": u.origin,
                        "gpu": u.file.meta.environment.gpu,
                        "torch": u.file.meta.environment.torch,
                        "caveats": u.file.meta.caveats,
                        "problems_with_time": n,
                        "problems": total,
                        "timed_on": on,
                        "timed_on_unrecorded": unrecorded,
                    })
                })
                .collect(),
        )
    }

    /// Lines for the run's summary: one per baseline file, and under a file of times taken
    /// before this run a note when some were not taken on `run_gpus` (the UUIDs of the GPUs
    /// that timed this run's candidates; empty on the CPU, where no note is given).
    pub fn describe(&self, problems: &[Problem], run_gpus: &[String]) -> Vec<String> {
        self.used
            .iter()
            .zip(self.coverage(problems))
            .map(|(u, (n, total))| {
                let env = &u.file.meta.environment;
                let mut s = format!(
                    "baseline {:<12} {} ({}; {} torch {}; {n}/{total} problems)",
                    u.mode.as_str(),
                    u.path.display(),
                    u.origin,
                    env.gpu,
                    env.torch,
                );
                for c in &u.file.meta.caveats {
                    s.push_str(&format!("\n    caveat: {c}"));
                }
                if let Some(note) = u.elsewhere_note(problems, run_gpus) {
                    s.push_str(&format!("\n    note: {note}"));
                }
                s
            })
            .collect()
    }
}

impl UsedFile {
    /// Which physical GPUs timed this file's usable entries for `problems`: entries per GPU
    /// UUID, and how many do not say (imported, or measured before kbench recorded it).
    pub fn timed_on(&self, problems: &[Problem]) -> (BTreeMap<String, usize>, usize) {
        crate::store::gpus_of(problems.iter().filter_map(|p| {
            let r = p.to_ref();
            match self.file.lookup(r.level, &r.file, &r.sha256) {
                Lookup::Usable(e) => Some(e),
                _ => None,
            }
        }))
    }

    /// For a file of times taken before the run (not `live`), how many of those it uses were
    /// taken on another GPU than the run's or on one not recorded: two GPUs of one model time
    /// the same code differently, by more than one GPU's noise between two runs.
    fn elsewhere_note(&self, problems: &[Problem], run_gpus: &[String]) -> Option<String> {
        if self.origin == "live" || run_gpus.is_empty() {
            return None;
        }
        let (on, unrecorded) = self.timed_on(problems);
        let other: usize = on
            .iter()
            .filter(|(g, _)| !run_gpus.contains(g))
            .map(|(_, n)| n)
            .sum();
        if other + unrecorded == 0 {
            return None;
        }
        let total = on.values().sum::<usize>() + unrecorded;
        let what = match (other, unrecorded) {
            (o, 0) => format!("{o} of the {total} times used were taken on another GPU than this run's"),
            (0, u) => format!("{u} of the {total} times used do not say which GPU took them"),
            (o, u) => format!(
                "{o} of the {total} times used were taken on another GPU than this run's and {u} do not say which"
            ),
        };
        Some(format!(
            "{what}; GPUs of one model can time the same code several percent apart, beyond one GPU's \
             noise (docs/baselines.md, stored against live): `--baselines live,{}` times it on \
             this run's GPU",
            self.mode.as_str()
        ))
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
    use crate::coverage::tests::problem;
    use crate::store::{BaselineEnv, Entry, Origin};

    const A: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000000";
    const B: &str = "GPU-bbbbbbbb-0000-0000-0000-000000000000";

    /// A compile file timing problems 1/1..=1/3 on GPU A, GPU B and one not named.
    fn table(origin: &str, gpus: [Option<&str>; 3]) -> (BaselineTable, Vec<Problem>) {
        let problems: Vec<Problem> = (1..=3).map(|i| problem(1, i)).collect();
        let mut f = BaselineFile::new(Mode::Compile, Origin::Measured, BaselineEnv::default());
        for (p, g) in problems.iter().zip(gpus) {
            let e = Entry {
                problem_sha256: Some(p.sha256.clone()),
                gpu_uuid: g.map(str::to_string),
                ..Entry::from_samples(vec![1.0], "H100", "cuda:0")
            };
            f.levels.entry(1).or_default().insert(p.file.clone(), e);
        }
        let used = UsedFile {
            mode: Mode::Compile,
            path: "compile.json".into(),
            origin: origin.into(),
            file: f,
        };
        (BaselineTable { used: vec![used] }, problems)
    }

    #[test]
    fn stored_times_say_when_another_gpu_took_them() {
        let (t, problems) = table("measured", [Some(A), Some(B), None]);
        assert_eq!(
            t.used[0].timed_on(&problems),
            (BTreeMap::from([(A.to_string(), 1), (B.to_string(), 1)]), 1)
        );
        assert_eq!(t.used[0].file.gpus(), t.used[0].timed_on(&problems));
        let lines = t.describe(&problems, &[A.to_string()]);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].contains("\n    note: 1 of the 3 times used were taken on another GPU than this run's and 1 do not say which;"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("`--baselines live,compile`"),
            "{}",
            lines[0]
        );
        // Only what the run uses counts: problem 1/2 alone, timed on B.
        let lines = t.describe(&problems[1..2], &[A.to_string()]);
        assert!(
            lines[0].contains("1 of the 1 times used were taken on another GPU than this run's;"),
            "{}",
            lines[0]
        );
        let lines = t.describe(&problems[2..], &[A.to_string()]);
        assert!(
            lines[0].contains("1 of the 1 times used do not say which GPU took them;"),
            "{}",
            lines[0]
        );
        // All on the run's GPUs, a run on the CPU (no GPU to compare), live times: no note.
        assert!(!t.describe(&problems[..2], &[A.to_string(), B.to_string()])[0].contains("note:"));
        assert!(!t.describe(&problems, &[])[0].contains("note:"));
        let (live, problems) = table("live", [Some(A), Some(B), None]);
        assert!(!live.describe(&problems, &[A.to_string()])[0].contains("note:"));
        // baselines_used.json names them.
        let m = t.manifest(&problems);
        assert_eq!(m[0]["timed_on"][A], 1);
        assert_eq!(m[0]["timed_on"][B], 1);
        assert_eq!(m[0]["timed_on_unrecorded"], 1);
    }

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
