//! `kbench merge`: the shards of one run joined into one ordinary run directory, which
//! `kbench run --resume` continues and reports read like any other.
//!
//! Only shards of one run merge: same run id and secret seed (so their inputs are those of
//! one run) and the same settings. Merging is idempotent: records are a union by eval key,
//! the merged directory's own records count as one more input, and the output is written in
//! a fixed order, so merging again (or after more shards finished) changes only what is new.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::EvalRecord;

use crate::cli::MergeArgs;
use crate::commands::slurm;
use crate::runlog::read::{read_run_folder, Trust};
use crate::runlog::seed::RunSecret;
use crate::runlog::{
    self, out_folder, write_signed, OutFolder, RunManifest, WriterLock, MANIFEST, RECORDS,
    RECORD_MAC, SECRET,
};

/// What a merge did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MergeReport {
    pub(crate) out: PathBuf,
    /// Run directories read (the output's previous content not counted).
    pub(crate) inputs: Vec<PathBuf>,
    /// Records in the merged log.
    pub(crate) records: usize,
    /// Records that were not in the output before.
    pub(crate) added: usize,
    /// Shards of a submission left out because they have not finished (`--partial`).
    pub(crate) unfinished: Vec<u32>,
    /// Lines of the inputs (or of the output's previous content) that did not verify and
    /// were left out, each naming its file, line and why; runs read unverified.
    pub(crate) warnings: Vec<String>,
}

/// One run directory's parts.
struct RunParts {
    dir: PathBuf,
    manifest: RunManifest,
    /// `None` for a run read unverified (`--unverified`).
    secret: Option<RunSecret>,
    /// Each record with its line exactly as in the log, lines that did not verify left out.
    records: Vec<(String, EvalRecord)>,
    /// What reading the log found: lines left out, the run read unverified.
    warnings: Vec<String>,
}

/// Reads a run folder for merging: verified as `kbench report` reads it (`runlog::read`),
/// which refuses what cannot be verified unless `unverified_ok`.
fn read_run(dir: &Path, unverified_ok: bool) -> Result<RunParts> {
    if !dir.join(MANIFEST).exists() {
        bail!(
            "reading {}: {} is not a kbench run directory",
            dir.join(MANIFEST).display(),
            dir.display()
        );
    }
    let folder = read_run_folder(dir, unverified_ok)?;
    let Some(manifest) = folder.manifest else {
        bail!(
            "{} is not a kbench run manifest",
            dir.join(MANIFEST).display()
        );
    };
    let mut warnings = folder.log.warnings();
    if let Trust::Unverified(why) = &folder.trust {
        warnings.push(format!("UNVERIFIED: {why}; merged anyway (--unverified)"));
    }
    let records = folder
        .log
        .lines
        .into_iter()
        .map(|l| (l.text, l.record))
        .collect();
    Ok(RunParts {
        dir: dir.to_path_buf(),
        manifest,
        secret: folder.secret,
        records,
        warnings,
    })
}

/// The run directories named by `inputs`: a submission directory stands for its shards.
/// Returns them, the default output, and the shards left out as unfinished.
fn expand_inputs(
    inputs: &[PathBuf],
    partial: bool,
) -> Result<(Vec<PathBuf>, Option<PathBuf>, Vec<u32>)> {
    let mut dirs = Vec::new();
    let mut default_out = None;
    let mut unfinished = Vec::new();
    for input in inputs {
        let input =
            std::path::absolute(input).with_context(|| format!("resolving {}", input.display()))?;
        if !input.join(slurm::SUBMISSION).exists() {
            dirs.push(input);
            continue;
        }
        let sub = slurm::Submission::load(&input)?;
        for i in 0..sub.shards {
            let shard = slurm::shard_dir(&input, i);
            if slurm::shard_finished(&input, i) {
                dirs.push(shard);
            } else if partial {
                unfinished.push(i);
                if shard.join(MANIFEST).exists() {
                    dirs.push(shard);
                }
            } else {
                bail!(
                    "shard {i} of {} has not finished ({} has no exit code 0 or 3): see `kbench slurm status {}`, resubmit it with `kbench slurm resubmit`, or merge what there is with --partial",
                    input.display(),
                    shard.display(),
                    input.display()
                );
            }
        }
        if inputs.len() == 1 {
            default_out = Some(input);
        }
    }
    Ok((dirs, default_out, unfinished))
}

