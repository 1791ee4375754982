use std::path::{Path, PathBuf};

use kbench_record::ProblemRef;
use sha2::{Digest, Sha256};

use crate::error::SuiteError;

/// One problem: a KernelBench-format Python module defining `Model`, `get_inputs` and
/// `get_init_inputs`, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `kernelbench`, `smoke`, or `file` for a single `--problem FILE`.
    pub suite: String,
    /// KernelBench level (1 single ops, 2 fusions, 3 models); 0 when unknown.
    pub level: u8,
    /// Id within the level, from the file name (`int(name.split("_")[0])`); 0 when unknown.
    pub id: u32,
    /// The file stem after `<id>_`, e.g. `Square_matrix_multiplication_`.
    pub name: String,
    /// File name as in the suite, e.g. `1_Square_matrix_multiplication_.py`.
    pub file: String,
    /// The Python source, exactly as read.
    pub source: String,
    /// Where the source was read from; `None` for embedded problems.
    pub origin: Option<PathBuf>,
    /// sha256 of `source`, lowercase hex.
    pub sha256: String,
}

impl Problem {
    pub(crate) fn new(
        suite: &str,
        level: u8,
        id: u32,
        name: &str,
        file: &str,
        source: String,
        origin: Option<PathBuf>,
    ) -> Self {
        Self {
            suite: suite.to_string(),
            level,
            id,
            name: name.to_string(),
            file: file.to_string(),
            sha256: sha256_hex(source.as_bytes()),
            source,
            origin,
        }
    }

    /// The plain reference carried by eval records.
    pub fn to_ref(&self) -> ProblemRef {
        ProblemRef {
            suite: self.suite.clone(),
            level: self.level,
            id: self.id,
            name: self.name.clone(),
            file: self.file.clone(),
            sha256: self.sha256.clone(),
        }
    }

    /// Stable key, e.g. `kernelbench/L1/19` (see [`ProblemRef::key`]).
    pub fn key(&self) -> String {
        format!("{}/L{}/{}", self.suite, self.level, self.id)
    }
}

/// sha256 of `bytes` as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Splits a problem file name `<id>_<Name>.py` into `(id, Name)`.
///
/// KernelBench's `dataset.py` takes `int(file_name.split("_")[0])`; kbench asks for the
/// stricter `<ascii digits>_<non-empty name>.py` so that a stray file is reported instead
/// of being given a surprising id. Leading zeros are accepted (`07_X.py` is id 7).
pub fn parse_problem_file_name(path: &Path) -> Result<(u32, String), SuiteError> {
    let bad = |reason: &str| SuiteError::BadFileName {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let expected = "problem files must be named `<id>_<Name>.py`, e.g. `19_ReLU.py`";
    let file = path
        .file_name()
        .and_then(|f| f.to_str())
        .ok_or_else(|| bad(&format!("file name is not valid UTF-8; {expected}")))?;
    let stem = file
        .strip_suffix(".py")
        .ok_or_else(|| bad(&format!("not a .py file; {expected}")))?;
    let Some((digits, name)) = stem.split_once('_') else {
        return Err(bad(&format!("no `_` after the id; {expected}")));
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(&format!(
            "name does not start with a numeric id followed by `_`; {expected}"
        )));
    }
    if name.is_empty() {
        return Err(bad(&format!("no name after the id; {expected}")));
    }
    let id = digits
        .parse::<u32>()
        .map_err(|_| bad(&format!("id {digits} is too large; {expected}")))?;
    Ok((id, name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn parses_kernelbench_names() {
        let p = |s: &str| parse_problem_file_name(Path::new(s));
        assert_eq!(
            p("1_Square_matrix_multiplication_.py").unwrap(),
            (1, "Square_matrix_multiplication_".to_string())
        );
        assert_eq!(
            p("dir/100_HingeLoss.py").unwrap(),
            (100, "HingeLoss".into())
        );
        assert_eq!(p("007_X.py").unwrap(), (7, "X".into()));
        for bad in [
            "ReLU.py", "_ReLU.py", "1ReLU.py", "1_.py", "x1_A.py", "1_A.txt",
        ] {
            let err = p(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
            assert!(err.contains("<id>_<Name>.py"), "{bad}: {err}");
        }
        assert!(p("99999999999_A.py")
            .unwrap_err()
            .to_string()
            .contains("too large"));
    }

    #[test]
    fn to_ref_carries_every_field() {
        let p = Problem::new("smoke", 1, 3, "Sum", "3_Sum.py", "x".into(), None);
        let r = p.to_ref();
        assert_eq!(r.suite, "smoke");
        assert_eq!((r.level, r.id), (1, 3));
        assert_eq!(r.name, "Sum");
        assert_eq!(r.file, "3_Sum.py");
        assert_eq!(r.sha256, sha256_hex(b"x"));
        assert_eq!(r.key(), p.key());
    }
}
