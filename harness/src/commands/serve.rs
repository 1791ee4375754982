//! `kbench serve`: the command line into the service's options (`serve::Options`).

use anyhow::{Context, Result};

use crate::cli::ServeArgs;
use crate::commands::run_config::build;
use crate::commands::stop::install_stop_flag;
use crate::config::AgentConfig;
use crate::exit;

pub fn command(a: ServeArgs) -> Result<i32> {
    if let Some(name) = &a.new_token {
        let (token, entry) = crate::serve::new_token(name)?;
        println!("token (give it to {name}; it is not kept anywhere): {token}\n\n{entry}");
        return Ok(exit::OK);
    }
    let stop = install_stop_flag();
    if a.eval.no_sandbox {
        anyhow::bail!("kbench serve never runs a candidate outside the sandbox: drop --no-sandbox");
    }
    let mut config = build(
        &a.suite,
        &a.python,
        &a.eval,
        AgentConfig::Reference,
        &a.out,
        None,
    )?;
    config.secret_from = a
        .secret_from
        .as_deref()
        .map(std::path::absolute)
        .transpose()
        .context("resolving --secret-from")?;
    let store = a
        .store
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", a.out.join("store.sqlite").display()));
    crate::serve::run(
        crate::serve::Options {
            config,
            listen: a.listen,
            store,
            tokens: a.tokens,
            evaluate: !a.no_worker,
            api: !a.worker,
            worker_id: a.worker_id,
            leaderboard: a.leaderboard,
            max_queue: a.max_queue,
            lease_s: a.lease,
        },
        stop.clone(),
    )?;
    Ok(if stop.load(std::sync::atomic::Ordering::SeqCst) {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}
