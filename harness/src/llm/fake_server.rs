//! A scripted OpenAI-compatible chat-completions server on loopback, for tests and for
//! trying agents without a model (`kbench fake-llm --script FILE`). Real HTTP over a real
//! socket: the client under test cannot tell it from a server, except by its answers.
//!
//! Script (JSON):
//! ```json
//! {"api_key": "sk-test",                       // optional: 401 for any other Bearer key
//!  "models": {"coder-model": [STEP, ...], "judge-model": [STEP, ...]}}
//! ```
//! Each request for a model takes that model's next STEP; a model not in the script gets
//! 404 `model_not_found`; a model whose steps are used up gets 400. STEP is one of:
//! - `{"content": "...", "reasoning": "...", "tool_calls": [{"name": "n", "arguments": "{..}"}],
//!    "usage": {"prompt_tokens": 10, "completion_tokens": 5}}` (every key optional)
//! - `{"status": 429, "retry_after": 1}` (or any status, with an optional `"body"`);
//!   `"retry_after"` may also be a string sent as is (an HTTP-date), and
//!   `"retry_after_date_s": 2` sends Retry-After as the HTTP-date that many seconds after
//!   the request arrived
//! - `{"raw": "text"}`: a 200 whose body is this text (malformed replies)
//! - any of the above with `"delay_s": 3`: the answer comes that much later.
//!
//! HTTP itself is tiny_http's (request parsing, keep-alive, chunked bodies); this file only
//! decides the answers.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// One received request: its Authorization header and JSON body.
#[derive(Debug, Clone)]
pub struct Received {
    pub authorization: Option<String>,
    pub body: Value,
    /// When it arrived (the unit tests check the client's pacing with it).
    #[cfg(test)]
    pub(crate) unix_s: f64,
}

struct State {
    api_key: Option<String>,
    steps: BTreeMap<String, VecDeque<Value>>,
    received: Vec<Received>,
    log: Option<std::path::PathBuf>,
}

/// A running fake server; it stops when the process ends.
#[derive(Clone)]
pub struct FakeLlm {
    pub(crate) addr: std::net::SocketAddr,
    state: Arc<Mutex<State>>,
}

impl FakeLlm {
    /// Starts the server on 127.0.0.1 (port 0: any free port).
    pub fn start(script: &Value, port: u16, log: Option<&Path>) -> Result<Self> {
        let api_key = script
            .get("api_key")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut steps = BTreeMap::new();
        if let Some(models) = script.get("models").and_then(Value::as_object) {
            for (name, list) in models {
                let list = list
                    .as_array()
                    .with_context(|| format!("fake-llm script: models.{name} must be a list"))?;
                steps.insert(name.clone(), list.iter().cloned().collect::<VecDeque<_>>());
            }
        }
        let server = tiny_http::Server::http(("127.0.0.1", port))
            .map_err(|e| anyhow::anyhow!("fake-llm: binding 127.0.0.1:{port}: {e}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .context("fake-llm: the server has no IP address")?;
        let state = Arc::new(Mutex::new(State {
            api_key,
            steps,
            received: Vec::new(),
            log: log.map(Path::to_path_buf),
        }));
        let s = Arc::clone(&state);
        std::thread::spawn(move || {
            for request in server.incoming_requests() {
                let s = Arc::clone(&s);
                // A thread per request: a scripted delay must not hold up the others.
                std::thread::spawn(move || {
                    let _ = serve(request, &s);
                });
            }
        });
        Ok(Self { addr, state })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requests received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .received
            .clone()
    }

    /// Steps not yet used, per model.
    pub fn remaining(&self) -> BTreeMap<String, usize> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .steps
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }
}

fn serve(mut request: tiny_http::Request, state: &Mutex<State>) -> std::io::Result<()> {
    let path = request.url().to_string();
    let auth = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    let mut body = Vec::new();
    request.as_reader().read_to_end(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, headers, text, delay) = answer(&path, auth, body, state);
    if delay > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(delay));
    }
    let mut response = tiny_http::Response::from_string(text).with_status_code(status);
    for (k, v) in [("Content-Type".to_string(), "application/json".to_string())]
        .into_iter()
        .chain(headers)
    {
        match tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
            Ok(h) => response.add_header(h),
            Err(()) => {
                eprintln!("fake-llm: the script's header `{k}: {v}` is not valid HTTP; not sent")
            }
        }
    }
    request.respond(response)
}

