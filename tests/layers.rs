//! Issue 23: the harness reads like its pipeline. Checked from the source itself:
//!
//! - every module of `harness/src` belongs to one box, and imports only from its own box or
//!   from boxes below it (`BOXES`, lowest first);
//! - no import circle between files of the harness;
//! - clap stays in `cli.rs` and `commands/`;
//! - `main.rs` is a dispatcher (at most 60 lines) and no source file of the repository,
//!   Rust or Python, tests included, is over 800 lines.
//!
//! The import graph is read from `crate::` and `super::` paths in code (comments skipped);
//! a path names the deepest file it reaches.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::repo_root;

/// The boxes of the pipeline, lowest first. A box may import from itself and from the
/// boxes before it.
const BOXES: &[&str] = &[
    "exit", "gpu", "worker", "agents", "config", "cli", "runlog", "plan", "measure", "judge",
    "eval", "exec", "llm", "commands", "lib", "main",
];

/// Exempt from the order: unit-test helpers compiled only under `cfg(test)`.
const EXEMPT: &[&str] = &["test_support"];

const MAX_LINES: usize = 800;
const MAX_MAIN_LINES: usize = 60;

fn src() -> PathBuf {
    repo_root().join("harness/src")
}

/// Every crate's source folder: the circle check covers them all.
const CRATES: &[&str] = &[
    "harness/src",
    "harness/record/src",
    "suites/src",
    "baselines/src",
    "reports/src",
    "adversarial/src",
];

/// Every file under `dir` with one of `exts`, skipping build output and fetched folders.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if p.is_dir() {
            if !name.starts_with('.')
                && !["target", "node_modules", "__pycache__"].contains(&name.as_str())
            {
                files(&p, exts, out);
            }
        } else if exts.iter().any(|x| name.ends_with(x)) {
            out.push(p);
        }
    }
}

/// Module path of a harness source file: `gpu/compare/mod.rs` → `["gpu", "compare"]`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().to_string())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" {
        parts.push(stem);
    }
    parts
}

/// The deepest module of `known` that `path` reaches.
fn resolve(path: &[String], known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| known.contains(p))
}

