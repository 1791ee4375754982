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
    let extra = ["--select", "1-2", "--leaderboard"];
    let serve = Serve::smoke(&extra, &svc, &tokens_file, &tmp.path().join("serve.log"));
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

/// A candidate that looks for the service's own files sees none of them, in either pass,
/// even where the service's folder and its tokens lie in a folder every sandbox shows (here
/// a library folder the environment names, as `/opt` would be), and even running as the
/// service's own uid: the store (every client's sources), each pass's run secret, the ranked
/// pass's seeds and the tokens. (Its own source is shown to it, read-only.)
#[test]
fn a_candidate_sees_none_of_the_service_files_in_either_pass() {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let shown = tmp.path().join("shown");
    std::fs::create_dir(&shown).unwrap();
    let (tokens_file, toks) = tokens(&shown, &[("alice", "")]);
    let svc = shown.join("svc");
    let mut args: Vec<&str> = vec!["--suite", "smoke", "--select", "1"];
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
    let env = [
        ("CUDA_HOME", shown.as_path()),
        ("KBENCH_CANDIDATE_UID", "off".as_ref()),
    ];
    let serve = Serve::start_env(&args, &tmp.path().join("serve.log"), &env);
    let url = serve.url.clone();
    let (problem, source) = {
        let p = &sc::smoke_problems()[0];
        (p.0.clone(), p.3.clone())
    };
    let shown_s = shown.to_str().unwrap();
    let peeks = format!(
        r#"{source}

import os
SHOWN = {shown_s:?}

def _peek():
    own = os.path.realpath(__file__)
    seen = []
    for top, dirs, files in os.walk(SHOWN):
        for f in files:
            p = os.path.join(top, f)
            if os.path.realpath(p) == own:
                continue
            try:
                with open(p, "rb") as fh:
                    if fh.read(1):
                        seen.append(p)
            except OSError:
                pass
    return seen

class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not os.path.isdir(SHOWN):
            raise RuntimeError("the library folder is not shown: the test proves nothing")
        seen = _peek()
        if seen:
            raise RuntimeError("LEAKED " + " ".join(seen))
"#
    );
    let id = ranked(&url, &toks[0], &problem, &peeks, "peeks", true);
    let t = Instant::now();
    let done = loop {
        let a = call(
            "GET",
            &format!("{url}/v1/submissions/{id}?wait=20"),
            Some(&toks[0]),
            None,
        );
        assert_eq!(a.status, 200, "{}", a.body);
        let s = a.json();
        let public_failed = s["state"] == "done" && s["verdict"]["outcome"] != "ok";
        if public_failed || (s["state"] == "done" && !s["ranked_verdict"].is_null()) {
            break (s, a.body);
        }
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "never done: {}\n{}",
            a.body,
            serve.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (s, body) = done;
    assert!(!body.contains("LEAKED"), "{body}");
    assert!(!body.contains(&toks[0]), "{body}");
    assert_eq!(s["verdict"]["outcome"], "ok", "{body}");
    assert_eq!(s["ranked_verdict"]["outcome"], "ok", "{body}");
    // What it looked for is there, readable by this uid, outside the sandbox.
    for f in [
        svc.join("store.sqlite"),
        svc.join("ranked-secret"),
        svc.join("public/secret"),
        tokens_file.clone(),
    ] {
        assert!(
            std::fs::read(&f).is_ok_and(|b| !b.is_empty()),
            "{}",
            f.display()
        );
    }
    serve.stop();
}
