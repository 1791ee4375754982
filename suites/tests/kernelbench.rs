//! The KernelBench loader against the 250 shipped problems and against broken folders.

use std::fs;
use std::path::{Path, PathBuf};

use kbench_suites::{
    kernelbench_levels, load_kernelbench, load_problem_file, sha256_hex, Loaded, Problem,
    SuiteError,
};

/// `$KBENCH_KERNELBENCH_DIR` (a KernelBench checkout); `None`, with the reason printed, when
/// unset: the caller skips.
fn kernelbench_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KBENCH_KERNELBENCH_DIR").filter(|d| !d.is_empty());
    if dir.is_none() {
        eprintln!("skipped: KBENCH_KERNELBENCH_DIR is not set (a KernelBench checkout's folder with level1/..)");
    }
    dir.map(PathBuf::from)
}

const GOOD_SOURCE: &str = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    \
    def forward(self, x):\n        return x\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\
    def get_init_inputs():\n    return []\n";

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, text).unwrap();
    path
}

/// The loaded problems of a suite, every file of it a good one.
fn all_good(dir: &Path, levels: &[u8]) -> Vec<Problem> {
    load_kernelbench(dir, levels)
        .unwrap_or_else(|e| panic!("{e} (set KBENCH_KERNELBENCH_DIR to a KernelBench checkout)"))
        .into_iter()
        .map(|l| match l {
            Loaded::Problem(p) => p,
            Loaded::Broken(b) => panic!("{b}"),
        })
        .collect()
}

/// A folder with level1..3, each holding one good problem.
fn tiny_suite() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for level in 1..=3 {
        write(
            tmp.path(),
            &format!("level{level}/1_Identity.py"),
            GOOD_SOURCE,
        );
    }
    tmp
}

#[test]
fn loads_all_250_kernelbench_problems() {
    let Some(dir) = kernelbench_dir() else {
        return;
    };
    let problems = all_good(&dir, &[1, 2, 3]);
    assert_eq!(problems.len(), 250);
    for (level, count) in [(1u8, 100u32), (2, 100), (3, 50)] {
        let ids: Vec<u32> = problems
            .iter()
            .filter(|p| p.level == level)
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, (1..=count).collect::<Vec<_>>(), "level {level}");
    }
    // Sorted by (level, id), never by file name ("10_" before "1_").
    let keys: Vec<(u8, u32)> = problems.iter().map(|p| (p.level, p.id)).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);

    let find = |level: u8, id: u32| {
        problems
            .iter()
            .find(|p| p.level == level && p.id == id)
            .unwrap()
    };
    let spot = [
        (1, 1, "Square_matrix_multiplication_"),
        (1, 19, "ReLU"),
        (1, 100, "HingeLoss"),
        (2, 40, "Matmul_Scaling_ResidualAdd"),
        (2, 100, "ConvTranspose3d_Clamp_Min_Divide"),
        (3, 1, "MLP"),
        (3, 50, "ReLUSelfAttention"),
    ];
    for (level, id, name) in spot {
        let p = find(level, id);
        assert_eq!(p.name, name);
        assert_eq!(p.file, format!("{id}_{name}.py"));
        assert_eq!(p.suite, "kernelbench");
        let origin = p.origin.as_ref().unwrap();
        assert!(origin.ends_with(format!("level{level}/{id}_{name}.py")));
        assert_eq!(p.source, fs::read_to_string(origin).unwrap());
        assert_eq!(p.sha256, sha256_hex(p.source.as_bytes()));
        let r = p.to_ref();
        assert_eq!(r.key(), format!("kernelbench/L{level}/{id}"));
        assert_eq!((r.name.as_str(), r.file.as_str()), (name, p.file.as_str()));
    }
    assert!(find(1, 19).source.contains("torch.relu(x)"));
}

#[test]
fn loads_a_subset_of_levels_in_order() {
    let Some(dir) = kernelbench_dir() else {
        return;
    };
    let problems = all_good(&dir, &[3, 2, 3]);
    assert_eq!(problems.len(), 150);
    assert_eq!((problems[0].level, problems[0].id), (2, 1));
    assert_eq!((problems[149].level, problems[149].id), (3, 50));
    assert!(load_kernelbench(&dir, &[]).unwrap().is_empty());
}

