//! `run.json`: what a run was asked to do, and every evaluation it plans.
//!
//! kbench signs it like a record line (`mac`, keyed by the run's `run.json` key derived from
//! its secret), so that a plan edited to drop evaluations, or settings changed after the
//! run, are recognised. Runs written before kbench signed it carry no `mac` and no plan.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kbench_record::Plan;
use serde::{Deserialize, Serialize};

use super::mac::{claim, sign_object, Claim};
use super::seed::RunSecret;

/// The purpose `run.json`'s key is derived for ([`RunSecret::subkey`]).
const MANIFEST_KEY: &str = "run.json";

/// What a run was asked to do; a resumed run must ask for the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub(crate) schema_version: u32,
    pub(crate) kbench_version: String,
    pub(crate) run_id: String,
    pub(crate) created_unix_s: f64,
    pub(crate) agent: String,
    pub(crate) suite: String,
    pub(crate) device: String,
    pub(crate) precision: String,
    pub(crate) profile: String,
    /// `train` or `eval` (`--model-mode`); runs made before it was recorded ran in `train`.
    #[serde(default = "train")]
    pub model_mode: String,
    pub(crate) trials: u32,
    /// Stress case families after the random trials (absent in runs made before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) families: Vec<String>,
    pub(crate) timed_calls: Option<u32>,
    /// `--min-timed-calls`: timings may stop after this many calls (`judge::settle`).
    /// Absent in runs made before timings could stop early, which timed every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) min_timed_calls: Option<u32>,
    pub(crate) weight_seed: u64,
    /// `i/N` when this run is one shard of a larger run (`--shard`); absent for a whole or
    /// merged run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shard: Option<String>,
    /// How the lines of `records.jsonl` are signed (`hmac-sha256`, keyed by the run's
    /// secret; see `runlog::records`). Absent in runs written before records were signed,
    /// whose lines are read unverified; a resumed run keeps what it recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) record_mac: Option<String>,
    /// `light` where CUDA sources' `torch/extension.h` was compiled as `torch/types.h` first
    /// (`KBENCH_CUDA_HEADER`); absent: torch's own header (and in runs made before the choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cuda_header: Option<String>,
    /// `light` where C++ sources' `torch/extension.h` was compiled as `torch/types.h` +
    /// `torch/python.h` first (`KBENCH_CXX_HEADER`); absent: torch's own header (and in runs
    /// made before the choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cxx_header: Option<String>,
    /// Every evaluation the run plans: the problems and the kernels of each (see
    /// [`kbench_record::Plan`]). A record that is not written, deleted, or does not verify
    /// leaves its planned evaluation missing, which reports count as not correct. Absent in
    /// runs written before kbench listed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) planned: Option<Plan>,
}

/// Whether `run.json` carries a signature, and whether it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seal {
    /// Signed, and the signature verifies under the run's secret.
    Intact,
    /// Signed, and it does not verify: changed after kbench wrote it, or signed with
    /// another run's secret.
    Broken,
    /// Not signed: written by a kbench from before it signed `run.json`.
    Unsigned,
}

/// `run.json` as read: the manifest and the text it was parsed from.
#[derive(Debug, Clone)]
pub(crate) struct ManifestFile {
    pub(crate) manifest: RunManifest,
    text: String,
}

impl ManifestFile {
    /// Reads and parses `path`.
    pub(crate) fn read(path: &Path) -> Result<ManifestFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let manifest = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a kbench run manifest", path.display()))?;
        Ok(ManifestFile { manifest, text })
    }

    /// Whether it is signed, and whether the signature holds under `secret`.
    pub(crate) fn seal(&self, secret: &RunSecret) -> Seal {
        match claim(self.text.trim_end()) {
            Claim::None => Seal::Unsigned,
            c if c.verifies(&secret.subkey(MANIFEST_KEY)) => Seal::Intact,
            _ => Seal::Broken,
        }
    }
}

/// `manifest` as the signed bytes of `run.json`.
pub(crate) fn signed_manifest(secret: &RunSecret, manifest: &RunManifest) -> Result<Vec<u8>> {
    let body = serde_json::to_string_pretty(manifest)?;
    Ok(format!("{}\n", sign_object(&secret.subkey(MANIFEST_KEY), &body)?).into_bytes())
}

/// Writes `manifest` to `path`, signed (atomically: readers see the old or the new).
pub(crate) fn write_signed(path: &Path, secret: &RunSecret, manifest: &RunManifest) -> Result<()> {
    super::write_atomic(path, &signed_manifest(secret, manifest)?)
}

/// Why a signed `run.json` is refused, with what to do; `dir` is its run folder.
pub(crate) fn broken_seal(dir: &Path) -> String {
    format!(
        "{} does not verify: it was changed after kbench wrote it (a plan edited to drop evaluations, a setting rewritten) or it belongs to another run (another secret); restore the run.json kbench wrote",
        dir.join(super::MANIFEST).display()
    )
}

