//! How every rendering states a run's records check: planned, recorded, missing and invalid
//! (0 included, so a reader knows it was checked), and UNVERIFIED where nothing could be.

use crate::completeness::{RecordsCheck, Verification};
use crate::report::{Report, RunReport};

/// The run's label, with `(UNVERIFIED)` when nothing of it was checked.
pub(crate) fn shown_label(run: &RunReport) -> String {
    if run.records_check.unverified() {
        format!("{} (UNVERIFIED)", run.label)
    } else {
        run.label.clone()
    }
}

/// One line stating what checking the run's records found.
pub(crate) fn records_line(c: &RecordsCheck) -> String {
    let mut parts = Vec::new();
    match (c.planned, c.missing) {
        (Some(planned), Some(missing)) => {
            parts.push(format!("{planned} planned"));
            parts.push(format!("{} recorded", c.recorded));
            parts.push(format!("{missing} missing"));
        }
        _ => {
            parts.push("no plan in run.json, missing ones not known".into());
            parts.push(format!("{} recorded", c.recorded));
        }
    }
    parts.push(format!("{} invalid", c.invalid));
    if c.truncated > 0 {
        parts.push(format!(
            "{} truncated last line (a run killed mid-write)",
            c.truncated
        ));
    }
    if c.duplicates > 0 {
        parts.push(format!("{} duplicate(s) counted once", c.duplicates));
    }
    if c.unplanned > 0 {
        parts.push(format!("{} unplanned record(s) left out", c.unplanned));
    }
    let verified = match c.verification {
        Verification::Verified => "verified: run.json and every line with the run's secret".into(),
        Verification::RecordsOnly => format!(
            "record lines verified; run.json not signed ({})",
            c.note.as_deref().unwrap_or("an older kbench")
        ),
        Verification::Unverified => format!(
            "UNVERIFIED, nothing checked ({})",
            c.note.as_deref().unwrap_or("--unverified")
        ),
    };
    let incomplete = c.missing.is_some_and(|m| m > 0) || c.invalid > 0;
    format!(
        "{}records: {}; a missing or invalid record counts as not correct; {verified}",
        if incomplete { "INCOMPLETE " } else { "" },
        parts.join(", ")
    )
}

/// The warning that opens a report holding runs read unverified, or `None`.
pub(crate) fn unverified_banner(report: &Report) -> Option<String> {
    if report.unverified.is_empty() {
        return None;
    }
    Some(format!(
        "UNVERIFIED: {} of {} run(s) could not be verified and were read as their files say (--unverified): {}; their numbers prove nothing",
        report.unverified.len(),
        report.runs.len(),
        report.unverified.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_states_missing_and_invalid_even_at_zero() {
        let c = RecordsCheck {
            planned: Some(4),
            recorded: 4,
            missing: Some(0),
            ..RecordsCheck::default()
        };
        let l = records_line(&c);
        assert!(
            l.starts_with("records: 4 planned, 4 recorded, 0 missing, 0 invalid;"),
            "{l}"
        );
        let c = RecordsCheck {
            planned: Some(4),
            recorded: 2,
            missing: Some(2),
            invalid: 1,
            truncated: 1,
            duplicates: 1,
            unplanned: 3,
            ..RecordsCheck::default()
        };
        let l = records_line(&c);
        assert!(l.starts_with("INCOMPLETE records: 4 planned, 2 recorded, 2 missing, 1 invalid, 1 truncated last line"), "{l}");
        assert!(
            l.contains("1 duplicate(s) counted once, 3 unplanned record(s) left out"),
            "{l}"
        );
        let c = RecordsCheck {
            verification: Verification::Unverified,
            note: Some("no secret".into()),
            recorded: 2,
            ..RecordsCheck::default()
        };
        let l = records_line(&c);
        assert!(
            l.contains("missing ones not known")
                && l.contains("UNVERIFIED, nothing checked (no secret)"),
            "{l}"
        );
    }
}
