//! `kbench import jsonl`: one JSON object a line with `level_id`, `task_id`, `custom_code`
//! (the kernel), `ref_code` (the set's reference, optional), claimed speedups in `score_*`
//! or `*speedup*` fields and, optionally, a correctness field (`correct`, `is_correct`,
//! `correctness`). Field names are matched without regard to case; a line with two names
//! kbench reads that differ only in case (`custom_code` and `Custom_Code`) is an error, since
//! which one the set meant cannot be told. Several lines for one problem become samples 0,
//! 1, ... in line order; a bad line (not UTF-8, not JSON, a field missing or wrong) is an
//! error naming it and costs that line only.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use kbench_record::claims::Claim;
use serde_json::{Map, Value};

use super::{baseline_of, Entry, Parsed};
use crate::agents::untrusted_file::{read_named, INDEX_CAP};

pub(crate) fn read(src: &Path) -> Result<Parsed> {
    let bytes = read_named(src, INDEX_CAP).map_err(|why| {
        anyhow!(
            "cannot read the JSON-lines file {}: it {why}",
            src.display()
        )
    })?;
    let mut out = Parsed::default();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let at = format!("line {}", i + 1);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = match std::str::from_utf8(line) {
            Ok(l) => l,
            Err(e) => {
                out.error(
                    at,
                    format!(
                        "not UTF-8 text (invalid byte at column {}): this line is not imported; save the file as UTF-8 and import it again",
                        e.valid_up_to() + 1
                    ),
                );
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match entry(line, &at) {
            Ok(e) => out.entries.push(e),
            Err(message) => out.error(at, message),
        }
    }
    Ok(out)
}

/// The fields kbench reads by name (besides `score*` and `*speedup*`).
const NAMED_FIELDS: [&str; 12] = [
    "level_id",
    "task_id",
    "custom_code",
    "ref_code",
    "correct",
    "is_correct",
    "correctness",
    "problem_name",
    "task_name",
    "model",
    "label",
    "display_name",
];

/// Two keys kbench reads that differ only in case, if the object has them.
fn case_clash(obj: &Map<String, Value>) -> Option<(&str, &str)> {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for k in obj.keys() {
        let lower = k.to_ascii_lowercase();
        let read = NAMED_FIELDS.contains(&lower.as_str())
            || lower.starts_with("score")
            || lower.contains("speedup");
        if !read {
            continue;
        }
        if let Some(first) = seen.insert(lower, k) {
            return Some((first, k));
        }
    }
    None
}

/// A field by name, any case ([`case_clash`] has ruled out two).
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// A whole number, written as a number or as a string of digits.
fn whole(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn boolean(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_f64().map(|x| x != 0.0),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Some(true),
            "false" | "0" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn entry(line: &str, at: &str) -> Result<Entry, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| {
        let what = e.to_string();
        let what = what
            .split(" at line ")
            .next()
            .unwrap_or_default()
            .to_string();
        format!("not JSON: {what} at column {}", e.column())
    })?;
    let Value::Object(obj) = value else {
        return Err("not a JSON object".into());
    };
    if let Some((a, b)) = case_clash(&obj) {
        return Err(format!(
            "fields {a:?} and {b:?} differ only in case: which one the set meant cannot be told; keep one and import again"
        ));
    }
    let get_id = |name: &str, max: u64| -> Result<u64, String> {
        let v = field(&obj, name).ok_or_else(|| format!("{name} is missing"))?;
        whole(v)
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("{name} is {v}, not a whole number up to {max}"))
    };
    let level = get_id("level_id", u8::MAX as u64)?;
    let problem = get_id("task_id", u32::MAX as u64)?;
    if level == 0 {
        return Err("level_id is 0: KernelBench levels start at 1".into());
    }
    let kernel = match field(&obj, "custom_code") {
        None => return Err("custom_code is missing".into()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) => None,
        Some(v) => return Err(format!("custom_code is {}, not a string", kind(v))),
    };
    let reference = match field(&obj, "ref_code") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(v) => return Err(format!("ref_code is {}, not a string", kind(v))),
    };
    let mut claims = Vec::new();
    for (k, v) in &obj {
        let lower = k.to_ascii_lowercase();
        if !(lower.starts_with("score") || lower.contains("speedup")) || v.is_null() {
            continue;
        }
        let speedup = number(v)
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("{k} is {v}, not a speedup (a non-negative number)"))?;
        claims.push(Claim {
            speedup,
            baseline: baseline_of(k).into(),
            field: k.clone(),
        });
    }
    let mut claimed_correct = None;
    for name in ["correct", "is_correct", "correctness"] {
        if let Some(v) = field(&obj, name).filter(|v| !v.is_null()) {
            claimed_correct =
                Some(boolean(v).ok_or_else(|| format!("{name} is {v}, not true or false"))?);
        }
    }
    let problem_name = ["problem_name", "task_name"]
        .iter()
        .find_map(|n| field(&obj, n).and_then(Value::as_str))
        .map(str::to_string);
    let label = ["model", "label", "display_name"]
        .iter()
        .find_map(|n| field(&obj, n).and_then(Value::as_str))
        .map(str::to_string);
    Ok(Entry {
        at: at.to_string(),
        level: level as u8,
        problem: problem as u32,
        sample: None,
        label,
        missing: kernel.is_none().then(|| "custom_code is null".to_string()),
        kernel,
        claims,
        claimed_correct,
        reference,
        problem_name,
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_differing_only_in_case_are_refused_where_kbench_reads_them() {
        let at = "line 1";
        let e = entry(
            r#"{"level_id": 1, "task_id": 2, "custom_code": "a", "Custom_Code": "b"}"#,
            at,
        )
        .unwrap_err();
        assert!(
            e.contains("\"Custom_Code\"")
                && e.contains("\"custom_code\"")
                && e.contains("differ only in case"),
            "{e}"
        );
        let e = entry(
            r#"{"level_id": 1, "task_id": 2, "custom_code": "a", "score_eager": 1, "SCORE_EAGER": 2}"#,
            at,
        )
        .unwrap_err();
        assert!(e.contains("differ only in case"), "{e}");
        // Fields kbench does not read may differ only in case; one field in any case is read.
        let ok = entry(
            r#"{"Level_ID": 1, "TASK_ID": 2, "custom_code": "a", "notes": 1, "Notes": 2}"#,
            at,
        )
        .unwrap();
        assert_eq!((ok.level, ok.problem), (1, 2));
    }
}
