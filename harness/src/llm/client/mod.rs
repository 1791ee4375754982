//! LLM access for the built-in agents: an OpenAI-compatible chat-completions client
//! (tool calls included) configured in `kbench.toml`, with retries honouring Retry-After,
//! request timeouts, a concurrency limit per endpoint, clear errors for a bad key or an
//! unknown model, every request and reply saved in the run directory, and replay of a
//! recorded run (`--llm-replay RUN_DIR`) without a model.
//!
//! `kbench.toml`:
//! ```toml
//! [models.coder]
//! base_url = "http://127.0.0.1:8000/v1"   # any OpenAI-compatible server
//! model = "my-model"
//! api_key_env = "MY_API_KEY"              # optional: local servers need no key
//! input_usd_per_mtok = 2.0
//! output_usd_per_mtok = 8.0
//! max_tokens = 16384                      # optional
//! temperature = 0.2                       # optional
//! reasoning_effort = "medium"             # optional (reasoning models)
//! timeout_s = 600
//! max_retries = 5
//! max_concurrency = 8                     # in-flight requests per base_url
//! rpm = 60                                # optional: requests per minute, this table
//! tpm = 200000                            # optional: tokens per minute, this table
//! ```
//!
//! `model` reads `kbench.toml`; `chat` is the client ([`Llm`]: record, replay, resume,
//! spend); `http` posts to an endpoint (concurrency gate, proxy choice, retries and
//! backoff, error classes); `limit` holds each model's rate limits; `reply` parses a chat-completions body. The client may import
//! `runlog` (below `llm`); the agents import it, never the other way.

mod chat;
mod http;
mod limit;
mod model;
mod reply;

pub use chat::{CallRecord, Llm, Spend};
pub use model::{LlmFile, ModelConfig};
pub use reply::{ChatReply, LlmError};
