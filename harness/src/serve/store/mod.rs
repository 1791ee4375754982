//! The service's queue and results: submissions, their two passes (the public one every
//! submission gets, the ranked one on secret seeds that leaderboard entries get), the verdict
//! cache and the evaluating fleet's identity. One trait, two databases: an embedded SQLite
//! file (one host) and PostgreSQL (several hosts, claims with `FOR UPDATE SKIP LOCKED`).
//!
//! Imports nothing of kbench beyond `anyhow` and serde: the service's other parts decide what
//! goes in, this module only keeps it durably and hands it out once.

use anyhow::{bail, Result};

mod postgres;
mod sqlite;

/// The two evaluations a submission can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pass {
    /// On the service's own seeds: every submission, answered as soon as it is done.
    Public,
    /// Leaderboard mode: a ranked entry again, on secret seeds, before it counts.
    Ranked,
}

impl Pass {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pass::Public => "public",
            Pass::Ranked => "ranked",
        }
    }
}

/// A verdict already known for a kernel: its summary (JSON) and its signed record line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Known {
    pub(crate) verdict: String,
    pub(crate) record: String,
}

/// A submission as the API takes it in, with what the cache already answers.
#[derive(Debug, Clone)]
pub(crate) struct NewRow {
    pub(crate) id: String,
    pub(crate) problem: String,
    pub(crate) source: String,
    pub(crate) label: Option<String>,
    pub(crate) ranked: bool,
    pub(crate) remeasure: bool,
    /// The public pass's cached answer (then the row is done at once).
    pub(crate) cached: Option<Known>,
    /// The ranked pass: `Some` for a ranked entry; its state and cached answer follow from
    /// the public answer ([`ranked_state_after`]).
    pub(crate) ranked_cached: Option<Known>,
    /// Whether the public answer lets the ranked pass run (correct and unflagged).
    pub(crate) public_counts: bool,
}

/// What a client may have in the store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Its submissions queued or running at once.
    pub(crate) max_queued: u64,
    /// Its submissions ever.
    pub(crate) max_submissions: Option<u64>,
    /// Everyone's submissions queued or running at once.
    pub(crate) max_queue: u64,
}

/// Why a submission was not taken.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    QueueFull,
    OverQueued { queued: u64, limit: u64 },
    QuotaExhausted { limit: u64 },
}

/// A claimed evaluation.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) seq: i64,
    pub(crate) id: String,
    pub(crate) problem: String,
    pub(crate) source: String,
    pub(crate) remeasure: bool,
    pub(crate) submitted_s: f64,
    /// The client that submitted it (every job of a claim has the same).
    pub(crate) client: String,
    /// Its claim took a warm problem ahead of the client's oldest queued one.
    pub(crate) ahead_of_oldest: bool,
}

/// What a claim prefers ([`Store::claim`]): problems the worker holds warm, for any client but
/// those whose turn for their oldest has come (`spent`: the worker counts, per client, the
/// kernels it claimed ahead of that client's oldest).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Warm<'a> {
    pub(crate) problems: &'a [String],
    pub(crate) spent: &'a [String],
}

impl Warm<'_> {
    /// Whether a claim of `client`'s looks for a warm problem first.
    pub(crate) fn applies_to(&self, client: &str) -> bool {
        !self.problems.is_empty() && !self.spent.iter().any(|c| c == client)
    }
}

/// A finished evaluation, as the store keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Done {
    pub(crate) known: Known,
    /// The public pass of a ranked entry: whether its ranked pass runs (`true`) or is
    /// skipped (a wrong or flagged kernel never counts).
    pub(crate) then_rank: Option<bool>,
    /// Answered from the verdict cache when claimed.
    pub(crate) cached: bool,
}

/// One submission as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) seq: i64,
    pub(crate) id: String,
    pub(crate) client: String,
    pub(crate) problem: String,
    pub(crate) label: Option<String>,
    pub(crate) ranked: bool,
    pub(crate) state: String,
    pub(crate) cached: bool,
    pub(crate) submitted_s: f64,
    pub(crate) finished_s: Option<f64>,
    pub(crate) verdict: Option<String>,
    pub(crate) record: Option<String>,
    /// `None` (not ranked), `queued`, `running`, `done` or `skipped`.
    pub(crate) ranked_state: Option<String>,
    pub(crate) ranked_verdict: Option<String>,
    pub(crate) ranked_record: Option<String>,
}

impl Row {
    /// Done for its submitter: the public pass answered.
    pub(crate) fn is_done(&self) -> bool {
        self.state == "done"
    }
}

