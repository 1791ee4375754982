//! The client shared by every task of a run ([`Llm`]): one chat completion at a time per
//! call, each saved as a [`CallRecord`] under `<run>/llm/`, answered from a recorded run
//! (`--llm-replay`) or from this run's own records (`--resume`), its [`Spend`] summed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::http::Http;
use super::model::{LlmFile, ModelConfig};
use super::reply::{parse_reply, ChatReply, LlmError, Usage};
use crate::agents::untrusted_file::{UntrustedDir, INDEX_CAP};

/// Totals over calls.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Spend {
    pub(crate) calls: u64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cost_usd: f64,
    pub(crate) wall_s: f64,
}

impl Spend {
    pub(crate) fn add(&mut self, r: &ChatReply) {
        self.calls += 1;
        self.input_tokens += r.usage.input_tokens;
        self.output_tokens += r.usage.output_tokens;
        self.cost_usd += r.cost_usd;
        self.wall_s += r.wall_s;
    }
}

/// The client shared by every task of a run.
pub struct Llm {
    file: LlmFile,
    config_path: PathBuf,
    /// The endpoints: a concurrency gate per `base_url`, the HTTP agents, retries.
    http: Http,
    /// `<run>/llm`: one folder per stream, one file per call.
    record_dir: PathBuf,
    /// `<recorded run>/llm` when replaying.
    replay_dir: Option<PathBuf>,
    /// A resumed run (`--resume`): calls this run directory already recorded are answered
    /// from their records (not sent, not saved again); the rest go to the model.
    resume: bool,
    /// Calls answered from this run's own records (`resume`).
    reused: std::sync::atomic::AtomicU64,
    /// Spend of the whole run so far.
    pub(crate) total: Mutex<Spend>,
    /// Calls per stream, for the file names (streams are sequential).
    seq: Mutex<HashMap<String, u32>>,
}

/// What one saved call looks like on disk (`llm/<stream>/<seq>_<label>.json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct CallRecord {
    pub(crate) stream: String,
    pub(crate) seq: u32,
    pub(crate) label: String,
    pub(crate) model_name: String,
    pub(crate) model: String,
    pub(crate) request: Value,
    /// HTTP status of the last attempt (0 when there was none, e.g. replayed).
    pub(crate) status: u16,
    pub(crate) attempts: u32,
    /// The body of the last reply, as text.
    pub(crate) reply_body: String,
    pub(crate) error: Option<String>,
    pub(crate) usage: Usage,
    pub(crate) cost_usd: f64,
    pub(crate) wall_s: f64,
    pub(crate) started_unix_s: f64,
}

