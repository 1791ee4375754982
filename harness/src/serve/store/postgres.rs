//! The store in PostgreSQL, shared by the API and one worker per GPU host: claims take rows
//! with `FOR UPDATE SKIP LOCKED`, so two workers never take the same evaluation, and a
//! transaction-scoped advisory lock serialises the quota checks of submissions. Connections
//! come from an r2d2 pool, which checks each before use and replaces one the server dropped
//! (a restart, a failover, an idle timeout), and every statement has a time limit.

use std::time::Duration;

use anyhow::{Context, Result};
use postgres::{Client, NoTls, Transaction};
use r2d2_postgres::PostgresConnectionManager;

use super::{
    cols, fairest, refusal, work_added, Counts, Done, Filter, Job, Known, Limits, NewRow, Pass,
    Refusal, Row, Store, Stored, Warm, OPEN, ROW,
};

/// Connections kept open: the API's blocking threads and a worker's claim, renew and finish
/// threads each take one for a transaction.
const POOL: u32 = 4;

/// The longest a statement may run (`statement_timeout`, set on each new connection): a
/// claim or a submission waiting on a lock that is never released fails instead of hanging
/// the service. Set with `SET`, not in the startup options, which poolers such as
/// pgbouncer refuse.
const STATEMENT_TIMEOUT: &str = "SET statement_timeout = '60s'";