/// Which of a client's submissions to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub(crate) ids: Option<Vec<String>>,
    pub(crate) problem: Option<String>,
    pub(crate) state: Option<String>,
    pub(crate) after: Option<i64>,
    pub(crate) limit: Option<u32>,
}

/// Submissions by state, over every client.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) queued: u64,
    pub(crate) running: u64,
    pub(crate) done: u64,
}

/// The service's durable state. Every method is one transaction.
pub(crate) trait Store: Send + Sync {
    /// Takes `rows` for `client` within `limits`, all or none; returns their `seq`s.
    fn submit(
        &self,
        client: &str,
        rows: &[NewRow],
        limits: &Limits,
        now: f64,
    ) -> Result<std::result::Result<Vec<i64>, Refusal>>;
    /// Claims up to `max` queued evaluations of `pass`, all of one client and one problem,
    /// for `worker` until `now + lease_s`: the client with the fewest evaluations running
    /// (then the oldest queued), so that one client's slow kernels do not hold back
    /// another's. Of that client's problems, the one queued first among `warm.problems`
    /// (whose reference session the worker holds open, or will open for a kernel it has
    /// claimed) when it has one queued and `warm` applies to it, else its oldest. Evaluations
    /// whose lease ran out are queued again first.
    fn claim(
        &self,
        pass: Pass,
        worker: &str,
        max: usize,
        lease_s: f64,
        now: f64,
        warm: Warm<'_>,
    ) -> Result<Vec<Job>>;
    /// Extends `worker`'s leases on `seqs`.
    fn renew(&self, pass: Pass, worker: &str, seqs: &[i64], until: f64) -> Result<()>;
    /// Records a claimed evaluation's answer; `false` when the claim was no longer
    /// `worker`'s (its lease ran out and another took it).
    fn finish(&self, pass: Pass, worker: &str, seq: i64, done: &Done, now: f64) -> Result<bool>;
    /// Queues again every evaluation `worker` holds (a restarted worker's unfinished work).
    fn requeue_worker(&self, worker: &str) -> Result<u64>;
    /// `client`'s submissions that `filter` selects, by `seq`.
    fn rows(&self, client: &str, filter: &Filter) -> Result<Vec<Row>>;
    /// Every ranked submission whose ranked pass is done (the board's candidates).
    fn ranked_rows(&self) -> Result<Vec<Row>>;
    fn cache_get(&self, key: &str) -> Result<Option<Known>>;
    fn cache_put(&self, key: &str, known: &Known) -> Result<()>;
    fn counts(&self) -> Result<Counts>;
    /// The evaluating fleet's identity for `pass` (settings, run, kbench, GPU model, torch):
    /// registers `fingerprint` when none is, and refuses a worker of another fleet.
    fn join_fleet(&self, pass: Pass, fingerprint: &str, describe: &str) -> Result<()>;
    fn fleet(&self, pass: Pass) -> Result<Option<String>>;
}

/// Opens the store `url` names: `sqlite:PATH` or `postgres://...`.
pub(crate) fn open(url: &str) -> Result<Box<dyn Store>> {
    if let Some(path) = url.strip_prefix("sqlite:") {
        return Ok(Box::new(sqlite::Sqlite::open(std::path::Path::new(path))?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(postgres::Postgres::open(url)?));
    }
    bail!("--store {url:?}: expected sqlite:PATH or postgres://USER@HOST:PORT/DB")
}

/// Whether a store error is the store being out of reach for now, which a worker waits out:
/// a connection dropped or refused, the server shutting down or restarting, no connection
/// free in time, a statement over its time limit, a conflict to retry, a busy SQLite file.
/// Any other error (a permission, a missing table, a corrupt file) is not mended by waiting.
pub(crate) fn transient(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        if let Some(pg) = c.downcast_ref::<::postgres::Error>() {
            // SQLSTATE classes 08 (connection), 57 (operator intervention: shutdown, a
            // statement cancelled on its timeout), 53300 (too many connections), and the
            // serialisation and deadlock failures.
            let state = pg.code().map(|s| s.code());
            return pg.is_closed()
                || state.is_some_and(|s| {
                    s.starts_with("08")
                        || s.starts_with("57")
                        || matches!(s, "53300" | "40001" | "40P01")
                })
                || std::error::Error::source(pg).is_some_and(|s| s.is::<std::io::Error>());
        }
        if let Some(lite) = c.downcast_ref::<rusqlite::Error>() {
            return matches!(
                lite.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            );
        }
        c.is::<r2d2_postgres::r2d2::Error>() || c.is::<std::io::Error>()
    })
}

