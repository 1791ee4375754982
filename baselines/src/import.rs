//! `kbench baselines import`: KernelBench's published baseline JSON into the store, marked
//! as imported and with what is known to be wrong with it.

use std::path::Path;

use crate::{gpu_slug, BaselineEnv, BaselineFile, Entry, KernelBenchBaselines, Mode, Origin};

/// What the importer cannot read from a KernelBench file itself.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// The mode, when the file name is not one KernelBench writes.
    pub mode: Option<Mode>,
    /// torch version the file was timed with (KernelBench's files do not say).
    pub torch: Option<String>,
    /// Device name, when the entries' `hardware` is missing or should be overridden.
    pub gpu: Option<String>,
    /// Further caveats to record.
    pub caveats: Vec<String>,
    /// Problems whose entries are stale, as `(level, id)`.
    pub stale: Vec<(u8, u32)>,
}

/// Known facts about a KernelBench results folder: torch version, caveats, stale problems.
pub struct KnownSource {
    pub torch: &'static str,
    pub caveats: &'static [&'static str],
    /// `(level, id, why)`.
    pub stale: &'static [(u8, u32, &'static str)],
}

/// Problems KernelBench changed after both published sets were timed
/// (KernelBench's git history of those files).
const CHANGED_2026: &[(u8, u32, &str)] = &[
    (
        1,
        12,
        "level1/12_Matmul_with_diagonal_matrices_.py changed on 2026-01-19, after this file was timed",
    ),
    (
        1,
        97,
        "level1/97_ScaledDotProductAttention.py changed on 2026-01-02 (fp16 → fp32), after this file was timed",
    ),
];

/// The caveats of the KernelBench folders kbench knows, by folder name
/// (`results/timing/<folder>/`). Source: KernelBench's git history.
pub fn known_caveats(folder: &str) -> Option<KnownSource> {
    match folder {
        "H100_Modal" => Some(KnownSource {
            torch: "2.9.0",
            caveats: &[
                "KernelBench results/timing/H100_Modal, written 2025-12-31 (commit 1f8d20f) with torch 2.9.0: CUDA events with L2 flush, 3 warmup, 1 discarded, 100 trials",
            ],
            stale: CHANGED_2026,
        }),
        "H100_PCIe_LambdaLabs" => Some(KnownSource {
            torch: "2.5.0",
            caveats: &[
                "KernelBench results/timing/H100_PCIe_LambdaLabs, last written 2025-07-21 (commit 129232e) with torch 2.5.0",
                "timed with CUDA events WITHOUT an L2 flush: small problems read warm caches, so these times are optimistic next to kbench's",
            ],
            stale: CHANGED_2026,
        }),
        _ => None,
    }
}

/// Reads a KernelBench baseline file into a store file. Returns the file and where in a
/// store it belongs is decided by its environment (`gpu`, `torch`) and mode.
pub fn import_kernelbench(path: &Path, opts: &ImportOptions) -> Result<BaselineFile, String> {
    let kb = KernelBenchBaselines::load(path).map_err(|e| e.to_string())?;
    let mode = match opts.mode {
        Some(m) => m,
        None => {
            let kb_mode = kb.mode.as_ref().ok_or_else(|| {
                format!(
                    "{}: the mode cannot be read from the file name (KernelBench writes baseline_time_torch.json or baseline_time_torch_compile_inductor_<mode>.json); pass --mode",
                    path.display()
                )
            })?;
            Mode::from_kernelbench(kb_mode).ok_or_else(|| {
                format!(
                    "{}: mode {kb_mode} is not one kbench measures (eager or inductor modes); pass --mode to import it as one",
                    path.display()
                )
            })?
        }
    };
    if kb.is_empty() {
        return Err(format!("{}: holds no timings", path.display()));
    }
    let gpu = match &opts.gpu {
        Some(g) => g.clone(),
        None => match kb.hardware().as_slice() {
            [one] if !one.is_empty() => one.to_string(),
            [] | [_] => {
                return Err(format!(
                    "{}: the entries do not name their GPU; pass --gpu NAME",
                    path.display()
                ))
            }
            many => {
                return Err(format!(
                    "{}: the entries name several GPUs ({}); import per GPU or pass --gpu NAME",
                    path.display(),
                    many.join(", ")
                ))
            }
        },
    };
    let folder = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|f| f.to_str())
        .unwrap_or("");
    let known = known_caveats(folder);
    let torch = opts
        .torch
        .clone()
        .or_else(|| known.as_ref().map(|k| k.torch.to_string()))
        .unwrap_or_else(|| "unknown".into());
    let mut file = BaselineFile::new(
        mode,
        Origin::Imported,
        BaselineEnv {
            gpu: gpu.clone(),
            gpu_slug: gpu_slug(&gpu),
            torch,
            ..Default::default()
        },
    );
    file.meta.imported_from = Some(path.display().to_string());
    file.meta.caveats.push(
        "imported: KernelBench rounds times to three significant digits and keeps no samples; speedups against it use its mean"
            .into(),
    );
    if let Some(k) = &known {
        file.meta
            .caveats
            .extend(k.caveats.iter().map(|c| c.to_string()));
    }
    file.meta.caveats.extend(opts.caveats.iter().cloned());
    let mut stale: Vec<(u8, u32, String)> = known
        .iter()
        .flat_map(|k| k.stale.iter().map(|(l, i, w)| (*l, *i, w.to_string())))
        .collect();
    stale.extend(
        opts.stale
            .iter()
            .map(|(l, i)| (*l, *i, "marked stale at import".to_string())),
    );
    for (level, name, t) in kb.iter() {
        let id = name.split('_').next().and_then(|i| i.parse::<u32>().ok());
        let why = stale
            .iter()
            .find(|(l, i, _)| *l == level && Some(*i) == id)
            .map(|(_, _, w)| w.clone());
        file.put(
            level,
            name,
            Entry {
                mean: t.mean_ms,
                std: t.std_ms,
                min: t.min_ms,
                max: t.max_ms,
                num_trials: t.num_trials,
                hardware: t.hardware.clone(),
                device: t.device.clone(),
                median: None,
                p25: None,
                p75: None,
                samples_ms: Vec::new(),
                compile_s: None,
                problem_sha256: None,
                measured_unix_s: None,
                run_id: None,
                stale: why,
                profile: None,
                gpu_uuid: None,
            },
        );
    }
    Ok(file)
}
