//! Helpers of the `kbench serve` tests: a real service on loopback (a port of its own), its
//! tokens, HTTP calls, and smoke-suite kernels whose verdicts are known.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::kbench;

/// A fixed run secret: the service's cases and `kbench run`'s are the same.
pub const SECRET: &str = "5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e";

/// Evaluation settings short enough for CI's two cores, the same for the service and for
/// the `kbench run` its verdicts are compared with.
pub const EVAL: &[&str] = &[
    "--device",
    "cpu",
    "--families",
    "random",
    "--trials",
    "2",
    "--timed-calls",
    "10",
];

/// A token file with `clients` (name, extra TOML lines), and each client's token.
pub fn tokens(dir: &Path, clients: &[(&str, &str)]) -> (PathBuf, Vec<String>) {
    let mut file = String::new();
    let mut out = Vec::new();
    for (name, extra) in clients {
        let made = kbench()
            .args(["serve", "--new-token", name])
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let text = String::from_utf8(made.stdout).unwrap();
        let token = text
            .split_whitespace()
            .find(|w| w.starts_with("kb_"))
            .expect("a token")
            .to_string();
        let entry = &text[text.find("[[client]]").expect("an entry")..];
        file.push_str(entry);
        file.push_str(extra);
        file.push('\n');
        out.push(token);
    }
    let path = dir.join("tokens.toml");
    std::fs::write(&path, file).unwrap();
    (path, out)
}

/// A running `kbench serve`, killed when dropped.
pub struct Serve {
    pub child: Child,
    pub url: String,
    pub log: PathBuf,
}

impl Serve {
    /// Starts `kbench serve ARGS --listen 127.0.0.1:0` and waits for its address (or, for a
    /// worker, for it to say it evaluates).
    pub fn start(args: &[&str], log: &Path) -> Serve {
        Serve::start_env(args, log, &[])
    }

    /// [`Serve::start`] over the smoke suite with [`EVAL`]'s settings, `extra` options (e.g.
    /// `--select 1-6`, `--store URL`), its folder `svc` and the tokens file `tokens_file`.
    pub fn smoke(extra: &[&str], svc: &Path, tokens_file: &Path, log: &Path) -> Serve {
        let mut args: Vec<&str> = vec!["--suite", "smoke"];
        args.extend(extra);
        args.extend(EVAL);
        let (svc_s, tok_s) = (svc.to_str().unwrap(), tokens_file.to_str().unwrap());
        args.extend(["--out", svc_s, "--tokens", tok_s, "--listen", "127.0.0.1:0"]);
        Serve::start(&args, log)
    }

