//! `kbench serve`: kbench as a hardened evaluation service. An HTTP JSON API (`api`, served
//! by `http`) takes kernels from clients with tokens (`auth`) into a durable queue (`store`:
//! SQLite, or PostgreSQL for several hosts); workers (`worker`) evaluate them with the same
//! engine, sandbox and checks as `kbench run`, answer repeats from a verdict cache keyed by
//! the evaluating fleet's identity (`fleet`, `verdict`), and store signed records. In
//! leaderboard mode ranked entries are evaluated again on secret seeds before they count on
//! the board (`board`). `metrics` says what `/metrics` reports.
//!
//! Owns everything of the service; imports the engine (`exec`), the run log (`runlog`), the
//! configuration and what they build on; `commands::serve` turns the command line into
//! [`Options`].

mod answer;
pub(crate) mod api;
mod auth;
mod board;
mod fleet;
mod http;
mod metrics;
pub(crate) mod store;
mod verdict;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

use crate::config::RunConfig;
use store::{Pass, Store};

pub(crate) use auth::new_token;

/// What `kbench serve` was asked to do.
pub(crate) struct Options {
    /// The evaluation settings, suite and run folder (the public pass's).
    pub(crate) config: RunConfig,
    pub(crate) listen: String,
    pub(crate) store: String,
    pub(crate) tokens: Option<std::path::PathBuf>,
    /// Evaluate (a worker) and/or serve the API.
    pub(crate) evaluate: bool,
    pub(crate) api: bool,
    pub(crate) worker_id: Option<String>,
    pub(crate) leaderboard: bool,
    pub(crate) max_queue: u64,
    pub(crate) lease_s: f64,
}

