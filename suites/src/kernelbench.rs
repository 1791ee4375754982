//! Loading problems from disk: a KernelBench checkout (levels 1–3) or a single file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::SuiteError;
use crate::problem::{parse_problem_file_name, Problem};
use crate::validate::validate_problem_source;

/// The KernelBench levels kbench loads. Level 4 (HuggingFace models) needs downloaded
/// weights and has no baselines; it is not supported.
pub const KERNELBENCH_LEVELS: [u8; 3] = [1, 2, 3];

/// Loads KernelBench problems of `levels`, sorted by (level, id).
///
/// `dir` is either a KernelBench checkout (holding `KernelBench/level1/`..) or a folder
/// holding `level1/ level2/ level3/` directly. Each level folder must exist. Files not
/// ending in `.py` and hidden files are ignored; every `.py` file must be named
/// `<id>_<Name>.py` and pass [`validate_problem_source`]. Ids must be unique per level.
/// Repeated levels are loaded once; an empty `levels` loads nothing.
pub fn load_kernelbench(dir: &Path, levels: &[u8]) -> Result<Vec<Problem>, SuiteError> {
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

/// The folder holding `level1/`..: `dir/KernelBench` in a checkout, else `dir` itself.
fn kernelbench_root(dir: &Path) -> PathBuf {
    let nested = dir.join("KernelBench");
    if nested.join("level1").is_dir() || (nested.is_dir() && !dir.join("level1").is_dir()) {
        nested
    } else {
        dir.to_path_buf()
    }
}

fn load_level(level_dir: &Path, level: u8) -> Result<Vec<Problem>, SuiteError> {
    if !level_dir.is_dir() {
        return Err(SuiteError::MissingLevelDir {
            level,
            path: level_dir.to_path_buf(),
        });
    }
    let io = |source| SuiteError::Io {
        path: level_dir.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(level_dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
        let is_py = path.extension().is_some_and(|e| e == "py");
        // `is_file` follows symlinks, so a linked problem file still loads.
        if is_py && !hidden && path.is_file() {
            paths.push(path);
        }
    }
    // Sorted so that a duplicate-id error always names the same pair of files.
    paths.sort();

    let mut by_id: BTreeMap<u32, Problem> = BTreeMap::new();
    for path in paths {
        let (id, name) = parse_problem_file_name(&path)?;
        if let Some(first) = by_id.get(&id) {
            return Err(SuiteError::DuplicateId {
                level,
                id,
                first: first.origin.clone().unwrap_or_default(),
                second: path,
            });
        }
        let source = read_source(&path)?;
        validate_problem_source(&path.display().to_string(), &source)?;
        // parse_problem_file_name has checked that the name is UTF-8.
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
        let file = file.unwrap_or_default();
        let problem = Problem::new("kernelbench", level, id, &name, &file, source, Some(path));
        by_id.insert(id, problem);
    }
    Ok(by_id.into_values().collect())
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
    std::fs::read_to_string(path).map_err(|source| SuiteError::Io {
        path: path.to_path_buf(),
        source,
    })
}
