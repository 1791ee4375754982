//! kbench's own `smoke` suite: small problems in the KernelBench format, written for this
//! project, that run in milliseconds on one CPU core. They exercise what KernelBench's
//! problems exercise (single ops, fusions, a model) plus signed inputs, int64 inputs, a
//! 0-dim output and module-level constants read inside `forward`.

use crate::problem::Problem;

/// Suite name of [`smoke`] problems.
pub const SMOKE_SUITE: &str = "smoke";

/// `(level, file name, source)`; level 1 single ops, 2 fusions, 3 models.
const SMOKE_FILES: [(u8, &str, &str); 12] = [
    smoke_file!(1, "1_Elementwise_Multiply_Add.py"),
    smoke_file!(1, "2_ELU.py"),
    smoke_file!(1, "3_Sum_Reduction_Long_Axis.py"),
    smoke_file!(1, "4_Softmax.py"),
    smoke_file!(1, "5_Matmul_Irregular_Shapes.py"),
    smoke_file!(1, "6_Conv2d_3x3_Padded.py"),
    smoke_file!(1, "7_GroupNorm_Affine.py"),
    smoke_file!(2, "8_Gemm_GELU_Scaling.py"),
    smoke_file!(1, "9_Cumsum.py"),
    smoke_file!(1, "10_CrossEntropy_Int64_Targets.py"),
    smoke_file!(3, "11_Two_Layer_MLP.py"),
    smoke_file!(2, "12_Conv2d_Subtract_Clamp_Global.py"),
];

/// The embedded smoke suite, sorted by id. Ids are unique across the whole suite (not
/// only per level), so `--problems smoke:N` needs no level.
pub fn smoke() -> Vec<Problem> {
    SMOKE_FILES
        .iter()
        .map(|&(level, file, source)| {
            let (id, name) = split_smoke_name(file);
            Problem::new(SMOKE_SUITE, level, id, name, file, source.to_string(), None)
        })
        .collect()
}

/// `"12_Foo.py"` → `(12, "Foo")`. Embedded names are fixed and checked by the tests.
fn split_smoke_name(file: &str) -> (u32, &str) {
    let stem = file.strip_suffix(".py").unwrap_or(file);
    let (digits, name) = stem.split_once('_').unwrap_or(("0", stem));
    (digits.parse().unwrap_or(0), name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;
    use crate::problem::parse_problem_file_name;
    use crate::validate::validate_problem_source;

    #[test]
    fn smoke_suite_loads_and_validates() {
        let problems = smoke();
        assert!(problems.len() >= 11);
        for p in &problems {
            assert_eq!(p.suite, "smoke");
            assert!((1..=3).contains(&p.level), "{}", p.file);
            validate_problem_source(&p.file, &p.source).unwrap();
            let (id, name) = parse_problem_file_name(Path::new(&p.file)).unwrap();
            assert_eq!((p.id, p.name.as_str()), (id, name.as_str()));
            assert_eq!(p.to_ref().key(), format!("smoke/L{}/{}", p.level, p.id));
            assert!(p.origin.is_none());
        }
        let ids: Vec<u32> = problems.iter().map(|p| p.id).collect();
        let expected: Vec<u32> = (1..=problems.len() as u32).collect();
        assert_eq!(ids, expected, "smoke ids must be 1..N in order");
        let hashes: BTreeSet<&str> = problems.iter().map(|p| p.sha256.as_str()).collect();
        assert_eq!(hashes.len(), problems.len());
    }

    #[test]
    fn embedded_files_match_the_smoke_folder() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("smoke");
        let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .collect();
        let embedded: BTreeSet<String> = smoke().into_iter().map(|p| p.file).collect();
        assert_eq!(
            on_disk, embedded,
            "every file in suites/smoke/ must be embedded"
        );
    }

    #[test]
    fn smoke_covers_the_required_kinds() {
        let problems = smoke();
        let by_id = |id: u32| problems.iter().find(|p| p.id == id).unwrap();
        assert!(by_id(1).source.contains("a * b + c"));
        // Signed inputs everywhere: negative branches and cancellation are exercised.
        for p in &problems {
            assert!(
                p.source.contains("torch.randn("),
                "{} must use torch.randn",
                p.file
            );
            assert!(
                !p.source.contains("torch.rand("),
                "{} must not use torch.rand",
                p.file
            );
        }
        assert!(problems.iter().any(|p| p.source.contains("torch.randint(")));
        assert!(problems.iter().any(|p| p.level == 2));
        assert!(problems.iter().any(|p| p.level == 3));
    }
}
