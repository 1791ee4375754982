//! Choosing a task's final kernel without rewarding timing noise.
//!
//! Keeping the fastest of several noisy measurements biases the speedup upward (the
//! winner's curse): the same source timed 1.33x and 1.17x keeps 1.33x, and a replay gives
//! something else. So the pick is made in three steps:
//!
//! 1. **Finalists**: the correct, timed kernels, identical sources (same sha256) collapsed
//!    into one (ranked by the mean of their measurements), the `--finalists` fastest of them
//!    (default 4, `DEFAULT_FINALISTS`).
//! 2. **Selection**: the finalists are re-timed together, as one batch of the evaluation
//!    service: back to back on one device, against the problem's one open reference session
//!    (the same reference worker and cached inputs), nothing else evaluated in between; each
//!    one's speedup is, as always, over reference calls interleaved with its own. The
//!    fastest there is chosen. This is the minimum form: the finalists are not
//!    interleaved round-robin *with each other* in one worker (that needs a multi-candidate
//!    worker protocol); each is timed against the same reference session, so slow drift of
//!    the machine moves reference and candidate alike.
//! 3. **Fresh measurement**: the chosen kernel is evaluated once more after the choice
//!    (`final_<name>`), and that record's speedup is the task's result: it was used for no
//!    choice, so the maximum's bias does not reach it. `kbench report` takes a task's final
//!    record as its result where one exists ([`kbench_record::SelectionRole::Final`]).
//!
//! One correct kernel skips step 2. Runs without timing, tasks without a correct kernel and
//! `--finalists 0` keep the old rule (fastest measured correct kernel, else the last one).

use anyhow::{Context, Result};
use kbench_record::{EvalRecord, Selection, SelectionRole};

use super::task::{pick_final, Finalist, KernelResult, SelectionReport, TaskCtx};

#[cfg(test)]
/// Finalists re-timed by default: enough that a kernel measured slow once by noise can still
/// win, few enough that the re-timing costs a handful of evaluations per task.
pub(crate) const DEFAULT_FINALISTS: u32 = 4;

/// What the task reports: its final kernel (the fresh record's result when there was a
/// selection), its source, and how it was chosen.
pub(super) type Chosen = (KernelResult, String, Option<SelectionReport>);

/// Chooses the task's final kernel among `sources` (every kernel the agent wrote, in order)
/// as the module comment says.
pub(super) fn choose(
    ctx: &TaskCtx,
    finalists: u32,
    sources: &[(KernelResult, String)],
) -> Result<Option<Chosen>> {
    let legacy = || pick_final(sources).map(|(k, s)| (k, s, None));
    let ranked = rank(sources);
    if finalists == 0 || ranked.is_empty() {
        return Ok(legacy());
    }
    let top: Vec<&Ranked> = ranked.iter().take(finalists as usize).collect();
    let n = top.len() as u32;
    let sel = |role, of: &str, session: Vec<String>| Selection {
        role,
        of: of.to_string(),
        finalists: n,
        session,
    };
    let mut timed: Vec<Option<f64>> = vec![None; top.len()];
    let mut pick = 0;
    if top.len() > 1 {
        let records = ctx.eval.remeasure(
            ctx.problem,
            top.iter()
                .map(|r| {
                    (
                        format!("select_{}", r.name),
                        r.source.clone(),
                        sel(SelectionRole::Finalist, &r.name, Vec::new()),
                    )
                })
                .collect(),
            None,
        )?;
        timed = records.iter().map(speedup).collect();
        // The fastest in the selection batch; ties (and a batch where none stayed correct)
        // go to the better-ranked finalist.
        for (i, s) in timed.iter().enumerate() {
            if let Some(s) = s {
                if timed[pick].is_none_or(|b| *s > b) {
                    pick = i;
                }
            }
        }
    }
    let chosen = top[pick];
    let session: Vec<String> = top
        .iter()
        .zip(&timed)
        .filter(|_| top.len() > 1)
        .map(|(r, s)| match s {
            Some(s) => format!("{} {s:.4}x", r.name),
            None => format!("{} not correct or not timed", r.name),
        })
        .collect();
    let final_name = format!("final_{}", chosen.name);
    let fresh = ctx
        .eval
        .remeasure(
            ctx.problem,
            vec![(
                final_name.clone(),
                chosen.source.clone(),
                sel(SelectionRole::Final, &chosen.name, session),
            )],
            ctx.unbilled_rest(),
        )?
        .pop()
        .context("no record of the final measurement")?;
    let report = SelectionReport {
        distinct_correct: ranked.len() as u32,
        finalists: top
            .iter()
            .zip(&timed)
            .map(|(r, s)| Finalist {
                name: r.name.clone(),
                sha256: r.sha256.clone(),
                agent_speedup: r.mean,
                selection_speedup: *s,
            })
            .collect(),
        chosen: chosen.name.clone(),
        final_record: final_name,
        final_speedup: speedup(&fresh),
    };
    Ok(Some((
        KernelResult::from_record(&fresh),
        chosen.source.clone(),
        Some(report),
    )))
}

fn speedup(r: &EvalRecord) -> Option<f64> {
    r.outcome
        .is_ok()
        .then(|| r.timing.as_ref().map(|t| t.speedup))
        .flatten()
}

/// A distinct correct, timed source: its first name and the mean of its measurements.
struct Ranked {
    name: String,
    sha256: String,
    source: String,
    mean: f64,
}

/// Distinct correct, timed sources, fastest (by mean measured speedup) first; ties keep the
/// order the agent wrote them in.
fn rank(sources: &[(KernelResult, String)]) -> Vec<Ranked> {
    let mut groups: Vec<(Ranked, Vec<f64>)> = Vec::new();
    for (k, src) in sources {
        let (true, Some(s)) = (k.correct, k.speedup) else {
            continue;
        };
        match groups.iter_mut().find(|(g, _)| g.sha256 == k.sha256) {
            Some((_, seen)) => seen.push(s),
            None => groups.push((
                Ranked {
                    name: k.name.clone(),
                    sha256: k.sha256.clone(),
                    source: src.clone(),
                    mean: 0.0,
                },
                vec![s],
            )),
        }
    }
    let mut ranked: Vec<Ranked> = groups
        .into_iter()
        .map(|(mut r, seen)| {
            r.mean = seen.iter().sum::<f64>() / seen.len() as f64;
            r
        })
        .collect();
    ranked.sort_by(|a, b| b.mean.total_cmp(&a.mean));
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    fn k(name: &str, sha: &str, correct: bool, speedup: Option<f64>) -> (KernelResult, String) {
        (
            KernelResult {
                name: name.into(),
                sha256: sha.into(),
                correct,
                speedup,
                outcome: if correct { "ok" } else { "mismatch" }.into(),
            },
            format!("source {sha}"),
        )
    }

    #[test]
    fn identical_sources_collapse_and_rank_by_their_mean() {
        let sources = [
            k("a", "1", true, Some(1.33)),
            k("b", "2", true, Some(1.25)),
            k("c", "1", true, Some(1.07)),
            k("d", "3", false, Some(9.0)),
            k("e", "4", true, None),
            k("f", "5", true, Some(1.25)),
        ];
        let r = rank(&sources);
        let names: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        // a's source averages 1.2; the incorrect 9x and the untimed kernel are not finalists;
        // b and f tie and keep their order.
        assert_eq!(names, ["b", "f", "a"]);
        assert_abs_diff_eq!(r[2].mean, 1.2, epsilon = 1e-12);
    }
}
