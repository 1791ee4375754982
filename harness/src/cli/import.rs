//! Arguments of `kbench import`: a published kernel set into kbench's replay layout and a
//! claims file.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// The layouts `kbench import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFormat {
    /// KernelBench's runs/<name>/: level_L_problem_P_sample_S_kernel.py, eval_results.json.
    KernelbenchRuns,
    /// One JSON object a line: level_id, task_id, ref_code, custom_code, score_* fields.
    Jsonl,
    /// KernelBenchLeaderboard's site: docs/assets/data.json, solutions/, problems/.
    Leaderboard,
}

impl ImportFormat {
    /// The name written in the claims file.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportFormat::KernelbenchRuns => "kernelbench-runs",
            ImportFormat::Jsonl => "jsonl",
            ImportFormat::Leaderboard => "leaderboard",
        }
    }
}

/// The module mode a set's own evaluation ran both models in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelModeArg {
    Train,
    Eval,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Then evaluate it: kbench run --kernelbench KernelBench --agent replay \
                  --replay-dir DIR --out RUN_DIR; claims.json in DIR says what the set claims."
)]
pub struct ImportSetArgs {
    /// The source's layout.
    #[arg(value_enum)]
    pub format: ImportFormat,
    /// The set: a runs/<name> folder, a .jsonl file, or the leaderboard repository (or its
    /// docs/assets folder).
    #[arg(value_name = "SRC")]
    pub src: PathBuf,
    /// Folder for the kernels (replay layout), refs/ and claims.json: empty, new, or an
    /// earlier import (replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The set's name in claims.json (default: the source's folder or file name).
    #[arg(long)]
    pub name: Option<String>,
    /// The tolerance the set's own check used, `ATOL,RTOL` (e.g. 1e-2,1e-2).
    #[arg(long, value_name = "ATOL,RTOL")]
    pub tolerance: Option<String>,
    /// The module mode the set's own evaluation used.
    #[arg(long, value_enum)]
    pub model_mode: Option<ModelModeArg>,
    /// kernelbench-runs: KernelBench's baseline times (results/timing/<hw>/baseline_time_torch*.json),
    /// to turn eval_results.json runtimes into claimed speedups.
    #[arg(long, value_name = "FILE")]
    pub baseline_json: Option<PathBuf>,
    /// The baseline a claimed-speedup field is against, `FIELD=eager|compile|max-autotune`
    /// (repeatable, or comma-separated), where its name does not say (`score_default` reads
    /// as eager, a bare `score` as unknown).
    #[arg(long, value_name = "FIELD=BASELINE", value_delimiter = ',')]
    pub claim_baseline: Vec<String>,
    /// Import into a non-empty --out that is not an earlier import (its
    /// level_*_problem_*_sample_*_kernel.py files and refs/ are replaced).
    #[arg(long)]
    pub force: bool,
}
