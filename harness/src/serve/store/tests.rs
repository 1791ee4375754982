//! The SQLite store's transactions: quotas, one claim per evaluation, leases, the ranked pass.

use super::*;

fn row(id: &str, problem: &str) -> NewRow {
    NewRow {
        id: id.into(),
        problem: problem.into(),
        source: format!("src {id}"),
        label: None,
        ranked: false,
        remeasure: false,
        cached: None,
        ranked_cached: None,
        public_counts: false,
    }
}

const ROOMY: Limits = Limits {
    max_queued: 100,
    max_submissions: None,
    max_queue: 1000,
};

fn done(verdict: &str) -> Done {
    Done {
        known: Known {
            verdict: verdict.into(),
            record: "{\"mac\":\"x\"}".into(),
        },
        then_rank: Some(true),
        cached: false,
    }
}

#[test]
fn claims_take_one_problem_at_a_time_and_never_the_same_evaluation_twice() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Sqlite::open(&dir.path().join("s.sqlite")).unwrap();
    let rows = [row("a", "p/1"), row("b", "p/2"), row("c", "p/1")];
    s.submit("alice", &rows, &ROOMY, 1.0).unwrap().unwrap();
    let first = s
        .claim(Pass::Public, "w1", 10, 60.0, 2.0, Warm::default())
        .unwrap();
    assert_eq!(
        first.iter().map(|j| j.problem.as_str()).collect::<Vec<_>>(),
        ["p/1", "p/1"]
    );
    let second = s
        .claim(Pass::Public, "w2", 10, 60.0, 2.0, Warm::default())
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].problem, "p/2");
    assert!(s
        .claim(Pass::Public, "w2", 10, 60.0, 2.0, Warm::default())
        .unwrap()
        .is_empty());
    // w1's lease runs out: w2 takes its work, and w1's late answer is refused.
    let taken = s
        .claim(Pass::Public, "w2", 10, 60.0, 100.0, Warm::default())
        .unwrap();
    assert_eq!(taken.len(), 2);
    assert!(!s
        .finish(Pass::Public, "w1", first[0].seq, &done("{}"), 101.0)
        .unwrap());
    assert!(s
        .finish(Pass::Public, "w2", first[0].seq, &done("{}"), 101.0)
        .unwrap());
    // A restarted worker queues what it held again (p/1's other kernel; p/2's lease had
    // run out and is queued already).
    assert_eq!(s.requeue_worker("w2").unwrap(), 1);
    let c = s.counts().unwrap();
    assert_eq!((c.queued, c.running, c.done), (2, 0, 1));
}

#[test]
fn a_client_with_fewer_evaluations_running_is_claimed_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Sqlite::open(&dir.path().join("s.sqlite")).unwrap();
    s.submit(
        "hog",
        &[row("h1", "p/1"), row("h2", "p/1"), row("h3", "p/2")],
        &ROOMY,
        1.0,
    )
    .unwrap()
    .unwrap();
    s.submit("late", &[row("l1", "p/3")], &ROOMY, 2.0)
        .unwrap()
        .unwrap();
    let first = s
        .claim(Pass::Public, "w", 1, 60.0, 3.0, Warm::default())
        .unwrap();
    assert_eq!(
        first[0].id, "h1",
        "the oldest first while nobody runs anything"
    );
    let second = s
        .claim(Pass::Public, "w", 1, 60.0, 3.0, Warm::default())
        .unwrap();
    assert_eq!(
        second[0].id, "l1",
        "then the client with nothing running, though it came later"
    );
    let third = s
        .claim(Pass::Public, "w", 5, 60.0, 3.0, Warm::default())
        .unwrap();
    assert_eq!(
        third.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["h2"],
        "one client's, one problem's"
    );
}

