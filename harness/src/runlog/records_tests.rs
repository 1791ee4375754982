//! Signing and verifying record lines.

use super::*;
use crate::runlog::mac::{MAC_HEX_LEN, MAC_PREFIX};
use crate::test_support::one_shot_records;

fn secret() -> RunSecret {
    RunSecret::from_bytes([5; 32])
}

/// A signed log of the fixture's records, one line each.
fn signed_log(s: &RunSecret) -> Vec<String> {
    one_shot_records()
        .iter()
        .map(|r| {
            let mut l = String::from_utf8(signed_line(s, r).unwrap()).unwrap();
            assert_eq!(l.pop(), Some('\n'));
            l
        })
        .collect()
}

fn read(text: &str, v: &Verifier) -> RecordLog {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("records.jsonl");
    std::fs::write(&p, text).unwrap();
    RecordLog::read(&p, v).unwrap()
}

fn faults(log: &RecordLog) -> Vec<(usize, LineFault)> {
    log.bad.clone()
}

#[test]
fn a_signed_line_is_one_json_record_with_its_mac_first_and_verifies() {
    let s = secret();
    let lines = signed_log(&s);
    assert!(lines.len() >= 3);
    for l in &lines {
        assert!(l.starts_with("{\"mac\":\""), "{l}");
        let back: EvalRecord = serde_json::from_str(l).unwrap();
        assert!(!back.run_id.is_empty());
    }
    let log = read(&(lines.join("\n") + "\n"), &Verifier::new(s, true));
    assert_eq!(log.lines.len(), lines.len());
    assert!(
        log.bad.is_empty() && log.unverified == 0,
        "{:?}",
        log.warnings()
    );
    assert!(log.warnings().is_empty());
    // Read with another run's secret, nothing verifies.
    let log = read(
        &(lines.join("\n") + "\n"),
        &Verifier::new(RunSecret::from_bytes([6; 32]), true),
    );
    assert!(log.lines.is_empty());
    assert!(log.bad.iter().all(|(_, f)| *f == LineFault::BadMac));
}

#[test]
fn a_float_is_verified_as_written_not_as_printed_again() {
    // The MAC covers the bytes: digits that parsing and printing would change still verify.
    let s = secret();
    let l = &signed_log(&s)[0];
    let wall = serde_json::from_str::<serde_json::Value>(l).unwrap()["wall_s"].clone();
    let forged = l.replacen(
        &format!("\"wall_s\":{wall}"),
        "\"wall_s\":3.2308577162038543e-8",
        1,
    );
    assert_ne!(&forged, l);
    let log = read(&format!("{forged}\n"), &Verifier::new(s.clone(), true));
    assert_eq!(faults(&log), vec![(1, LineFault::BadMac)]);
    let body = format!("{{{}", &forged[MAC_PREFIX.len() + MAC_HEX_LEN + 2..]);
    let resigned = format!(
        "{MAC_PREFIX}{}\",{}",
        s.mac_hex(body.as_bytes()),
        &body[1..]
    );
    let log = read(&format!("{resigned}\n"), &Verifier::new(s, true));
    assert_eq!(log.lines.len(), 1);
    assert_eq!(log.lines[0].text, resigned);
}

#[test]
fn each_bad_line_is_named_and_skipped_and_the_rest_is_read() {
    let s = secret();
    let lines = signed_log(&s);
    let n = lines.len();
    // Line 1 rewritten (speedup 1000), a forged unsigned line appended after the genuine
    // ones, a line that is not JSON, a malformed MAC, and a truncated last line.
    let rewritten = {
        let l = &lines[0];
        let at = l
            .find("\"speedup\":")
            .expect("the fixture's first record is timed")
            + 10;
        let end = at + l[at..].find([',', '}']).unwrap();
        format!("{}1000.0{}", &l[..at], &l[end..])
    };
    assert!(rewritten.starts_with(MAC_PREFIX), "mac kept first");
    assert_ne!(rewritten, lines[0]);
    let unsigned = {
        let mut v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        v.as_object_mut().unwrap().remove("mac");
        serde_json::to_string(&v).unwrap()
    };
    let mut text = String::new();
    text += &(rewritten + "\n");
    for l in &lines[1..] {
        text += &(l.clone() + "\n");
    }
    text += &(unsigned + "\n");
    text += "{\"schema_version\": 1, broken\n";
    text += "{\"mac\":\"00\",\"schema_version\":1}\n";
    text += &lines[1][..lines[1].len() / 2];
    let log = read(&text, &Verifier::new(s, true));
    assert_eq!(log.lines.len(), n - 1);
    let got: Vec<(usize, String)> = log
        .bad
        .iter()
        .map(|(no, f)| {
            let kind = match f {
                LineFault::BadMac => "bad MAC",
                LineFault::NoMac => "no MAC",
                LineFault::NotJson(_) => "not JSON",
                LineFault::Truncated => "truncated",
                other => panic!("{other:?}"),
            };
            (*no, kind.to_string())
        })
        .collect();
    let want = vec![
        (1, "bad MAC"),
        (n + 1, "no MAC"),
        (n + 2, "not JSON"),
        (n + 3, "bad MAC"),
        (n + 4, "truncated"),
    ];
    let want: Vec<(usize, String)> = want.into_iter().map(|(a, b)| (a, b.into())).collect();
    assert_eq!(got, want);
    assert!(log.truncated_tail());
    let w = log.warnings();
    assert_eq!(w.len(), 5);
    assert!(w[0].contains("records.jsonl line 1: bad MAC"), "{w:?}");
    assert!(w.iter().all(|l| l.ends_with("skipped")), "{w:?}");
    assert_eq!(
        log.complete_len as usize,
        text.len() - lines[1].len() / 2,
        "the truncated tail starts after the last newline"
    );
}

