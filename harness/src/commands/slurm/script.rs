//! The job array script (`DIR/slurm/job.sbatch`): array task `i` runs shard `i/N` of the
//! submitted command. Pure string building.

use std::path::Path;

use super::submission::{Sharded, Submission};
use super::EXIT_CODE;
use crate::runlog::SECRET;

/// Quotes `s` for bash: single quotes, with `'` written as `'\''`.
pub(super) fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The job array script. Array task `i` runs shard `i/N` in `DIR/shards/i`.
pub(crate) fn render_script(dir: &Path, sub: &Submission) -> String {
    let o = &sub.sbatch;
    let kind = sub.sharded();
    let mut s = String::from("#!/bin/bash\n");
    s += &format!(
        "# Written by `kbench slurm submit` (kbench {}): array task i evaluates shard i of {} of\n",
        sub.kbench_version, sub.shards
    );
    s += &format!("#   kbench {}\n", sub.command.join(" "));
    let d = quote(&dir.display().to_string());
    s += &format!(
        "# Follow with `kbench slurm status {d}`, continue stopped shards with `kbench slurm \
         resubmit {d}`,\n"
    );
    s += &match (kind, sub.store()) {
        (Sharded::Measure, Some(store)) => format!(
            "# then list the baselines with `kbench baselines show --store {}`.\n",
            quote(&store.display().to_string())
        ),
        _ => format!("# then join them with `kbench merge {d}`.\n"),
    };
    let mut opts = vec![
        format!("--job-name={}", o.job_name),
        format!(
            "--output={}",
            dir.join("slurm").join("logs").join("%A_%a.out").display()
        ),
        format!("--chdir={}", sub.workdir.display()),
        // Pre-empted or failed-node tasks go back to the queue and resume their shard; their
        // output is appended to, so the log keeps every attempt.
        "--requeue".to_string(),
        "--open-mode=append".to_string(),
    ];
    opts.extend(o.partition.iter().map(|p| format!("--partition={p}")));
    opts.extend(o.account.iter().map(|a| format!("--account={a}")));
    opts.extend(o.time.iter().map(|t| format!("--time={t}")));
    opts.extend(o.gpus_per_task.iter().map(|g| format!("--gres=gpu:{g}")));
    opts.extend(
        o.cpus_per_task
            .iter()
            .map(|c| format!("--cpus-per-task={c}")),
    );
    opts.extend(o.extra.iter().cloned());
    for opt in opts {
        s += &format!("#SBATCH {opt}\n");
    }
    let shards = quote(&dir.join("shards").display().to_string());
    let secret = quote(&dir.join(SECRET).display().to_string());
    let mut cmd = quote(&sub.kbench.display().to_string());
    for a in &sub.command {
        cmd.push(' ');
        cmd += &quote(a);
    }
    s += "set -u\n";
    for (k, v) in &sub.env {
        s += &format!("export {k}={}\n", quote(v));
    }
    let n = sub.shards;
    s += &format!(
        r#"shard=${{SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}}
dir={shards}/"$shard"
mkdir -p "$dir"
rm -f "$dir/{EXIT_CODE}"
echo "kbench shard $shard/{n}: job ${{SLURM_JOB_ID:-?}} on $(hostname), CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-}}" >&2
"#
    );
    s += &match kind {
        Sharded::Run => format!(
            r#"{cmd} --out "$dir" --shard "$shard/{n}" --secret-from {secret} --resume
rc=$?
echo "$rc" > "$dir/{EXIT_CODE}"
# 3 means "all evaluated, some kernels failed": the shard is complete, so Slurm sees success.
if [ "$rc" -eq 3 ]; then exit 0; fi
exit "$rc"
"#
        ),
        // measure resumes by itself from the run directories under --work; its 3 means
        // "problems still unmeasured", a failure to resubmit.
        Sharded::Measure => format!(
            r#"{cmd} --work "$dir" --shard "$shard/{n}"
rc=$?
echo "$rc" > "$dir/{EXIT_CODE}"
exit "$rc"
"#
        ),
    };
    s
}
