//! `kbench serve` on PostgreSQL: the API in front (`--no-worker`), two workers (`--worker`,
//! one secret) taking the work with `FOR UPDATE SKIP LOCKED`; every submission answered once,
//! every distinct kernel evaluated once across both, and a worker killed mid-queue has its
//! claims taken over by the other when its lease runs out; and the hostile requests of
//! `serve_requests`, answered alike on this store. Needs a server: `.ci/run` starts
//! one with tests/postgres/setup.sh and sets KBENCH_POSTGRES_URL (with KBENCH_POSTGRES_TESTS=1
//! the test fails rather than skips without it).

use crate::common;
use crate::serve_common as sc;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{ensure_python, records, shared};
use sc::{call, honest, submit, tokens, Serve, EVAL, SECRET};

/// A fresh database on the server, for one test.
fn database() -> Option<String> {
    let Some(url) = std::env::var("KBENCH_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var("KBENCH_POSTGRES_TESTS").as_deref() != Ok("1"),
            "KBENCH_POSTGRES_TESTS=1 but KBENCH_POSTGRES_URL is not set (tests/postgres/setup.sh prints it)"
        );
        eprintln!(
            "skipped: KBENCH_POSTGRES_URL is not set (tests/postgres/setup.sh starts a server)"
        );
        return None;
    };
    // Tests of one binary run in parallel in one process: a counter keeps their names apart,
    // the wall clock keeps them apart from an earlier run's databases left on the server.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = format!(
        "kbench_test_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        nanos
    );
    let mut c = postgres::Client::connect(&url, postgres::NoTls)
        .expect("connecting to KBENCH_POSTGRES_URL");
    c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let base = &url[..url.rfind('/').unwrap()];
    Some(format!("{base}/{name}"))
}

