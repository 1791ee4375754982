//! The importer against the four baseline files shipped with KernelBench.

use std::path::{Path, PathBuf};

use kbench_baselines::{KernelBenchBaselines, KernelBenchMode};

/// `$KBENCH_KERNELBENCH_DIR/baseline_times`; `None`, with the reason printed, when unset: the
/// caller skips.
fn baseline_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KBENCH_KERNELBENCH_DIR").filter(|d| !d.is_empty());
    if dir.is_none() {
        eprintln!("skipped: KBENCH_KERNELBENCH_DIR is not set (a KernelBench checkout's folder with level1/..)");
    }
    dir.map(|d| PathBuf::from(d).join("baseline_times"))
}

fn load(dir: &Path, rel: &str) -> KernelBenchBaselines {
    KernelBenchBaselines::load(&dir.join(rel)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn all_four_shipped_files_import() {
    let Some(dir) = baseline_dir() else {
        return;
    };
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
        let b = load(&dir, rel);
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
    let Some(dir) = baseline_dir() else {
        return;
    };
    let modal = load(&dir, "H100_Modal/baseline_time_torch.json");
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

    let lambda = load(&dir, "H100_PCIe_LambdaLabs/baseline_time_torch.json");
    assert_eq!(lambda.get(1, "19_ReLU.py").unwrap().mean_ms, 6.96);
}

#[test]
fn missing_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("H100_Modal/absent.json");
    let err = KernelBenchBaselines::load(&path).unwrap_err().to_string();
    assert!(err.contains("absent.json"), "{err}");

    let bad = tmp.path().join("baseline_time_torch.json");
    std::fs::write(&bad, "{\"level1\": [1, 2]}").unwrap();
    let err = KernelBenchBaselines::load(&bad).unwrap_err().to_string();
    assert!(err.contains("baseline_time_torch.json"), "{err}");
    assert!(err.contains("not KernelBench baseline JSON"), "{err}");
}

#[test]
fn import_marks_origin_caveats_and_stale_entries() {
    use kbench_baselines::{import_kernelbench, ImportOptions, Lookup, Mode, Origin, Store};
    let Some(dir) = baseline_dir() else {
        return;
    };
    let lambda = import_kernelbench(
        &dir.join("H100_PCIe_LambdaLabs/baseline_time_torch_compile_inductor_default.json"),
        &ImportOptions::default(),
    )
    .unwrap();
    assert_eq!(lambda.mode(), Some(Mode::Compile));
    assert_eq!(lambda.meta.origin, Origin::Imported);
    assert_eq!(lambda.meta.environment.torch, "2.5.0");
    assert!(
        lambda
            .meta
            .caveats
            .iter()
            .any(|c| c.contains("WITHOUT an L2 flush")),
        "{:?}",
        lambda.meta.caveats
    );
    assert_eq!(lambda.len(), 250);
    // The two problems KernelBench changed after timing are kept but never used.
    let file12 = lambda.levels[&1]
        .keys()
        .find(|k| k.starts_with("12_"))
        .unwrap()
        .clone();
    assert!(
        matches!(lambda.lookup(1, &file12, "any"), Lookup::Stale(w) if w.contains("2026-01-19"))
    );
    let file11 = lambda.levels[&1]
        .keys()
        .find(|k| k.starts_with("11_"))
        .unwrap()
        .clone();
    assert!(matches!(
        lambda.lookup(1, &file11, "any"),
        Lookup::Usable(_)
    ));

    let modal = import_kernelbench(
        &dir.join("H100_Modal/baseline_time_torch.json"),
        &ImportOptions {
            torch: Some("2.9.0+cu128".into()),
            stale: vec![(2, 5)],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(modal.mode(), Some(Mode::Eager));
    assert_eq!(modal.meta.environment.torch, "2.9.0+cu128");
    assert_eq!(modal.meta.environment.gpu, "NVIDIA H100 80GB HBM3");
    assert!(!modal.meta.caveats.iter().any(|c| c.contains("WITHOUT")));
    let file5 = modal.levels[&2]
        .keys()
        .find(|k| k.starts_with("5_"))
        .unwrap()
        .clone();
    assert!(matches!(modal.lookup(2, &file5, "x"), Lookup::Stale(_)));

    // Stored under its GPU and torch version, and read back from there.
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path());
    let env = &modal.meta.environment;
    let path = store.path(&env.gpu, &env.torch, Mode::Eager);
    modal.save(&path).unwrap();
    assert!(path.ends_with("nvidia-h100-80gb-hbm3/torch-2.9.0+cu128/eager.json"));
    let back = store
        .load(&env.gpu, &env.torch, Mode::Eager)
        .unwrap()
        .unwrap();
    assert_eq!(back, modal);

    let bad = tmp.path().join("times.json");
    std::fs::write(&bad, r#"{"level1": {}}"#).unwrap();
    let err = import_kernelbench(&bad, &ImportOptions::default()).unwrap_err();
    assert!(
        err.contains("times.json") && err.contains("--mode"),
        "{err}"
    );
}
