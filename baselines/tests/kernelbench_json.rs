//! The importer against the four baseline files shipped with KernelBench.

use std::path::{Path, PathBuf};

use kbench_baselines::{KernelBenchBaselines, KernelBenchMode};

/// `shared/kernelbench/baseline_times` beside the repository root, or
/// `$KBENCH_KERNELBENCH_DIR/baseline_times`.
fn baseline_dir() -> PathBuf {
    let root = match std::env::var_os("KBENCH_KERNELBENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kernelbench"),
    };
    root.join("baseline_times")
}

fn load(rel: &str) -> KernelBenchBaselines {
    let path = baseline_dir().join(rel);
    KernelBenchBaselines::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn all_four_shipped_files_import() {
    let files = [
        (
            "H100_Modal/baseline_time_torch.json",
            "NVIDIA H100 80GB HBM3",
        ),
        (
            "H100_Modal/baseline_time_torch_compile_inductor_default.json",
            "NVIDIA H100 80GB HBM3",
        ),
        (
            "H100_PCIe_LambdaLabs/baseline_time_torch.json",
            "NVIDIA H100 PCIe",
        ),
        (
            "H100_PCIe_LambdaLabs/baseline_time_torch_compile_inductor_default.json",
            "NVIDIA H100 PCIe",
        ),
    ];
    for (rel, hardware) in files {
        let b = load(rel);
        assert_eq!(
            (b.level_len(1), b.level_len(2), b.level_len(3)),
            (100, 100, 50),
            "{rel}"
        );
        assert_eq!(b.len(), 250);
        assert_eq!(b.hardware(), [hardware], "{rel}");
        for (level, file, t) in b.iter() {
            assert!(file.ends_with(".py"), "{rel}: {file}");
            assert_eq!(t.num_trials, 100, "{rel}: L{level} {file}");
            assert_eq!(t.device, "cuda:0");
            assert!(
                t.min_ms <= t.mean_ms && t.mean_ms <= t.max_ms,
                "{rel}: {file}"
            );
        }
        let expected_mode = if rel.contains("compile") {
            KernelBenchMode::Compile {
                backend: "inductor".into(),
                mode: Some("default".into()),
            }
        } else {
            KernelBenchMode::Eager
        };
        assert_eq!(b.mode.as_ref(), Some(&expected_mode));
    }
}

#[test]
fn spot_values() {
    let modal = load("H100_Modal/baseline_time_torch.json");
    let t = modal.get(1, "1_Square_matrix_multiplication_.py").unwrap();
    assert_eq!(
        (t.mean_ms, t.std_ms, t.min_ms, t.max_ms),
        (2.66, 0.0199, 2.65, 2.86)
    );
    assert_eq!(t.hardware, "NVIDIA H100 80GB HBM3");
    assert_eq!(modal.get(1, "19_ReLU.py").unwrap().mean_ms, 4.28);
    assert!(modal.get(2, "40_Matmul_Scaling_ResidualAdd.py").is_some());
    assert!(modal.get(4, "19_ReLU.py").is_none());
    assert!(
        modal.get(1, "19_ReLU").is_none(),
        "lookup is by full file name"
    );

    let lambda = load("H100_PCIe_LambdaLabs/baseline_time_torch.json");
    assert_eq!(lambda.get(1, "19_ReLU.py").unwrap().mean_ms, 6.96);
}

#[test]
fn missing_file_is_named() {
    let path = baseline_dir().join("H100_Modal/absent.json");
    let err = KernelBenchBaselines::load(&path).unwrap_err().to_string();
    assert!(err.contains("absent.json"), "{err}");

    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("baseline_time_torch.json");
    std::fs::write(&bad, "{\"level1\": [1, 2]}").unwrap();
    let err = KernelBenchBaselines::load(&bad).unwrap_err().to_string();
    assert!(err.contains("baseline_time_torch.json"), "{err}");
    assert!(err.contains("not KernelBench baseline JSON"), "{err}");
}
