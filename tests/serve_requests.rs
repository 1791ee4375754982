//! `kbench serve` against hostile requests (no token, bad tokens, malformed and oversized
//! bodies, path-like problem ids, a token past its quota and rate, a full queue, a slow
//! client), each answered with its status while the service keeps serving; no answer holds a
//! server path, the secret or another client's data. `serve_postgres` runs the same requests
//! against a PostgreSQL store. Then the Python client, installed with
//! pip from the repository, against the same real service.

use crate::common;
use crate::serve_common as sc;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ensure_python, kbench, repo_root, shared};
use sc::{call, honest, submit, tokens, Serve, EVAL};
use serde_json::json;

#[test]
fn hostile_requests_get_their_status_and_the_service_keeps_serving_the_others() {
    hostile_requests_against(None);
}

/// The hostile requests against a service on `store` (`--store`; `None`: its own SQLite
/// file), so that each store's quota, rate and queue checks are held to the same answers.
/// No answer may hold the store's address or its database's name either.
pub fn hostile_requests_against(store: Option<&str>) {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (tokens_file, toks) = tokens(
        tmp.path(),
        &[
            ("alice", ""),
            ("bob", "max_submissions = 2\n"),
            ("carol", "submissions_per_minute = 2\n"),
            ("dave", "max_queued = 1\n"),
        ],
    );
    let (alice, bob, carol, dave) = (&toks[0], &toks[1], &toks[2], &toks[3]);
    let svc = tmp.path().join("svc");
    let mut args: Vec<&str> = vec!["--suite", "smoke"];
    args.extend(EVAL);
    let (svc_s, tok_s) = (svc.to_str().unwrap(), tokens_file.to_str().unwrap());
    args.extend([
        "--out",
        svc_s,
        "--tokens",
        tok_s,
        "--listen",
        "127.0.0.1:0",
        "--max-queue",
        "6",
    ]);
    if let Some(store) = store {
        args.extend(["--store", store]);
    }

    // No --no-sandbox in serve.
    let mut refused = args.clone();
    refused.push("--no-sandbox");
    let out = kbench().arg("serve").args(&refused).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never runs a candidate outside the sandbox")
    );
    // A bad tokens file refuses the service before it writes anything: no folder, no store.
    let bad_tokens = tmp.path().join("bad-tokens.toml");
    std::fs::write(&bad_tokens, "[[client]]\nname = \"x\"\n").unwrap();
    let mut refused = args.clone();
    let at = refused.iter().position(|a| *a == "--tokens").unwrap() + 1;
    refused[at] = bad_tokens.to_str().unwrap();
    let out = kbench().arg("serve").args(&refused).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad-tokens.toml"),
        "{err}"
    );
    assert!(!svc.exists(), "a refused service left {}", svc.display());

    let serve = Serve::start(&args, &tmp.path().join("serve.log"));
    let url = serve.url.clone();
    let problems = sc::smoke_problems();
    let kernel = |n: usize| vec![(problems[0].0.clone(), honest(&problems[0].3, n))];
    let mut bodies = Vec::new();
    let mut expect = |a: sc::Answer, status: u16, code: &str| {
        assert_eq!(a.status, status, "{code}: {}", a.body);
        if !code.is_empty() {
            assert_eq!(a.json()["error"]["code"], code, "{}", a.body);
        }
        bodies.push(a.body.clone());
        a
    };
    let subs = format!("{url}/v1/submissions");
    expect(
        call("POST", &subs, None, Some(&json!({"submissions": []}))),
        401,
        "unauthorized",
    );
    expect(
        call(
            "POST",
            &subs,
            Some("kb_forged"),
            Some(&json!({"submissions": []})),
        ),
        401,
        "unauthorized",
    );
    expect(
        call(
            "GET",
            &format!("{url}/v1/problems"),
            Some(&format!("{alice}x")),
            None,
        ),
        401,
        "unauthorized",
    );
    expect(
        call(
            "POST",
            &subs,
            Some(alice),
            Some(&json!({"submissions": []})),
        ),
        422,
        "invalid_request",
    );
    expect(
        call(
            "POST",
            &subs,
            Some(alice),
            Some(&json!({"submissions": [{"problem": "smoke/L1/1"}]})),
        ),
        422,
        "invalid_request",
    );
    expect(
        call(
            "POST",
            &subs,
            Some(alice),
            Some(&json!({"submissions": [], "admin": true})),
        ),
        422,
        "invalid_request",
    );
    let too_many: Vec<_> = (0..257)
        .map(|_| json!({"problem": "smoke/L1/1", "source": "x"}))
        .collect();
    expect(
        call(
            "POST",
            &subs,
            Some(alice),
            Some(&json!({"submissions": too_many})),
        ),
        422,
        "invalid_request",
    );
    for path_like in [
        "../../etc/passwd",
        "/etc/passwd",
        "smoke/L1/1/../../../secret",
        "smoke\u{0}L1",
    ] {
        let a = expect(
            submit(
                &url,
                alice,
                &[(path_like.into(), "class ModelNew: pass".into())],
            ),
            422,
            "invalid_submission",
        );
        assert!(
            !a.body.contains("passwd") && !a.body.contains("secret"),
            "{}",
            a.body
        );
    }
    let big = "#".repeat((1 << 20) + 10);
    expect(
        submit(&url, alice, &[("smoke/L1/1".into(), big)]),
        413,
        "source_too_large",
    );
    expect(
        call(
            "GET",
            &format!("{url}/v1/submissions/nope?wait=1000"),
            Some(alice),
            None,
        ),
        400,
        "invalid_wait",
    );
    expect(
        call(
            "GET",
            &format!("{url}/v1/submissions?state=odd"),
            Some(alice),
            None,
        ),
        400,
        "invalid_query",
    );
    expect(
        call(
            "GET",
            &format!("{url}/v1/export?format=pdf"),
            Some(alice),
            None,
        ),
        400,
        "invalid_query",
    );
    expect(
        call("GET", &format!("{url}/v1/leaderboard"), Some(alice), None),
        404,
        "not_leaderboard",
    );
    expect(
        call("GET", &format!("{url}/v1/nothing"), Some(alice), None),
        404,
        "no_route",
    );

    // Raw requests: malformed JSON, no JSON content type, a body over 4 MiB.
    let raw = |req: &[u8]| -> String {
        let addr = url.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = s.write_all(req);
        let mut out = String::new();
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
            if out.contains("\r\n\r\n") && out.contains("}") {
                break;
            }
        }
        out
    };
    let post = |ctype: &str, body: &[u8]| -> Vec<u8> {
        let mut r = format!(
            "POST /v1/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let a = raw(&post("application/json", b"{\"submissions\": [ {"));
    assert!(a.starts_with("HTTP/1.1 400"), "{a}");
    let a = raw(&post("text/plain", b"{\"submissions\": []}"));
    assert!(a.starts_with("HTTP/1.1 415"), "{a}");
    let a = raw(&post("application/json", &vec![b' '; 5 << 20]));
    assert!(a.starts_with("HTTP/1.1 413"), "{a}");

    // Nobody's body is read before their token is checked: 401 at once, the body unsent.
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /v1/submissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{").unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 401"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // The scheme is case-insensitive.
    let a = call("GET", &format!("{url}/v1/problems"), None, None);
    assert_eq!(a.status, 401);
    let lower = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let st = lower
        .get(format!("{url}/v1/problems"))
        .header("Authorization", format!("bearer {alice}"))
        .call()
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(st, 200);

    // Quota, rate, queued limit and the full queue.
    expect(
        submit(&url, bob, &[kernel(1)[0].clone(), kernel(2)[0].clone()]),
        202,
        "",
    );
    expect(submit(&url, bob, &kernel(3)), 403, "quota_exhausted");
    expect(
        submit(&url, carol, &[kernel(4)[0].clone(), kernel(5)[0].clone()]),
        202,
        "",
    );
    let a = expect(submit(&url, carol, &kernel(6)), 429, "rate_limited");
    assert!(
        a.retry_after
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "Retry-After"
    );
    let a = expect(
        submit(&url, dave, &[kernel(7)[0].clone(), kernel(8)[0].clone()]),
        429,
        "over_queued",
    );
    assert!(a.retry_after.is_some());
    // Six kernels queued or running at most: alice's batch of three more finds it full.
    let a = submit(
        &url,
        alice,
        &[
            kernel(9)[0].clone(),
            kernel(10)[0].clone(),
            kernel(11)[0].clone(),
        ],
    );
    if a.status == 429 {
        assert_eq!(a.json()["error"]["code"], "queue_full");
        assert!(a.retry_after.is_some());
    } else {
        // The first kernels were already evaluated: then four more must overflow it.
        assert_eq!(a.status, 202, "{}", a.body);
        let more: Vec<_> = (12..19).map(|n| kernel(n)[0].clone()).collect();
        expect(submit(&url, alice, &more), 429, "queue_full");
    }

    // A slow client holds one connection, not the service: its half-sent headers are cut
    // off, and others are answered meanwhile.
    // A connection that never sends a byte is closed as soon as one with half its headers.
    let mut idle = TcpStream::connect(&addr).unwrap();
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"POST /v1/submissions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let t = Instant::now();
    for _ in 0..5 {
        let h = call("GET", &format!("{url}/v1/health"), None, None);
        assert_eq!(h.status, 200);
    }
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "others waited on the slow client"
    );
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 1024];
    let cut = slow.read(&mut buf);
    assert!(
        t.elapsed() < Duration::from_secs(25),
        "the slow client kept its connection"
    );
    let n = cut.unwrap_or(0);
    let said = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || said.starts_with("HTTP/1.1 408"), "{said}");
    idle.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let r = idle.read(&mut buf);
    let closed = matches!(r, Ok(0))
        || r.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset);
    assert!(closed, "the idle connection was kept: {r:?}");
    assert!(
        t.elapsed() < Duration::from_secs(25),
        "the idle connection was kept too long"
    );

    // One client never sees another's submissions.
    let a = expect(
        submit(&url, bob.as_str(), &kernel(1)),
        403,
        "quota_exhausted",
    );
    drop(a);
    let mine = call("GET", &format!("{url}/v1/submissions"), Some(bob), None).json();
    let bob_ids: Vec<String> = mine["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bob_ids.len(), 2);
    expect(
        call(
            "GET",
            &format!("{url}/v1/submissions/{}", bob_ids[0]),
            Some(alice),
            None,
        ),
        404,
        "not_found",
    );
    let theirs = call(
        "GET",
        &format!("{url}/v1/submissions?ids={}", bob_ids.join(",")),
        Some(alice),
        None,
    );
    assert_eq!(theirs.json()["submissions"].as_array().unwrap().len(), 0);
    let done = sc::wait_all(&url, bob, &bob_ids, Duration::from_secs(600));
    for s in &done {
        bodies.push(s.to_string());
        assert_eq!(s["verdict"]["outcome"], "ok", "{s}");
    }
    bodies.push(
        call(
            "GET",
            &format!("{url}/v1/export?format=jsonl"),
            Some(bob),
            None,
        )
        .body,
    );
    bodies.push(
        call(
            "GET",
            &format!("{url}/v1/export?format=markdown"),
            Some(bob),
            None,
        )
        .body,
    );
    bodies.push(call("GET", &format!("{url}/metrics"), None, None).body);
    let spec = call("GET", &format!("{url}/openapi.json"), None, None);
    assert_eq!(spec.status, 200);
    assert!(spec.body.contains("\"openapi\": \"3.1.0\""));

    // Nothing of the server's in any answer: its folders, the tokens file, the secret, the
    // other clients' names.
    let secret = std::fs::read_to_string(svc.join("public/secret")).unwrap();
    let home = std::env::var("HOME").unwrap_or_default();
    for b in &bodies {
        for leak in [svc_s, tok_s, secret.trim(), "alice", "carol", "dave"] {
            assert!(!b.contains(leak), "an answer holds {leak:?}: {b}");
        }
        if let Some(store) = store {
            // The address whole, and the database's name alone (unique to this test).
            let name = store.rsplit('/').next().unwrap_or(store);
            for leak in [store, name] {
                assert!(
                    !b.contains(leak),
                    "an answer holds the store's address ({leak:?}): {b}"
                );
            }
        }
        if home.len() > 1 {
            assert!(
                !b.contains(&format!("{home}/")),
                "an answer holds the home folder: {b}"
            );
        }
    }
    assert_eq!(
        call("GET", &format!("{url}/v1/health"), None, None).status,
        200
    );
    let _ = serve.stop();
}

