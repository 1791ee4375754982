//! Reading a run folder for a report: what is verified, what is refused, what `--unverified`
//! reads anyway.

use super::*;
use crate::runlog::manifest::RunManifest;
use crate::runlog::{signed_line, RunDir, LEGACY_RECORD_MAC};
use crate::test_support::one_shot_records;

fn asked() -> RunManifest {
    RunManifest {
        schema_version: kbench_record::SCHEMA_VERSION,
        kbench_version: "0.1.0".into(),
        run_id: String::new(),
        created_unix_s: 0.0,
        agent: "one-shot".into(),
        suite: "kernelbench".into(),
        device: "cuda:0".into(),
        precision: "fp32".into(),
        profile: "strict".into(),
        model_mode: "train".into(),
        trials: 2,
        families: Vec::new(),
        timed_calls: Some(9),
        min_timed_calls: None,
        weight_seed: 42,
        shard: None,
        record_mac: None,
        cuda_header: None,
        cxx_header: None,
        planned: None,
    }
}

/// A run folder written by `RunDir` with the fixture's records.
fn run(dir: &Path) {
    let d = RunDir::open(dir, false, None, asked()).unwrap();
    for r in one_shot_records() {
        d.append(&r).unwrap();
    }
}

#[test]
fn a_run_kbench_wrote_reads_verified_with_its_plan() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    run(&dir);
    let f = read_run_folder(&dir, false).unwrap();
    assert_eq!(f.trust, Trust::Verified);
    assert_eq!(f.log.lines.len(), one_shot_records().len());
    let plan = f.manifest.unwrap().planned.unwrap();
    assert_eq!(plan.keys("one-shot").len(), one_shot_records().len());
    // Its records.jsonl stands for the folder: verified with the folder's secret.
    let f = read_run_folder(&dir.join(RECORDS), false).unwrap();
    assert_eq!(f.trust, Trust::Verified);
}

#[test]
fn what_cannot_be_verified_is_refused_unless_asked_and_then_marked() {
    let t = tempfile::tempdir().unwrap();
    type Spoil = fn(&Path);
    let cases: [(&str, Spoil); 4] = [
        ("has no secret", |d| {
            std::fs::remove_file(d.join(SECRET)).unwrap()
        }),
        ("has no run.json", |d| {
            std::fs::remove_file(d.join(MANIFEST)).unwrap()
        }),
        ("does not verify", |d| {
            let text = std::fs::read_to_string(d.join(MANIFEST)).unwrap();
            let edited = text.replace("\"trials\": 2", "\"trials\": 3");
            assert_ne!(text, edited);
            std::fs::write(d.join(MANIFEST), edited).unwrap();
        }),
        ("carries no signature", |d| {
            // run.json put back unsigned, its plan dropped: it passes for an older run's.
            let mut m = ManifestFile::read(&d.join(MANIFEST)).unwrap().manifest;
            m.planned = None;
            std::fs::write(d.join(MANIFEST), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
        }),
    ];
    for (i, (says, spoil)) in cases.into_iter().enumerate() {
        let dir = t.path().join(format!("run{i}"));
        run(&dir);
        spoil(&dir);
        let e = read_run_folder(&dir, false).unwrap_err().to_string();
        assert!(
            e.contains(says) && e.contains("--unverified"),
            "{says}: {e}"
        );
        let f = read_run_folder(&dir, true).unwrap();
        assert!(matches!(f.trust, Trust::Unverified(_)), "{says}");
        assert_eq!(f.log.lines.len(), one_shot_records().len(), "{says}");
        assert_eq!(f.log.unverified, one_shot_records().len(), "{says}");
    }
    // The same run.json, legacy scheme claimed: its lines name it as replaced.
    let dir = t.path().join("claims-legacy");
    run(&dir);
    let mut m = ManifestFile::read(&dir.join(MANIFEST)).unwrap().manifest;
    m.record_mac = Some(LEGACY_RECORD_MAC.into());
    m.planned = None;
    std::fs::write(dir.join(MANIFEST), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let e = read_run_folder(&dir, false).unwrap_err().to_string();
    assert!(e.contains("is not the one kbench wrote"), "{e}");
    // A records file alone has nothing to verify it with.
    let lone = t.path().join("x_records.jsonl");
    std::fs::copy(dir.join(RECORDS), &lone).unwrap();
    let e = read_run_folder(&lone, false).unwrap_err().to_string();
    assert!(e.contains("outside a run folder"), "{e}");
    assert!(read_run_folder(&lone, true).is_ok());
}

#[test]
fn a_run_from_before_run_json_was_signed_reads_with_its_lines_verified() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("old");
    std::fs::create_dir(&dir).unwrap();
    let s = RunSecret::from_bytes([4; 32]);
    s.save(&dir.join(SECRET)).unwrap();
    let m = RunManifest {
        record_mac: Some(LEGACY_RECORD_MAC.into()),
        ..asked()
    };
    std::fs::write(dir.join(MANIFEST), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let text: Vec<u8> = one_shot_records()
        .iter()
        .flat_map(|r| signed_line(&s, r).unwrap())
        .collect();
    std::fs::write(dir.join(RECORDS), text).unwrap();
    let f = read_run_folder(&dir, false).unwrap();
    assert!(matches!(&f.trust, Trust::Legacy(n) if n.contains("before run.json was signed")));
    assert_eq!(f.log.lines.len(), one_shot_records().len());
    assert!(f.manifest.unwrap().planned.is_none());
    // Written before records were signed at all: unverified, so refused unless asked.
    let m = RunManifest {
        record_mac: None,
        ..asked()
    };
    std::fs::write(dir.join(MANIFEST), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let plain: String = one_shot_records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join(RECORDS), plain).unwrap();
    let e = read_run_folder(&dir, false).unwrap_err().to_string();
    assert!(e.contains("carry no MAC"), "{e}");
    assert!(read_run_folder(&dir, true).is_ok());
}