#[test]
fn an_old_run_is_read_unverified_with_one_warning_unless_a_line_verifies() {
    let s = secret();
    let plain: Vec<String> = one_shot_records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    let text = plain.join("\n") + "\n";
    // No secret (the committed report fixtures) or an unsigned manifest: read, unverified.
    for v in [
        Verifier::unchecked("it is not in a run folder with a secret"),
        Verifier::new(s.clone(), false),
    ] {
        let log = read(&text, &v);
        assert_eq!(log.lines.len(), plain.len());
        assert_eq!(log.unverified, plain.len());
        let w = log.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("read unverified"), "{w:?}");
    }
    // The manifest says signed: every unsigned line fails.
    let log = read(&text, &Verifier::new(s.clone(), true));
    assert!(log.lines.is_empty());
    assert_eq!(log.bad.len(), plain.len());
    // Unsigned manifest (forged down, or a resumed old run) with one line that verifies:
    // the unsigned lines next to it fail; the signed one is read.
    let signed = signed_log(&s);
    let mixed = format!("{}\n{}\n", plain[0], signed[1]);
    let log = read(&mixed, &Verifier::new(s, false));
    assert_eq!(log.lines.len(), 1);
    assert_eq!(log.lines[0].no, 2);
    assert_eq!(faults(&log), vec![(1, LineFault::NoMac)]);
    assert_eq!(log.unverified, 0);
}

#[test]
fn a_run_folder_gives_its_secret_and_whether_it_signs() {
    let d = tempfile::tempdir().unwrap();
    let s = secret();
    s.save(&d.path().join(SECRET)).unwrap();
    std::fs::write(d.path().join(MANIFEST), r#"{"record_mac":"hmac-sha256"}"#).unwrap();
    let signed = signed_log(&s);
    std::fs::write(d.path().join("records.jsonl"), signed.join("\n") + "\n").unwrap();
    let log = RecordLog::of_run(d.path()).unwrap();
    assert_eq!(log.lines.len(), signed.len());
    assert!(log.warnings().is_empty());
    let v = Verifier::of_run(d.path());
    assert!(v.signed && v.key.is_some());
    // Without its secret the lines cannot be checked: read, unverified, and said why.
    std::fs::remove_file(d.path().join(SECRET)).unwrap();
    let log = RecordLog::of_run(d.path()).unwrap();
    assert_eq!(log.unverified, signed.len());
    assert!(log.warnings()[0].contains("secret"), "{:?}", log.warnings());
}

#[test]
fn a_line_of_the_current_scheme_under_a_legacy_run_json_is_recognised() {
    // run.json stripped of its signature and put back as a legacy one: the lines, signed with
    // the records' own key, fail the secret's MAC and are named for what they are.
    let s = secret();
    let key = records_key(&s, Some(RECORD_MAC)).unwrap();
    assert_ne!(key, s);
    let lines = signed_log(&key);
    let text = lines.join("\n") + "\n";
    let log = read(&text, &Verifier::for_scheme(&s, Some(RECORD_MAC)).unwrap());
    assert_eq!(log.lines.len(), lines.len());
    assert_eq!(log.replaced_manifest, 0);
    for legacy in [None, Some(LEGACY_RECORD_MAC)] {
        let log = read(&text, &Verifier::for_scheme(&s, legacy).unwrap());
        assert!(log.lines.is_empty());
        assert_eq!(log.replaced_manifest, lines.len());
    }
    assert!(Verifier::for_scheme(&s, Some("hmac-sha512")).is_err());
}

#[test]
fn a_file_of_junk_is_warned_about_in_a_screenful() {
    let junk: String = (0..5000).map(|i| format!("junk {i}\n")).collect();
    let log = read(&junk, &Verifier::new(secret(), true));
    assert_eq!(log.bad.len(), 5000);
    assert_eq!(log.invalid(), 5000);
    let w = log.warnings();
    assert_eq!(w.len(), WARNED_LINES + 1, "{w:?}");
    assert!(
        w[WARNED_LINES].contains("4990 more bad line(s) skipped (4990 not JSON); 5000 in all"),
        "{w:?}"
    );
}