/// Refuses a run whose `run.json` passes for an older one: unsigned, while its records say
/// the kbench that wrote them signs `run.json`.
pub(crate) fn check_not_downgraded(dir: &Path, manifest: &RunManifest, seal: Seal) -> Result<()> {
    if seal == Seal::Unsigned && manifest.record_mac.as_deref() == Some(super::RECORD_MAC) {
        bail!(
            "{} carries no signature, though it says its records are signed as {}, by a kbench that signs run.json: it is not the run.json kbench wrote; restore that one",
            dir.join(super::MANIFEST).display(),
            super::RECORD_MAC
        );
    }
    Ok(())
}

impl RunManifest {
    /// The timed calls after which a timing could stop: every call in runs made before
    /// timings could stop early.
    fn least_timed_calls(&self) -> Option<u32> {
        self.timed_calls
            .map(|n| self.min_timed_calls.map_or(n, |m| m.min(n)))
    }

    /// The module mode the run's records were made in (`eval` only when it says so).
    pub(crate) fn model_mode(&self) -> kbench_record::ModelMode {
        if self.model_mode == "eval" {
            kbench_record::ModelMode::Eval
        } else {
            kbench_record::ModelMode::Train
        }
    }

    /// The first setting that differs from `other`'s, described (the suite may differ: a
    /// resumed run may select a different subset of problems).
    pub(crate) fn conflict(&self, other: &RunManifest) -> Option<String> {
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
        let show = |h: &Option<String>| h.clone().unwrap_or_else(|| "full".to_string());
        for (var, a, b) in [
            ("KBENCH_CUDA_HEADER", &self.cuda_header, &other.cuda_header),
            ("KBENCH_CXX_HEADER", &self.cxx_header, &other.cxx_header),
        ] {
            if a != b {
                return Some(format!("{var}: recorded {}, now {}", show(a), show(b)));
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
            let show = |t: Option<u32>| {
                t.map_or_else(|| "none (--no-timing)".to_string(), |n| n.to_string())
            };
            return Some(format!(
                "timed calls: recorded {}, now {}",
                show(self.timed_calls),
                show(other.timed_calls)
            ));
        }
        if self.timed_calls.is_some() && self.least_timed_calls() != other.least_timed_calls() {
            let show = |t: Option<u32>| t.map_or_else(String::new, |n| n.to_string());
            return Some(format!(
                "least timed calls (--min-timed-calls): recorded {}, now {}",
                show(self.least_timed_calls()),
                show(other.least_timed_calls())
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
pub(crate) fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn manifest() -> RunManifest {
        RunManifest {
            schema_version: 1,
            kbench_version: "0.1.0".into(),
            run_id: "r".into(),
            created_unix_s: 0.0,
            agent: "reference".into(),
            suite: "smoke".into(),
            device: "cpu".into(),
            precision: "fp32".into(),
            profile: "strict".into(),
            model_mode: "train".into(),
            trials: 5,
            families: Vec::new(),
            timed_calls: Some(100),
            min_timed_calls: None,
            weight_seed: 42,
            shard: None,
            record_mac: Some(super::super::RECORD_MAC.into()),
            cuda_header: None,
            cxx_header: None,
            planned: None,
        }
    }

    #[test]
    fn a_resume_mismatch_names_settings_in_words_not_debug_values() {
        let a = manifest();
        let b = RunManifest {
            timed_calls: None,
            min_timed_calls: None,
            ..manifest()
        };
        let said = a.conflict(&b).unwrap();
        assert_eq!(said, "timed calls: recorded 100, now none (--no-timing)");
        assert!(!said.contains("Some(") && !said.contains("None"), "{said}");
        // A resume under another CUDA header would mix records built two ways.
        let light = RunManifest {
            cuda_header: Some("light".into()),
            ..manifest()
        };
        assert_eq!(
            manifest().conflict(&light).unwrap(),
            "KBENCH_CUDA_HEADER: recorded full, now light"
        );
        let light_cxx = RunManifest {
            cxx_header: Some("light".into()),
            ..manifest()
        };
        assert_eq!(
            light_cxx.conflict(&manifest()).unwrap(),
            "KBENCH_CXX_HEADER: recorded light, now full"
        );
    }

    #[test]
    fn a_signed_manifest_reads_back_and_any_edit_breaks_its_seal() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.json");
        let s = RunSecret::from_bytes([9; 32]);
        write_signed(&p, &s, &manifest()).unwrap();
        let f = ManifestFile::read(&p).unwrap();
        assert_eq!(f.manifest, manifest());
        assert_eq!(f.seal(&s), Seal::Intact);
        assert_eq!(f.seal(&RunSecret::from_bytes([8; 32])), Seal::Broken);
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("\"trials\": 5", "\"trials\": 6")).unwrap();
        assert_eq!(ManifestFile::read(&p).unwrap().seal(&s), Seal::Broken);
        std::fs::write(&p, serde_json::to_string_pretty(&manifest()).unwrap()).unwrap();
        let f = ManifestFile::read(&p).unwrap();
        assert_eq!(f.seal(&s), Seal::Unsigned);
        let e = check_not_downgraded(d.path(), &f.manifest, f.seal(&s)).unwrap_err();
        assert!(e.to_string().contains("carries no signature"), "{e}");
    }
}
