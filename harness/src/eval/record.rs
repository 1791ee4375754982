//! Assembling records: keys, the candidate's reference, the environment every record of a
//! run carries, and the records of candidates that never ran (a problem whose reference
//! failed, a plan entry decided without a worker).

use kbench_record::{
    CandidateRef, Device, Environment, EvalRecord, Outcome, ProblemRef, SCHEMA_VERSION,
};

use super::Unit;
use crate::agents::Candidate;
use crate::judge::Tolerance;
use crate::plan::Unjudged;
use crate::runlog::{now_unix, RunDir};
use crate::worker::python::PythonInfo;
use crate::worker::sandbox::Containment;
use kbench_baselines::BaselineTable;

pub(crate) fn candidate_ref(agent: &str, c: &Candidate) -> CandidateRef {
    CandidateRef {
        agent: agent.into(),
        name: c.name.clone(),
        sample: c.sample,
        source_path: c.source_path.as_ref().map(|p| p.display().to_string()),
        sha256: c.sha256.clone(),
        selection: c.selection.clone(),
    }
}

/// The record of a candidate whose problem's reference failed: nothing to judge it against.
pub(crate) fn reference_error_record(
    tol: Tolerance,
    device: Device,
    run_dir: &RunDir,
    unit: &Unit,
    message: &str,
    env: Environment,
    baselines: Option<&BaselineTable>,
) -> EvalRecord {
    let outcome = Outcome::ReferenceError {
        message: message.to_string(),
    };
    let candidate = candidate_ref(unit.agent, unit.cand);
    let mut r = bare_record(
        tol,
        device,
        run_dir,
        unit.problem.to_ref(),
        candidate,
        outcome,
        env,
    );
    r.cost = unit.cand.cost.clone();
    r.baselines_missing = missing_baselines(baselines, &r.problem);
    r
}

/// The record of a plan entry decided without any worker (`no_kernel`, `problem_error`).
pub(crate) fn unjudged_record(
    tol: Tolerance,
    device: Device,
    run_dir: &RunDir,
    agent: &str,
    u: &Unjudged,
    env: Environment,
    baselines: Option<&BaselineTable>,
) -> EvalRecord {
    let candidate = candidate_ref(agent, &u.cand);
    let mut r = bare_record(
        tol,
        device,
        run_dir,
        u.problem.clone(),
        candidate,
        u.outcome.clone(),
        env,
    );
    r.cost = u.cand.cost.clone();
    r.baselines_missing = missing_baselines(baselines, &r.problem);
    r
}

/// The run's baselines with no usable time for `problem` (a record's `baselines_missing`):
/// every record of a run with `--baselines` says it, whatever its outcome, so that a report
/// can leave the problem out of those baselines' figures.
pub(crate) fn missing_baselines(
    baselines: Option<&BaselineTable>,
    problem: &ProblemRef,
) -> std::collections::BTreeMap<String, String> {
    baselines.map(|t| t.missing(problem)).unwrap_or_default()
}

/// A record of a candidate that never ran: its outcome and nothing measured.
fn bare_record(
    tol: Tolerance,
    device: Device,
    run_dir: &RunDir,
    problem: ProblemRef,
    candidate: CandidateRef,
    outcome: Outcome,
    env: Environment,
) -> EvalRecord {
    let now = now_unix();
    EvalRecord {
        schema_version: SCHEMA_VERSION,
        run_id: run_dir.manifest.run_id.clone(),
        problem,
        candidate,
        device,
        precision: tol.precision,
        profile: tol.profile,
        model_mode: run_dir.manifest.model_mode(),
        outcome,
        cases: Vec::new(),
        timing: None,
        load_s: None,
        build_ahead_s: None,
        phases: None,
        gpu: None,
        wall_s: 0.0,
        started_unix_s: now,
        finished_unix_s: now,
        log_tail: String::new(),
        notes: Vec::new(),
        env,
        baselines: Default::default(),
        baselines_missing: Default::default(),
        speed_of_light: None,
        integrity: None,
        cost: None,
    }
}

/// The environment every record of the run carries (its device name and GPU are filled per
/// GPU).
pub(crate) fn environment_base(
    info: &PythonInfo,
    containment: &Containment,
    bounds: kbench_record::Bounds,
) -> Environment {
    let (cuda_header, cxx_header) = crate::worker::light_headers::light_header_labels();
    Environment {
        kbench: env!("CARGO_PKG_VERSION").into(),
        python: info.python.clone(),
        torch: info.torch.clone(),
        device_name: String::new(),
        gpu_uuid: None,
        cuda: info.torch_cuda.clone(),
        hostname: hostname(),
        containment: Some(containment.name().to_string()),
        bounds: Some(bounds),
        cuda_header,
        cxx_header,
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