/// The `crate::a::b` and `super::a` paths a line of code names (identifiers only).
fn paths_in(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (start, prefix) in code
        .match_indices("crate::")
        .map(|(i, _)| (i, "crate"))
        .chain(code.match_indices("super::").map(|(i, _)| (i, "super")))
    {
        // Not part of a longer identifier (`kbench_crate::`).
        if code[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[start + prefix.len() + 2..];
        let mut segs: Vec<String> = Vec::new();
        let mut tail = rest;
        loop {
            let id: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if id.is_empty() {
                break;
            }
            tail = &tail[id.len()..];
            segs.push(id);
            if let Some(t) = tail.strip_prefix("::") {
                tail = t;
            } else {
                break;
            }
        }
        let base: Vec<String> = if prefix == "crate" {
            Vec::new()
        } else {
            // `super` is the parent of the file's module (`a/b.rs` and `a/b/mod.rs` alike).
            let mut m = module.to_vec();
            m.pop();
            while segs.first().map(String::as_str) == Some("super") {
                segs.remove(0);
                m.pop();
            }
            m
        };
        let mut full = base;
        full.extend(segs);
        out.push(full);
    }
    out
}

struct Graph {
    /// module → modules it imports (other than itself and its own submodules).
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn graph() -> Graph {
    graph_of(&src())
}

fn graph_of(root: &Path) -> Graph {
    let mut all = Vec::new();
    files(root, &[".rs"], &mut all);
    // A crate's `lib.rs` is its root module; `main.rs` is a module of its own.
    let module_of = |f: &Path| {
        let m = module_of(root, f);
        if m == ["lib"] {
            Vec::new()
        } else {
            m
        }
    };
    let known: BTreeSet<Vec<String>> = all.iter().map(|f| module_of(f)).collect();
    let mut edges = BTreeMap::new();
    for f in &all {
        let module = module_of(f);
        let text = std::fs::read_to_string(f).unwrap();
        let mut to = BTreeSet::new();
        // Unit tests sit at the end of a file, after `#[cfg(test)]`; their `super` is the
        // file itself and they are not part of the pipeline.
        for line in text
            .lines()
            .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        {
            let code = line.split("//").next().unwrap_or("");
            for p in paths_in(code, &module) {
                if let Some(target) = resolve(&p, &known) {
                    // A module naming itself is not an import (a folder's `mod.rs` naming its
                    // own files is: `mod.rs` should only declare and re-export them).
                    if target != module {
                        to.insert(target);
                    }
                }
            }
        }
        edges.insert(module, to);
    }
    Graph { edges }
}

fn box_of(module: &[String]) -> &str {
    module.first().map(String::as_str).unwrap_or("lib")
}

fn rank(b: &str) -> Option<usize> {
    BOXES.iter().position(|x| *x == b)
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

#[test]
fn issue23_every_module_is_in_a_box() {
    let g = graph();
    let stray: Vec<String> = g
        .edges
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| box_of(m).to_string())
        .filter(|b| rank(b).is_none() && !EXEMPT.contains(&b.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(stray.is_empty(), "modules outside every box: {stray:?}");
}

#[test]
fn issue23_no_box_imports_from_a_higher_box() {
    let g = graph();
    let mut up = Vec::new();
    for (from, tos) in &g.edges {
        let fb = box_of(from);
        if EXEMPT.contains(&fb) {
            continue;
        }
        for to in tos {
            let tb = box_of(to);
            if EXEMPT.contains(&tb) {
                continue;
            }
            if let (Some(a), Some(b)) = (rank(fb), rank(tb)) {
                if b > a {
                    up.push(format!("{} → {}", name(from), name(to)));
                }
            }
        }
    }
    assert!(
        up.is_empty(),
        "{} upward import(s):\n{}",
        up.len(),
        up.join("\n")
    );
}

#[test]
fn issue23_no_import_circles_between_files() {
    let mut circles = Vec::new();
    for c in CRATES {
        for circle in circles_of(&graph_of(&repo_root().join(c))) {
            circles.push(format!("{c}: {circle}"));
        }
    }
    assert!(
        circles.is_empty(),
        "{} import circle(s):\n{}",
        circles.len(),
        circles.join("\n")
    );
}

/// The import circles of a graph, each as its members.
// Warshall's transitive closure reads plainest with indices.
#[allow(clippy::needless_range_loop)]
fn circles_of(g: &Graph) -> BTreeSet<String> {
    // Tarjan's strongly connected components would do; the graph is small, so a
    // reachability closure is enough and plainer.
    let nodes: Vec<&Vec<String>> = g.edges.keys().collect();
    let index: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let n = nodes.len();
    let mut reach = vec![vec![false; n]; n];
    for (from, tos) in &g.edges {
        for to in tos {
            if let (Some(&a), Some(&b)) = (index.get(from), index.get(to)) {
                // `test_support` is compiled for unit tests only: outside the graph.
                if !EXEMPT.contains(&box_of(from)) && !EXEMPT.contains(&box_of(to)) {
                    reach[a][b] = true;
                }
            }
        }
    }
    for k in 0..n {
        for i in 0..n {
            if reach[i][k] {
                for j in 0..n {
                    if reach[k][j] {
                        reach[i][j] = true;
                    }
                }
            }
        }
    }
    let mut circles = BTreeSet::new();
    for i in 0..n {
        if reach[i][i] {
            let members: Vec<String> = (0..n)
                .filter(|&j| reach[i][j] && reach[j][i])
                .map(|j| name(nodes[j]))
                .collect();
            circles.insert(members.join(" ↔ "));
        }
    }
    circles
}

#[test]
fn issue23_clap_only_in_cli_and_commands() {
    let mut all = Vec::new();
    files(&src(), &[".rs"], &mut all);
    let mut bad = Vec::new();
    for f in all {
        let m = module_of(&src(), &f);
        let b = box_of(&m);
        if ["cli", "commands", "main"].contains(&b) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("clap::") || code.contains("crate::cli") {
                bad.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "clap outside cli/commands:\n{}",
        bad.join("\n")
    );
}

#[test]
fn issue23_main_is_a_dispatcher_and_no_source_file_is_over_800_lines() {
    let main = std::fs::read_to_string(src().join("main.rs")).unwrap();
    assert!(
        main.lines().count() <= MAX_MAIN_LINES,
        "main.rs has {} lines",
        main.lines().count()
    );
    let root = repo_root();
    let mut all = Vec::new();
    for dir in [
        "harness",
        "suites",
        "baselines",
        "reports",
        "adversarial",
        "tests",
        "bench",
    ] {
        files(&root.join(dir), &[".rs", ".py"], &mut all);
    }
    let mut long = Vec::new();
    for f in all {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        // Problem files and kernels of the corpora are data, not kbench's source.
        if rel.starts_with("adversarial/exploits/") || rel.starts_with("tests/fixtures/") {
            continue;
        }
        let n = std::fs::read_to_string(&f)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if n > MAX_LINES {
            long.push(format!("{rel}: {n}"));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// Whether `text` holds a `json!` literal whose first key is `"cmd"`: a worker request
/// built by hand.
fn json_requests(text: &str) -> Vec<usize> {
    let mut hits = Vec::new();
    for (at, _) in text.match_indices("json!(") {
        let rest = text[at + "json!(".len()..].trim_start();
        if let Some(inner) = rest.strip_prefix('{') {
            if inner.trim_start().starts_with("\"cmd\"") {
                hits.push(text[..at].matches('\n').count() + 1);
            }
        }
    }
    hits
}

#[test]
fn worker_requests_are_built_from_the_command_enum() {
    // The protocol module (record crate) is the one place a request's JSON is written.
    let protocol = repo_root().join("harness/record/src/protocol");
    let mut all = Vec::new();
    for c in CRATES {
        files(&repo_root().join(c), &[".rs"], &mut all);
    }
    let mut bad = Vec::new();
    for f in all.iter().filter(|f| !f.starts_with(&protocol)) {
        let text = std::fs::read_to_string(f).unwrap();
        for line in json_requests(&text) {
            bad.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "json! requests outside the protocol module (use kbench_record::protocol::Command):\n{}",
        bad.join("\n")
    );
    assert_eq!(
        json_requests("let a = 1;\nlet r = json!(\n  {\"cmd\": \"exit\"});"),
        [2]
    );
}
