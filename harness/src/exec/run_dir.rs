//! The run directory of a run configuration: `run.json` says what the [`RunConfig`] asks
//! for, and the directory is opened (or resumed) from it.

use anyhow::Result;
use kbench_record::SCHEMA_VERSION;

use crate::config::RunConfig;
use crate::runlog::{now_unix, RunDir, RunManifest};

/// Creates the run directory of `config`, or reopens it with `config.resume`, with the
/// evaluations it plans (added to the recorded plan on resume).
pub(crate) fn open(config: &RunConfig, planned: kbench_record::Plan) -> Result<RunDir> {
    let mut asked = manifest_of(config);
    asked.planned = Some(planned);
    RunDir::open(
        &config.out,
        config.resume,
        config.secret_from.as_deref(),
        asked,
    )
}

/// What `config` asks for, as `run.json` records it; the run id and how records are signed
/// are left for [`RunDir::open`] to fill in, the plan for [`open`].
pub(crate) fn manifest_of(c: &RunConfig) -> RunManifest {
    let (cuda_header, cxx_header) = crate::worker::light_headers::light_header_labels();
    RunManifest {
        schema_version: SCHEMA_VERSION,
        kbench_version: env!("CARGO_PKG_VERSION").into(),
        run_id: String::new(),
        created_unix_s: now_unix(),
        agent: c.agent.name().into(),
        suite: c.suite_label.clone(),
        device: c.device.to_string(),
        precision: c.precision.to_string(),
        profile: c.profile.to_string(),
        model_mode: c.model_mode.to_string(),
        trials: c.trials,
        families: c.families.iter().map(|f| f.to_string()).collect(),
        timed_calls: c.timing.as_ref().map(|t| t.timed_calls),
        min_timed_calls: c.timing.as_ref().map(|t| t.min_timed_calls),
        weight_seed: c.weight_seed,
        shard: c.shard.map(|s| s.to_string()),
        record_mac: None,
        cuda_header,
        cxx_header,
        planned: None,
    }
}
