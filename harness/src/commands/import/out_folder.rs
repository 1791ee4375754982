//! What --out may hold before an import, and what an import may remove there: only the files
//! an earlier import wrote, as it wrote them. Each import leaves `import_manifest.json`, the
//! files it wrote with their sha256; the next import into the folder removes those still as
//! written and nothing else, `--force` or not. A file the user changed, or anything of the
//! user's (a run folder kept in `problems/`, notes beside the kernels), stays; where the new
//! import would have to replace such a file the import refuses before writing anything.
//!
//! An import from before the manifest is known by its `claims.json`: the kernel and
//! reference files it names, and the copies of those references under `problems/` (a file
//! there is the import's when its bytes are the reference's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use anyhow::{bail, Context, Result};
use kbench_record::claims::ClaimsFile;
use serde::{Deserialize, Serialize};

/// The claims file's name in --out.
pub(crate) const CLAIMS: &str = "claims.json";
pub(crate) const REFS: &str = "refs";
/// The set's references again in KernelBench's layout (`level<L>/<P>_<name>.py`), so
/// `kbench run --kernelbench DIR/problems` evaluates the kernels on the problems they were
/// written for.
pub(crate) const PROBLEMS: &str = "problems";

/// The manifest's name in --out.
pub(crate) const MANIFEST: &str = "import_manifest.json";
const MANIFEST_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    schema_version: u32,
    /// Every file the import wrote, the claims file included.
    files: Vec<WrittenFile>,
}

/// One file an import wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WrittenFile {
    /// Relative to --out, `/`-separated.
    pub(crate) path: String,
    pub(crate) sha256: String,
}

impl WrittenFile {
    pub(crate) fn of(path: &str, bytes: &[u8]) -> Self {
        WrittenFile {
            path: path.into(),
            sha256: kbench_suites::sha256_hex(bytes),
        }
    }
}

/// What making --out ready did.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Kernel files of the earlier import removed.
    pub(crate) removed_kernels: usize,
    /// Files of the earlier import left where they are because they changed since.
    pub(crate) kept_changed: Vec<String>,
}

/// Writes the manifest of an import's `files`.
pub(crate) fn write_manifest(out: &Path, files: Vec<WrittenFile>) -> Result<()> {
    let m = Manifest {
        schema_version: MANIFEST_SCHEMA_VERSION,
        files,
    };
    write_new(
        &out.join(MANIFEST),
        serde_json::to_string_pretty(&m)?.as_bytes(),
    )
}

/// Writes `bytes` to `path` through a fresh temporary file beside it (never an existing
/// file of that name, as `path.tmp` might be), then renamed into place.
pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Makes --out ready for an import that writes `planned` (paths relative to it): new, empty,
/// or an earlier import (whose own files, as written, are removed); any other folder only
/// with `force`, where the import goes beside what it holds. Refuses, before anything is
/// removed, where a file it did not write (or a link, or a file in place of a folder) is in
/// the way of `planned`.
pub(crate) fn prepare_out(out: &Path, force: bool, planned: &[String]) -> Result<Prepared> {
    if !out.exists() {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        return Ok(Prepared::default());
    }
    if !out.is_dir() {
        bail!("--out {} is a file, not a folder", out.display());
    }
    let empty = std::fs::read_dir(out)
        .with_context(|| format!("reading {}", out.display()))?
        .next()
        .is_none();
    if empty {
        return Ok(Prepared::default());
    }
    let earlier = ClaimsFile::read(&out.join(CLAIMS)).ok();
    if earlier.is_none() && !force {
        bail!(
            "--out {} is not empty and is not an earlier `kbench import` (it has no readable {CLAIMS}): choose a new or empty folder, or pass --force to import beside what it holds (kbench import never removes or replaces a file it did not write)",
            out.display()
        );
    }
    let own = match &earlier {
        Some(claims) => own_files(out, claims),
        None => BTreeMap::new(),
    };
    let mut prepared = Prepared::default();
    let mut removable = BTreeSet::new();
    for (rel, sha) in &own {
        let Some(bytes) = plain_file(out, rel) else {
            continue;
        };
        if sha
            .as_ref()
            .is_none_or(|s| *s == kbench_suites::sha256_hex(&bytes))
        {
            removable.insert(rel.clone());
        } else {
            prepared.kept_changed.push(rel.clone());
        }
    }
    let in_the_way: Vec<String> = planned
        .iter()
        .filter(|rel| !removable.contains(*rel) && blocked(out, rel))
        .cloned()
        .collect();
    if !in_the_way.is_empty() {
        let shown: Vec<&str> = in_the_way.iter().take(5).map(String::as_str).collect();
        let more = in_the_way.len().saturating_sub(shown.len());
        bail!(
            "--out {}: the import would replace {}{}, which no earlier import wrote as it is now (changed since, someone else's, or a link): move it away and import again; kbench import never removes or replaces a file it did not write, --force or not",
            out.display(),
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        );
    }
    let mut dirs = BTreeSet::new();
    for rel in &removable {
        let path = out.join(rel);
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        if !rel.contains('/') && rel.ends_with("_kernel.py") {
            prepared.removed_kernels += 1;
        }
        let mut at = Path::new(rel.as_str()).parent();
        while let Some(d) = at.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(d.to_path_buf());
            at = d.parent();
        }
    }
    // Folders the removed files leave empty, deepest first; one holding anything stays.
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(out.join(d));
    }
    Ok(prepared)
}

