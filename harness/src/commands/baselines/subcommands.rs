//! `kbench baselines measure`, `import` and `show`, and the lines `kbench run --baselines`
//! ends its summary with: what they print.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kbench_baselines::{BaselineFile, BaselineTable, Lookup, Mode, Store};
use kbench_record::EvalRecord;

use super::measuring::measure;
use super::store::{environment, store_root, StoreFiles};
use crate::agents::read_dir_sorted;
use crate::config::AgentConfig;

/// Per baseline mode: how the run's correct kernels compare with it.
pub fn summary_lines(records: &[EvalRecord], table: &BaselineTable) -> Vec<String> {
    let mut out = Vec::new();
    for u in &table.used {
        let name = u.mode.as_str();
        // A problem with no usable time in this mode has no speedup over it, not a slow one:
        // its records are left out of the denominator and counted apart.
        let all = records.len();
        let records: Vec<&EvalRecord> = records
            .iter()
            .filter(|r| !r.baselines_missing.contains_key(name))
            .collect();
        let without = if all > records.len() {
            format!(
                "; {} record(s) with no {name} time left out",
                all - records.len()
            )
        } else {
            String::new()
        };
        let speedups: Vec<f64> = records
            .iter()
            .filter(|r| r.outcome.is_ok())
            .filter_map(|r| r.baselines.get(name).map(|b| b.speedup))
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        if speedups.is_empty() {
            out.push(format!(
                "vs {name:<12} no correct kernel has a {name} time to compare with{without}"
            ));
            continue;
        }
        let geomean = (speedups.iter().map(|s| s.ln()).sum::<f64>() / speedups.len() as f64).exp();
        let fast1 = speedups.iter().filter(|s| **s > 1.0).count();
        out.push(format!(
            "vs {name:<12} {} of {} kernel(s) compared; geomean speedup {geomean:.3}x; fast_1 {fast1}/{} ({:.1}%){without}",
            speedups.len(),
            records.len(),
            records.len(),
            100.0 * fast1 as f64 / records.len().max(1) as f64
        ));
        // Where the store's eager time is far from the run's own reference, the speedups
        // over its times carry that factor: said under the line.
        let drifts: Vec<(String, f64)> = records
            .iter()
            .filter(|r| r.outcome.is_ok())
            .filter_map(|r| Some((r.problem.key(), r.baselines.get(name)?.eager_drift?)))
            .collect();
        if let Some(note) = kbench_reports::drift_note(name, &drifts) {
            out.push(format!("    note: {note}"));
        }
    }
    out
}

