//! Posting a request to an endpoint: each model's rate limits (`rpm`, `tpm`: [`Limits`]),
//! at most `max_concurrency` requests in flight per `base_url`, loopback servers reached
//! without a proxy, retries on 429 and 5xx (and transport errors) honouring Retry-After in
//! seconds or as an HTTP-date, else exponential backoff with jitter (backon), and the
//! errors a bad key, an unknown model, a timeout or another HTTP status give.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use backon::BackoffBuilder;
use serde_json::Value;

use super::limit::Limits;
use super::model::{LlmFile, ModelConfig};
use super::reply::{parse_reply, ChatReply, LlmError};

/// A counting semaphore for one endpoint. Hand-written (a Mutex and a Condvar): the client is
/// blocking, and the async semaphores of tokio or async-lock would bring a runtime along.
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
    /// Rate limits per `[models.NAME]` table.
    limits: HashMap<String, Limits>,
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
        let rate = file
            .models
            .iter()
            .map(|(name, m)| (name.clone(), Limits::new(m)))
            .collect();
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
            limits: rate,
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
        let limits = self.limits.get(model_name);
        let estimate = Limits::estimate(payload.len());
        if let Some(l) = limits {
            l.tokens(estimate);
        }
        let mut delays = backoff(m.max_retries);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            if let Some(l) = limits {
                l.request();
            }
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
                        .and_then(retry_after);
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
            let retryable =
                transport.is_some() || matches!(status, 429 | 500 | 502 | 503 | 504 | 529);
            // The next backoff delay (None: no retries left), or the server's Retry-After.
            let wait = if retryable {
                delays.next().map(|d| retry_after_or(retry_after, d))
            } else {
                None
            };
            if let Some(e) = transport {
                let timed_out = matches!(e, ureq::Error::Timeout(_));
                if let Some(wait) = wait {
                    std::thread::sleep(wait);
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
                    if let (Some(l), Ok(r)) = (limits, &r) {
                        let used = r.usage.input_tokens + r.usage.output_tokens;
                        l.tokens(used.saturating_sub(estimate));
                    }
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
                _ if wait.is_some() => {
                    std::thread::sleep(wait.unwrap_or_default());
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

/// The longest wait a Retry-After may ask for: a server asking for more is waited on this
/// long, then tried again (or the call fails when no retries are left).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// The backoff delays of the retries (`max_retries` of them): exponential from
/// `KBENCH_LLM_BACKOFF_S` (default 1 s), doubling up to 30 s, each plus a random jitter of
/// up to its own length, so tasks that failed together do not retry together.
fn backoff(max_retries: u32) -> backon::ExponentialBackoff {
    let base = std::env::var("KBENCH_LLM_BACKOFF_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(1.0);
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs_f64(base))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .with_max_times(max_retries as usize)
        .with_jitter()
        .build()
}

/// A Retry-After header: delay-seconds (fractions accepted) or an HTTP-date (RFC 9110
/// 10.2.3), as the time from now (zero for a date already past).
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(s) = value.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(1e9)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The server's Retry-After (capped at [`MAX_RETRY_AFTER`]) when it gave one, else the
/// backoff delay.
fn retry_after_or(retry_after: Option<Duration>, backoff: Duration) -> Duration {
    retry_after.map_or(backoff, |d| d.min(MAX_RETRY_AFTER))
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

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(retry_after("-1"), None);
        assert_eq!(retry_after("soon"), None);
        let later = std::time::SystemTime::now() + Duration::from_secs(10);
        let d = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        // HTTP-dates have whole seconds.
        assert!((8..=10).contains(&d.as_secs()), "{d:?}");
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after_or(Some(Duration::from_secs(3600)), Duration::from_secs(1)),
            MAX_RETRY_AFTER
        );
        assert_eq!(
            retry_after_or(None, Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn backoff_grows_with_jitter_and_stops_after_max_retries() {
        let delays: Vec<Duration> = backoff(4).collect();
        assert_eq!(delays.len(), 4);
        for (i, d) in delays.iter().enumerate() {
            // 1, 2, 4, 8 s (KBENCH_LLM_BACKOFF_S unset in unit tests), each plus < 100 %.
            let base = 2f64.powi(i as i32);
            let s = d.as_secs_f64();
            assert!(s >= base && s < 2.0 * base, "retry {i}: {s}s");
        }
        assert_eq!(backoff(0).count(), 0);
    }
}
