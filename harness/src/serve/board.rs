//! Leaderboard mode's board (each client's best ranked entry per problem, counted only once
//! its secret-seed pass is correct and unflagged), its page (the `kbench leaderboard` page,
//! rebuilt when a ranked answer lands), and a client's records for its exports.

use std::collections::BTreeMap;
use std::sync::Mutex;

use anyhow::{Context, Result};
use kbench_record::EvalRecord;
use kbench_reports::{RecordExtras, RunInput};
use serde::Serialize;

use super::store::{Filter, Store};
use super::verdict::Verdict;

#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Entry {
    client: String,
    problem: String,
    submission: String,
    label: Option<String>,
    speedup: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Board {
    problems: Vec<String>,
    entries: Vec<Entry>,
}

/// A signed record line as a record (its `mac` member aside).
pub(crate) fn record_of(line: &str) -> Result<EvalRecord> {
    let mut v: serde_json::Value =
        serde_json::from_str(line).context("a stored record that is not JSON")?;
    if let Some(o) = v.as_object_mut() {
        o.remove("mac");
    }
    Ok(serde_json::from_value(v)?)
}

fn verdict(s: &Option<String>) -> Option<Verdict> {
    s.as_deref().and_then(|t| serde_json::from_str(t).ok())
}

/// Each client's best counting entry per problem, best first within a problem.
pub(crate) fn board(store: &dyn Store, problems: Vec<String>) -> Result<Board> {
    let mut best: BTreeMap<(String, String), Entry> = BTreeMap::new();
    for r in store.ranked_rows()? {
        let (Some(public), Some(ranked)) = (verdict(&r.verdict), verdict(&r.ranked_verdict)) else {
            continue;
        };
        if !(public.counts() && ranked.counts()) {
            continue;
        }
        let Some(speedup) = ranked.speedup else {
            continue;
        };
        let e = Entry {
            client: r.client.clone(),
            problem: r.problem.clone(),
            submission: r.id.clone(),
            label: r.label.clone(),
            speedup,
        };
        let k = (r.problem.clone(), r.client.clone());
        if best.get(&k).is_none_or(|b| b.speedup < speedup) {
            best.insert(k, e);
        }
    }
    let mut entries: Vec<Entry> = best.into_values().collect();
    entries.sort_by(|a, b| {
        a.problem
            .cmp(&b.problem)
            .then(b.speedup.total_cmp(&a.speedup))
    });
    Ok(Board { problems, entries })
}

/// A client's finished evaluations as a report's input (one run, named after the client).
pub(crate) fn report_of(client: &str, lines: &[String]) -> kbench_reports::Report {
    let records = lines
        .iter()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let r = record_of(l).ok()?;
            Some((r, RecordExtras::from_json(&v)))
        })
        .collect();
    let input = RunInput {
        label: client.to_string(),
        path: client.to_string(),
        records,
        ..RunInput::default()
    };
    kbench_reports::build_report(&[input], kbench_reports::SpeedupBasis::default())
}

/// A client's signed record lines, each once (submissions the cache answered share one).
pub(crate) fn client_records(store: &dyn Store, client: &str) -> Result<Vec<String>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let rows = store.rows(
            client,
            &Filter {
                after: Some(after),
                limit: Some(1000),
                ..Filter::default()
            },
        )?;
        let Some(last) = rows.last() else { break };
        after = last.seq;
        for r in &rows {
            for line in [&r.record, &r.ranked_record].into_iter().flatten() {
                if seen.insert(line.clone()) {
                    out.push(line.clone());
                }
            }
        }
    }
    Ok(out)
}

/// The board's page, rendered again only when the ranked answers changed.
#[derive(Default)]
pub(crate) struct PageCache {
    page: Mutex<Option<(Vec<i64>, String)>>,
}

/// Seconds between the page's reloads in a browser.
const REFRESH_S: u32 = 10;

impl PageCache {
    pub(crate) fn page(&self, store: &dyn Store, title: &str) -> Result<String> {
        let rows = store.ranked_rows()?;
        let stamp: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let mut cached = self.page.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, page)) = cached.as_ref() {
            if *s == stamp {
                return Ok(page.clone());
            }
        }
        // One run per client: its ranked (secret-seed) records of entries whose public pass
        // counted; a flagged or wrong entry never reaches the page.
        let mut by_client: BTreeMap<String, Vec<(EvalRecord, RecordExtras)>> = BTreeMap::new();
        for r in &rows {
            let counts = verdict(&r.verdict).is_some_and(|v| v.counts());
            let Some(line) = r.ranked_record.as_deref().filter(|_| counts) else {
                continue;
            };
            let Ok(mut rec) = record_of(line) else {
                continue;
            };
            rec.candidate.agent = r.client.clone();
            let extras = serde_json::from_str(line)
                .map(|v| RecordExtras::from_json(&v))
                .unwrap_or_default();
            by_client
                .entry(r.client.clone())
                .or_default()
                .push((rec, extras));
        }
        let runs: Vec<RunInput> = by_client
            .into_iter()
            .map(|(client, records)| RunInput {
                label: client.clone(),
                path: client,
                records,
                ..RunInput::default()
            })
            .collect();
        let report = kbench_reports::build_report(&runs, kbench_reports::SpeedupBasis::default());
        let page = kbench_reports::leaderboard::render_leaderboard(&report, title)
            .map_err(|e| anyhow::anyhow!("rendering the leaderboard: {e}"))?;
        let refresh = format!("<meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">");
        let page = match page.find("</head>") {
            Some(at) => format!("{}{refresh}{}", &page[..at], &page[at..]),
            None => format!("{refresh}{page}"),
        };
        *cached = Some((stamp, page.clone()));
        Ok(page)
    }
}