/// `kbench baselines measure`.
pub fn measure_command(m: &crate::cli::MeasureArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    let modes = Mode::parse_list(&m.modes).map_err(|e| anyhow::anyhow!("--modes: {e}"))?;
    // `out` is set per measuring run below.
    let mut config = crate::commands::run_config::build(
        &m.suite,
        &m.python,
        &m.eval,
        AgentConfig::Reference,
        Path::new("."),
        m.shard,
    )?;
    config.lookahead = m.lookahead.map(usize::from);
    for b in &config.broken {
        eprintln!("kbench: {b}; not measured");
    }
    let info = crate::worker::probe_cache::probe_persisted(&config.python, &config.cache)?;
    let env = environment(&config, &info)?;
    let root = store_root(m.store.as_ref(), &config.cache);
    let mut work = match &m.work {
        Some(w) => std::path::absolute(w).unwrap_or_else(|_| w.clone()),
        None => super::store::default_work(&config.cache, &root, &env),
    };
    if let Some(shard) = m.shard {
        // Shards of one measurement keep their logs apart; the store is shared (locked).
        work = work.join(format!("shard-{}-of-{}", shard.index, shard.count));
    }
    let mut files = StoreFiles::open(Store::new(&root), env.clone(), &modes)?;
    let before = files.missing(&config.problems, &modes, m.retry_failed);
    let todo: usize = before.values().map(Vec::len).sum();
    if !config.quiet {
        eprintln!(
            "kbench: baselines {} for {} problem(s) on {} with torch {}: {todo} to measure, the rest stored in {}",
            modes.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(","),
            config.problems.len(),
            env.gpu,
            env.torch,
            files.store.dir(&env.gpu, &env.torch).display()
        );
    }
    let r = measure(&config, &mut files, &modes, &work, m.retry_failed, stop)?;
    if r.recovered > 0 {
        println!(
            "recovered {} entr(ies) recorded by an earlier, interrupted measurement",
            r.recovered
        );
    }
    if r.retried_alone > 0 {
        println!(
            "{} mode(s) had run out of GPU memory beside loads sent ahead and were measured again with the GPU to themselves",
            r.retried_alone
        );
    }
    for &mode in &modes {
        let f = &files.files[&mode];
        let (mut ok, mut failed) = (0, Vec::new());
        for p in &config.problems {
            let pr = p.to_ref();
            match f.lookup(pr.level, &pr.file, &pr.sha256) {
                Lookup::Usable(_) => ok += 1,
                Lookup::Failed(e) => failed.push(format!("{} ({})", pr.key(), e.outcome)),
                _ => {}
            }
        }
        println!(
            "{:<12} {ok}/{} timed, {} failed: {}",
            mode.as_str(),
            config.problems.len(),
            failed.len(),
            files.path(mode).display()
        );
        for f in failed.iter().take(20) {
            println!("    failed: {f}");
        }
        if failed.len() > 20 {
            println!(
                "    ... and {} more (see the file's \"errors\")",
                failed.len() - 20
            );
        }
    }
    if r.interrupted {
        eprintln!(
            "kbench: interrupted; what was measured is kept: rerun the same command to continue"
        );
        return Ok(crate::exit::INTERRUPTED);
    }
    if r.not_started > 0 {
        eprintln!(
            "kbench: stopped starting problems (--stop-starting-after): {} problem(s) not started; what was measured is kept: rerun the same command to continue",
            r.not_started
        );
        return Ok(crate::exit::STOPPED_STARTING);
    }
    if !r.still_missing.is_empty() {
        eprintln!(
            "kbench: {} problem(s) still lack a time or a recorded failure (e.g. {}); rerun to continue",
            r.still_missing.len(),
            r.still_missing.keys().next().map_or("", String::as_str)
        );
        return Ok(crate::exit::KERNELS_FAILED);
    }
    Ok(crate::exit::OK)
}