#[test]
fn accepts_a_checkout_layout() {
    let tmp = tempfile::tempdir().unwrap();
    for level in 1..=3 {
        write(
            tmp.path(),
            &format!("KernelBench/level{level}/2_B.py"),
            GOOD_SOURCE,
        );
        write(
            tmp.path(),
            &format!("KernelBench/level{level}/10_A_.py"),
            GOOD_SOURCE,
        );
    }
    write(tmp.path(), "KernelBench/level1/README.md", "not a problem");
    write(tmp.path(), "KernelBench/level1/.hidden.py", "not a problem");
    fs::create_dir(tmp.path().join("KernelBench/level1/sub.py")).unwrap();
    let problems = all_good(tmp.path(), &[1, 2, 3]);
    let got: Vec<(u8, u32, &str)> = problems
        .iter()
        .map(|p| (p.level, p.id, p.name.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (1, 2, "B"),
            (1, 10, "A_"),
            (2, 2, "B"),
            (2, 10, "A_"),
            (3, 2, "B"),
            (3, 10, "A_")
        ]
    );
}

#[test]
fn files_not_named_like_problems_are_ignored() {
    let tmp = tiny_suite();
    write(tmp.path(), "level2/helpers.py", GOOD_SOURCE);
    write(tmp.path(), "level2/__init__.py", "");
    write(tmp.path(), "level2/1ReLU.py", "not python at all (");
    write(tmp.path(), "level2/99999999999_Huge.py", GOOD_SOURCE);
    let got: Vec<(u8, u32)> = all_good(tmp.path(), &[1, 2, 3])
        .iter()
        .map(|p| (p.level, p.id))
        .collect();
    assert_eq!(got, [(1, 1), (2, 1), (3, 1)]);
}

/// A broken file costs its own problem: the others of its level still load, in order.
#[test]
fn a_broken_problem_file_is_one_entry_naming_the_file_and_the_fault() {
    let tmp = tiny_suite();
    let src = GOOD_SOURCE.replace("class Model(", "class Net(");
    let no_model = write(tmp.path(), "level1/2_NoModel.py", &src);
    write(tmp.path(), "level1/3_Good.py", GOOD_SOURCE);
    let latin1 = tmp.path().join("level1/4_Latin1.py");
    fs::write(&latin1, b"# caf\xe9\nclass Model:\n").unwrap();
    let loaded = load_kernelbench(tmp.path(), &[1]).unwrap();
    let ids: Vec<(u32, bool)> = loaded
        .iter()
        .map(|l| (l.level_id().1, matches!(l, Loaded::Problem(_))))
        .collect();
    assert_eq!(ids, [(1, true), (2, false), (3, true), (4, false)]);

    let b = loaded[1].broken().unwrap();
    assert_eq!(
        (b.level, b.name.as_str(), b.file.as_str()),
        (1, "NoModel", "2_NoModel.py")
    );
    assert_eq!(b.path, no_model);
    assert_eq!(b.key(), "kernelbench/L1/2");
    assert_eq!(b.sha256, sha256_hex(src.as_bytes()));
    let text = b.to_string();
    assert!(text.contains("2_NoModel.py"), "{text}");
    assert!(text.contains("`class Model`"), "{text}");
    assert!(!text.contains("get_inputs`,"), "{text}");

    let text = loaded[3].broken().unwrap().to_string();
    assert!(
        text.contains("4_Latin1.py") && text.contains("not UTF-8") && text.contains("offset 5"),
        "{text}"
    );
}

#[test]
fn a_shared_id_is_one_broken_entry_naming_both_files() {
    let tmp = tiny_suite();
    write(tmp.path(), "level3/01_Other.py", GOOD_SOURCE);
    write(tmp.path(), "level3/2_Fine.py", GOOD_SOURCE);
    let loaded = load_kernelbench(tmp.path(), &[3]).unwrap();
    assert_eq!(loaded.len(), 2);
    assert!(loaded[1].problem().is_some_and(|p| p.id == 2));
    let b = loaded[0].broken().unwrap();
    assert_eq!((b.level, b.id), (3, 1));
    let text = b.to_string();
    assert!(text.contains("01_Other.py"), "{text}");
    assert!(text.contains("1_Identity.py"), "{text}");
    assert!(text.contains("renumber"), "{text}");
}

