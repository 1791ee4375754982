//! Posting a request to an endpoint: at most `max_concurrency` requests in flight per
//! `base_url`, loopback servers reached without a proxy, retries on 429 and 5xx honouring
//! Retry-After (else exponential backoff), and the errors a bad key, an unknown model, a
//! timeout or another HTTP status give.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::model::{LlmFile, ModelConfig};
use super::reply::{parse_reply, ChatReply, LlmError};

/// A counting semaphore for one endpoint.
struct Gate {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Gate {
    fn acquire(self: &Arc<Self>) -> GateGuard {
        let mut n = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *n == 0 {
            n = self.cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n -= 1;
        GateGuard(Arc::clone(self))
    }
}

struct GateGuard(Arc<Gate>);

impl Drop for GateGuard {
    fn drop(&mut self) {
        let mut n = self.0.free.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.0.cv.notify_one();
    }
}

/// The endpoints of `kbench.toml`'s models: a gate per `base_url` and the HTTP agents.
pub(super) struct Http {
    config_path: PathBuf,
    gates: HashMap<String, Arc<Gate>>,
    agent: ureq::Agent,
    /// For loopback servers: never through an HTTP proxy from the environment.
    direct: ureq::Agent,
}

impl Http {
    pub(super) fn new(file: &LlmFile, config_path: &Path) -> Self {
        let mut gates: HashMap<String, Arc<Gate>> = HashMap::new();
        let mut limits: HashMap<String, usize> = HashMap::new();
        for m in file.models.values() {
            let e = limits
                .entry(m.base_url.clone())
                .or_insert(m.max_concurrency);
            *e = (*e).min(m.max_concurrency);
        }
        for (url, n) in limits {
            gates.insert(
                url,
                Arc::new(Gate {
                    free: Mutex::new(n),
                    cv: Condvar::new(),
                }),
            );
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let direct = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .build()
            .new_agent();
        Self {
            config_path: config_path.to_path_buf(),
            gates,
            agent,
            direct,
        }
    }

    /// Posts with retries; returns (status, attempts, last body, parsed reply).
    pub(super) fn post(
        &self,
        model_name: &str,
        m: &ModelConfig,
        body: &Value,
    ) -> (u16, u32, String, Result<ChatReply, LlmError>) {
        let url = format!("{}/chat/completions", m.base_url.trim_end_matches('/'));
        let key = match &m.api_key_env {
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    return (
                        0,
                        0,
                        String::new(),
                        Err(LlmError::BadKey(format!(
                            "model `{model_name}`: the environment variable {var} (api_key_env in {}) is not set; export it with the API key for {}",
                            self.config_path.display(),
                            m.base_url
                        ))),
                    )
                }
            },
            None => None,
        };
        let payload = serde_json::to_vec(body).unwrap_or_default();
        let gate = self.gates.get(&m.base_url).cloned();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let _slot = gate.as_ref().map(|g| g.acquire());
            let client = if is_loopback(&m.base_url) {
                &self.direct
            } else {
                &self.agent
            };
            let mut req = client
                .post(&url)
                .config()
                .timeout_global(Some(Duration::from_secs_f64(m.timeout_s)))
                .build()
                .header("Content-Type", "application/json");
            if let Some(k) = &key {
                req = req.header("Authorization", format!("Bearer {k}"));
            }
            let sent = req.send(&payload[..]);
            let (status, retry_after, text, transport) = match sent {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<f64>().ok());
                    let text = resp
                        .body_mut()
                        .with_config()
                        .limit(64 << 20)
                        .read_to_string();
                    match text {
                        Ok(t) => (status, retry_after, t, None),
                        Err(e) => (status, retry_after, String::new(), Some(e)),
                    }
                }
                Err(e) => (0, None, String::new(), Some(e)),
            };
            // The slot is held until the reply is read, not while waiting to retry.
            drop(_slot);
            let retries_left = attempt <= m.max_retries;
            if let Some(e) = transport {
                let timed_out = matches!(e, ureq::Error::Timeout(_));
                if retries_left {
                    std::thread::sleep(backoff(attempt, None));
                    continue;
                }
                let msg = format!(
                    "model `{model_name}` ({} at {url}): {} after {attempt} attempt(s): {e}",
                    m.model,
                    if timed_out {
                        format!("no reply within timeout_s = {}", m.timeout_s)
                    } else {
                        "request failed".to_string()
                    }
                );
                return (
                    status,
                    attempt,
                    text,
                    Err(if timed_out {
                        LlmError::Timeout(msg)
                    } else {
                        LlmError::Http(msg)
                    }),
                );
            }
            match status {
                200..=299 => {
                    let r = parse_reply(&text, m);
                    return (status, attempt, text, r);
                }
                401 | 403 => {
                    let who = m
                        .api_key_env
                        .as_deref()
                        .map(|v| format!("the key in ${v}"))
                        .unwrap_or_else(|| "a request without a key (set api_key_env)".into());
                    return (
                        status,
                        attempt,
                        text.clone(),
                        Err(LlmError::BadKey(format!(
                            "model `{model_name}` ({} at {url}): the server refused {who} (HTTP {status}): {}; check the key and the base_url in {}",
                            m.model,
                            error_message(&text),
                            self.config_path.display()
                        ))),
                    );
                }
                404 | 400 if status == 404 || text.contains("model_not_found") => {
                    return (
                        status,
                        attempt,
                        text.clone(),
                        Err(LlmError::UnknownModel(format!(
                            "model `{model_name}`: the server at {url} does not know the model `{}` (HTTP {status}): {}; fix `model` (or base_url) of [models.{model_name}] in {}",
                            m.model,
                            error_message(&text),
                            self.config_path.display()
                        ))),
                    );
                }
                429 | 500 | 502 | 503 | 504 | 529 if retries_left => {
                    std::thread::sleep(backoff(attempt, retry_after));
                    continue;
                }
                _ => {
                    return (
                        status,
                        attempt,
                        text.clone(),
                        Err(LlmError::Http(format!(
                            "model `{model_name}` ({} at {url}): HTTP {status} after {attempt} attempt(s): {}",
                            m.model,
                            error_message(&text)
                        ))),
                    )
                }
            }
        }
    }
}

/// Whether a base URL names this host (local servers are reached without a proxy).
fn is_loopback(base_url: &str) -> bool {
    let rest = base_url
        .split_once("://")
        .map_or(base_url, |(_, r)| r)
        .split('/')
        .next()
        .unwrap_or("");
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => rest.split(':').next().unwrap_or(""),
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

/// Retry-After when the server gave one (capped at 5 minutes), else 1, 2, 4 … 30 s.
fn backoff(attempt: u32, retry_after: Option<f64>) -> Duration {
    if let Some(s) = retry_after.filter(|s| s.is_finite() && *s >= 0.0) {
        return Duration::from_secs_f64(s.min(300.0));
    }
    let base = std::env::var("KBENCH_LLM_BACKOFF_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64((base * 2f64.powi(attempt.saturating_sub(1) as i32)).min(30.0))
}

fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.chars().take(300).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8000/v1"));
        assert!(is_loopback("http://localhost/v1"));
        assert!(is_loopback("http://[::1]:9/v1"));
        assert!(!is_loopback("https://api.example.invalid/v1"));
    }
}
