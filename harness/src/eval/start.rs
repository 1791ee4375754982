//! Starting a candidate's worker: in a private working folder, ahead on a GPU, and for a
//! baseline mode with its `load` sent ahead.

use std::path::Path;

use anyhow::{Context, Result};
use kbench_record::protocol::{Command, Load};

use super::prepare::Prepared;
use crate::agents::Candidate;
use crate::measure::{Ctx, Station};
use crate::runlog::RunDir;
use crate::worker::{Prestart, Role, WorkerSpec};

/// The note on a record evaluated with nothing else loaded on its GPU (`lookahead` 0): an
/// out-of-memory failure there is the candidate's own.
pub(crate) const GPU_ALONE_NOTE: &str = "evaluated with nothing loaded ahead on its GPU";

/// Set for a GPU candidate's worker whose source names `cpp_extension`: its start imports
/// `torch.utils.cpp_extension`, so the load does not.
const IMPORT_CPP_EXTENSION_ENV: &str = "KBENCH_IMPORT_CPP_EXTENSION";

/// Starts a candidate's worker (ahead, on a GPU). A baseline mode (`warm_up`: PyTorch's own
/// code, not untrusted) is also sent its `load` ahead, so its torch.compile runs while the
/// problems before it are evaluated, paused while anything is timed.
pub(crate) fn start_candidate(
    ctx: &Ctx,
    exec: &Station,
    run_dir: &RunDir,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
) -> Result<(tempfile::TempDir, Prestart)> {
    // In memory where the host allows (`fast_temp_dir`): its timing exchange file lies here,
    // mapped by the worker, and pages of a disk-backed file under writeback stall the
    // worker's writes into them while it is timed.
    let cwd = tempfile::Builder::new()
        .prefix("kbench-cand-")
        .tempdir_in(crate::worker::fast_temp_dir())
        .context("creating a private working directory for the candidate")?;
    let spec = candidate_spec(ctx, exec, run_dir, cwd.path(), problem_path, cand, prep);
    let load = cand.warm_up.then(|| {
        (
            candidate_load(ctx, exec, problem_path, cand, prep),
            ctx.config.timeouts.load,
        )
    });
    Ok((
        cwd,
        Prestart::spawn_then(spec, ctx.config.timeouts.start, load),
    ))
}

/// How a candidate's worker is started: in `cwd`, its output in the candidate's log, inside
/// the run's sandbox seeing the problem file and its own source (read-only) and its build
/// folder (writable).
pub(crate) fn candidate_spec(
    ctx: &Ctx,
    exec: &Station,
    run_dir: &RunDir,
    cwd: &Path,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
) -> WorkerSpec {
    let mut spec = ctx.spec(
        Role::Candidate,
        cwd,
        Some(run_dir.logs_dir().join(format!("{}.log", prep.key))),
        exec.device,
    );
    spec.env
        .extend(import_ahead(&cand.source, exec.gpu.is_some()));
    ctx.jail.apply(
        &mut spec,
        &[problem_path, &prep.source_path],
        &[&prep.build_dir],
        // Baseline modes are PyTorch's own code (`warm_up`), not a candidate's.
        cand.warm_up,
        exec.gpu.is_some(),
    );
    spec
}

/// What a candidate's worker imports at its start rather than in its load: torch's extension
/// module (it imports setuptools: 0.2-0.4 s of a load, which on a GPU comes between two
/// evaluations) where the source names it and the worker is a GPU's, whose start runs ahead
/// and unpaused (kbench_worker/__main__.py). The test is the loader's own (`cpp_extension`
/// in the source, kbench_worker/loading.py), so the start imports it exactly where a load
/// would. On the CPU a start is paused like a load, so nothing is gained there.
fn import_ahead(source: &str, gpu: bool) -> Option<(String, String)> {
    (gpu && source.contains("cpp_extension")).then(|| (IMPORT_CPP_EXTENSION_ENV.into(), "1".into()))
}

pub(crate) fn candidate_load(
    ctx: &Ctx,
    exec: &Station,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
) -> Command {
    Command::Load(Load {
        candidate_path: Some(prep.source_path.clone()),
        build_dir: Some(prep.build_dir.clone()),
        warm_up: Some(cand.warm_up),
        ..ctx.load(exec.device, problem_path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_worker_imports_the_extension_module_at_its_start_where_the_source_names_it() {
        let builds = "from torch.utils.cpp_extension import load_inline\n";
        assert_eq!(
            import_ahead(builds, true),
            Some((IMPORT_CPP_EXTENSION_ENV.to_string(), "1".to_string()))
        );
        assert_eq!(
            import_ahead(builds, false),
            None,
            "a CPU start is paused like a load"
        );
        assert_eq!(
            import_ahead("import torch\n", true),
            None,
            "PyTorch alone needs none"
        );
    }
}