#[test]
fn a_claim_takes_a_warm_problem_of_the_fairest_client_before_its_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Sqlite::open(&dir.path().join("s.sqlite")).unwrap();
    // Submitted in turn, as an RL trainer's rollouts of three prompts come.
    let rows: Vec<NewRow> = (0..6)
        .map(|i| row(&format!("t{i}"), &format!("p/{}", i % 3)))
        .collect();
    s.submit("trainer", &rows, &ROOMY, 1.0).unwrap().unwrap();
    s.submit("other", &[row("o1", "p/2")], &ROOMY, 2.0)
        .unwrap()
        .unwrap();
    let ids = |jobs: &[Job]| jobs.iter().map(|j| j.id.clone()).collect::<Vec<_>>();
    let names = |v: &[&str]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let (none, bob) = (names(&[]), names(&["bob"]));
    let warm = |problems| Warm {
        problems,
        spent: &none,
    };
    // Nothing warm: the oldest problem.
    let first = s
        .claim(Pass::Public, "w", 1, 60.0, 3.0, Warm::default())
        .unwrap();
    assert_eq!(ids(&first), ["t0"]);
    assert!(!first[0].ahead_of_oldest);
    assert_eq!(first[0].client, "trainer");
    // The client with nothing running comes first, warm or not: its only problem.
    let p1 = names(&["p/1"]);
    let second = s.claim(Pass::Public, "w", 5, 60.0, 3.0, warm(&p1)).unwrap();
    assert_eq!(ids(&second), ["o1"]);
    // The trainer again: p/2 is warm, so its kernels go before p/1's older t1.
    let p9_p2 = names(&["p/9", "p/2"]);
    let third = s
        .claim(Pass::Public, "w", 5, 60.0, 3.0, warm(&p9_p2))
        .unwrap();
    assert_eq!(ids(&third), ["t2", "t5"]);
    assert!(third.iter().all(|j| j.ahead_of_oldest));
    // A client whose run is spent gets its oldest, warm problems or not.
    let p0 = names(&["p/0"]);
    let spent = Warm {
        problems: &p0,
        spent: &names(&["trainer"]),
    };
    let fourth = s.claim(Pass::Public, "w", 1, 60.0, 3.0, spent).unwrap();
    assert_eq!(ids(&fourth), ["t1"]);
    assert!(!fourth[0].ahead_of_oldest);
    // Of several warm problems, the one queued first, whatever the list's order; another
    // client's spent run changes nothing for this one.
    let p0_p1 = names(&["p/0", "p/1"]);
    let fifth = s
        .claim(
            Pass::Public,
            "w",
            5,
            60.0,
            3.0,
            Warm {
                problems: &p0_p1,
                spent: &bob,
            },
        )
        .unwrap();
    assert_eq!(ids(&fifth), ["t3"]);
    assert!(!fifth[0].ahead_of_oldest, "p/0's t3 is the oldest now");
    // A warm problem with nothing queued: the oldest.
    let p2 = names(&["p/2"]);
    let sixth = s.claim(Pass::Public, "w", 5, 60.0, 3.0, warm(&p2)).unwrap();
    assert_eq!(ids(&sixth), ["t4"]);
    // A problem id that would break a query built by hand is only a value.
    s.submit("trainer", &[row("q", "p/'x\"]")], &ROOMY, 4.0)
        .unwrap()
        .unwrap();
    let odd = names(&["p/'x\"]"]);
    let quoted = s
        .claim(Pass::Public, "w", 5, 60.0, 5.0, warm(&odd))
        .unwrap();
    assert_eq!(ids(&quoted), ["q"]);
}

#[test]
fn quotas_refuse_a_whole_batch_and_cached_answers_add_no_work() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Sqlite::open(&dir.path().join("s.sqlite")).unwrap();
    let tight = Limits {
        max_queued: 2,
        max_submissions: Some(4),
        max_queue: 1000,
    };
    let r = s
        .submit(
            "bob",
            &[row("1", "p"), row("2", "p"), row("3", "p")],
            &tight,
            1.0,
        )
        .unwrap();
    assert_eq!(
        r,
        Err(Refusal::OverQueued {
            queued: 0,
            limit: 2
        })
    );
    assert!(
        s.rows("bob", &Filter::default()).unwrap().is_empty(),
        "nothing of a refused batch is kept"
    );
    s.submit("bob", &[row("1", "p"), row("2", "p")], &tight, 1.0)
        .unwrap()
        .unwrap();
    let mut cached = row("3", "p");
    cached.cached = Some(Known {
        verdict: "{}".into(),
        record: "{}".into(),
    });
    s.submit("bob", &[cached.clone()], &tight, 1.0)
        .unwrap()
        .unwrap();
    let rows = s.rows("bob", &Filter::default()).unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows[2].cached && rows[2].is_done());
    cached.id = "4".into();
    s.submit("bob", &[cached.clone()], &tight, 1.0)
        .unwrap()
        .unwrap();
    cached.id = "5".into();
    assert_eq!(
        s.submit("bob", &[cached], &tight, 1.0).unwrap(),
        Err(Refusal::QuotaExhausted { limit: 4 })
    );
    // Another client's rows are not bob's.
    assert!(s
        .rows(
            "eve",
            &Filter {
                ids: Some(vec!["1".into()]),
                ..Filter::default()
            }
        )
        .unwrap()
        .is_empty());
    let full = Limits {
        max_queued: 100,
        max_submissions: None,
        max_queue: 2,
    };
    assert_eq!(
        s.submit("eve", &[row("6", "p")], &full, 1.0).unwrap(),
        Err(Refusal::QueueFull)
    );
}

