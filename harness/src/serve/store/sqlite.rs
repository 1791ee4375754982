//! The store in one SQLite file (WAL, synchronous FULL: a submission answered 202 is on
//! disk). One connection behind a mutex: the service's transactions are short, and SQLite
//! serialises writers anyway.

use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{
    cols, fairest, refusal, work_added, Counts, Done, Filter, Job, Known, Limits, NewRow, Pass,
    Refusal, Row, Store, Stored, Warm, OPEN, ROW,
};

pub(crate) struct Sqlite {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    client TEXT NOT NULL,
    problem TEXT NOT NULL,
    source TEXT NOT NULL,
    label TEXT,
    ranked INTEGER NOT NULL,
    remeasure INTEGER NOT NULL,
    submitted_s REAL NOT NULL,
    state TEXT NOT NULL,
    cached INTEGER NOT NULL,
    worker TEXT,
    lease_until REAL,
    finished_s REAL,
    verdict TEXT,
    record TEXT,
    ranked_state TEXT,
    ranked_worker TEXT,
    ranked_lease REAL,
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

fn row(r: &rusqlite::Row) -> rusqlite::Result<Row> {
    Ok(Row {
        seq: r.get(0)?,
        id: r.get(1)?,
        client: r.get(2)?,
        problem: r.get(3)?,
        label: r.get(4)?,
        ranked: r.get::<_, i64>(5)? != 0,
        state: r.get(6)?,
        cached: r.get::<_, i64>(7)? != 0,
        submitted_s: r.get(8)?,
        finished_s: r.get(9)?,
        verdict: r.get(10)?,
        record: r.get(11)?,
        ranked_state: r.get(12)?,
        ranked_verdict: r.get(13)?,
        ranked_record: r.get(14)?,
    })
}

impl Sqlite {
    pub(crate) fn open(path: &Path) -> Result<Sqlite> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the store's folder {}", dir.display()))?;
        }
        // Every client's sources are in it: owner-only, whoever else can see the folder
        // (SQLite gives its -wal and -shm files the database's mode).
        if !path.exists() {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("creating the store {}", path.display()))?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("making the store {} owner-only", path.display()))?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("opening the store {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)
            .with_context(|| format!("creating the tables of {}", path.display()))?;
        Ok(Sqlite {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn count(tx: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<u64> {
    Ok(tx.query_row(sql, p, |r| r.get::<_, i64>(0))? as u64)
}

impl Store for Sqlite {
    fn submit(
        &self,
        client: &str,
        rows: &[NewRow],
        limits: &Limits,
        now: f64,
    ) -> Result<std::result::Result<Vec<i64>, Refusal>> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let adding = work_added(rows);
        let mine_open = count(
            &tx,
            &format!("SELECT COUNT(*) FROM submissions WHERE client = ?1 AND {OPEN}"),
            [client],
        )?;
        let mine_all = count(
            &tx,
            "SELECT COUNT(*) FROM submissions WHERE client = ?1",
            [client],
        )?;
        let all_open = count(
            &tx,
            &format!("SELECT COUNT(*) FROM submissions WHERE {OPEN}"),
            [],
        )?;
        if let Some(r) = refusal(
            limits,
            rows.len() as u64,
            adding,
            mine_open,
            mine_all,
            all_open,
        ) {
            return Ok(Err(r));
        }
        let mut seqs = Vec::with_capacity(rows.len());
        for r in rows {
            let v = Stored::of(r, now);
            tx.execute(
                "INSERT INTO submissions (id, client, problem, source, label, ranked, remeasure, submitted_s, state, cached, finished_s, verdict, record, ranked_state, ranked_verdict, ranked_record)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    r.id, client, r.problem, r.source, r.label, r.ranked as i64, r.remeasure as i64, now,
                    v.state, r.cached.is_some() as i64, v.finished, v.verdict, v.record, v.ranked_state, v.ranked_verdict, v.ranked_record
                ],
            )?;
            seqs.push(tx.last_insert_rowid());
        }
        tx.commit()?;
        Ok(Ok(seqs))
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
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            &format!("UPDATE submissions SET {state} = 'queued', {wcol} = NULL WHERE {state} = 'running' AND {lease} < ?1"),
            [now],
        )?;
        let first: Option<(String, String)> = tx
            .query_row(&format!("{} LIMIT 1", fairest(state)), [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let Some((oldest, client)) = first else {
            return Ok(Vec::new());
        };
        let problem = if warm.applies_to(&client) {
            // The list goes in as one JSON array (SQLite's json_each), not as one
            // placeholder per problem.
            tx.query_row(
                &format!("SELECT problem FROM submissions WHERE {state} = 'queued' AND client = ?1 AND problem IN (SELECT value FROM json_each(?2)) ORDER BY seq LIMIT 1"),
                params![client, serde_json::to_string(warm.problems)?],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or_else(|| oldest.clone())
        } else {
            oldest.clone()
        };
        let ahead_of_oldest = problem != oldest;
        let jobs = {
            let mut q = tx.prepare(&format!(
                "SELECT seq, problem, source, remeasure, submitted_s, id FROM submissions WHERE {state} = 'queued' AND problem = ?1 AND client = ?3 ORDER BY seq LIMIT ?2"
            ))?;
            let jobs = q
                .query_map(params![problem, max as i64, client], |r| {
                    Ok(Job {
                        seq: r.get(0)?,
                        problem: r.get(1)?,
                        source: r.get(2)?,
                        remeasure: r.get::<_, i64>(3)? != 0,
                        submitted_s: r.get(4)?,
                        id: r.get(5)?,
                        client: client.clone(),
                        ahead_of_oldest,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            jobs
        };
        for j in &jobs {
            tx.execute(
                &format!("UPDATE submissions SET {state} = 'running', {wcol} = ?1, {lease} = ?2 WHERE seq = ?3"),
                params![worker, now + lease_s, j.seq],
            )?;
        }
        tx.commit()?;
        Ok(jobs)
    }

    fn renew(&self, pass: Pass, worker: &str, seqs: &[i64], until: f64) -> Result<()> {
        let (state, wcol, lease) = cols(pass);
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for s in seqs {
            tx.execute(
                &format!("UPDATE submissions SET {lease} = ?1 WHERE seq = ?2 AND {wcol} = ?3 AND {state} = 'running'"),
                params![until, s, worker],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn finish(&self, pass: Pass, worker: &str, seq: i64, done: &Done, now: f64) -> Result<bool> {
        let conn = self.conn();
        let n = match pass {
            Pass::Public => conn.execute(
                "UPDATE submissions SET state = 'done', finished_s = ?1, verdict = ?2, record = ?3, cached = ?7,
                    ranked_state = CASE WHEN ranked = 0 THEN NULL WHEN ?4 = 1 THEN 'queued' ELSE 'skipped' END
                 WHERE seq = ?5 AND worker = ?6 AND state = 'running'",
                params![now, done.known.verdict, done.known.record, done.then_rank.unwrap_or(false) as i64, seq, worker, done.cached as i64],
            )?,
            Pass::Ranked => conn.execute(
                "UPDATE submissions SET ranked_state = 'done', ranked_verdict = ?1, ranked_record = ?2
                 WHERE seq = ?3 AND ranked_worker = ?4 AND ranked_state = 'running'",
                params![done.known.verdict, done.known.record, seq, worker],
            )?,
        };
        Ok(n == 1)
    }

    fn requeue_worker(&self, worker: &str) -> Result<u64> {
        let conn = self.conn();
        let a = conn.execute(
            "UPDATE submissions SET state = 'queued', worker = NULL WHERE state = 'running' AND worker = ?1",
            [worker],
        )?;
        let b = conn.execute(
            "UPDATE submissions SET ranked_state = 'queued', ranked_worker = NULL WHERE ranked_state = 'running' AND ranked_worker = ?1",
            [worker],
        )?;
        Ok((a + b) as u64)
    }

    fn rows(&self, client: &str, f: &Filter) -> Result<Vec<Row>> {
        let conn = self.conn();
        if let Some(ids) = &f.ids {
            // One query for the lot (a long poll repeats it).
            let marks = vec!["?"; ids.len()].join(",");
            let mut q = conn.prepare(&format!(
                "SELECT {ROW} FROM submissions WHERE client = ? AND id IN ({marks}) ORDER BY seq"
            ))?;
            let args = std::iter::once(client).chain(ids.iter().map(String::as_str));
            let rows = q
                .query_map(rusqlite::params_from_iter(args), row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            return Ok(rows);
        }
        let mut q = conn.prepare(&format!(
            "SELECT {ROW} FROM submissions WHERE client = ?1 AND seq > ?2
               AND (?3 IS NULL OR problem = ?3) AND (?4 IS NULL OR state = ?4)
             ORDER BY seq LIMIT ?5"
        ))?;
        let rows = q
            .query_map(
                params![
                    client,
                    f.after.unwrap_or(0),
                    f.problem,
                    f.state,
                    f.limit.unwrap_or(100) as i64
                ],
                row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn ranked_rows(&self) -> Result<Vec<Row>> {
        let conn = self.conn();
        let mut q = conn.prepare(&format!(
            "SELECT {ROW} FROM submissions WHERE ranked = 1 AND ranked_state = 'done' ORDER BY seq"
        ))?;
        let rows = q
            .query_map([], row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn cache_get(&self, key: &str) -> Result<Option<Known>> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                "SELECT verdict, record FROM verdicts WHERE cache_key = ?1",
                [key],
                |r| {
                    Ok(Known {
                        verdict: r.get(0)?,
                        record: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    fn cache_put(&self, key: &str, known: &Known) -> Result<()> {
        self.conn().execute(
            "INSERT INTO verdicts (cache_key, verdict, record) VALUES (?1, ?2, ?3)
             ON CONFLICT(cache_key) DO UPDATE SET verdict = excluded.verdict, record = excluded.record",
            params![key, known.verdict, known.record],
        )?;
        Ok(())
    }

    fn counts(&self) -> Result<Counts> {
        let conn = self.conn();
        let c = |sql: &str| count(&conn, sql, []);
        Ok(Counts {
            queued: c("SELECT COUNT(*) FROM submissions WHERE state = 'queued'")?
                + c("SELECT COUNT(*) FROM submissions WHERE ranked_state = 'queued'")?,
            running: c("SELECT COUNT(*) FROM submissions WHERE state = 'running'")?
                + c("SELECT COUNT(*) FROM submissions WHERE ranked_state = 'running'")?,
            done: c("SELECT COUNT(*) FROM submissions WHERE state = 'done'")?,
        })
    }

    fn join_fleet(&self, pass: Pass, fingerprint: &str, describe: &str) -> Result<()> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO fleet (pass, fingerprint, describe) VALUES (?1, ?2, ?3) ON CONFLICT(pass) DO NOTHING",
            params![pass.name(), fingerprint, describe],
        )?;
        let (have, theirs): (String, String) = conn.query_row(
            "SELECT fingerprint, describe FROM fleet WHERE pass = ?1",
            [pass.name()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        super::same_fleet(&have, &theirs, fingerprint, describe)
    }

    fn fleet(&self, pass: Pass) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT fingerprint FROM fleet WHERE pass = ?1",
                [pass.name()],
                |r| r.get(0),
            )
            .optional()?)
    }
}