#[test]
fn the_python_client_installs_with_pip_and_works_against_a_real_service() {
    ensure_python();
    let _g = shared();
    let tmp = tempfile::tempdir().unwrap();
    // Installed from the repository path into a fresh environment.
    let venv = tmp.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let py = venv.join("bin/python3");
    let pip = Command::new(&py)
        .args(["-m", "pip", "install", "-q"])
        .arg(repo_root().join("clients/python"))
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "pip install clients/python:\n{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let imported = Command::new(&py)
        .current_dir(tmp.path())
        .args([
            "-c",
            "import kbench_client, kbench_client.reward; print(kbench_client.__file__)",
        ])
        .output()
        .unwrap();
    assert!(
        imported.status.success()
            && String::from_utf8_lossy(&imported.stdout).contains("site-packages")
    );

    let (tokens_file, toks) = tokens(tmp.path(), &[("rl", "")]);
    let svc = tmp.path().join("svc");
    let serve = Serve::smoke(&[], &svc, &tokens_file, &tmp.path().join("serve.log"));
    let problems = sc::smoke_problems();
    let sources = tmp.path().join("sources");
    std::fs::create_dir_all(&sources).unwrap();
    std::fs::write(sources.join("honest.py"), honest(&problems[0].3, 0)).unwrap();
    std::fs::write(sources.join("zeros.py"), sc::zeros(&problems[0].3)).unwrap();
    std::fs::write(sources.join("crashes.py"), sc::crashes(&problems[0].3)).unwrap();
    // Its unit tests (a fake service) and its live tests (this one), with the installed
    // package: run from a copy of the tests outside the checkout, which `_path.py` then
    // leaves off the import path (and checks).
    let tests = tmp.path().join("client-tests/tests");
    std::fs::create_dir_all(&tests).unwrap();
    for f in std::fs::read_dir(repo_root().join("clients/python/tests")).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&f, tests.join(f.file_name().unwrap())).unwrap();
        }
    }
    let out = Command::new(&py)
        .current_dir(tests.parent().unwrap())
        .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
        .env("KBENCH_CLIENT_INSTALLED", "1")
        .env("KBENCH_SERVE_URL", &serve.url)
        .env("KBENCH_SERVE_TOKEN", &toks[0])
        .env("KBENCH_SERVE_PROBLEM", &problems[0].0)
        .env("KBENCH_SERVE_SOURCES", &sources)
        .env("KBENCH_SERVE_TIMEOUT", "600")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the client's tests:\n{text}\nservice:\n{}",
        serve.log_text()
    );
    assert!(
        !text.contains("skipped '"),
        "a live test was skipped:\n{text}"
    );
    let _ = serve.stop();
}
