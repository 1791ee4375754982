//! What an `--out` folder holds before a run is written there: kbench writes a run only into
//! a new folder, an empty one, or a kbench run folder, so that another tool's files (a
//! KernelBench `runs/<name>/` with its `eval_results.json`, notes, anything) are never
//! overwritten. `kbench import` keeps the same rule for its own output (an earlier import).

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::manifest::ManifestFile;
use super::{LOCK, MANIFEST};

/// What a folder holds, as a place to write a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutFolder {
    /// It does not exist yet.
    New,
    /// It exists and holds nothing but what kbench writes before `run.json` (a `lock` file,
    /// empty `logs/`, `kernels/`, `llm/`, and the `baselines/` of `--baselines live`, holding
    /// only its `store/` and `runs/`).
    Empty,
    /// A kbench run folder: its `run.json` is a kbench run manifest.
    Run,
    /// Anything else; the names of the first entries it holds.
    Foreign(Vec<String>),
}

/// Folders a kbench run creates before its `run.json`, harmless when empty.
const SCAFFOLD_DIRS: [&str; 3] = ["logs", "kernels", "llm"];
/// Where `kbench run --baselines live` measures, inside `--out`, before the run starts.
const LIVE_BASELINES: &str = "baselines";
/// Entries named in an error about a foreign folder.
const NAMED: usize = 5;

/// What `dir` holds (see [`OutFolder`]).
pub(crate) fn out_folder(dir: &Path) -> Result<OutFolder> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(OutFolder::New),
        Err(e) => return Err(e).with_context(|| format!("reading --out {}", dir.display())),
    };
    if !meta.is_dir() && !dir.is_dir() {
        bail!(
            "--out {} is a file, not a folder: choose a new or empty folder",
            dir.display()
        );
    }
    if dir.join(MANIFEST).exists() {
        return match ManifestFile::read(&dir.join(MANIFEST)) {
            Ok(_) => Ok(OutFolder::Run),
            Err(e) => bail!(
                "--out {} holds a {MANIFEST} that is not a kbench run's ({e:#}): kbench never writes over another tool's files; choose a new or empty folder (for example {})",
                dir.display(),
                dir.join("kbench").display()
            ),
        };
    }
    let mut foreign = Vec::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("reading --out {}", dir.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("reading --out {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().to_string();
        let path = e.path();
        let scaffold = (name == LOCK && path.is_file())
            || (SCAFFOLD_DIRS.contains(&name.as_str()) && path.is_dir() && holds(&path, &[]))
            || (name == LIVE_BASELINES && path.is_dir() && holds(&path, &["store", "runs"]));
        if !scaffold {
            foreign.push(name);
        }
    }
    if foreign.is_empty() {
        return Ok(OutFolder::Empty);
    }
    foreign.sort();
    Ok(OutFolder::Foreign(foreign))
}

/// Whether `dir` holds only folders named in `names` (nothing, for none).
fn holds(dir: &Path, names: &[&str]) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .all(|e| names.contains(&e.file_name().to_string_lossy().as_ref()) && e.path().is_dir())
    })
}

/// The error for a foreign `--out` folder holding `names`.
pub(crate) fn foreign_error(dir: &Path, names: &[String]) -> anyhow::Error {
    let mut shown: Vec<String> = names.iter().take(NAMED).cloned().collect();
    if names.len() > NAMED {
        shown.push(format!("and {} more", names.len() - NAMED));
    }
    anyhow::anyhow!(
        "--out {} is not empty and is not a kbench run folder (it holds {}): kbench writes run.json, records.jsonl, eval_results.json, secret, kernels/ and logs/ there and never overwrites another tool's files; choose a new or empty folder (for example {})",
        dir.display(),
        shown.join(", "),
        dir.join("kbench").display()
    )
}

/// Refuses `dir` as a run's `--out` unless it is new, empty or a kbench run folder.
pub(crate) fn check_out(dir: &Path) -> Result<OutFolder> {
    match out_folder(dir)? {
        OutFolder::Foreign(names) => Err(foreign_error(dir, &names)),
        ok => Ok(ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_empty_or_kbench_folders_take_a_run() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        assert_eq!(check_out(&out).unwrap(), OutFolder::New);
        std::fs::create_dir(&out).unwrap();
        assert_eq!(check_out(&out).unwrap(), OutFolder::Empty);
        // What a start that stopped early leaves.
        std::fs::write(out.join(LOCK), "1 host\n").unwrap();
        std::fs::create_dir(out.join("logs")).unwrap();
        assert_eq!(check_out(&out).unwrap(), OutFolder::Empty);
        // What `--baselines live` measured there before the run opened it.
        std::fs::create_dir_all(out.join("baselines/store/x")).unwrap();
        std::fs::create_dir_all(out.join("baselines/runs")).unwrap();
        assert_eq!(check_out(&out).unwrap(), OutFolder::Empty);
        std::fs::write(out.join("baselines/theirs.csv"), "t").unwrap();
        assert!(check_out(&out).is_err());
        std::fs::remove_dir_all(out.join("baselines")).unwrap();
        // A KernelBench runs/<name>/ folder.
        std::fs::write(out.join("eval_results.json"), "{}").unwrap();
        std::fs::write(out.join("logs/notes.txt"), "mine").unwrap();
        let e = check_out(&out).unwrap_err().to_string();
        assert!(
            e.contains("not a kbench run folder (it holds eval_results.json, logs)"),
            "{e}"
        );
        assert!(e.contains("never overwrites"), "{e}");
        // Another tool's run.json.
        std::fs::write(out.join(MANIFEST), "{\"steps\": 3}").unwrap();
        let e = check_out(&out).unwrap_err().to_string();
        assert!(e.contains("is not a kbench run's"), "{e}");
        let file = d.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(check_out(&file)
            .unwrap_err()
            .to_string()
            .contains("is a file"));
    }
}
