//! `kbench import jsonl`: one JSON object a line with `level_id`, `task_id`, `custom_code`
//! (the kernel), `ref_code` (the set's reference, optional), claimed speedups in `score_*`
//! or `*speedup*` fields and, optionally, a correctness field (`correct`, `is_correct`,
//! `correctness`). Field names are matched without regard to case. Several lines for one
//! problem become samples 0, 1, ... in line order; a bad line is an error naming it.

use std::path::Path;

use anyhow::{Context, Result};
use kbench_record::claims::Claim;
use serde_json::{Map, Value};

use super::{baseline_of, Entry, Parsed};

pub fn read(src: &Path) -> Result<Parsed> {
    let text = std::fs::read_to_string(src)
        .with_context(|| format!("cannot read the JSON-lines file {}", src.display()))?;
    let mut out = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        let at = format!("line {}", i + 1);
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

/// A field by name, any case.
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
