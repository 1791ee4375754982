//! Static checks of a problem's source, before any Python runs.

use crate::error::SuiteError;

/// What every KernelBench problem defines at top level, as `(line prefix, label)`.
const REQUIRED: [(&str, &str); 3] = [
    ("class Model", "`class Model`"),
    ("def get_inputs", "`def get_inputs`"),
    ("def get_init_inputs", "`def get_init_inputs`"),
];

/// Checks that `source` defines `class Model`, `def get_inputs` and `def get_init_inputs`
/// at top level. Line-based: a definition counts when a line starts (column 0) with the
/// keyword and name followed by `(`, `:` or whitespace, so `class ModelNew` or
/// `def get_inputs_fp16` do not count. `file_label` names the file in the error.
pub fn validate_problem_source(file_label: &str, source: &str) -> Result<(), SuiteError> {
    let missing: Vec<&'static str> = REQUIRED
        .iter()
        .filter(|(prefix, _)| !source.lines().any(|line| defines(line, prefix)))
        .map(|&(_, label)| label)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(SuiteError::InvalidProblem {
            file: file_label.to_string(),
            missing,
        })
    }
}

fn defines(line: &str, prefix: &str) -> bool {
    line.strip_prefix(prefix)
        .and_then(|rest| rest.chars().next())
        .is_some_and(|c| c == '(' || c == ':' || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "import torch\nclass Model(nn.Module):\n    pass\n\
                        def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n";

    #[test]
    fn accepts_a_complete_problem() {
        validate_problem_source("x.py", GOOD).unwrap();
    }

    #[test]
    fn names_every_missing_definition() {
        let src = "class ModelNew(nn.Module):\n    pass\n    def get_inputs():\n        pass\n\
                   def get_inputs_fp16():\n    pass\ndef get_init_inputs():\n    return []\n";
        let err = validate_problem_source("7_Foo.py", src).unwrap_err();
        match &err {
            SuiteError::InvalidProblem { file, missing } => {
                assert_eq!(file, "7_Foo.py");
                assert_eq!(missing, &vec!["`class Model`", "`def get_inputs`"]);
            }
            other => panic!("unexpected error {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("7_Foo.py"), "{text}");
        assert!(text.contains("`class Model`, `def get_inputs`"), "{text}");
        assert!(text.contains("must define"), "{text}");
    }

    #[test]
    fn old_style_class_without_parentheses_counts() {
        let src = "class Model:\n    pass\ndef get_inputs ():\n    pass\ndef get_init_inputs():\n";
        validate_problem_source("x.py", src).unwrap();
    }
}