impl Llm {
    pub fn new(
        file: LlmFile,
        config_path: &Path,
        run_dir: &Path,
        replay: Option<&Path>,
        resume: bool,
    ) -> Result<Self> {
        let http = Http::new(&file, config_path);
        let replay_dir = match replay {
            Some(r) => {
                let d = r.join("llm");
                if !d.is_dir() {
                    bail!(
                        "--llm-replay {}: no llm/ folder of recorded calls there; pass the --out directory of an agent run",
                        r.display()
                    );
                }
                Some(d)
            }
            None => None,
        };
        let record_dir = run_dir.join("llm");
        std::fs::create_dir_all(&record_dir)
            .with_context(|| format!("creating {}", record_dir.display()))?;
        Ok(Self {
            file,
            config_path: config_path.to_path_buf(),
            http,
            record_dir,
            replay_dir,
            resume,
            reused: std::sync::atomic::AtomicU64::new(0),
            total: Mutex::new(Spend::default()),
            seq: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn model(&self, name: &str) -> Result<&ModelConfig> {
        self.file.model(name, &self.config_path)
    }

    /// Whether replies come from a recorded run (`--llm-replay`).
    pub(crate) fn replaying(&self) -> bool {
        self.replay_dir.is_some()
    }

    /// Calls a resumed run answered from its own records.
    pub(crate) fn reused_calls(&self) -> u64 {
        self.reused.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn spent(&self) -> Spend {
        *self.total.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_seq(&self, stream: &str) -> u32 {
        let mut m = self.seq.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(stream.to_string()).or_insert(0);
        let s = *n;
        *n += 1;
        s
    }

    /// One chat completion. `stream` names a sequence of calls made one after another
    /// (a task, or one trajectory of a task): replay matches calls by stream and position.
    pub fn chat(
        &self,
        model_name: &str,
        stream: &str,
        label: &str,
        messages: &[Value],
        tools: Option<&[Value]>,
    ) -> Result<ChatReply, LlmError> {
        let m = self
            .model(model_name)
            .map_err(|e| LlmError::UnknownModel(format!("{e:#}")))?
            .clone();
        let seq = self.next_seq(stream);
        let mut body = json!({"model": m.model, "messages": messages});
        if let Some(t) = m.max_tokens {
            body["max_tokens"] = json!(t);
        }
        if let Some(t) = m.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(e) = &m.reasoning_effort {
            body["reasoning_effort"] = json!(e);
        }
        if let Some(tools) = tools {
            body["tools"] = Value::Array(tools.to_vec());
        }
        let started = Instant::now();
        let started_unix_s = crate::runlog::now_unix();
        let from_record = |rec: CallRecord, how: &str| {
            if rec.label != label {
                eprintln!(
                    "kbench: {how}: call {seq} of `{stream}` was `{}` when recorded and is `{label}` now (a kernel's verdict changed); replaying the recorded reply anyway",
                    rec.label
                );
            }
            let r = match &rec.error {
                Some(e) => Err(LlmError::Malformed(format!("(replayed) {e}"))),
                None => parse_reply(&rec.reply_body, &m),
            };
            (rec.status, 0, rec.reply_body, r)
        };
        // A resumed run answers the calls it already made from its own records.
        let own = if self.resume {
            self.replayed(&self.record_dir, stream, seq).ok()
        } else {
            None
        };
        let reused = own.is_some();
        let (status, attempts, reply_body, result) = match (own, &self.replay_dir) {
            (Some(rec), _) => from_record(rec, "--resume"),
            (None, Some(dir)) => match self.replayed(dir, stream, seq) {
                Ok(rec) => from_record(rec, "--llm-replay"),
                Err(e) => (0, 0, String::new(), Err(e)),
            },
            (None, None) => self.http.post(model_name, &m, &body),
        };
        let wall_s = started.elapsed().as_secs_f64();
        let result = result.map(|mut r| {
            r.wall_s = wall_s;
            r
        });
        let (usage, cost) = match &result {
            Ok(r) => (r.usage, r.cost_usd),
            Err(_) => (Usage::default(), 0.0),
        };
        let rec = CallRecord {
            stream: stream.to_string(),
            seq,
            label: label.to_string(),
            model_name: model_name.to_string(),
            model: m.model.clone(),
            request: body,
            status,
            attempts,
            reply_body,
            error: result.as_ref().err().map(|e| e.to_string()),
            usage,
            cost_usd: cost,
            wall_s,
            started_unix_s,
        };
        let dir = self.record_dir.join(stream);
        if reused {
            // Already saved by the run that made it.
            self.reused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        } else {
            let saved = std::fs::create_dir_all(&dir).and_then(|_| {
                std::fs::write(
                    dir.join(format!("{seq:04}_{label}.json")),
                    serde_json::to_vec_pretty(&rec).unwrap_or_default(),
                )
            });
            if let Err(e) = saved {
                return Err(LlmError::Http(format!(
                    "could not save the call in {}: {e}",
                    dir.display()
                )));
            }
        }
        if let Ok(r) = &result {
            self.total.lock().unwrap_or_else(|e| e.into_inner()).add(r);
        }
        result
    }

    fn replayed(&self, dir: &Path, stream: &str, seq: u32) -> Result<CallRecord, LlmError> {
        let d = dir.join(stream);
        let prefix = format!("{seq:04}_");
        let found = std::fs::read_dir(&d).ok().and_then(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"))
            })
        });
        let Some(path) = found else {
            return Err(LlmError::Replay(format!(
                "--llm-replay: the recorded run has no call {seq} in stream `{stream}` ({}); it was made with other settings or problems",
                d.display()
            )));
        };
        // A recorded run may be a published one: its calls are read as a set's files are
        // (no link out of its llm/ folder, no FIFO, size capped).
        let rel = path.strip_prefix(dir).unwrap_or(&path);
        let text = UntrustedDir::new(dir, &[])
            .map_err(|e| LlmError::Replay(format!("reading {}: {e}", dir.display())))?
            .read_text(rel, INDEX_CAP)
            .map_err(|why| LlmError::Replay(format!("{} not read: it {why}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| {
            LlmError::Replay(format!("{} is not a recorded call: {e}", path.display()))
        })
    }
}

#[cfg(test)]
mod tests {
    use approx::assert_abs_diff_eq;
    use std::collections::BTreeMap;

    use super::*;
    use crate::llm::fake_server::FakeLlm;

    fn setup(
        script: Value,
        key_env: Option<&str>,
        timeout_s: f64,
        retries: u32,
    ) -> (FakeLlm, Llm, tempfile::TempDir) {
        setup_limited(script, key_env, timeout_s, retries, None, None)
    }

    fn setup_limited(
        script: Value,
        key_env: Option<&str>,
        timeout_s: f64,
        retries: u32,
        rpm: Option<u32>,
        tpm: Option<u32>,
    ) -> (FakeLlm, Llm, tempfile::TempDir) {
        let server = FakeLlm::start(&script, 0, None).unwrap();
        let mut models = BTreeMap::new();
        models.insert(
            "m".to_string(),
            ModelConfig {
                base_url: server.base_url(),
                model: "served-model".into(),
                api_key_env: key_env.map(str::to_string),
                input_usd_per_mtok: 2.0,
                output_usd_per_mtok: 8.0,
                max_tokens: Some(100),
                temperature: Some(0.2),
                reasoning_effort: None,
                timeout_s,
                max_retries: retries,
                max_concurrency: 2,
                rpm,
                tpm,
            },
        );
        let dir = tempfile::tempdir().unwrap();
        let llm = Llm::new(
            LlmFile { models },
            Path::new("kbench.toml"),
            dir.path(),
            None,
            false,
        )
        .unwrap();
        (server, llm, dir)
    }

    #[test]
    fn retries_on_429_honouring_retry_after_then_records_usage_and_cost() {
        let script = json!({"models": {"served-model": [
            {"status": 429, "retry_after": 1},
            {"content": "hello", "tool_calls": [{"name": "compile", "arguments": "{}"}],
             "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}
        ]}});
        let (server, llm, dir) = setup(script, None, 10.0, 3);
        let t = Instant::now();
        let r = llm
            .chat(
                "m",
                "s",
                "first",
                &[json!({"role": "user", "content": "hi"})],
                None,
            )
            .unwrap();
        let waited = t.elapsed().as_secs_f64();
        assert!(
            waited >= 1.0,
            "Retry-After: 1 was not honoured (waited {waited}s)"
        );
        assert_eq!(server.received().len(), 2);
        assert_eq!(r.content, "hello");
        assert_eq!(r.tool_calls[0].name, "compile");
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 1000,
                output_tokens: 500
            }
        );
        assert_abs_diff_eq!(
            r.cost_usd,
            (1000.0 * 2.0 + 500.0 * 8.0) / 1e6,
            epsilon = 1e-12
        );
        assert_eq!(llm.spent().calls, 1);
        // The request carried the configured model and sampling settings.
        let body = &server.received()[1].body;
        assert_eq!(body["model"], "served-model");
        assert_eq!(body["max_tokens"], 100);
        // Saved: request and reply, with the attempt count.
        let saved: CallRecord = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("llm/s/0000_first.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(saved.attempts, 2);
        assert_eq!(saved.request["messages"][0]["content"], "hi");
        assert!(saved.reply_body.contains("hello"));
    }

    #[test]
    fn a_429_with_an_http_date_retry_after_is_honoured() {
        // The date is made when the 429 is sent, 3 s ahead (whole seconds: at least ~2 s).
        let script = json!({"models": {"served-model": [
            {"status": 429, "retry_after_date_s": 3},
            {"content": "after the date"}
        ]}});
        let (server, llm, _d) = setup(script, None, 10.0, 1);
        let t = Instant::now();
        let r = llm.chat("m", "s", "c", &[], None).unwrap();
        let waited = t.elapsed().as_secs_f64();
        assert_eq!(r.content, "after the date");
        assert!(
            (1.8..5.0).contains(&waited),
            "Retry-After as an HTTP-date 3 s ahead: waited {waited}s"
        );
        let got = server.received();
        assert_eq!(got.len(), 2);
        assert!(got[1].unix_s - got[0].unix_s >= 1.8);
    }

    #[test]
    fn rpm_spaces_requests_across_concurrent_streams() {
        let script = json!({"models": {"served-model": vec![json!({"content": "x"}); 5]}});
        // rpm = 120: one request each 0.5 s, the first at once: 5 requests take >= 2 s,
        // though they come from 5 threads at once.
        let (server, llm, _d) = setup_limited(script, None, 10.0, 0, Some(120), None);
        let t = Instant::now();
        std::thread::scope(|s| {
            for i in 0..5 {
                let llm = &llm;
                s.spawn(move || llm.chat("m", &format!("s{i}"), "c", &[], None).unwrap());
            }
        });
        let took = t.elapsed().as_secs_f64();
        assert!(
            (1.9..3.5).contains(&took),
            "5 requests at rpm = 120 took {took}s"
        );
        let mut at: Vec<f64> = server.received().iter().map(|r| r.unix_s).collect();
        at.sort_by(f64::total_cmp);
        for w in at.windows(2) {
            assert!(w[1] - w[0] >= 0.4, "requests {:.3}s apart", w[1] - w[0]);
        }
    }

    #[test]
    fn tpm_charges_the_reported_usage() {
        // tpm = 6000: 100 tokens/s, the bucket one second's worth. Each reply reports 150
        // tokens; the prompts are estimated at a few tokens. Three calls use 450 tokens, of
        // which 350 beyond the first second's 100: about 3.5 s in all.
        let step =
            json!({"content": "x", "usage": {"prompt_tokens": 100, "completion_tokens": 50}});
        let script = json!({"models": {"served-model": vec![step; 3]}});
        let (_s, llm, _d) = setup_limited(script, None, 10.0, 0, None, Some(6000));
        let t = Instant::now();
        for _ in 0..3 {
            llm.chat("m", "s", "c", &[], None).unwrap();
        }
        let took = t.elapsed().as_secs_f64();
        assert!(
            (3.2..5.0).contains(&took),
            "450 tokens at tpm = 6000 took {took}s"
        );
        assert_eq!(llm.spent().input_tokens + llm.spent().output_tokens, 450);
    }

    #[test]
    fn concurrency_is_limited_per_endpoint() {
        let slow = json!({"content": "x", "delay_s": 0.4});
        let script = json!({"models": {"served-model": [slow.clone(), slow.clone(), slow]}});
        let (_s, llm, _d) = setup(script, None, 10.0, 0);
        // setup's limit is 2: three calls at once take two rounds of 0.4 s.
        let t = Instant::now();
        std::thread::scope(|s| {
            for i in 0..3 {
                let llm = &llm;
                s.spawn(move || llm.chat("m", &format!("s{i}"), "c", &[], None).unwrap());
            }
        });
        let took = t.elapsed().as_secs_f64();
        assert!(
            (0.8..1.2).contains(&took),
            "3 calls through 2 slots took {took}s"
        );
        assert_eq!(llm.spent().calls, 3);
    }

    #[test]
    fn bad_key_is_a_clear_fatal_error() {
        let script = json!({"api_key": "right", "models": {"served-model": [{"content": "x"}]}});
        std::env::set_var("KBENCH_TEST_WRONG_KEY", "wrong");
        let (server, llm, _d) = setup(script, Some("KBENCH_TEST_WRONG_KEY"), 10.0, 3);
        let e = llm.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(matches!(e, LlmError::BadKey(_)) && e.is_fatal(), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("KBENCH_TEST_WRONG_KEY") && msg.contains("401"),
            "{msg}"
        );
        assert_eq!(server.received().len(), 1, "a 401 must not be retried");
        assert_eq!(
            server.received()[0].authorization.as_deref(),
            Some("Bearer wrong")
        );
        // An unset variable is named before any request.
        let (server2, llm2, _d2) = setup(json!({}), Some("KBENCH_TEST_UNSET_KEY_VAR"), 10.0, 0);
        let e = llm2.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(
            e.to_string().contains("KBENCH_TEST_UNSET_KEY_VAR")
                && e.to_string().contains("is not set"),
            "{e}"
        );
        assert!(server2.received().is_empty());
    }

    #[test]
    fn unknown_model_is_a_clear_fatal_error() {
        let (_s, llm, _d) = setup(json!({"models": {"other": []}}), None, 10.0, 3);
        let e = llm.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(
            matches!(e, LlmError::UnknownModel(_)) && e.is_fatal(),
            "{e}"
        );
        assert!(
            e.to_string().contains("served-model") && e.to_string().contains("404"),
            "{e}"
        );
        // 400 with model_not_found (some servers) is the same error.
        let script = json!({"models": {"served-model": [{"status": 400, "body": {"error": {"code": "model_not_found", "message": "no such model"}}}]}});
        let (_s, llm, _d) = setup(script, None, 10.0, 3);
        let e = llm.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(matches!(e, LlmError::UnknownModel(_)), "{e}");
        // A name missing from kbench.toml too.
        let e = llm.chat("nope", "s", "c", &[], None).unwrap_err();
        assert!(e.to_string().contains("[models.nope]"), "{e}");
    }

    #[test]
    fn a_slow_server_times_out_and_malformed_replies_are_not_fatal() {
        let script = json!({"models": {"served-model": [
            {"content": "late", "delay_s": 3},
            {"raw": "this is not json"},
            {"raw": "{\"choices\": []}"}
        ]}});
        let (_s, llm, _d) = setup(script, None, 0.5, 0);
        let t = Instant::now();
        let e = llm.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(matches!(e, LlmError::Timeout(_)), "{e}");
        assert!(
            t.elapsed().as_secs_f64() < 2.5,
            "the timeout did not cut the request"
        );
        assert!(e.to_string().contains("timeout_s = 0.5"), "{e}");
        let e = llm.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(matches!(e, LlmError::Malformed(_)) && !e.is_fatal(), "{e}");
        let e = llm.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(e.to_string().contains("choices[0].message"), "{e}");
    }

    #[test]
    fn replay_returns_the_recorded_replies_without_a_server() {
        let script = json!({"models": {"served-model": [{"content": "one"}, {"raw": "junk"}]}});
        let (_s, llm, dir) = setup(script, None, 10.0, 0);
        llm.chat("m", "s", "a", &[], None).unwrap();
        llm.chat("m", "s", "b", &[], None).unwrap_err();
        let mut models = BTreeMap::new();
        let mut m = llm.model("m").unwrap().clone();
        m.base_url = "http://127.0.0.1:9/v1".into();
        models.insert("m".to_string(), m);
        let out = tempfile::tempdir().unwrap();
        let replay = Llm::new(
            LlmFile { models },
            Path::new("kbench.toml"),
            out.path(),
            Some(dir.path()),
            false,
        )
        .unwrap();
        assert_eq!(
            replay.chat("m", "s", "a", &[], None).unwrap().content,
            "one"
        );
        assert!(matches!(
            replay.chat("m", "s", "b", &[], None),
            Err(LlmError::Malformed(_))
        ));
        let e = replay.chat("m", "s", "c", &[], None).unwrap_err();
        assert!(
            matches!(e, LlmError::Replay(_)) && e.to_string().contains("no call 2"),
            "{e}"
        );
    }
}