/// Names the first way in which `b` cannot be merged with `a`.
fn mismatch(a: &RunParts, b: &RunParts) -> Option<String> {
    let secrets_differ = matches!((&a.secret, &b.secret), (Some(x), Some(y)) if x != y);
    if a.manifest.run_id != b.manifest.run_id || secrets_differ {
        return Some(format!(
            "they are different runs (run ids {} and {}): only shards of one run merge, since other runs' inputs came from other secret seeds",
            a.manifest.run_id, b.manifest.run_id
        ));
    }
    if let Some(diff) = a.manifest.conflict(&b.manifest) {
        if !diff.starts_with("shard:") {
            return Some(format!("their settings differ ({diff})"));
        }
    }
    if a.manifest.record_mac != b.manifest.record_mac {
        return Some(format!(
            "they were written by different kbench versions (records signed as {} and {})",
            a.manifest.record_mac.as_deref().unwrap_or("nothing"),
            b.manifest.record_mac.as_deref().unwrap_or("nothing")
        ));
    }
    if a.manifest.suite != b.manifest.suite {
        return Some(format!(
            "their suites differ ({} and {})",
            a.manifest.suite, b.manifest.suite
        ));
    }
    let count = |s: &Option<String>| {
        s.as_deref()
            .and_then(|s| s.parse::<crate::config::shard::Shard>().ok())
            .map(|s| s.count)
    };
    if let (Some(x), Some(y)) = (count(&a.manifest.shard), count(&b.manifest.shard)) {
        if x != y {
            return Some(format!(
                "they split the run differently ({x} and {y} shards)"
            ));
        }
    }
    None
}

/// `kbench merge`: a `baselines measure` submission's shards into its store, or the shards
/// of a run into one run directory.
pub fn command(a: &MergeArgs) -> Result<i32> {
    if let Some(say) = slurm::merge_measure(&a.inputs, a.out.as_deref(), a.partial)? {
        println!("{say}");
        return Ok(crate::exit::OK);
    }
    let r = merge(&a.inputs, a.out.as_deref(), a.partial, a.unverified)?;
    for w in &r.warnings {
        eprintln!("kbench: warning: {w}");
    }
    println!(
        "merged {} run dir(s) into {}: {} record(s), {} new",
        r.inputs.len(),
        r.out.display(),
        r.records,
        r.added
    );
    if !r.unfinished.is_empty() {
        eprintln!(
            "kbench: left out unfinished shard(s) {:?} (--partial): merge again once they finish",
            r.unfinished
        );
    }
    Ok(crate::exit::OK)
}

