//! `run.json`: what a run was asked to do.

use serde::{Deserialize, Serialize};

/// What a run was asked to do; a resumed run must ask for the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub schema_version: u32,
    pub kbench_version: String,
    pub run_id: String,
    pub created_unix_s: f64,
    pub agent: String,
    pub suite: String,
    pub device: String,
    pub precision: String,
    pub profile: String,
    /// `train` or `eval` (`--model-mode`); runs made before it was recorded ran in `train`.
    #[serde(default = "train")]
    pub model_mode: String,
    pub trials: u32,
    /// Stress case families after the random trials (absent in runs made before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<String>,
    pub timed_calls: Option<u32>,
    pub weight_seed: u64,
    /// `i/N` when this run is one shard of a larger run (`--shard`); absent for a whole or
    /// merged run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// How the lines of `records.jsonl` are signed (`hmac-sha256`, keyed by the run's
    /// secret; see `runlog::records`). Absent in runs written before records were signed,
    /// whose lines are read unverified; a resumed run keeps what it recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_mac: Option<String>,
}

impl RunManifest {
    /// The module mode the run's records were made in (`eval` only when it says so).
    pub fn model_mode(&self) -> kbench_record::ModelMode {
        if self.model_mode == "eval" {
            kbench_record::ModelMode::Eval
        } else {
            kbench_record::ModelMode::Train
        }
    }

    /// The first setting that differs from `other`'s, described (the suite may differ: a
    /// resumed run may select a different subset of problems).
    pub fn conflict(&self, other: &RunManifest) -> Option<String> {
        let pairs = [
            ("agent", &self.agent, &other.agent),
            ("device", &self.device, &other.device),
            ("precision", &self.precision, &other.precision),
            ("profile", &self.profile, &other.profile),
            ("--model-mode", &self.model_mode, &other.model_mode),
        ];
        for (name, a, b) in pairs {
            if a != b {
                return Some(format!("{name}: recorded {a}, now {b}"));
            }
        }
        if self.trials != other.trials {
            return Some(format!(
                "trials: recorded {}, now {}",
                self.trials, other.trials
            ));
        }
        if self.families != other.families {
            let show = |f: &[String]| {
                if f.is_empty() {
                    "random only".to_string()
                } else {
                    f.join(",")
                }
            };
            return Some(format!(
                "case families: recorded {}, now {}",
                show(&self.families),
                show(&other.families)
            ));
        }
        if self.timed_calls != other.timed_calls {
            return Some(format!(
                "timed calls: recorded {:?}, now {:?}",
                self.timed_calls, other.timed_calls
            ));
        }
        if self.weight_seed != other.weight_seed {
            return Some(format!(
                "weight seed: recorded {}, now {}",
                self.weight_seed, other.weight_seed
            ));
        }
        if self.shard != other.shard {
            let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "none (whole run)".into());
            return Some(format!(
                "shard: recorded {}, now {}",
                show(&self.shard),
                show(&other.shard)
            ));
        }
        None
    }
}

fn train() -> String {
    "train".into()
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