    /// [`Serve::start`] with these variables in the service's environment.
    pub fn start_env(args: &[&str], log: &Path, env: &[(&str, &Path)]) -> Serve {
        let err = std::fs::File::create(log).unwrap();
        let mut child = kbench()
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("starting kbench serve");
        let worker_only = args.contains(&"--worker");
        let t = Instant::now();
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if let Some(at) = text.find("listening on http://") {
                let url = text[at + "listening on ".len()..]
                    .lines()
                    .next()
                    .unwrap()
                    .trim()
                    .to_string();
                return Serve {
                    child,
                    url,
                    log: log.to_path_buf(),
                };
            }
            if worker_only && text.contains("kbench serve: evaluating") {
                return Serve {
                    child,
                    url: String::new(),
                    log: log.to_path_buf(),
                };
            }
            if let Ok(Some(s)) = child.try_wait() {
                panic!("kbench serve exited ({s}) before serving:\n{text}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "kbench serve did not start:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "kbench serve did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer: status, headers we read, body.
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The submission ids of an accepted submit (202).
    pub fn ids(&self) -> Vec<String> {
        self.json()["ids"]
            .as_array()
            .unwrap_or_else(|| panic!("no ids: {}", self.body))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

pub fn call(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> Answer {
    let agent = agent();
    let auth = token.map(|t| format!("Bearer {t}"));
    let resp = match (method, body) {
        ("GET", _) => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
        ("POST", Some(b)) => {
            let mut r = agent.post(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send_json(b)
        }
        _ => panic!("{method} without a body"),
    };
    let mut resp = resp.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    Answer {
        status,
        retry_after,
        body,
    }
}

/// Submits `items` (problem, source) as one request; the ids.
pub fn submit(url: &str, token: &str, items: &[(String, String)]) -> Answer {
    let subs: Vec<Value> = items
        .iter()
        .map(|(p, s)| json!({"problem": p, "source": s}))
        .collect();
    call(
        "POST",
        &format!("{url}/v1/submissions"),
        Some(token),
        Some(&json!({"submissions": subs})),
    )
}

/// Waits (long polls) until every id is done; their submissions in the order given.
pub fn wait_all(url: &str, token: &str, ids: &[String], limit: Duration) -> Vec<Value> {
    let t = Instant::now();
    let mut done: Vec<Option<Value>> = vec![None; ids.len()];
    while done.iter().any(Option::is_none) {
        assert!(t.elapsed() < limit, "submissions not done within {limit:?}");
        for chunk in (0..ids.len()).collect::<Vec<_>>().chunks(200) {
            let want: Vec<&str> = chunk
                .iter()
                .filter(|i| done[**i].is_none())
                .map(|i| ids[*i].as_str())
                .collect();
            if want.is_empty() {
                continue;
            }
            let a = call(
                "GET",
                &format!("{url}/v1/submissions?ids={}&wait=20", want.join(",")),
                Some(token),
                None,
            );
            assert_eq!(a.status, 200, "{}", a.body);
            for s in a.json()["submissions"].as_array().unwrap() {
                if s["state"] == "done" {
                    let i = ids
                        .iter()
                        .position(|x| x == s["id"].as_str().unwrap())
                        .unwrap();
                    done[i] = Some(s.clone());
                }
            }
        }
    }
    done.into_iter().map(Option::unwrap).collect()
}

/// The smoke suite's problem files, by id (`smoke/L<level>/<id>`), with their level.
pub fn smoke_problems() -> Vec<(String, u8, u32, String)> {
    let dir = crate::common::repo_root().join("suites/smoke");
    let list = kbench()
        .args(["list", "--suite", "smoke"])
        .output()
        .unwrap();
    let text = String::from_utf8(list.stdout).unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let (level, id, name) = (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2]);
            let src = std::fs::read_to_string(dir.join(format!("{id}_{name}.py"))).unwrap();
            (format!("smoke/L{level}/{id}"), level, id, src)
        })
        .collect()
}

/// A correct kernel of a problem: its own model under the candidate's name.
pub fn honest(problem_source: &str, variant: usize) -> String {
    format!("{problem_source}\n\nclass ModelNew(Model):\n    pass\n# variant {variant}\n")
}

/// A wrong one: the right shape, all zeros.
pub fn zeros(problem_source: &str) -> String {
    format!("{problem_source}\n\nclass ModelNew(Model):\n    def forward(self, *args):\n        return super().forward(*args) * 0\n")
}

/// One that dies in its forward.
pub fn crashes(problem_source: &str) -> String {
    format!("{problem_source}\n\nimport os\nclass ModelNew(Model):\n    def forward(self, *args):\n        os._exit(3)\n")
}

/// What a verdict says, to compare with a `kbench run` record: the outcome kind and flag.
pub fn verdict_of_record(r: &Value) -> (String, Option<String>) {
    (
        r["outcome"]["kind"].as_str().unwrap().to_string(),
        r["outcome"]["flag"].as_str().map(str::to_string),
    )
}

pub fn verdict_of_answer(s: &Value) -> (String, Option<String>) {
    (
        s["verdict"]["outcome"].as_str().unwrap().to_string(),
        s["verdict"]["flags"]
            .as_array()
            .and_then(|f| f.first())
            .and_then(Value::as_str)
            .map(str::to_string),
    )
}

/// Reads `kbench serve`'s stderr lines until `pred` holds for the log.
pub fn wait_log(log: &Path, pred: impl Fn(&str) -> bool, limit: Duration) {
    let t = Instant::now();
    loop {
        let f = std::fs::File::open(log).unwrap();
        let text: String = BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n");
        if pred(&text) {
            return;
        }
        assert!(t.elapsed() < limit, "log never matched:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
