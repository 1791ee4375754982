//! `kbench.toml`: the named models ([`ModelConfig`]) and their checks on load.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// One named model of `kbench.toml`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub(crate) base_url: String,
    pub(crate) model: String,
    #[serde(default)]
    pub(crate) api_key_env: Option<String>,
    #[serde(default)]
    pub(crate) input_usd_per_mtok: f64,
    #[serde(default)]
    pub(crate) output_usd_per_mtok: f64,
    #[serde(default)]
    pub(crate) max_tokens: Option<u32>,
    #[serde(default)]
    pub(crate) temperature: Option<f64>,
    #[serde(default)]
    pub(crate) reasoning_effort: Option<String>,
    #[serde(default = "default_timeout")]
    pub(crate) timeout_s: f64,
    #[serde(default = "default_retries")]
    pub(crate) max_retries: u32,
    #[serde(default = "default_concurrency")]
    pub(crate) max_concurrency: usize,
    /// Requests per minute to send at most (this table's calls across the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rpm: Option<u32>,
    /// Tokens (prompt and completion) per minute to use at most, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tpm: Option<u32>,
}

fn default_timeout() -> f64 {
    600.0
}
fn default_retries() -> u32 {
    5
}
fn default_concurrency() -> usize {
    8
}

/// `kbench.toml`.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
pub struct LlmFile {
    #[serde(default)]
    pub(crate) models: BTreeMap<String, ModelConfig>,
}

impl LlmFile {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading the model configuration {} (pass --llm-config FILE; see README: LLM agents)",
                path.display()
            )
        })?;
        let f: LlmFile =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        for (name, m) in &f.models {
            if !(m.timeout_s.is_finite() && m.timeout_s > 0.0) {
                bail!(
                    "{}: models.{name}.timeout_s must be a positive number",
                    path.display()
                );
            }
            for (key, v) in [("rpm", m.rpm), ("tpm", m.tpm)] {
                if v == Some(0) {
                    bail!(
                        "{}: models.{name}.{key} must be at least 1 (leave it out for no limit)",
                        path.display()
                    );
                }
            }
            if m.max_concurrency == 0 {
                bail!(
                    "{}: models.{name}.max_concurrency must be at least 1",
                    path.display()
                );
            }
        }
        Ok(f)
    }

    pub(crate) fn model(&self, name: &str, path: &Path) -> Result<&ModelConfig> {
        self.models.get(name).with_context(|| {
            format!(
                "model `{name}` is not defined in {} (defined: {}); add a [models.{name}] table",
                path.display(),
                self.models.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }
}
