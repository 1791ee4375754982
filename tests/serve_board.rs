//! `kbench serve --leaderboard`: a ranked entry is answered on the public cases at once and
//! counts on the board only after its secret-seed pass; wrong and flagged entries never count;
//! the leaderboard page is served live (headless Chromium reads it) and changes as ranked
//! answers land. Unranked submissions never reach the board.

use crate::common;
use crate::serve_common as sc;

use std::time::{Duration, Instant};

use common::{ensure_python, shared};
use sc::{call, honest, tokens, Serve, EVAL};
use serde_json::{json, Value};

fn ranked(url: &str, token: &str, problem: &str, source: &str, label: &str, rank: bool) -> String {
    let body = json!({"submissions": [{"problem": problem, "source": source, "label": label, "ranked": rank}]});
    let a = call(
        "POST",
        &format!("{url}/v1/submissions"),
        Some(token),
        Some(&body),
    );
    assert_eq!(a.status, 202, "{}", a.body);
    a.json()["ids"][0].as_str().unwrap().to_string()
}

fn board(url: &str, token: &str) -> Value {
    let a = call("GET", &format!("{url}/v1/leaderboard"), Some(token), None);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

#[test]
fn ranked_entries_count_after_their_secret_seed_pass_and_flagged_ones_never() {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (tokens_file, toks) = tokens(tmp.path(), &[("alice", ""), ("bob", "")]);
    let (alice, bob) = (&toks[0], &toks[1]);
    let svc = tmp.path().join("svc");
    let mut args: Vec<&str> = vec!["--suite", "smoke", "--select", "1-2"];
    args.extend(EVAL);
    let (svc_s, tok_s) = (svc.to_str().unwrap(), tokens_file.to_str().unwrap());
    args.extend([
        "--out",
        svc_s,
        "--tokens",
        tok_s,
        "--listen",
        "127.0.0.1:0",
        "--leaderboard",
    ]);
    let serve = Serve::start(&args, &tmp.path().join("serve.log"));
    let url = serve.url.clone();
    let problems = sc::smoke_problems();
    let (p1, s1) = (&problems[0].0, &problems[0].3);
    let p2 = problems.iter().find(|p| p.0 == "smoke/L1/2").unwrap();

    let page = call("GET", &format!("{url}/leaderboard"), None, None);
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("alice"));

    let a_ok = ranked(&url, alice, p1, &honest(s1, 0), "alice-honest", true);
    let mutates = format!(
        "{s1}\n\nclass ModelNew(Model):\n    def forward(self, *args):\n        out = super().forward(*args)\n        args[0].mul_(0.5)\n        return out\n"
    );
    let a_flagged = ranked(&url, alice, p1, &mutates, "alice-mutates", true);
    let b_wrong = ranked(&url, bob, p1, &sc::zeros(s1), "bob-zeros", true);
    let b_ok = ranked(&url, bob, &p2.0, &honest(&p2.3, 0), "bob-honest", true);
    let b_unranked = ranked(&url, bob, p1, &honest(s1, 1), "bob-unranked", false);

    let alice_done = sc::wait_all(
        &url,
        alice,
        &[a_ok.clone(), a_flagged.clone()],
        Duration::from_secs(600),
    );
    assert_eq!(alice_done[0]["verdict"]["outcome"], "ok");
    assert_eq!(
        alice_done[1]["verdict"]["flagged"], true,
        "{}",
        alice_done[1]
    );
    let bob_done = sc::wait_all(
        &url,
        bob,
        &[b_wrong, b_ok.clone(), b_unranked],
        Duration::from_secs(600),
    );
    assert_eq!(bob_done[0]["verdict"]["correct"], false);

    // The board fills as the ranked passes land: alice's honest entry and bob's.
    let t = Instant::now();
    let b = loop {
        let b = board(&url, alice);
        if b["entries"].as_array().unwrap().len() >= 2 {
            break b;
        }
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "ranked passes never landed: {b}\n{}",
            serve.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    let b2 = board(&url, bob);
    assert_eq!(
        b, b2,
        "nothing more lands: the wrong and flagged entries never rank"
    );
    let subs: Vec<&str> = b["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["submission"].as_str().unwrap())
        .collect();
    assert_eq!(subs.len(), 2, "{b}");
    assert!(
        subs.contains(&a_ok.as_str()) && subs.contains(&b_ok.as_str()),
        "{b}"
    );
    // The ranked pass ran on other cases than the public one: its record is another run's.
    let one = call(
        "GET",
        &format!("{url}/v1/submissions/{a_ok}"),
        Some(alice),
        None,
    )
    .json();
    assert_eq!(one["ranked_verdict"]["outcome"], "ok", "{one}");
    assert!(
        std::fs::read_to_string(svc.join("ranked/records.jsonl"))
            .unwrap()
            .lines()
            .count()
            == 2
    );
    let flagged = call(
        "GET",
        &format!("{url}/v1/submissions/{a_flagged}"),
        Some(alice),
        None,
    )
    .json();
    assert!(
        flagged["ranked_verdict"].is_null(),
        "a flagged entry gets no ranked pass: {flagged}"
    );

    // The page, live, in a real browser.
    let out =
        crate::leaderboard::browse(&format!("{url}/leaderboard"), &["--dump-dom".to_string()]);
    assert!(out.status.success(), "{}", common::show(&out));
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("alice") && dom.contains("bob"),
        "the page names the ranked clients:\n{dom}"
    );
    assert!(
        dom.contains("http-equiv=\"refresh\""),
        "the page reloads itself"
    );
    let _ = serve.stop();
}