fn err_body(code: &str, msg: &str) -> String {
    json!({"error": {"message": msg, "type": "invalid_request_error", "code": code}}).to_string()
}

type Answer = (u16, Vec<(String, String)>, String, f64);

fn answer(path: &str, auth: Option<String>, body: Value, state: &Mutex<State>) -> Answer {
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    st.received.push(Received {
        authorization: auth.clone(),
        body: body.clone(),
        #[cfg(test)]
        unix_s: crate::runlog::now_unix(),
    });
    if let Some(log) = &st.log {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{}", json!({"authorization": auth, "body": body}));
        }
    }
    if !path.ends_with("/chat/completions") {
        return (
            404,
            vec![],
            err_body(
                "not_found",
                &format!("fake-llm serves /v1/chat/completions, not {path}"),
            ),
            0.0,
        );
    }
    if let Some(key) = &st.api_key {
        if auth.as_deref() != Some(&format!("Bearer {key}")) {
            return (
                401,
                vec![],
                err_body("invalid_api_key", "Incorrect API key provided"),
                0.0,
            );
        }
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(queue) = st.steps.get_mut(&model) else {
        return (
            404,
            vec![],
            err_body(
                "model_not_found",
                &format!("The model `{model}` does not exist"),
            ),
            0.0,
        );
    };
    let Some(step) = queue.pop_front() else {
        return (
            400,
            vec![],
            err_body(
                "script_exhausted",
                &format!("fake-llm: the script has no more replies for model `{model}`"),
            ),
            0.0,
        );
    };
    let delay = step.get("delay_s").and_then(Value::as_f64).unwrap_or(0.0);
    if let Some(raw) = step.get("raw").and_then(Value::as_str) {
        return (200, vec![], raw.to_string(), delay);
    }
    if let Some(status) = step.get("status").and_then(Value::as_u64) {
        let mut headers = Vec::new();
        if let Some(ra) = step.get("retry_after") {
            let v = match ra {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            headers.push(("Retry-After".to_string(), v));
        } else if let Some(s) = step.get("retry_after_date_s").and_then(Value::as_f64) {
            let at = SystemTime::now() + Duration::from_secs_f64(s.max(0.0));
            headers.push(("Retry-After".to_string(), httpdate::fmt_http_date(at)));
        }
        let text = step
            .get("body")
            .map(|b| match b {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_else(|| err_body("scripted", &format!("scripted HTTP {status}")));
        return (status as u16, headers, text, delay);
    }
    let mut message = json!({"role": "assistant", "content": step.get("content").cloned().unwrap_or(Value::Null)});
    if let Some(r) = step.get("reasoning") {
        message["reasoning_content"] = r.clone();
    }
    if let Some(calls) = step.get("tool_calls").and_then(Value::as_array) {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let args = match c.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => "{}".to_string(),
                };
                json!({"id": format!("call_{i}"), "type": "function",
                       "function": {"name": c.get("name").cloned().unwrap_or(Value::Null), "arguments": args}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let usage = step
        .get("usage")
        .cloned()
        .unwrap_or(json!({"prompt_tokens": 100, "completion_tokens": 50}));
    let reply = json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason":
            if message.get("tool_calls").is_some() { "tool_calls" } else { "stop" }}],
        "usage": usage,
    });
    (200, vec![], reply.to_string(), delay)
}

/// `kbench fake-llm`: serve until killed; prints the base URL (and writes it to
/// `port_file` when given, for scripts that start it in the background).
pub fn command(
    script: &Path,
    port: u16,
    port_file: Option<&Path>,
    log: Option<&Path>,
) -> Result<i32> {
    let text = std::fs::read_to_string(script)
        .with_context(|| format!("reading the fake-llm script {}", script.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", script.display()))?;
    let server = FakeLlm::start(&v, port, log)?;
    println!("fake-llm: serving {}", server.base_url());
    if let Some(p) = port_file {
        std::fs::write(p, server.base_url())?;
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
