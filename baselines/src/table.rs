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
    /// The store's eager file beside the stored files used (same GPU and torch), whether or
    /// not eager was asked for: each record's `eager_drift` compares its times with the run's
    /// own reference. None for live runs and when the store has no eager file.
    pub anchor: Option<UsedFile>,
}

impl BaselineTable {
    /// Speedups of a timed candidate over every baseline with a usable time for `problem`.
    /// `reference` is the run's own timing of the problem's eager code, beside the candidate.
    pub fn ratios(
        &self,
        problem: &kbench_record::ProblemRef,
        candidate: &TimingStats,
        reference: &TimingStats,
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
                    eager_drift: self.eager_drift(u, problem, basis, reference),
                },
            );
        }
        out
    }

    /// The anchor's eager time for `problem` over the run's reference time, on `basis`, for
    /// a stored file `u` of the anchor's store folder (same GPU and torch).
    fn eager_drift(
        &self,
        u: &UsedFile,
        problem: &kbench_record::ProblemRef,
        basis: &str,
        reference: &TimingStats,
    ) -> Option<f64> {
        let a = self.anchor.as_ref()?;
        if u.origin != "measured" || u.path.parent() != a.path.parent() {
            return None;
        }
        let Lookup::Usable(e) = a.file.lookup(problem.level, &problem.file, &problem.sha256) else {
            return None;
        };
        let (stored, run) = match basis {
            "median" => (e.median?, reference.median_ms),
            _ => (e.mean, reference.mean_ms),
        };
        (stored > 0.0 && run > 0.0).then(|| stored / run)
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
        (
            BaselineTable {
                used: vec![used],
                anchor: None,
            },
            problems,
        )
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

    fn stats(median_ms: f64, mean_ms: f64) -> TimingStats {
        TimingStats {
            clock: "perf_counter".into(),
            samples_ms: vec![median_ms],
            median_ms,
            mean_ms,
            min_ms: median_ms,
            max_ms: median_ms,
            std_ms: 0.0,
            p25_ms: median_ms,
            p75_ms: median_ms,
            wall_s: 0.0,
        }
    }

    /// An eager file of the store folder `dir` timing `problems[0]` at 3 ms (median and mean).
    fn anchor(dir: &str, problems: &[Problem]) -> UsedFile {
        let mut f = BaselineFile::new(Mode::Eager, Origin::Measured, BaselineEnv::default());
        let p = &problems[0];
        let e = Entry {
            problem_sha256: Some(p.sha256.clone()),
            ..Entry::from_samples(vec![3.0], "H100", "cuda:0")
        };
        f.levels.entry(1).or_default().insert(p.file.clone(), e);
        UsedFile {
            mode: Mode::Eager,
            path: PathBuf::from(dir).join("eager.json"),
            origin: "measured".into(),
            file: f,
        }
    }

    #[test]
    fn stored_speedups_say_how_far_the_stores_eager_time_is_from_the_runs() {
        // The compile file (1 ms for every problem) sits at `compile.json`, a folder of "".
        let (mut t, problems) = table("measured", [None, None, None]);
        let cand = stats(0.5, 0.5);
        let p0 = problems[0].to_ref();
        // No anchor: no drift.
        assert_eq!(
            t.ratios(&p0, &cand, &stats(2.0, 2.0))["compile"].eager_drift,
            None
        );
        // The store's eager time 3 ms against the run's own reference of 2 ms: 1.5.
        t.anchor = Some(anchor("", &problems));
        let r = &t.ratios(&p0, &cand, &stats(2.0, 4.0))["compile"];
        assert_eq!((r.speedup, r.eager_drift), (2.0, Some(1.5)));
        // A problem the anchor has no time for; a file from another folder; live times.
        assert_eq!(
            t.ratios(&problems[1].to_ref(), &cand, &stats(2.0, 2.0))["compile"].eager_drift,
            None
        );
        t.anchor = Some(anchor("elsewhere", &problems));
        assert_eq!(
            t.ratios(&p0, &cand, &stats(2.0, 2.0))["compile"].eager_drift,
            None
        );
        let (mut live, problems) = table("live", [None, None, None]);
        live.anchor = Some(anchor("", &problems));
        assert_eq!(
            live.ratios(&problems[0].to_ref(), &cand, &stats(2.0, 2.0))["compile"].eager_drift,
            None
        );
        // An anchor entry without a median against a median-basis time: not compared
        // across statistics.
        let mut a = anchor("", &problems);
        a.file
            .levels
            .get_mut(&1)
            .unwrap()
            .values_mut()
            .for_each(|e| e.median = None);
        t.anchor = Some(a);
        assert_eq!(
            t.ratios(&p0, &cand, &stats(2.0, 6.0))["compile"].eager_drift,
            None
        );
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
