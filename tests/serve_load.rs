//! `kbench serve` under load and under SIGKILL, on the CPU with the real worker: a thousand
//! submissions from eight clients get the verdicts `kbench run` gives the same kernels, each
//! distinct kernel evaluated once, every answer's record signed with the run's key, and the
//! metrics account for all of it; a service killed mid-queue and started again completes
//! every submission exactly once; a copy of a kernel comes from the cache, marked, and is
//! evaluated again on request.

use crate::common;
use crate::serve_common as sc;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{ensure_python, kbench, records, shared, show, RunBuilder};
use sc::{call, honest, submit, tokens, wait_all, Serve, EVAL, SECRET};
use serde_json::Value;

/// The distinct kernels: (problem id, level, id, source), honest ones for every smoke problem,
/// wrong, crashing and broken ones, and three that attack the harness.
fn kernels() -> Vec<(String, u8, u32, String)> {
    let problems = sc::smoke_problems();
    let mut out: Vec<(String, u8, u32, String)> = problems
        .iter()
        .map(|(k, l, i, src)| (k.clone(), *l, *i, honest(src, 0)))
        .collect();
    let p = |n: usize| problems[n].clone();
    let (k, l, i, src) = p(0);
    out.push((k.clone(), l, i, sc::zeros(&src)));
    out.push((k.clone(), l, i, sc::crashes(&src)));
    out.push((k.clone(), l, i, "class ModelNew(:\n".to_string()));
    // Writes into its input after computing: caught as a mutated input.
    out.push((k.clone(), l, i, format!(
        "{src}\n\nclass ModelNew(Model):\n    def forward(self, *args):\n        out = super().forward(*args)\n        args[0].mul_(0.5)\n        return out\n"
    )));
    // Rebinds the comparison the checker might use.
    out.push((k.clone(), l, i, format!(
        "{src}\n\nimport torch\ntorch.allclose = lambda *a, **k: True\nclass ModelNew(Model):\n    def forward(self, *args):\n        return super().forward(*args) * 0\n"
    )));
    let (k, l, i, src) = p(1);
    out.push((k, l, i, sc::zeros(&src)));
    out
}