#[test]
fn missing_level_dir_says_what_to_pass() {
    let tmp = tiny_suite();
    fs::remove_dir_all(tmp.path().join("level3")).unwrap();
    load_kernelbench(tmp.path(), &[1, 2]).unwrap();
    let err = load_kernelbench(tmp.path(), &[1, 2, 3]).unwrap_err();
    assert!(
        matches!(err, SuiteError::MissingLevelDir { level: 3, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&tmp.path().join("level3").display().to_string()),
        "{text}"
    );
    assert!(
        text.contains("KernelBench checkout") && text.contains("--levels"),
        "{text}"
    );
    // Not told which levels: those it has.
    assert_eq!(kernelbench_levels(tmp.path()), [1, 2]);
    fs::remove_dir_all(tmp.path().join("level1")).unwrap();
    assert_eq!(kernelbench_levels(tmp.path()), [2]);
    assert!(kernelbench_levels(&tmp.path().join("nowhere")).is_empty());

    let gone = tmp.path().join("nowhere");
    let text = load_kernelbench(&gone, &[1]).unwrap_err().to_string();
    assert!(
        text.contains("nowhere") && text.contains("does not exist"),
        "{text}"
    );
}

#[test]
fn unknown_level_is_refused() {
    let tmp = tiny_suite();
    let text = load_kernelbench(tmp.path(), &[4]).unwrap_err().to_string();
    assert!(
        text.contains("level 4") && text.contains("1, 2 or 3"),
        "{text}"
    );
}

#[test]
fn single_problem_file() {
    let tmp = tempfile::tempdir().unwrap();
    let p = load_problem_file(&write(tmp.path(), "level2/17_Fused_.py", GOOD_SOURCE)).unwrap();
    assert_eq!(p.suite, "file");
    assert_eq!((p.level, p.id, p.name.as_str()), (2, 17, "Fused_"));
    assert_eq!(p.file, "17_Fused_.py");
    assert_eq!(p.to_ref().key(), "file/L2/17");

    let p = load_problem_file(&write(tmp.path(), "mine/my_problem.py", GOOD_SOURCE)).unwrap();
    assert_eq!((p.level, p.id, p.name.as_str()), (0, 0, "my_problem"));
    assert_eq!(
        p.origin.as_deref(),
        Some(tmp.path().join("mine/my_problem.py").as_path())
    );

    if let Some(dir) = kernelbench_dir() {
        let p = load_problem_file(&dir.join("level1/19_ReLU.py")).unwrap();
        assert_eq!((p.level, p.id, p.name.as_str()), (1, 19, "ReLU"));
    }

    let bad = write(tmp.path(), "3_Bad.py", "def get_inputs():\n    return []\n");
    let text = load_problem_file(&bad).unwrap_err().to_string();
    assert!(text.contains("3_Bad.py"), "{text}");
    assert!(
        text.contains("`class Model`, `def get_init_inputs`"),
        "{text}"
    );

    let text = load_problem_file(&tmp.path().join("absent.py"))
        .unwrap_err()
        .to_string();
    assert!(text.contains("absent.py"), "{text}");

    // Said once: the cause is in the message, not repeated as its source.
    let err = load_problem_file(&tmp.path().join("absent.py")).unwrap_err();
    assert!(std::error::Error::source(&err).is_none(), "{err:?}");
    let latin1 = tmp.path().join("5_Latin1.py");
    fs::write(&latin1, b"x = 1\n# caf\xe9\n").unwrap();
    let err = load_problem_file(&latin1).unwrap_err();
    assert!(matches!(err, SuiteError::NotUtf8 { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("5_Latin1.py")
            && text.contains("offset 11")
            && text.contains("save it as UTF-8"),
        "{text}"
    );
    assert!(std::error::Error::source(&err).is_none());
}
