//! `kbench merge` of a `baselines measure` submission, which has nothing to merge.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::status::shard_finished;
use super::submission::Submission;
use super::SUBMISSION;

/// `kbench merge` of a `baselines measure` submission: its shards committed into the
/// baseline store as they measured, so there is nothing to merge. Returns what to say, or
/// `None` when no input is such a submission (then merge goes on as usual).
pub(crate) fn merge_measure(
    inputs: &[PathBuf],
    out: Option<&Path>,
    partial: bool,
) -> Result<Option<String>> {
    for input in inputs {
        let dir =
            std::path::absolute(input).with_context(|| format!("resolving {}", input.display()))?;
        if !dir.join(SUBMISSION).exists() {
            continue;
        }
        let sub = Submission::load(&dir)?;
        let Some(store) = sub.store() else {
            continue;
        };
        let (d, st) = (dir.display(), store.display());
        if inputs.len() > 1 || out.is_some() {
            bail!(
                "{d} is a `kbench baselines measure` submission: its shards commit into the baseline store {st}, so it has no run to merge with others or into --out; list the store with `kbench baselines show --store {st}`"
            );
        }
        let unfinished: Vec<String> = (0..sub.shards)
            .filter(|&i| !shard_finished(&dir, i))
            .map(|i| i.to_string())
            .collect();
        let mut say = format!(
            "nothing to merge: {d} is a `kbench baselines measure` submission, whose shards commit their baselines into the store {st} as they measure them; list them with `kbench baselines show --store {st}`"
        );
        if !unfinished.is_empty() {
            let which = unfinished.join(",");
            if !partial {
                bail!(
                    "shard(s) {which} of {d} have not finished (see `kbench slurm status {d}`; `kbench slurm resubmit {d}` continues them); what the shards measured so far is in the store {st} already: there is nothing to merge"
                );
            }
            say += &format!(
                "\nshard(s) {which} have not finished: the store lacks what they have still to measure (`kbench slurm resubmit {d}`)"
            );
        }
        return Ok(Some(say));
    }
    Ok(None)
}
