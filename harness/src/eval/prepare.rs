//! Where a candidate's files go before it is evaluated: its source in the run folder and its
//! content-addressed build folder.

use std::path::PathBuf;

use anyhow::{Context, Result};
use kbench_suites::Problem;

use crate::agents::Candidate;
use crate::measure::Ctx;
use crate::runlog::{sanitize, RunDir};
use crate::worker::build::extension_build_dir;

/// Where a candidate's files go: its source in the run directory and its content-addressed
/// build directory (keyed by source, torch version and device architecture).
#[derive(Clone)]
pub(crate) struct Prepared {
    pub(crate) key: String,
    pub(crate) source_path: PathBuf,
    pub(crate) build_dir: PathBuf,
}

pub(crate) fn prepare_candidate(
    ctx: &Ctx,
    problem: &Problem,
    cand: &Candidate,
    agent: &str,
    run_dir: &RunDir,
) -> Result<Prepared> {
    let c = ctx.config;
    let key = sanitize(&format!(
        "{}__{}__{}__{}",
        problem.to_ref().key(),
        agent,
        cand.name,
        cand.sample
    ));
    let source_path = run_dir.kernels_dir().join(format!("{key}.py"));
    std::fs::write(&source_path, &cand.source)
        .with_context(|| format!("saving candidate source {}", source_path.display()))?;
    // Readable by the unprivileged uid a sandboxed candidate runs as, whatever the umask (the
    // run folder around it stays hidden from the sandbox).
    if c.candidate_uid.is_some() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&source_path, std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("making {} readable", source_path.display()))?;
    }
    let build_dir = extension_build_dir(
        &c.cache,
        &cand.sha256,
        &ctx.info.torch,
        c.device,
        ctx.cuda_arch.as_deref(),
        ctx.jail.candidate_uid,
    );
    std::fs::create_dir_all(&build_dir)
        .with_context(|| format!("creating {}", build_dir.display()))?;
    Ok(Prepared {
        key,
        source_path,
        build_dir,
    })
}
