//! Loading problems from disk: a KernelBench checkout (levels 1–3) or a single file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::broken::{BrokenProblem, Loaded};
use crate::error::{missing_definitions, SuiteError};
use crate::problem::{parse_problem_file_name, sha256_hex, Problem};
use crate::validate::validate_problem_source;

/// The KernelBench levels kbench loads. Level 4 (HuggingFace models) needs downloaded
/// weights and has no baselines; it is not supported.
pub const KERNELBENCH_LEVELS: [u8; 3] = [1, 2, 3];

/// Loads KernelBench problems of `levels`, sorted by (level, id): per problem file, the
/// problem or, for a file that cannot be one, a [`BrokenProblem`] naming it and what is wrong.
///
/// `dir` is either a KernelBench checkout (holding `KernelBench/level1/`..) or a folder
/// holding `level1/ level2/ level3/` directly. Each level folder must exist. Only files
/// named like KernelBench's problems, `<id>_<Name>.py`, are problems: `__init__.py`, helper
/// modules, other files and hidden files are ignored. A problem file that cannot be read,
/// is not UTF-8 or fails [`validate_problem_source`] is broken, and so is an id that two
/// files share (one entry naming both). Only a missing folder or an unknown level fails the
/// whole load. Repeated levels are loaded once; an empty `levels` loads nothing.
pub fn load_kernelbench(dir: &Path, levels: &[u8]) -> Result<Vec<Loaded>, SuiteError> {
    if !dir.is_dir() {
        return Err(SuiteError::MissingRoot {
            path: dir.to_path_buf(),
        });
    }
    let root = kernelbench_root(dir);
    let mut wanted = levels.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut problems = Vec::new();
    for level in wanted {
        if !KERNELBENCH_LEVELS.contains(&level) {
            return Err(SuiteError::UnknownLevel { level });
        }
        problems.extend(load_level(&root.join(format!("level{level}")), level)?);
    }
    Ok(problems)
}

/// The KernelBench levels whose folder `dir` has (a checkout or a folder holding `level1/`..),
/// in order: what a run takes when it is not told which levels.
pub fn kernelbench_levels(dir: &Path) -> Vec<u8> {
    let root = kernelbench_root(dir);
    KERNELBENCH_LEVELS
        .into_iter()
        .filter(|l| root.join(format!("level{l}")).is_dir())
        .collect()
}

/// The folder holding `level1/`..: `dir/KernelBench` in a checkout, else `dir` itself.
fn kernelbench_root(dir: &Path) -> PathBuf {
    let nested = dir.join("KernelBench");
    if nested.join("level1").is_dir() || (nested.is_dir() && !dir.join("level1").is_dir()) {
        nested
    } else {
        dir.to_path_buf()
    }
}

fn load_level(level_dir: &Path, level: u8) -> Result<Vec<Loaded>, SuiteError> {
    if !level_dir.is_dir() {
        return Err(SuiteError::MissingLevelDir {
            level,
            path: level_dir.to_path_buf(),
        });
    }
    let io = |error| SuiteError::Io {
        path: level_dir.to_path_buf(),
        error,
    };
    // Problem files by id; sorted so that a shared id always names its files in one order.
    let mut by_id: BTreeMap<u32, Vec<(PathBuf, String)>> = BTreeMap::new();
    for entry in std::fs::read_dir(level_dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
        // `is_file` follows symlinks, so a linked problem file still loads.
        if hidden || !path.is_file() {
            continue;
        }
        // Not named like a problem (`__init__.py`, a helper, a README): not a problem.
        if let Ok((id, name)) = parse_problem_file_name(&path) {
            by_id.entry(id).or_default().push((path, name));
        }
    }
    Ok(by_id
        .into_iter()
        .map(|(id, mut files)| {
            files.sort();
            load_entry(level, id, &files)
        })
        .collect())
}

/// The problem of `id` in `level` from its files (one, unless the id is shared).
fn load_entry(level: u8, id: u32, files: &[(PathBuf, String)]) -> Loaded {
    let (path, name) = &files[0];
    // parse_problem_file_name has checked that the name is UTF-8.
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
    let file = file.unwrap_or_default();
    let broken = |sha256: String, reason: String| BrokenProblem {
        suite: "kernelbench".into(),
        level,
        id,
        name: name.clone(),
        file: file.clone(),
        path: path.clone(),
        sha256,
        reason,
    };
    if files.len() > 1 {
        let all: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();
        return Loaded::Broken(broken(
            String::new(),
            format!(
                "problem id {id} of level {level} is shared by {}; remove or renumber all but one",
                all.join(" and ")
            ),
        ));
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return Loaded::Broken(broken(String::new(), format!("cannot be read: {e}"))),
    };
    let sha256 = sha256_hex(&bytes);
    let source = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => return Loaded::Broken(broken(sha256, not_utf8(&e))),
    };
    if let Err(SuiteError::InvalidProblem { missing, .. }) =
        validate_problem_source(&path.display().to_string(), &source)
    {
        return Loaded::Broken(broken(sha256, missing_definitions(&missing)));
    }
    Loaded::Problem(Problem::new(
        "kernelbench",
        level,
        id,
        name,
        &file,
        source,
        Some(path.clone()),
    ))
}

/// Why bytes are not UTF-8 and what to do, e.g. `not UTF-8 text (invalid byte at offset
/// 3): save it as UTF-8`.
fn not_utf8(e: &std::string::FromUtf8Error) -> String {
    format!(
        "is not UTF-8 text (invalid byte at offset {}): save it as UTF-8",
        e.utf8_error().valid_up_to()
    )
}

/// Loads one problem file given on the command line (`--problem FILE`), suite `file`.
///
/// The level is N when the file sits in a folder named `levelN`, else 0; the id comes
/// from a leading `<digits>_` of the file name, else 0, and the name is the rest of the
/// stem (or the whole stem). The source must pass [`validate_problem_source`].
pub fn load_problem_file(path: &Path) -> Result<Problem, SuiteError> {
    let file =
        path.file_name()
            .and_then(|f| f.to_str())
            .ok_or_else(|| SuiteError::BadFileName {
                path: path.to_path_buf(),
                reason: "file name is not valid UTF-8; rename the file".into(),
            })?;
    let source = read_source(path)?;
    validate_problem_source(&path.display().to_string(), &source)?;
    let stem = file.strip_suffix(".py").unwrap_or(file);
    let (id, name) = match stem.split_once('_') {
        Some((digits, rest))
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            let name = if rest.is_empty() { stem } else { rest };
            (digits.parse::<u32>().unwrap_or(0), name)
        }
        _ => (0, stem),
    };
    let level = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("level"))
        .and_then(|n| n.parse::<u8>().ok())
        .unwrap_or(0);
    Ok(Problem::new(
        "file",
        level,
        id,
        name,
        file,
        source,
        Some(path.to_path_buf()),
    ))
}

fn read_source(path: &Path) -> Result<String, SuiteError> {
    let bytes = std::fs::read(path).map_err(|error| SuiteError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    String::from_utf8(bytes).map_err(|e| SuiteError::NotUtf8 {
        path: path.to_path_buf(),
        detail: format!("invalid byte at offset {}", e.utf8_error().valid_up_to()),
    })
}