/// Runs the service until `stop` is raised (SIGINT, SIGTERM).
pub(crate) fn run(mut o: Options, stop: Arc<AtomicBool>) -> Result<()> {
    if o.config.no_sandbox {
        bail!("kbench serve never runs a candidate outside the sandbox: drop --no-sandbox");
    }
    if !(o.lease_s.is_finite() && o.lease_s >= 1.0) {
        bail!("--lease must be at least 1 second, got {}", o.lease_s);
    }
    // Everything that can refuse the service does so before it writes anything: a bad
    // tokens file or a folder that cannot be hidden leaves no store, no folder behind.
    let clients = match (&o.tokens, o.api) {
        (Some(path), true) => Some(auth::Clients::load(path)?),
        (None, true) => bail!("--tokens FILE is needed to serve the API"),
        _ => None,
    };
    // No candidate sees the service's own files, wherever they lie: its folder (the store by
    // default, every pass's run folder and secret, the ranked pass's seeds), an SQLite store
    // kept elsewhere (its folder: the write-ahead log comes and goes beside it) and the
    // clients' tokens. The run folder alone is hidden by `kbench run`; a pass's candidates
    // would see the other pass's secret, and every client's sources in the store, wherever
    // the service's folder lies under one the sandbox shows (`/opt`, a library folder).
    let mut hidden = vec![o.config.out.clone()];
    if let Some(db) = o.store.strip_prefix("sqlite:").map(std::path::Path::new) {
        let folder = db.parent().filter(|p| !p.as_os_str().is_empty());
        hidden.push(std::path::absolute(folder.unwrap_or(".".as_ref()))?);
    }
    for folder in &hidden {
        crate::worker::sandbox::hideable(folder)
            .map_err(|why| anyhow::anyhow!("--out or --store: {why}"))?;
    }
    // The service's folder holds its store and secrets: owner-only when kbench makes it.
    if !o.config.out.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&o.config.out)
            .with_context(|| format!("creating --out {}", o.config.out.display()))?;
    }
    o.config.hidden_also = hidden;
    o.config.hidden_also.extend(o.tokens.clone());
    let store: Arc<dyn Store> = Arc::from(store::open(&o.store)?);
    let metrics = Arc::new(metrics::Metrics::new());
    let wake = Arc::new(worker::Wake::default());
    let problems: HashMap<String, kbench_suites::Problem> = o
        .config
        .problems
        .iter()
        .map(|p| (p.key(), p.clone()))
        .collect();
    let app = match clients {
        Some(clients) => Some(Arc::new(api::App {
            store: Arc::clone(&store),
            clients,
            problems: o
                .config
                .problems
                .iter()
                .map(|p| {
                    (
                        p.key(),
                        api::ProblemInfo {
                            id: p.key(),
                            level: p.level,
                            name: p.name.clone(),
                            sha256: p.sha256.clone(),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
            max_queue: o.max_queue,
            leaderboard: o.leaderboard,
            title: format!("kbench leaderboard: {}", o.config.suite_label),
            metrics: Arc::clone(&metrics),
            wake: Arc::clone(&wake),
            fleets: Mutex::new(BTreeMap::new()),
            board: board::PageCache::default(),
        })),
        None => None,
    };
    let mut threads = Vec::new();
    let mut engines = Vec::new();
    if o.evaluate {
        let id = o.worker_id.clone().unwrap_or_else(|| {
            let out = std::path::absolute(&o.config.out).unwrap_or_else(|_| o.config.out.clone());
            format!("{}:{}", crate::eval::record::hostname(), out.display())
        });
        let requeued = store.requeue_worker(&id)?;
        if requeued > 0 {
            eprintln!("kbench serve: {requeued} evaluation(s) this worker held when it stopped are queued again");
        }
        let public = worker::pass_config(&o.config, Pass::Public, &o.config.out);
        let mut passes = vec![(Pass::Public, public)];
        let devices = o.config.gpus.len().max(1);
        let worker = Arc::new(worker::Worker {
            id,
            store: Arc::clone(&store),
            problems,
            metrics: Arc::clone(&metrics),
            wake: Arc::clone(&wake),
            stop: Arc::clone(&stop),
            lease_s: o.lease_s,
            devices,
            held: Mutex::new(HashMap::new()),
        });
        let first = Arc::new(worker::Engine::start(
            &passes[0].1,
            Pass::Public,
            store.as_ref(),
            Arc::clone(&stop),
        )?);
        engines.push(Arc::clone(&first));
        if o.leaderboard {
            let mut ranked = worker::pass_config(&o.config, Pass::Ranked, &o.config.out);
            ranked.secret_from = Some(worker::ranked_secret_file(&o.config.out)?);
            let e = Arc::new(worker::Engine::start(
                &ranked,
                Pass::Ranked,
                store.as_ref(),
                Arc::clone(&stop),
            )?);
            engines.push(e);
            passes.push((Pass::Ranked, ranked));
        }
        for engine in &engines {
            let (w, e) = (Arc::clone(&worker), Arc::clone(engine));
            let stop = Arc::clone(&stop);
            threads.push(
                std::thread::Builder::new()
                    .name("kbench-serve-claims".into())
                    .spawn(move || {
                        if let Err(e) = w.run(e) {
                            eprintln!("kbench serve: the worker stopped: {e:#}");
                            stop.store(true, Ordering::SeqCst);
                        }
                    })?,
            );
        }
        let w = Arc::clone(&worker);
        threads.push(
            std::thread::Builder::new()
                .name("kbench-serve-leases".into())
                .spawn(move || w.renew_leases())?,
        );
        eprintln!(
            "kbench serve: evaluating {} problem(s) into {}",
            o.config.problems.len(),
            o.config.out.display()
        );
    }
    let served = match app {
        Some(app) => serve_api(&o.listen, app, Arc::clone(&stop)),
        None => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Ok(())
        }
    };
    stop.store(true, Ordering::SeqCst);
    wake.ring();
    for t in threads {
        let _ = t.join();
    }
    for e in engines {
        if let Err(err) = e.finish() {
            eprintln!("kbench serve: {err:#}");
        }
    }
    served
}

fn serve_api(listen: &str, app: Arc<api::App>, stop: Arc<AtomicBool>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kbench-serve-api")
        .build()
        .context("starting the API's runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("--listen {listen}: cannot listen there"))?;
        // Tests and scripts read the address (port 0 picks a free one) from this line.
        eprintln!(
            "kbench serve: listening on http://{}",
            listener.local_addr()?
        );
        http::serve(listener, api::router(app), stop).await
    })
}

#[cfg(test)]
mod tests;