/// Merges `inputs` into `out` (default: the one submission directory given). `out` must be
/// new, empty, a run of the same run (an earlier merge) or the submission directory; runs
/// that cannot be verified are refused unless `unverified_ok`, and then the merged run gets
/// no secret (so its reports say UNVERIFIED).
pub(crate) fn merge(
    inputs: &[PathBuf],
    out: Option<&Path>,
    partial: bool,
    unverified_ok: bool,
) -> Result<MergeReport> {
    let (dirs, default_out, unfinished) = expand_inputs(inputs, partial)?;
    let out = match (out, default_out) {
        (Some(o), _) => std::path::absolute(o)?,
        (None, Some(d)) => d,
        (None, None) => {
            bail!("say where the merged run goes with --out DIR (only a single `kbench slurm submit` directory merges into itself)")
        }
    };
    if dirs.is_empty() {
        bail!(
            "nothing to merge: no shard of {} has a run yet",
            out.display()
        );
    }
    if let OutFolder::Foreign(names) = out_folder(&out)? {
        // `kbench slurm submit`'s folder holds its shards: the run merges into it.
        if !out.join(slurm::SUBMISSION).exists() {
            return Err(runlog::foreign_error(&out, &names));
        }
    }
    let mut runs = Vec::with_capacity(dirs.len());
    for d in &dirs {
        runs.push(read_run(d, unverified_ok)?);
    }
    let first = &runs[0];
    for r in &runs[1..] {
        if let Some(why) = mismatch(first, r) {
            bail!(
                "cannot merge {} with {}: {why}",
                first.dir.display(),
                r.dir.display()
            );
        }
    }
    // The output's previous content: a run of the same run (an earlier merge), or nothing.
    let previous = if out.join(MANIFEST).exists() {
        let prev = read_run(&out, unverified_ok)?;
        if let Some(s) = &prev.manifest.shard {
            bail!(
                "{} is shard {s} of a run, not a merged run; merge into another directory",
                out.display()
            );
        }
        if let Some(why) = mismatch(first, &prev) {
            bail!(
                "cannot merge into {}: it already holds a run, and {why}",
                out.display()
            );
        }
        Some(prev)
    } else {
        if out.join(SECRET).exists() && Some(RunSecret::load(&out.join(SECRET))?) != first.secret {
            bail!(
                "cannot merge into {}: its secret seed is not the shards' (it belongs to another run); choose another --out",
                out.display()
            );
        }
        None
    };
    // Merged unverified, the output is unverified too: it gets no secret.
    let secret = match runs
        .iter()
        .chain(previous.iter())
        .map(|r| r.secret.clone())
        .collect::<Option<Vec<_>>>()
    {
        Some(_) => first.secret.clone(),
        None => {
            if out.join(SECRET).exists() {
                bail!(
                    "cannot merge runs read --unverified into {}: it holds a verified run (its secret); choose another --out",
                    out.display()
                );
            }
            None
        }
    };

    // Union by eval key. A key recorded twice must be the same record; two different
    // evaluations of one kernel mean the inputs overlapped, which merging must not hide.
    // Lines are compared and copied as written, never parsed and printed again.
    let mut merged: BTreeMap<String, (&str, &EvalRecord, &Path)> = BTreeMap::new();
    let before = previous.as_ref().map_or(0, |p| p.records.len());
    for run in previous.iter().chain(runs.iter()) {
        for (line, rec) in &run.records {
            let key = rec.key();
            match merged.get(&key) {
                Some((seen, _, _)) if seen.trim_end() == line.trim_end() => {}
                Some((_, _, from)) => bail!(
                    "{key} is recorded differently in {} and {}: the inputs evaluated it twice; merge only the shards of one submission",
                    from.display(),
                    run.dir.display()
                ),
                None => {
                    merged.insert(key, (line.as_str(), rec, run.dir.as_path()));
                }
            }
        }
    }
    let mut lines: Vec<(&str, &EvalRecord)> =
        merged.into_values().map(|(l, r, _)| (l, r)).collect();
    let order = |r: &EvalRecord| {
        (
            r.problem.level,
            r.problem.id,
            r.problem.suite.clone(),
            r.candidate.agent.clone(),
            r.candidate.name.clone(),
            r.candidate.sample,
        )
    };
    lines.sort_by_cached_key(|(_, r)| order(r));

    for sub in ["", "logs", "kernels"] {
        std::fs::create_dir_all(out.join(sub))
            .with_context(|| format!("creating {}", out.join(sub).display()))?;
    }
    // The output is written like a run: never while a kbench run writes it.
    let _lock = WriterLock::acquire(&out)?;
    if let Some(s) = secret.as_ref().filter(|_| !out.join(SECRET).exists()) {
        s.save(&out.join(SECRET))?;
    }
    let mut manifest = first.manifest.clone();
    manifest.shard = None;
    // Every input's plan (and an earlier merge's): the merged run plans all of them. A run
    // without a plan (an older kbench) leaves the merged run without one.
    manifest.planned = runs
        .iter()
        .chain(previous.iter())
        .try_fold(None::<kbench_record::Plan>, |acc, r| {
            let p = r.manifest.planned.as_ref()?;
            Some(Some(match acc {
                Some(mut a) => {
                    a.extend(p);
                    a
                }
                None => p.clone(),
            }))
        })
        .flatten();
    manifest.created_unix_s = runs
        .iter()
        .chain(previous.iter())
        .map(|r| r.manifest.created_unix_s)
        .fold(f64::INFINITY, f64::min);
    for run in &runs {
        if run.dir != out {
            for sub in ["kernels", "logs"] {
                copy_files(&run.dir.join(sub), &out.join(sub))?;
            }
        }
    }
    let mut text = String::new();
    for (line, _) in &lines {
        text += line.trim_end();
        text.push('\n');
    }
    // Records first, then the manifest: a merge cut short leaves no run.json announcing a
    // log that is not there.
    runlog::write_atomic(&out.join(RECORDS), text.as_bytes())?;
    match &secret {
        // Shards of a run that signs run.json: so does their merge.
        Some(s) if manifest.record_mac.as_deref() == Some(RECORD_MAC) => {
            write_signed(&out.join(MANIFEST), s, &manifest)?
        }
        _ => runlog::write_atomic(&out.join(MANIFEST), &serde_json::to_vec_pretty(&manifest)?)?,
    }
    let merged: Vec<EvalRecord> = lines.iter().map(|(_, r)| (*r).clone()).collect();
    runlog::write_eval_results(&out, &merged)?;
    Ok(MergeReport {
        out,
        inputs: dirs,
        records: lines.len(),
        added: lines.len() - before,
        unfinished,
        warnings: previous
            .iter()
            .chain(runs.iter())
            .flat_map(|r| r.warnings.iter().cloned())
            .collect(),
    })
}

