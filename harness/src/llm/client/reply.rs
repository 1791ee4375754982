//! A model's reply: the parsed chat completion ([`ChatReply`], its [`ToolCall`]s and
//! [`Usage`]) and why a call failed ([`LlmError`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::ModelConfig;

/// A tool call the model asked for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The raw JSON text of the arguments, as the model wrote it (may be malformed).
    pub(crate) arguments: String,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Usage {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

/// A parsed reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChatReply {
    pub content: String,
    /// The model's separate reasoning text, where the server returns one.
    pub(crate) reasoning: Option<String>,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) usage: Usage,
    pub(crate) cost_usd: f64,
    pub(crate) wall_s: f64,
    /// The assistant message as returned, to append to a conversation.
    pub(crate) message: Value,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("{0}")]
    BadKey(String),
    #[error("{0}")]
    UnknownModel(String),
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    Http(String),
    /// The reply was not a chat completion: the round fails, the run goes on.
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Replay(String),
    #[error("{0}")]
    Budget(String),
}

impl LlmError {
    /// Errors that no other round would escape: the run stops with the message.
    pub(crate) fn is_fatal(&self) -> bool {
        matches!(
            self,
            LlmError::BadKey(_) | LlmError::UnknownModel(_) | LlmError::Replay(_)
        )
    }
}

/// Parses a chat-completions body.
pub(crate) fn parse_reply(text: &str, m: &ModelConfig) -> Result<ChatReply, LlmError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        LlmError::Malformed(format!(
            "the reply is not JSON ({e}): {}",
            text.chars().take(200).collect::<String>()
        ))
    })?;
    let msg = v
        .pointer("/choices/0/message")
        .ok_or_else(|| {
            LlmError::Malformed(format!(
                "the reply has no choices[0].message: {}",
                text.chars().take(200).collect::<String>()
            ))
        })?
        .clone();
    let content = msg
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let reasoning = msg
        .get("reasoning_content")
        .or_else(|| msg.get("reasoning"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let name = c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    LlmError::Malformed(format!("tool call {i} has no function name"))
                })?;
            let arguments = match c.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            tool_calls.push(ToolCall {
                id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("call_{i}")),
                name: name.to_string(),
                arguments,
            });
        }
    }
    let usage = Usage {
        input_tokens: v
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        output_tokens: v
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    let cost_usd = usage.input_tokens as f64 * m.input_usd_per_mtok / 1e6
        + usage.output_tokens as f64 * m.output_usd_per_mtok / 1e6;
    Ok(ChatReply {
        content,
        reasoning,
        tool_calls,
        usage,
        cost_usd,
        wall_s: 0.0,
        message: msg,
    })
}