/// `kbench baselines import`.
pub fn import_command(a: &crate::cli::ImportArgs) -> Result<i32> {
    let cache = crate::worker::python::cache_dir();
    let store = Store::new(store_root(a.store.as_ref(), &cache));
    let mut stale = Vec::new();
    for s in &a.stale {
        let (l, i) = s
            .split_once('/')
            .and_then(|(l, i)| Some((l.parse::<u8>().ok()?, i.parse::<u32>().ok()?)))
            .with_context(|| format!("--stale {s:?}: expected LEVEL/ID, e.g. 1/12"))?;
        stale.push((l, i));
    }
    let opts = kbench_baselines::ImportOptions {
        mode: a
            .mode
            .as_deref()
            .map(Mode::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--mode: {e}"))?,
        torch: a.torch.clone(),
        gpu: a.gpu.clone(),
        caveats: a.caveat.clone(),
        stale,
    };
    for path in &a.files {
        let f = kbench_baselines::import_kernelbench(path, &opts).map_err(anyhow::Error::msg)?;
        let mode = f.mode().context("imported file has a mode")?;
        let env = &f.meta.environment;
        let dest = store.path(&env.gpu, &env.torch, mode);
        if dest.exists() && !a.force {
            bail!(
                "{} already exists; pass --force to replace it with {}",
                dest.display(),
                path.display()
            );
        }
        f.save(&dest)?;
        let stale_n = f.stale_count();
        println!(
            "imported {} {} time(s) ({} marked stale) of {} (torch {}) from {} into {}",
            f.len(),
            mode,
            stale_n,
            env.gpu,
            env.torch,
            path.display(),
            dest.display()
        );
        for c in &f.meta.caveats {
            println!("    caveat: {c}");
        }
    }
    Ok(crate::exit::OK)
}

/// `kbench baselines show`.
pub fn show_command(a: &crate::cli::ShowArgs) -> Result<i32> {
    let cache = crate::worker::python::cache_dir();
    let root = store_root(a.store.as_ref(), &cache);
    let mut rows = Vec::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    for gpu in sorted_dirs(&root)? {
        for torch in sorted_dirs(&gpu)? {
            let mut files = read_dir_sorted(&torch, "baseline store folder")?;
            files.retain(|p| p.extension().is_some_and(|e| e == "json"));
            paths.extend(files);
        }
    }
    let problems = match &a.kernelbench {
        Some(dir) => Some(super::coverage::kernelbench_problems(dir)?),
        None => None,
    };
    let mut files = Vec::new();
    let (mut unnamed_on_gpu, mut timed_on_gpu) = (0, 0);
    for path in paths {
        let f = BaselineFile::load(&path)?;
        let stale = f.stale_count();
        let (on, unnamed) = f.gpus();
        let per_level: Vec<String> = f
            .levels
            .iter()
            .map(|(l, m)| format!("L{l}:{}", m.len()))
            .collect();
        rows.push(serde_json::json!({
            "path": path.display().to_string(),
            "gpu": f.meta.environment.gpu,
            "torch": f.meta.environment.torch,
            "mode": f.meta.mode,
            "origin": f.meta.origin,
            "timed": f.len(),
            "per_level": per_level.join(" "),
            "failed": f.error_count(),
            "stale": stale,
            "caveats": f.meta.caveats,
            "timed_on": on,
            "timed_on_unrecorded": unnamed,
        }));
        // Entries timed on a GPU that do not name it (on the CPU, or imported, none can).
        if f.meta.environment.gpu_properties.is_some() {
            unnamed_on_gpu += unnamed;
            timed_on_gpu += f.len();
        }
        files.push((path.display().to_string(), f));
    }
    let coverage = super::coverage::coverage(&files, problems.as_deref());
    if a.json {
        for (row, cov) in rows.iter_mut().zip(&coverage) {
            row["coverage"] = serde_json::to_value(&cov.levels)?;
        }
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(crate::exit::OK);
    }
    if rows.is_empty() {
        println!("no baseline files in {}", root.display());
        return Ok(crate::exit::OK);
    }
    println!("store: {}", root.display());
    println!(
        "{:<28} {:<16} {:<27} {:<9} {:>6} {:>6} {:>6}  per level",
        "gpu", "torch", "mode", "origin", "timed", "failed", "stale"
    );
    for r in &rows {
        let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
        println!(
            "{:<28} {:<16} {:<27} {:<9} {:>6} {:>6} {:>6}  {}",
            s("gpu"),
            s("torch"),
            s("mode"),
            s("origin"),
            r["timed"].to_string(),
            r["failed"].to_string(),
            r["stale"].to_string(),
            s("per_level")
        );
    }
    // Which GPU timed an entry is recorded since kbench named it: say how many do not.
    if unnamed_on_gpu > 0 {
        println!(
            "{unnamed_on_gpu} of {timed_on_gpu} entries timed on a GPU do not name which (measured before kbench recorded it; `--json` gives each file's `timed_on`)"
        );
    }
    print!(
        "{}",
        super::coverage::render(&coverage, a.kernelbench.as_deref(), a.gaps)
    );
    // The torch in use, when kbench's environment answers: files of another one compare two
    // torches.
    let choice = crate::worker::python::PythonChoice::resolve(None, &cache);
    if let Ok(info) = crate::worker::python::probe_cached(&choice) {
        let torches: Vec<String> = rows
            .iter()
            .filter_map(|r| r["torch"].as_str().map(str::to_string))
            .collect();
        if let Some(note) = super::store::other_torch_note(&torches, &info.torch, true) {
            println!(
                "{}",
                note.replacen("this run uses", "this environment has", 1)
            );
        }
    }
    Ok(crate::exit::OK)
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut v = read_dir_sorted(dir, "baseline store folder")?;
    v.retain(|p| p.is_dir());
    Ok(v)
}
