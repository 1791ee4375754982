//! The identity of the machines that evaluate for one store: what a verdict depends on beyond
//! the problem and the kernel (the settings, the run's secret through its run id, kbench,
//! the problem set, the GPU model and torch). The verdict cache is keyed under it, and a
//! worker of another identity may not join a store's fleet.

use anyhow::Result;

use super::verdict::sha256_hex;
use crate::config::RunConfig;

pub(crate) struct Fleet {
    pub(crate) fingerprint: String,
    /// For people: kbench, torch, device and run.
    pub(crate) describe: String,
}

impl Fleet {
    pub(crate) fn of(c: &RunConfig, run_id: &str) -> Result<Fleet> {
        let torch = crate::worker::python::probe_cached(&c.python)?.torch;
        let device = if c.gpus.is_empty() {
            "cpu".to_string()
        } else {
            let names = crate::gpu::describe().unwrap_or_default();
            c.gpus
                .iter()
                .map(|g| {
                    names
                        .iter()
                        .find(|i| i.index == *g)
                        .map_or_else(|| format!("GPU {g}"), |i| i.name.clone())
                })
                .collect::<Vec<_>>()
                .join(" + ")
        };
        let settings = format!(
            "{:?}|{:?}|{:?}|{}|{:?}|{:?}|{}|{:?}|{}|{}|{:?}",
            c.precision,
            c.profile,
            c.model_mode,
            c.trials,
            c.families,
            c.timing,
            c.require_custom_kernels,
            c.time_as,
            c.weight_seed,
            c.no_sandbox,
            crate::worker::light_headers::light_headers()?,
        );
        let problems: String = c
            .problems
            .iter()
            .map(|p| format!("{}={};", p.key(), p.sha256))
            .collect();
        let describe = format!(
            "kbench {} with torch {torch} on {device} (run {run_id})",
            env!("CARGO_PKG_VERSION")
        );
        let fingerprint = sha256_hex(format!("{describe}\n{settings}\n{problems}").as_bytes());
        Ok(Fleet {
            fingerprint,
            describe,
        })
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