/// The earlier import's own files, with their sha256 where its manifest gives one.
fn own_files(out: &Path, claims: &ClaimsFile) -> BTreeMap<String, Option<String>> {
    let manifest = std::fs::read(out.join(MANIFEST))
        .ok()
        .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
        .filter(|m| m.schema_version == MANIFEST_SCHEMA_VERSION);
    let mut own: BTreeMap<String, Option<String>> = BTreeMap::new();
    if let Some(m) = manifest {
        own.extend(m.files.into_iter().map(|f| (f.path, Some(f.sha256))));
        own.insert(MANIFEST.into(), None);
        return own;
    }
    // Before the manifest: what the claims file names, and the copies of its references.
    own.insert(CLAIMS.into(), None);
    for k in &claims.kernels {
        own.extend(
            k.kernel
                .iter()
                .chain(&k.reference)
                .map(|p| (p.clone(), None)),
        );
        let shared = format!("{REFS}/level_{}_problem_{}.py", k.level, k.problem);
        if k.reference.as_deref() != Some(shared.as_str()) {
            continue;
        }
        let Some(reference) = plain_file(out, &shared) else {
            continue;
        };
        let dir = format!("{PROBLEMS}/level{}", k.level);
        for e in std::fs::read_dir(out.join(&dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            let rel = format!("{dir}/{name}");
            if name.starts_with(&format!("{}_", k.problem))
                && plain_file(out, &rel).is_some_and(|b| b == reference)
            {
                own.insert(rel, None);
            }
        }
    }
    own
}

/// The bytes of `rel` in `out` when it is a plain file reached through plain folders (no
/// link anywhere on the way, no `..`): only such a file may be removed.
fn plain_file(out: &Path, rel: &str) -> Option<Vec<u8>> {
    let path = Path::new(rel);
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let mut at = out.to_path_buf();
    for c in path.components() {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at).ok()?;
        if meta.file_type().is_symlink() {
            return None;
        }
    }
    let meta = std::fs::symlink_metadata(&at).ok()?;
    if !meta.is_file() {
        return None;
    }
    std::fs::read(&at).ok()
}

/// Whether writing `rel` in `out` would replace or pass through something: the file exists
/// (even as a dangling link), or a folder on its way is a link or not a folder.
fn blocked(out: &Path, rel: &str) -> bool {
    let mut at = out.to_path_buf();
    let parts: Vec<Component> = Path::new(rel).components().collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            return false;
        };
        let last = i + 1 == parts.len();
        if last || meta.file_type().is_symlink() || !meta.is_dir() {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_files_through_plain_folders_are_the_imports() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path();
        std::fs::create_dir_all(out.join("refs")).unwrap();
        std::fs::write(out.join("refs/a.py"), "a").unwrap();
        std::os::unix::fs::symlink(out.join("refs"), out.join("linked")).unwrap();
        assert_eq!(plain_file(out, "refs/a.py").as_deref(), Some(&b"a"[..]));
        assert_eq!(plain_file(out, "linked/a.py"), None);
        assert_eq!(plain_file(out, "../x"), None);
        assert_eq!(plain_file(out, "refs"), None);
        assert!(blocked(out, "refs/a.py") && blocked(out, "linked/b.py"));
        assert!(!blocked(out, "refs/b.py") && !blocked(out, "new/b.py"));
    }
}