/// Copies the files of `from` (recursively) into `to`, where they are missing or differ
/// (a shard resumed after a merge may have rewritten a worker log).
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", from.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir_all(&dst).with_context(|| format!("creating {}", dst.display()))?;
            copy_files(&src, &dst)?;
        } else if kind.is_file() {
            let same = dst.exists()
                && std::fs::read(&src).with_context(|| format!("reading {}", src.display()))?
                    == std::fs::read(&dst).with_context(|| format!("reading {}", dst.display()))?;
            if !same {
                std::fs::copy(&src, &dst)
                    .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kbench_record::{
        CandidateRef, Device, Environment, Outcome, Precision, ProblemRef, ToleranceProfile,
        SCHEMA_VERSION,
    };

    use super::*;

    fn manifest(run_id: &str, shard: Option<&str>) -> RunManifest {
        RunManifest {
            schema_version: SCHEMA_VERSION,
            kbench_version: "0.1.0".into(),
            run_id: run_id.into(),
            created_unix_s: 100.0,
            agent: "reference".into(),
            suite: "smoke".into(),
            device: "cpu".into(),
            precision: "fp32".into(),
            profile: "strict".into(),
            model_mode: "train".into(),
            trials: 5,
            families: Vec::new(),
            timed_calls: None,
            min_timed_calls: None,
            weight_seed: 42,
            shard: shard.map(Into::into),
            record_mac: Some(RECORD_MAC.into()),
            cuda_header: None,
            cxx_header: None,
            planned: None,
        }
    }

    /// A record's line for problem `id`, with a float written as a run writes it: digits
    /// that serde_json, parsing and printing again, would not keep.
    fn line(run_id: &str, id: u32, outcome: Outcome) -> String {
        let r = EvalRecord {
            schema_version: SCHEMA_VERSION,
            run_id: run_id.into(),
            problem: ProblemRef {
                suite: "smoke".into(),
                level: 1,
                id,
                name: "x".into(),
                file: format!("{id}_x.py"),
                sha256: "0".into(),
            },
            candidate: CandidateRef {
                agent: "reference".into(),
                name: "reference".into(),
                sample: 0,
                source_path: None,
                sha256: "0".into(),
                selection: None,
            },
            device: Device::Cpu,
            precision: Precision::Fp32,
            profile: ToleranceProfile::Strict,
            model_mode: Default::default(),
            outcome,
            cases: vec![],
            timing: None,
            load_s: None,
            build_ahead_s: None,
            phases: None,
            gpu: None,
            wall_s: 1.5,
            started_unix_s: 0.0,
            finished_unix_s: 1.0,
            log_tail: String::new(),
            notes: vec![],
            env: Environment::default(),
            baselines: Default::default(),
            baselines_missing: Default::default(),
            speed_of_light: None,
            integrity: None,
            cost: None,
        };
        serde_json::to_string(&r).unwrap().replacen(
            "\"wall_s\":1.5",
            "\"wall_s\":3.2308577162038543e-8",
            1,
        )
    }

    /// `line` signed as a run with secret byte `secret` signs it, its bytes kept.
    fn signed(secret: u8, line: &str) -> String {
        let key =
            crate::runlog::records_key(&RunSecret::from_bytes([secret; 32]), Some(RECORD_MAC))
                .unwrap();
        crate::runlog::mac::sign_object(&key, line).unwrap()
    }

    /// A run folder as kbench writes it: `run.json` signed and planning `lines`, each line
    /// signed.
    fn write_run(dir: &Path, m: &RunManifest, secret: u8, lines: &[String]) {
        std::fs::create_dir_all(dir.join("kernels")).unwrap();
        let s = RunSecret::from_bytes([secret; 32]);
        let mut m = m.clone();
        let mut plan = kbench_record::Plan::new(kbench_record::PlannedKernels::Ahead);
        for l in lines {
            let r: EvalRecord = serde_json::from_str(l).unwrap();
            plan.add_kernel(&r.problem, &r.candidate.name, r.candidate.sample);
        }
        m.planned = Some(plan);
        write_signed(&dir.join(MANIFEST), &s, &m).unwrap();
        s.save(&dir.join(SECRET)).unwrap();
        let text: String = lines.iter().map(|l| signed(secret, l) + "\n").collect();
        std::fs::write(dir.join(RECORDS), text).unwrap();
    }

    #[test]
    fn shards_merge_byte_for_byte_and_merging_again_changes_nothing() {
        let t = tempfile::tempdir().unwrap();
        let (a, b, out) = (t.path().join("a"), t.path().join("b"), t.path().join("m"));
        write_run(
            &a,
            &manifest("r", Some("0/2")),
            1,
            &[line("r", 3, Outcome::Ok)],
        );
        write_run(
            &b,
            &manifest("r", Some("1/2")),
            1,
            &[line("r", 2, Outcome::Ok), line("r", 10, Outcome::Ok)],
        );
        std::fs::write(b.join("kernels/k.py"), "kernel").unwrap();
        let r = merge(&[a.clone(), b.clone()], Some(&out), false, false).unwrap();
        assert_eq!((r.records, r.added), (3, 3));
        let text = std::fs::read_to_string(out.join(RECORDS)).unwrap();
        let expected: String = [2, 3, 10]
            .iter()
            .map(|&id| signed(1, &line("r", id, Outcome::Ok)) + "\n")
            .collect();
        assert_eq!(
            text, expected,
            "records must be copied as written, in problem order"
        );
        assert_eq!(
            std::fs::read_to_string(out.join("kernels/k.py")).unwrap(),
            "kernel"
        );
        // KernelBench's eval_results.json of the merged records (one level: also on top).
        let kb: kbench_record::eval_results::KbEvalResults =
            serde_json::from_slice(&std::fs::read(out.join("eval_results.json")).unwrap()).unwrap();
        assert_eq!(kb.keys().copied().collect::<Vec<_>>(), [2, 3, 10]);
        assert!(kb[&10][0].correctness && kb[&10][0].compiled);
        assert!(out.join("kernelbench/level_1/eval_results.json").exists());
        // The merged run.json: signed, planning every shard's evaluations.
        let file = crate::runlog::ManifestFile::read(&out.join(MANIFEST)).unwrap();
        assert_eq!(
            file.seal(&RunSecret::from_bytes([1; 32])),
            crate::runlog::Seal::Intact
        );
        let mut m = file.manifest;
        let planned = m.planned.take().unwrap();
        assert_eq!(m, manifest("r", None));
        assert_eq!(planned.keys("reference").len(), 3);
        // It reads as a verified run, nothing missing.
        let run = crate::commands::report::read_run(&out, false).unwrap();
        assert_eq!(run.check.missing, Some(0));
        assert_eq!(
            RunSecret::load(&out.join(SECRET)).unwrap(),
            RunSecret::from_bytes([1; 32])
        );

        let files = |d: &Path| {
            (
                std::fs::read(d.join(RECORDS)).unwrap(),
                std::fs::read(d.join(MANIFEST)).unwrap(),
            )
        };
        let before = files(&out);
        let r = merge(&[a, b], Some(&out), false, false).unwrap();
        assert_eq!((r.records, r.added), (3, 0));
        assert_eq!(files(&out), before);
    }

    #[test]
    fn mixed_runs_settings_and_overlaps_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = |n: &str| t.path().join(n);
        write_run(
            &p("a"),
            &manifest("r", Some("0/2")),
            1,
            &[line("r", 1, Outcome::Ok)],
        );
        // Another run: other run id and secret.
        write_run(
            &p("other"),
            &manifest("s", Some("1/2")),
            2,
            &[line("s", 2, Outcome::Ok)],
        );
        // Same run, other settings.
        let mut fp16 = manifest("r", Some("1/2"));
        fp16.precision = "fp16".into();
        write_run(&p("fp16"), &fp16, 1, &[line("r", 2, Outcome::Ok)]);
        // Same run, split differently.
        write_run(
            &p("thirds"),
            &manifest("r", Some("1/3")),
            1,
            &[line("r", 2, Outcome::Ok)],
        );
        // Same run and key, another result.
        let failed = Outcome::CompileError {
            message: "x".into(),
        };
        write_run(
            &p("twice"),
            &manifest("r", Some("1/2")),
            1,
            &[line("r", 1, failed)],
        );
        for (input, says) in [
            ("other", "different runs"),
            ("fp16", "settings differ (precision"),
            ("thirds", "split the run differently"),
            ("twice", "recorded differently"),
        ] {
            let e = merge(&[p("a"), p(input)], Some(&p("out")), false, false).unwrap_err();
            assert!(e.to_string().contains(says), "{input}: {e:#}");
            assert!(
                !p("out").join(MANIFEST).exists(),
                "{input}: wrote a merged run"
            );
        }
        // The output directory of another run is not overwritten.
        write_run(
            &p("b"),
            &manifest("r", Some("1/2")),
            1,
            &[line("r", 2, Outcome::Ok)],
        );
        write_run(
            &p("whole"),
            &manifest("s", None),
            2,
            &[line("s", 2, Outcome::Ok)],
        );
        let e = merge(&[p("a"), p("b")], Some(&p("whole")), false, false).unwrap_err();
        assert!(e.to_string().contains("different runs"), "{e:#}");
        // Nor is a shard taken for a merged run.
        let e = merge(&[p("a"), p("b")], Some(&p("other")), false, false).unwrap_err();
        assert!(e.to_string().contains("is shard 1/2"), "{e:#}");
        // Without --out, only a submission directory says where to go.
        let e = merge(&[p("a"), p("b")], None, false, false).unwrap_err();
        assert!(e.to_string().contains("--out"), "{e:#}");
        // Nor another tool's folder.
        std::fs::create_dir(p("foreign")).unwrap();
        std::fs::write(p("foreign/eval_results.json"), "{}").unwrap();
        let e = merge(&[p("a"), p("b")], Some(&p("foreign")), false, false).unwrap_err();
        assert!(e.to_string().contains("not a kbench run folder"), "{e:#}");
        assert_eq!(
            std::fs::read_dir(p("foreign")).unwrap().count(),
            1,
            "nothing written into it"
        );
    }

    #[test]
    fn a_shard_without_its_secret_merges_only_unverified_into_an_unverified_run() {
        let t = tempfile::tempdir().unwrap();
        let p = |n: &str| t.path().join(n);
        write_run(
            &p("a"),
            &manifest("r", Some("0/2")),
            1,
            &[line("r", 1, Outcome::Ok)],
        );
        write_run(
            &p("b"),
            &manifest("r", Some("1/2")),
            1,
            &[line("r", 2, Outcome::Ok)],
        );
        std::fs::remove_file(p("b").join(SECRET)).unwrap();
        let e = merge(&[p("a"), p("b")], Some(&p("out")), false, false).unwrap_err();
        assert!(e.to_string().contains("--unverified"), "{e:#}");
        let r = merge(&[p("a"), p("b")], Some(&p("out")), false, true).unwrap();
        assert_eq!(r.records, 2);
        assert!(
            r.warnings.iter().any(|w| w.starts_with("UNVERIFIED")),
            "{:?}",
            r.warnings
        );
        assert!(
            !p("out").join(SECRET).exists(),
            "an unverified merge gets no secret"
        );
        assert!(crate::commands::report::read_run(&p("out"), false).is_err());
        let run = crate::commands::report::read_run(&p("out"), true).unwrap();
        assert!(run.check.unverified());
    }
}