/// The state of a new ranked entry's ranked pass, from its public answer.
pub(crate) fn ranked_state_after(r: &NewRow) -> Option<&'static str> {
    if !r.ranked {
        return None;
    }
    Some(match (&r.cached, &r.ranked_cached) {
        (Some(_), Some(_)) if r.public_counts => "done",
        (Some(_), _) if !r.public_counts => "skipped",
        _ if r.cached.is_none() => "waiting",
        _ => "queued",
    })
}

/// The columns of a pass: its state, worker and lease.
fn cols(pass: Pass) -> (&'static str, &'static str, &'static str) {
    match pass {
        Pass::Public => ("state", "worker", "lease_until"),
        Pass::Ranked => ("ranked_state", "ranked_worker", "ranked_lease"),
    }
}

/// The columns a [`Row`] is read from, in its fields' order.
const ROW: &str = "seq, id, client, problem, label, ranked, state, cached, submitted_s, finished_s, verdict, record, ranked_state, ranked_verdict, ranked_record";

/// A submission with work queued or running, in either pass.
const OPEN: &str =
    "(state IN ('queued','running') OR ranked_state IN ('queued','running','waiting'))";

/// The next claim's problem and client: of the clients with work queued, the one with the
/// fewest evaluations running, then the oldest queued.
fn fairest(state: &str) -> String {
    format!(
        "SELECT s.problem, s.client FROM submissions s
           LEFT JOIN (SELECT client, COUNT(*) AS n FROM submissions WHERE {state} = 'running' GROUP BY client) r
             ON r.client = s.client
         WHERE s.{state} = 'queued' ORDER BY COALESCE(r.n, 0), s.seq"
    )
}

/// How many of `rows` add work to the queue (the rest answered from the cache).
fn work_added(rows: &[NewRow]) -> u64 {
    rows.iter()
        .filter(|r| r.cached.is_none() || ranked_state_after(r) == Some("queued"))
        .count() as u64
}

/// What a new row is stored with beyond what the client sent: its state, and the answers the
/// cache already had.
struct Stored<'a> {
    state: &'static str,
    finished: Option<f64>,
    verdict: Option<&'a str>,
    record: Option<&'a str>,
    ranked_state: Option<&'static str>,
    ranked_verdict: Option<&'a str>,
    ranked_record: Option<&'a str>,
}

impl<'a> Stored<'a> {
    fn of(r: &'a NewRow, now: f64) -> Stored<'a> {
        let (state, finished, verdict, record) = match &r.cached {
            Some(k) => (
                "done",
                Some(now),
                Some(k.verdict.as_str()),
                Some(k.record.as_str()),
            ),
            None => ("queued", None, None, None),
        };
        let ranked_state = ranked_state_after(r);
        let (ranked_verdict, ranked_record) = match (&r.ranked_cached, ranked_state) {
            (Some(k), Some("done")) => (Some(k.verdict.as_str()), Some(k.record.as_str())),
            _ => (None, None),
        };
        Stored {
            state,
            finished,
            verdict,
            record,
            ranked_state,
            ranked_verdict,
            ranked_record,
        }
    }
}

/// Refusal of a client's batch of `rows` submissions, `adding` of them work to queue (the
/// rest answered from the cache), from the counts a transaction read.
pub(crate) fn refusal(
    limits: &Limits,
    rows: u64,
    adding: u64,
    mine_open: u64,
    mine_all: u64,
    all_open: u64,
) -> Option<Refusal> {
    if let Some(limit) = limits.max_submissions {
        if mine_all + rows > limit {
            return Some(Refusal::QuotaExhausted { limit });
        }
    }
    // A batch answered entirely from the cache adds no work: only the quota counts.
    if adding == 0 {
        return None;
    }
    if mine_open + adding > limits.max_queued {
        return Some(Refusal::OverQueued {
            queued: mine_open,
            limit: limits.max_queued,
        });
    }
    if all_open + adding > limits.max_queue {
        return Some(Refusal::QueueFull);
    }
    None
}

#[cfg(test)]
mod tests;

/// A worker joins the fleet a store already has only with the same identity: verdicts cached
/// under one identity must not answer for another GPU, torch or settings.
fn same_fleet(have: &str, theirs: &str, fingerprint: &str, describe: &str) -> Result<()> {
    if have == fingerprint {
        return Ok(());
    }
    bail!(
        "this store's workers evaluate as {theirs}; this one would evaluate as {describe}: give it a store of its own (--store), or the same GPU model, torch, settings and --secret-from"
    )
}