#[test]
fn two_workers_on_postgresql_answer_every_submission_once_and_take_over_a_dead_workers_claims() {
    let Some(db) = database() else { return };
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let (tokens_file, toks) = tokens(tmp.path(), &[("alice", "")]);
    let tok = &toks[0];
    let p = |s: &std::path::Path| s.to_str().unwrap().to_string();
    let common_args = |out: &str| -> Vec<String> {
        let mut a: Vec<String> = ["--suite", "smoke"].iter().map(|s| s.to_string()).collect();
        a.extend(EVAL.iter().map(|s| s.to_string()));
        a.extend([
            "--store".into(),
            db.clone(),
            "--out".into(),
            out.into(),
            "--secret-from".into(),
            p(&secret),
            "--lease".into(),
            "4".into(),
        ]);
        a
    };
    let start = |role: &[&str], out: &str, log: &str| {
        let mut a = common_args(&p(&tmp.path().join(out)));
        a.extend(role.iter().map(|s| s.to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        Serve::start(&a, &tmp.path().join(log))
    };
    let api = start(
        &[
            "--no-worker",
            "--tokens",
            &p(&tokens_file),
            "--listen",
            "127.0.0.1:0",
        ],
        "api",
        "api.log",
    );
    let w1 = start(&["--worker", "--worker-id", "w1"], "w1", "w1.log");
    let mut w2 = start(&["--worker", "--worker-id", "w2"], "w2", "w2.log");
    let url = api.url.clone();

    let problems = sc::smoke_problems();
    let distinct: Vec<(String, String)> = (0..12)
        .map(|n| (problems[n % 6].0.clone(), honest(&problems[n % 6].3, n)))
        .chain([(problems[0].0.clone(), sc::zeros(&problems[0].3))])
        .collect();
    // Each distinct kernel four times, in three requests.
    let mut items = Vec::new();
    for _ in 0..4 {
        items.extend(distinct.iter().cloned());
    }
    let mut ids = Vec::new();
    for chunk in items.chunks(20) {
        let a = submit(&url, tok, chunk);
        assert_eq!(a.status, 202, "{}", a.body);
        ids.extend(a.ids());
    }
    // Kill w2 once both have started answering: its claims go to w1 when their lease ends.
    let t = Instant::now();
    while !(records_in(&tmp.path().join("w2/public")) > 0
        && records_in(&tmp.path().join("w1/public")) > 0)
    {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "both workers should take work:\nw1:\n{}\nw2:\n{}",
            w1.log_text(),
            w2.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    w2.child.kill().unwrap();
    w2.child.wait().unwrap();
    let done = sc::wait_all(&url, tok, &ids, Duration::from_secs(900));
    assert_eq!(done.len(), items.len());
    for ((_, src), s) in items.iter().zip(&done) {
        let want = if src.contains("* 0") {
            "mismatch"
        } else {
            "ok"
        };
        assert_eq!(s["verdict"]["outcome"], want, "{s}");
    }
    // Within each worker's log no kernel twice; across both, every distinct kernel, and a
    // second evaluation only where w2 died holding it.
    let r1 = records(&tmp.path().join("w1/public"));
    let r2 = records(&tmp.path().join("w2/public"));
    for r in [&r1, &r2] {
        let keys: BTreeSet<String> = r.iter().map(common::key).collect();
        assert_eq!(
            keys.len(),
            r.len(),
            "a kernel evaluated twice by one worker"
        );
    }
    let all: BTreeSet<String> = r1.iter().chain(&r2).map(common::key).collect();
    assert_eq!(all.len(), distinct.len(), "every distinct kernel evaluated");
    assert!(
        r1.len() + r2.len() <= distinct.len() + 8,
        "more evaluations than distinct kernels and w2's claims"
    );
    // Repeats claimed with their first copy join its evaluation; later ones come from the
    // cache: either way no repeat is evaluated again (the records above).
    let health = call("GET", &format!("{url}/v1/health"), None, None).json();
    assert_eq!(
        (health["queued"].as_u64(), health["running"].as_u64()),
        (Some(0), Some(0))
    );
    drop(w1);
    drop(api);
}

#[test]
fn hostile_requests_get_the_same_answers_on_postgresql() {
    let Some(db) = database() else { return };
    crate::serve_requests::hostile_requests_against(Some(&db));
}

fn records_in(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("records.jsonl")).map_or(0, |t| t.lines().count())
}

/// The server drops every connection of the service (a restart, a failover, an idle
/// timeout: here `pg_terminate_backend`) between two batches of work, and again while its
/// worker waits for work: the service makes new connections and goes on, the API answers and
/// the worker evaluates, and its log says it could not claim and then could again, or
/// nothing at all (a dropped connection replaced before use).
#[test]
fn connections_the_server_drops_are_made_again_and_the_queue_goes_on() {
    let Some(db) = database() else { return };
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (tokens_file, toks) = tokens(tmp.path(), &[("alice", "")]);
    let tok = &toks[0];
    let svc = tmp.path().join("svc");
    let log = tmp.path().join("serve.log");
    let mut serve = Serve::smoke(&["--store", &db], &svc, &tokens_file, &log);
    let url = serve.url.clone();
    let problems = sc::smoke_problems();
    let batch = |from: usize| -> Vec<(String, String)> {
        (from..from + 2)
            .map(|n| (problems[n % 4].0.clone(), honest(&problems[n % 4].3, n)))
            .collect()
    };
    let drop_connections = || {
        let mut c = postgres::Client::connect(&db, postgres::NoTls).unwrap();
        let dropped: i64 = c
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(dropped > 0, "the service held no connection");
    };
    let mut answered = 0;
    for round in 0..3 {
        let a = submit(&url, tok, &batch(round * 2));
        assert_eq!(
            a.status,
            202,
            "round {round}: {}\n{}",
            a.body,
            serve.log_text()
        );
        let ids: Vec<String> = a.ids();
        for s in sc::wait_all(&url, tok, &ids, Duration::from_secs(300)) {
            assert_eq!(s["verdict"]["outcome"], "ok", "{s}");
            answered += 1;
        }
        drop_connections();
        // The worker polls for work meanwhile: its next claims meet the dropped connections.
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            serve.child.try_wait().unwrap().is_none(),
            "the service stopped:\n{}",
            serve.log_text()
        );
    }
    assert_eq!(answered, 6);
    let health = call("GET", &format!("{url}/v1/health"), None, None);
    assert_eq!(health.status, 200, "{}", health.body);
    let _ = serve.stop();
}
