//! Arguments of `kbench serve`: where it listens, its store, its clients, its roles, and the
//! suite and evaluation settings every verdict it gives is made under.

use std::path::PathBuf;

use clap::Args;

use super::eval::EvalArgs;
use super::setup::PythonArgs;
use super::suite::SuiteArgs;

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    #[command(flatten)]
    pub eval: EvalArgs,
    #[command(flatten)]
    pub python: PythonArgs,
    /// Address the HTTP API listens on (put TLS in a reverse proxy in front: docs/serve.md).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8470")]
    pub listen: String,
    /// The service's folder: its store (SQLite) and one run folder per pass (`public/`, and
    /// `ranked/` in leaderboard mode) with the signed records and their secret.
    #[arg(long, value_name = "DIR", default_value = "serve-run")]
    pub out: PathBuf,
    /// The queue and results: `sqlite:PATH` (default: OUT/store.sqlite) or
    /// `postgres://USER@HOST:PORT/DB` (several hosts, one `--worker` each).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The clients: a TOML file of `[[client]]` entries (name, token_sha256, limits).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["worker", "new_token"])]
    pub tokens: Option<PathBuf>,
    /// Evaluate only (no HTTP API): one per GPU host in front of a PostgreSQL store.
    #[arg(long, conflicts_with = "no_worker")]
    pub worker: bool,
    /// Serve the HTTP API only; workers elsewhere take the work from the shared store.
    #[arg(long)]
    pub no_worker: bool,
    /// This worker's name in the store (default: host name and --out).
    #[arg(long, value_name = "NAME")]
    pub worker_id: Option<String>,
    /// The run's secret from this file: every worker host of one store shares it (the same
    /// secret seeds, one signing key).
    #[arg(long, value_name = "FILE")]
    pub secret_from: Option<PathBuf>,
    /// Leaderboard mode: the suite's problems are the board; ranked entries are evaluated
    /// again on secret seeds before they count, flagged ones never count, and
    /// `GET /leaderboard` serves the page live.
    #[arg(long)]
    pub leaderboard: bool,
    /// Submissions queued or running at most; past it a submission is answered 429.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_queue: u64,
    /// Seconds a claimed evaluation stays with its worker without a renewal; a dead worker's
    /// work is taken over after it.
    #[arg(long, value_name = "S", default_value_t = 120.0)]
    pub lease: f64,
    /// Print a fresh client token and its `[[client]]` entry for --tokens, then exit.
    #[arg(long, value_name = "NAME")]
    pub new_token: Option<String>,
}