#[test]
fn a_thousand_submissions_from_eight_clients_get_the_verdicts_of_kbench_run_each_kernel_evaluated_once(
) {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("client{i}")).collect();
    let clients: Vec<(&str, &str)> = names
        .iter()
        .map(|n| {
            (
                n.as_str(),
                "submissions_per_minute = 100000\nrequests_per_minute = 100000\n",
            )
        })
        .collect();
    let (tokens_file, toks) = tokens(tmp.path(), &clients);
    let svc = tmp.path().join("svc");
    let extra = ["--secret-from", secret.to_str().unwrap()];
    let serve = Serve::smoke(&extra, &svc, &tokens_file, &tmp.path().join("serve.log"));
    let url = serve.url.clone();
    let kernels = kernels();

    // 8 clients, 125 submissions each in 5 requests of 25, kernels chosen by a fixed sequence.
    let t0 = Instant::now();
    let handles: Vec<_> = toks
        .iter()
        .enumerate()
        .map(|(c, tok)| {
            let (url, tok, kernels) = (url.clone(), tok.clone(), kernels.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut latencies = Vec::new();
                let mut x: u64 = 0x9e37_79b9 ^ (c as u64 + 1);
                for _ in 0..5 {
                    let batch: Vec<usize> = (0..25)
                        .map(|_| {
                            x = x
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            (x >> 33) as usize % kernels.len()
                        })
                        .collect();
                    let items: Vec<(String, String)> = batch
                        .iter()
                        .map(|&k| (kernels[k].0.clone(), kernels[k].3.clone()))
                        .collect();
                    let t = Instant::now();
                    let a = submit(&url, &tok, &items);
                    latencies.push(t.elapsed().as_secs_f64());
                    assert_eq!(a.status, 202, "{}", a.body);
                    let ids: Vec<String> = a.ids();
                    assert_eq!(ids.len(), 25);
                    mine.extend(ids.into_iter().zip(batch));
                }
                let ids: Vec<String> = mine.iter().map(|(i, _)| i.clone()).collect();
                let t = Instant::now();
                let done = wait_all(&url, &tok, &ids, Duration::from_secs(900));
                latencies.push(t.elapsed().as_secs_f64() / ids.len() as f64);
                (mine, done, latencies)
            })
        })
        .collect();
    let mut answers: BTreeMap<usize, BTreeSet<(String, Option<String>)>> = BTreeMap::new();
    let mut posts = Vec::new();
    let mut total = 0;
    let mut served_records = Vec::new();
    for h in handles {
        let (mine, done, lat) = h.join().expect("a client thread");
        posts.extend_from_slice(&lat[..lat.len() - 1]);
        for ((id, k), s) in mine.iter().zip(&done) {
            assert_eq!(s["id"].as_str(), Some(id.as_str()));
            assert_eq!(s["state"], "done");
            answers
                .entry(*k)
                .or_default()
                .insert(sc::verdict_of_answer(s));
            served_records.push(s["record"].clone());
            total += 1;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    assert_eq!(total, 1000, "every submission answered");

    // Each distinct kernel evaluated once: one record per kernel in the service's run log.
    let recs = records(&svc.join("public"));
    let keys: BTreeSet<String> = recs.iter().map(common::key).collect();
    assert_eq!(
        keys.len(),
        recs.len(),
        "a kernel evaluated twice:\n{recs:#?}"
    );
    assert_eq!(
        recs.len(),
        answers.len(),
        "one evaluation per distinct kernel submitted"
    );

    // The same kernels through `kbench run`, same settings and secret.
    let replay = tmp.path().join("replay");
    std::fs::create_dir_all(&replay).unwrap();
    for (n, (_, level, id, src)) in kernels.iter().enumerate() {
        std::fs::write(
            replay.join(format!("level_{level}_problem_{id}_sample_{n}_kernel.py")),
            src,
        )
        .unwrap();
    }
    let run_out = tmp.path().join("run");
    let out = kbench()
        .args(
            RunBuilder::new()
                .agent("replay")
                .replay_dir(&replay)
                .suite("smoke")
                .args(EVAL)
                .secret_from(&secret)
                .out(&run_out)
                .build(),
        )
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", show(&out));
    let by_sample: BTreeMap<u64, (String, Option<String>)> = records(&run_out)
        .iter()
        .map(|r| {
            (
                r["candidate"]["sample"].as_u64().unwrap(),
                sc::verdict_of_record(r),
            )
        })
        .collect();
    for (k, seen) in &answers {
        assert_eq!(seen.len(), 1, "kernel {k} got different verdicts: {seen:?}");
        let v = seen.iter().next().unwrap();
        assert_eq!(
            Some(v),
            by_sample.get(&(*k as u64)),
            "kernel {k}: the service and kbench run differ"
        );
    }
    let outcomes: BTreeSet<&str> = answers
        .values()
        .flatten()
        .map(|(o, _)| o.as_str())
        .collect();
    for want in ["ok", "mismatch", "crashed", "compile_error"] {
        assert!(outcomes.contains(want), "no {want} among {outcomes:?}");
    }
    assert!(
        answers.values().flatten().any(|(_, f)| f.is_some()),
        "no kernel was flagged: {answers:?}"
    );

    // Latency of the API's submissions, and the service's own quantiles, into a results file.
    posts.sort_by(f64::total_cmp);
    let q = |p: f64| posts[((posts.len() - 1) as f64 * p).round() as usize];
    let metrics = call("GET", &format!("{url}/metrics"), None, None).body;
    let quantile = |name: &str, q: &str| -> Option<f64> {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{quantile=\"{q}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let results = serde_json::json!({
        "submissions": total,
        "clients": 8,
        "distinct_kernels": answers.len(),
        "evaluations": recs.len(),
        "wall_s": wall,
        "submit_request_p50_s": q(0.5),
        "submit_request_p99_s": q(0.99),
        "api_latency_p50_s": quantile("kbench_serve_api_latency_seconds", "0.5"),
        "api_latency_p99_s": quantile("kbench_serve_api_latency_seconds", "0.99"),
    });
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-load-latency.json");
    std::fs::write(&file, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    eprintln!("{}: {results}", file.display());
    // The metrics account for the load: nothing queued, every submission done, one
    // evaluation a distinct kernel, the device's busy share a share, and the API's quantiles.
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"))
    };
    assert_eq!(value("kbench_serve_queue_depth"), 0.0);
    assert_eq!(
        value("kbench_serve_submissions{state=\"done\"}"),
        total as f64
    );
    assert_eq!(value("kbench_serve_evaluations_total"), recs.len() as f64);
    let busy = value("kbench_serve_gpu_busy_ratio{gpu=\"cpu\"}");
    assert!(busy > 0.0 && busy <= 1.0, "busy share {busy}");
    let (p50, p99) = (
        results["api_latency_p50_s"].as_f64().expect("an API p50"),
        results["api_latency_p99_s"].as_f64().expect("an API p99"),
    );
    assert!(0.0 < p50 && p50 <= p99, "{p50} {p99}");
    assert!(value("kbench_serve_responses_total{status=\"202\"}") >= 40.0);

    // Every client's export is its records as signed lines: each verifies under the run's
    // records key, on the bytes served (a client holding the secret can check them; nobody
    // else can make one), and together they are every submission's record.
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(svc.join("public/run.json")).unwrap())
            .unwrap();
    let key = kbench::runlog::records_key(
        &kbench::runlog::seed::RunSecret::load(&svc.join("public/secret")).unwrap(),
        manifest["record_mac"].as_str(),
    )
    .unwrap();
    let mut exported = BTreeSet::new();
    for tok in &toks {
        let a = call(
            "GET",
            &format!("{url}/v1/export?format=jsonl"),
            Some(tok),
            None,
        );
        assert_eq!(a.status, 200, "{}", a.body);
        for line in a.body.lines() {
            assert!(kbench::runlog::line_verifies(&key, line), "{line}");
            let r: Value = serde_json::from_str(line).unwrap();
            exported.insert(r["candidate"]["name"].as_str().unwrap().to_string());
        }
    }
    let served: BTreeSet<String> = served_records
        .iter()
        .map(|r| r["candidate"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(exported, served);
    let forged = a_line_changed(&served_records[0]);
    assert!(!kbench::runlog::line_verifies(&key, &forged));
    let status = serve.stop();
    assert_eq!(
        status.code(),
        Some(130),
        "SIGTERM stops the service as an interruption"
    );
}

#[test]
fn a_service_killed_mid_queue_completes_every_submission_exactly_once_after_a_restart() {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (tokens_file, toks) = tokens(tmp.path(), &[("alice", "")]);
    let svc = tmp.path().join("svc");
    let problems = sc::smoke_problems();
    let items: Vec<(String, String)> = (0..8)
        .map(|n| (problems[n % 4].0.clone(), honest(&problems[n % 4].3, n)))
        .collect();

    let mut serve = Serve::smoke(&[], &svc, &tokens_file, &tmp.path().join("first.log"));
    let a = submit(&serve.url, &toks[0], &items);
    assert_eq!(a.status, 202, "{}", a.body);
    let ids: Vec<String> = a.ids();
    // Killed once the first verdicts are in and the rest still queued or running.
    let t = Instant::now();
    loop {
        let a = call(
            "GET",
            &format!("{}/v1/submissions?ids={}", serve.url, ids.join(",")),
            Some(&toks[0]),
            None,
        );
        let done = a.json()["submissions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["state"] == "done")
            .count();
        if done >= 2 {
            assert!(
                done < ids.len(),
                "everything finished before the kill: make the queue longer"
            );
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(300), "no verdict came");
        std::thread::sleep(Duration::from_millis(50));
    }
    serve.child.kill().unwrap();
    serve.child.wait().unwrap();
    drop(serve);

    let serve = Serve::smoke(&[], &svc, &tokens_file, &tmp.path().join("second.log"));
    let done = wait_all(&serve.url, &toks[0], &ids, Duration::from_secs(600));
    for s in &done {
        assert_eq!(s["verdict"]["outcome"], "ok", "{s}");
    }
    let recs = records(&svc.join("public"));
    let keys: Vec<String> = recs.iter().map(common::key).collect();
    let unique: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(
        unique.len(),
        keys.len(),
        "a kernel recorded twice: {keys:?}"
    );
    assert_eq!(keys.len(), 8, "one record per kernel");
    let names: BTreeSet<String> = done
        .iter()
        .map(|s| {
            s["record"]["candidate"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(names.len(), 8);
    let log = serve.log_text();
    assert!(
        log.contains("queued again"),
        "the restarted worker took back what it held:\n{log}"
    );
    let _ = serve.stop();
    let _: Option<Value> = None;
}

/// A served record as a signed line with its outcome rewritten and its MAC kept.
fn a_line_changed(r: &Value) -> String {
    let mac = r["mac"].as_str().unwrap();
    let mut body = r.clone();
    body.as_object_mut().unwrap().remove("mac");
    body["outcome"] = serde_json::json!({"kind": "ok"});
    body["timing"] = Value::Null;
    let text = body.to_string();
    format!("{{\"mac\":\"{mac}\",{}", &text[1..])
}

/// The name the service gives a kernel (`k` and 24 hex digits of sha256(problem's sha256,
/// NUL, source)), computed with coreutils' `sha256sum` as the tests have no hash crate.
fn kernel_name(problem_sha256: &str, source: &str) -> String {
    let o = std::process::Command::new("sh")
        .args(["-c", "printf '%s\\0%s' \"$1\" \"$2\" | sha256sum", "sh"])
        .args([problem_sha256, source])
        .output()
        .expect("running sha256sum");
    format!("k{}", &String::from_utf8_lossy(&o.stdout)[..24])
}

/// The verdict cache, and a re-measurement on request: a kernel sent again is answered at
/// once from the cache, marked `cached`, with the first evaluation's record; sent with
/// `remeasure`, it is evaluated again, not marked, with a record of its own (another sample),
/// and the run log holds both evaluations.
/// A batch whose first kernel cannot be evaluated still answers and counts the one after it.
#[test]
fn a_copy_is_answered_from_the_cache_and_remeasured_on_request() {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (tokens_file, toks) = tokens(tmp.path(), &[("alice", "")]);
    let tok = &toks[0];
    let svc = tmp.path().join("svc");
    let log = tmp.path().join("serve.log");
    let serve = Serve::smoke(&["--select", "1"], &svc, &tokens_file, &log);
    let url = serve.url.clone();
    let (problem, source) = {
        let p = &sc::smoke_problems()[0];
        (p.0.clone(), honest(&p.3, 0))
    };
    let send = |remeasure: bool| -> Value {
        let body = serde_json::json!({"submissions": [
            {"problem": problem, "source": source, "remeasure": remeasure}
        ]});
        let a = call(
            "POST",
            &format!("{url}/v1/submissions"),
            Some(tok),
            Some(&body),
        );
        assert_eq!(a.status, 202, "{}", a.body);
        let id = a.json()["ids"][0].as_str().unwrap().to_string();
        wait_all(&url, tok, &[id], Duration::from_secs(300)).remove(0)
    };
    let first = send(false);
    assert_eq!(
        (
            first["cached"].as_bool(),
            first["verdict"]["outcome"].as_str()
        ),
        (Some(false), Some("ok"))
    );
    let copy = send(false);
    assert_eq!(copy["cached"], true, "{copy}");
    assert_eq!(copy["record"]["mac"], first["record"]["mac"]);
    let again = send(true);
    assert_eq!(again["cached"], false, "{again}");
    assert_eq!(again["verdict"]["outcome"], "ok");
    assert_ne!(again["record"]["mac"], first["record"]["mac"]);
    assert_ne!(
        again["record"]["candidate"]["sample"],
        first["record"]["candidate"]["sample"]
    );
    assert_eq!(
        again["record"]["candidate"]["name"],
        first["record"]["candidate"]["name"]
    );
    assert_eq!(
        records(&svc.join("public")).len(),
        2,
        "two evaluations of the kernel"
    );
    // A batch whose first kernel fails before it is evaluated (a folder where its source
    // goes): the kernel after it is evaluated, answered and counted all the same.
    let kernels = svc.join("public/kernels");
    let blocked = honest(&sc::smoke_problems()[0].3, 1);
    let first_name = first["record"]["candidate"]["name"].as_str().unwrap();
    let blocked_name = kernel_name(
        first["record"]["problem"]["sha256"].as_str().unwrap(),
        &blocked,
    );
    let first_file = std::fs::read_dir(&kernels)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|f| f.ends_with(&format!("{first_name}__0.py")))
        .expect("the first kernel's source (sample 0) in the run's kernels folder");
    std::fs::create_dir(kernels.join(first_file.replace(first_name, &blocked_name))).unwrap();
    let batch = [
        (problem.clone(), blocked),
        (problem.clone(), honest(&sc::smoke_problems()[0].3, 2)),
    ];
    let a = submit(&url, tok, &batch);
    assert_eq!(a.status, 202, "{}", a.body);
    let after = a.json()["ids"][1].as_str().unwrap().to_string();
    let after = wait_all(&url, tok, &[after], Duration::from_secs(300)).remove(0);
    assert_eq!(after["cached"], false, "{after}");
    assert_eq!(after["verdict"]["outcome"], "ok", "{after}");
    // The metrics agree: three evaluations, the copy a cache hit.
    let metrics = call("GET", &format!("{url}/metrics"), None, None).body;
    for (series, expected) in [
        ("kbench_serve_evaluations_total", 3.0),
        ("kbench_serve_cache_hits_total", 1.0),
    ] {
        let got = metrics.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        });
        assert_eq!(got, Some(expected), "{series} in:\n{metrics}");
    }
    let _ = serve.stop();
}

/// An RL trainer's shape: one client's rollouts of six problems, submitted in turn (1, 2, …,
/// 6, 1, 2, …), three rounds. Each claim takes a problem the worker holds warm before the
/// client's oldest, so every problem's reference session opens about once. Taking the oldest
/// instead reopens them: the CPU keeps four sessions, and six problems in turn evict each
/// other's (12 opened when this test was written against that rule).
#[test]
fn rollouts_of_several_problems_submitted_in_turn_open_each_reference_session_about_once() {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (tokens_file, toks) = tokens(tmp.path(), &[("trainer", "")]);
    let tok = &toks[0];
    let svc = tmp.path().join("svc");
    let log = tmp.path().join("serve.log");
    let serve = Serve::smoke(&["--select", "1-6"], &svc, &tokens_file, &log);
    let url = serve.url.clone();
    let problems: Vec<_> = sc::smoke_problems().into_iter().take(6).collect();
    let items: Vec<(String, String)> = (0..3)
        .flat_map(|round| {
            problems
                .iter()
                .map(move |(k, _, _, src)| (k.clone(), honest(src, round)))
        })
        .collect();
    let a = submit(&url, tok, &items);
    assert_eq!(a.status, 202, "{}", a.body);
    let done = wait_all(&url, tok, &a.ids(), Duration::from_secs(600));
    assert!(
        done.iter().all(|s| s["verdict"]["outcome"] == "ok"),
        "{done:?}"
    );
    let metrics = call("GET", &format!("{url}/metrics"), None, None).body;
    let count = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"))
    };
    let opened = count("kbench_serve_reference_sessions_opened_total{pass=\"public\"}");
    let reused = count("kbench_serve_reference_sessions_reused_total{pass=\"public\"}");
    assert!(
        (6.0..=8.0).contains(&opened),
        "{opened} reference sessions opened for 18 kernels of 6 problems (reused {reused})"
    );
    // The records agree: at most 8 evaluations paid for opening a session.
    let opening = records(&svc.join("public"))
        .iter()
        .filter(|r| r["phases"]["reference_open_s"].as_f64().unwrap_or(0.0) > 0.0)
        .count();
    assert!(opening <= 8, "{opening} records opened a reference session");
    serve.stop();
}