/// A server that vanishes without closing its connections (a host down, a network cut) is
/// noticed within about a minute instead of TCP's retransmission timeout of many minutes.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long to wait for a connection: a free one of the pool, or a new one to a server that
/// is back.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct Postgres {
    pool: r2d2_postgres::r2d2::Pool<PostgresConnectionManager<NoTls>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS submissions (
    seq BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    client TEXT NOT NULL,
    problem TEXT NOT NULL,
    source TEXT NOT NULL,
    label TEXT,
    ranked BIGINT NOT NULL,
    remeasure BIGINT NOT NULL,
    submitted_s DOUBLE PRECISION NOT NULL,
    state TEXT NOT NULL,
    cached BIGINT NOT NULL,
    worker TEXT,
    lease_until DOUBLE PRECISION,
    finished_s DOUBLE PRECISION,
    verdict TEXT,
    record TEXT,
    ranked_state TEXT,
    ranked_worker TEXT,
    ranked_lease DOUBLE PRECISION,
    ranked_verdict TEXT,
    ranked_record TEXT
);
CREATE INDEX IF NOT EXISTS submissions_state ON submissions(state, seq);
CREATE INDEX IF NOT EXISTS submissions_ranked ON submissions(ranked_state, seq);
CREATE INDEX IF NOT EXISTS submissions_client ON submissions(client, seq);
CREATE INDEX IF NOT EXISTS submissions_client_problem ON submissions(client, problem, seq);
CREATE TABLE IF NOT EXISTS verdicts (cache_key TEXT PRIMARY KEY, verdict TEXT NOT NULL, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fleet (pass TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, describe TEXT NOT NULL);
";

/// The advisory lock of submissions' quota checks (any constant shared by every process).
const SUBMIT_LOCK: i64 = 0x6b62_656e_6368;

fn row(r: &postgres::Row) -> Row {
    Row {
        seq: r.get(0),
        id: r.get(1),
        client: r.get(2),
        problem: r.get(3),
        label: r.get(4),
        ranked: r.get::<_, i64>(5) != 0,
        state: r.get(6),
        cached: r.get::<_, i64>(7) != 0,
        submitted_s: r.get(8),
        finished_s: r.get(9),
        verdict: r.get(10),
        record: r.get(11),
        ranked_state: r.get(12),
        ranked_verdict: r.get(13),
        ranked_record: r.get(14),
    }
}

impl Postgres {
    pub(crate) fn open(url: &str) -> Result<Postgres> {
        // The URL may hold a password: never echo it, nor the parser's words about it.
        let mut config: postgres::Config = url.parse().map_err(|_| {
            anyhow::anyhow!("--store: not a PostgreSQL URL (postgres://USER@HOST:PORT/DB)")
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE)
            .tcp_user_timeout(TCP_USER_TIMEOUT);
        let pool = r2d2_postgres::r2d2::Pool::builder()
            .max_size(POOL)
            .connection_timeout(CONNECT_TIMEOUT)
            .connection_customizer(Box::new(StatementTimeout))
            .build(PostgresConnectionManager::new(config, NoTls))
            .context("connecting to the PostgreSQL store given by --store")?;
        {
            let mut c = pool.get()?;
            let mut tx = c.transaction()?;
            // Two processes creating the tables at once would race on the catalog.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SUBMIT_LOCK])?;
            tx.batch_execute(SCHEMA)
                .context("creating the store's tables in PostgreSQL")?;
            tx.commit()?;
        }
        Ok(Postgres { pool })
    }

    /// A connection of the pool (checked, or made again if the server dropped it).
    fn with<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut c = self
            .pool
            .get()
            .context("no connection to the PostgreSQL store")?;
        f(&mut c)
    }
}

/// Sets [`STATEMENT_TIMEOUT`] on each connection the pool makes.
#[derive(Debug)]
struct StatementTimeout;

impl r2d2_postgres::r2d2::CustomizeConnection<Client, postgres::Error> for StatementTimeout {
    fn on_acquire(&self, c: &mut Client) -> std::result::Result<(), postgres::Error> {
        c.batch_execute(STATEMENT_TIMEOUT)
    }
}

fn count(
    tx: &mut Transaction,
    sql: &str,
    p: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<u64> {
    Ok(tx.query_one(sql, p)?.get::<_, i64>(0) as u64)
}

impl Store for Postgres {
    fn submit(
        &self,
        client: &str,
        rows: &[NewRow],
        limits: &Limits,
        now: f64,
    ) -> Result<std::result::Result<Vec<i64>, Refusal>> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SUBMIT_LOCK])?;
            let adding = work_added(rows);
            let mine_open = count(
                &mut tx,
                &format!("SELECT COUNT(*) FROM submissions WHERE client = $1 AND {OPEN}"),
                &[&client],
            )?;
            let mine_all = count(&mut tx, "SELECT COUNT(*) FROM submissions WHERE client = $1", &[&client])?;
            let all_open = count(&mut tx, &format!("SELECT COUNT(*) FROM submissions WHERE {OPEN}"), &[])?;
            if let Some(r) = refusal(limits, rows.len() as u64, adding, mine_open, mine_all, all_open) {
                return Ok(Err(r));
            }
            let mut seqs = Vec::with_capacity(rows.len());
            for r in rows {
                let v = Stored::of(r, now);
                let seq: i64 = tx
                    .query_one(
                        "INSERT INTO submissions (id, client, problem, source, label, ranked, remeasure, submitted_s, state, cached, finished_s, verdict, record, ranked_state, ranked_verdict, ranked_record)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) RETURNING seq",
                        &[
                            &r.id, &client, &r.problem, &r.source, &r.label, &(r.ranked as i64), &(r.remeasure as i64), &now,
                            &v.state, &(r.cached.is_some() as i64), &v.finished, &v.verdict, &v.record, &v.ranked_state, &v.ranked_verdict, &v.ranked_record,
                        ],
                    )?
                    .get(0);
                seqs.push(seq);
            }
            tx.commit()?;
            Ok(Ok(seqs))
        })
    }

    fn claim(
        &self,
        pass: Pass,
        worker: &str,
        max: usize,
        lease_s: f64,
        now: f64,
        warm: Warm<'_>,
    ) -> Result<Vec<Job>> {
        let (state, wcol, lease) = cols(pass);
        self.with(|c| {
            let mut tx = c.transaction()?;
            // Expired leases, skipping rows another transaction holds (it is claiming them).
            tx.execute(
                &format!(
                    "UPDATE submissions SET {state} = 'queued', {wcol} = NULL WHERE seq IN (
                        SELECT seq FROM submissions WHERE {state} = 'running' AND {lease} < $1 FOR UPDATE SKIP LOCKED)"
                ),
                &[&now],
            )?;
            let first = tx.query_opt(
                &format!("{} LIMIT 1 FOR UPDATE OF s SKIP LOCKED", fairest(state)),
                &[],
            )?;
            let Some(first) = first else {
                tx.commit()?;
                return Ok(Vec::new());
            };
            let (oldest, client): (String, String) = (first.get(0), first.get(1));
            let warm_queued = if !warm.applies_to(&client) {
                None
            } else {
                tx.query_opt(
                    &format!(
                        "SELECT problem FROM submissions WHERE {state} = 'queued' AND client = $1 AND problem = ANY($2)
                         ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
                    ),
                    &[&client, &warm.problems],
                )?
            };
            let problem: String = warm_queued.map_or_else(|| oldest.clone(), |r| r.get(0));
            let ahead_of_oldest = problem != oldest;
            let rows = tx.query(
                &format!(
                    "SELECT seq, problem, source, remeasure, submitted_s, id FROM submissions WHERE {state} = 'queued' AND problem = $1 AND client = $3
                     ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED"
                ),
                &[&problem, &(max as i64), &client],
            )?;
            let jobs: Vec<Job> = rows
                .iter()
                .map(|r| Job {
                    seq: r.get(0),
                    problem: r.get(1),
                    source: r.get(2),
                    remeasure: r.get::<_, i64>(3) != 0,
                    submitted_s: r.get(4),
                    id: r.get(5),
                    client: client.clone(),
                    ahead_of_oldest,
                })
                .collect();
            let seqs: Vec<i64> = jobs.iter().map(|j| j.seq).collect();
            tx.execute(
                &format!("UPDATE submissions SET {state} = 'running', {wcol} = $1, {lease} = $2 WHERE seq = ANY($3)"),
                &[&worker, &(now + lease_s), &seqs],
            )?;
            tx.commit()?;
            Ok(jobs)
        })
    }

    fn renew(&self, pass: Pass, worker: &str, seqs: &[i64], until: f64) -> Result<()> {
        let (state, wcol, lease) = cols(pass);
        let seqs = seqs.to_vec();
        self.with(|c| {
            c.execute(
                &format!("UPDATE submissions SET {lease} = $1 WHERE seq = ANY($2) AND {wcol} = $3 AND {state} = 'running'"),
                &[&until, &seqs, &worker],
            )?;
            Ok(())
        })
    }

    fn finish(&self, pass: Pass, worker: &str, seq: i64, done: &Done, now: f64) -> Result<bool> {
        self.with(|c| {
            let n = match pass {
                Pass::Public => c.execute(
                    "UPDATE submissions SET state = 'done', finished_s = $1, verdict = $2, record = $3, cached = $7,
                        ranked_state = CASE WHEN ranked = 0 THEN NULL WHEN $4 THEN 'queued' ELSE 'skipped' END
                     WHERE seq = $5 AND worker = $6 AND state = 'running'",
                    &[&now, &done.known.verdict, &done.known.record, &done.then_rank.unwrap_or(false), &seq, &worker, &(done.cached as i64)],
                )?,
                Pass::Ranked => c.execute(
                    "UPDATE submissions SET ranked_state = 'done', ranked_verdict = $1, ranked_record = $2
                     WHERE seq = $3 AND ranked_worker = $4 AND ranked_state = 'running'",
                    &[&done.known.verdict, &done.known.record, &seq, &worker],
                )?,
            };
            Ok(n == 1)
        })
    }

    fn requeue_worker(&self, worker: &str) -> Result<u64> {
        self.with(|c| {
            let a = c.execute(
                "UPDATE submissions SET state = 'queued', worker = NULL WHERE state = 'running' AND worker = $1",
                &[&worker],
            )?;
            let b = c.execute(
                "UPDATE submissions SET ranked_state = 'queued', ranked_worker = NULL WHERE ranked_state = 'running' AND ranked_worker = $1",
                &[&worker],
            )?;
            Ok(a + b)
        })
    }

    fn rows(&self, client: &str, f: &Filter) -> Result<Vec<Row>> {
        self.with(|c| {
            if let Some(ids) = &f.ids {
                let found = c.query(
                    &format!("SELECT {ROW} FROM submissions WHERE client = $1 AND id = ANY($2) ORDER BY seq"),
                    &[&client, ids],
                )?;
                return Ok(found.iter().map(row).collect());
            }
            let limit = f.limit.unwrap_or(100) as i64;
            let rows = c.query(
                &format!(
                    "SELECT {ROW} FROM submissions WHERE client = $1 AND seq > $2
                       AND ($3::TEXT IS NULL OR problem = $3) AND ($4::TEXT IS NULL OR state = $4)
                     ORDER BY seq LIMIT $5"
                ),
                &[&client, &f.after.unwrap_or(0), &f.problem, &f.state, &limit],
            )?;
            Ok(rows.iter().map(row).collect())
        })
    }

    fn ranked_rows(&self) -> Result<Vec<Row>> {
        self.with(|c| {
            let rows = c.query(
                &format!("SELECT {ROW} FROM submissions WHERE ranked = 1 AND ranked_state = 'done' ORDER BY seq"),
                &[],
            )?;
            Ok(rows.iter().map(row).collect())
        })
    }

    fn cache_get(&self, key: &str) -> Result<Option<Known>> {
        self.with(|c| {
            Ok(c.query_opt(
                "SELECT verdict, record FROM verdicts WHERE cache_key = $1",
                &[&key],
            )?
            .map(|r| Known {
                verdict: r.get(0),
                record: r.get(1),
            }))
        })
    }

    fn cache_put(&self, key: &str, known: &Known) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO verdicts (cache_key, verdict, record) VALUES ($1, $2, $3)
                 ON CONFLICT (cache_key) DO UPDATE SET verdict = EXCLUDED.verdict, record = EXCLUDED.record",
                &[&key, &known.verdict, &known.record],
            )?;
            Ok(())
        })
    }

    fn counts(&self) -> Result<Counts> {
        self.with(|c| {
            let r = c.query_one(
                "SELECT
                    (SELECT COUNT(*) FROM submissions WHERE state = 'queued') + (SELECT COUNT(*) FROM submissions WHERE ranked_state = 'queued'),
                    (SELECT COUNT(*) FROM submissions WHERE state = 'running') + (SELECT COUNT(*) FROM submissions WHERE ranked_state = 'running'),
                    (SELECT COUNT(*) FROM submissions WHERE state = 'done')",
                &[],
            )?;
            let n = |i: usize| -> u64 { r.get::<_, i64>(i) as u64 };
            Ok(Counts {
                queued: n(0),
                running: n(1),
                done: n(2),
            })
        })
    }

    fn join_fleet(&self, pass: Pass, fingerprint: &str, describe: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO fleet (pass, fingerprint, describe) VALUES ($1, $2, $3) ON CONFLICT (pass) DO NOTHING",
                &[&pass.name(), &fingerprint, &describe],
            )?;
            let r = c.query_one(
                "SELECT fingerprint, describe FROM fleet WHERE pass = $1",
                &[&pass.name()],
            )?;
            let (have, theirs): (String, String) = (r.get(0), r.get(1));
            super::same_fleet(&have, &theirs, fingerprint, describe)
        })
    }

    fn fleet(&self, pass: Pass) -> Result<Option<String>> {
        self.with(|c| {
            Ok(c.query_opt(
                "SELECT fingerprint FROM fleet WHERE pass = $1",
                &[&pass.name()],
            )?
            .map(|r| r.get(0)))
        })
    }
}