#[test]
fn a_ranked_entry_runs_its_ranked_pass_only_when_its_public_answer_counts() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Sqlite::open(&dir.path().join("s.sqlite")).unwrap();
    let mut a = row("a", "p");
    a.ranked = true;
    let mut b = row("b", "p");
    b.ranked = true;
    s.submit("c", &[a, b], &ROOMY, 1.0).unwrap().unwrap();
    assert!(
        s.claim(Pass::Ranked, "w", 10, 60.0, 1.0, Warm::default())
            .unwrap()
            .is_empty(),
        "not before the public pass"
    );
    let jobs = s
        .claim(Pass::Public, "w", 10, 60.0, 1.0, Warm::default())
        .unwrap();
    let mut wrong = done("{}");
    wrong.then_rank = Some(false);
    s.finish(Pass::Public, "w", jobs[0].seq, &done("{}"), 2.0)
        .unwrap();
    s.finish(Pass::Public, "w", jobs[1].seq, &wrong, 2.0)
        .unwrap();
    let ranked = s
        .claim(Pass::Ranked, "w", 10, 60.0, 3.0, Warm::default())
        .unwrap();
    assert_eq!(ranked.len(), 1);
    assert_eq!(ranked[0].seq, jobs[0].seq);
    s.finish(Pass::Ranked, "w", ranked[0].seq, &done("{\"r\":1}"), 4.0)
        .unwrap();
    let rows = s.ranked_rows().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].ranked_verdict.as_deref(), Some("{\"r\":1}"));
    let all = s.rows("c", &Filter::default()).unwrap();
    assert_eq!(all[1].ranked_state.as_deref(), Some("skipped"));
}

#[test]
fn the_store_file_is_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/s.sqlite");
    let _s = sqlite::Sqlite::open(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_worker_of_another_fleet_may_not_join_and_the_cache_keeps_the_latest_answer() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite::Sqlite::open(&dir.path().join("s.sqlite")).unwrap();
    s.join_fleet(Pass::Public, "f1", "torch 2.11 on H200")
        .unwrap();
    s.join_fleet(Pass::Public, "f1", "torch 2.11 on H200")
        .unwrap();
    let e = s
        .join_fleet(Pass::Public, "f2", "torch 2.9 on H100")
        .unwrap_err();
    assert!(
        format!("{e}").contains("H200") && format!("{e}").contains("H100"),
        "{e}"
    );
    assert_eq!(s.fleet(Pass::Public).unwrap().as_deref(), Some("f1"));
    let k = |v: &str| Known {
        verdict: v.into(),
        record: "r".into(),
    };
    s.cache_put("key", &k("1")).unwrap();
    s.cache_put("key", &k("2")).unwrap();
    assert_eq!(s.cache_get("key").unwrap(), Some(k("2")));
    assert_eq!(s.cache_get("other").unwrap(), None);
}

#[test]
fn only_a_store_out_of_reach_is_waited_out() {
    use super::transient;
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    assert!(transient(&anyhow::Error::from(io).context("claiming")));
    let busy =
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY), None);
    assert!(transient(&anyhow::Error::from(busy)));
    let corrupt = rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
        None,
    );
    assert!(!transient(&anyhow::Error::from(corrupt)));
    assert!(!transient(&anyhow::anyhow!(
        "relation \"submissions\" does not exist"
    )));
}
