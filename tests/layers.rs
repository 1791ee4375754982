//! The harness reads like its pipeline. Checked from the source itself:
//!
//! - every module of `harness/src` belongs to one box, and imports only from its own box or
//!   from boxes below it (`BOXES`, lowest first);
//! - no import circle between files of the harness;
//! - clap stays in `cli/` and `commands/`;
//! - `main.rs` is a dispatcher (at most 60 lines) and no source file of the repository,
//!   Rust or Python, tests included, is over 800 lines;
//! - names and comments say what they guard, not which tracker entry asked for them: no
//!   tracked file or folder name outside `archive/`, no Rust or Python function name and no
//!   line of product code (harness, suites, baselines, reports, adversarial) carries an
//!   issue number, except inside a path into the archive.
//! - the case families are listed once (`kbench_record::FAMILIES`): no other source file
//!   spells the list, and the Python worker's generators and the docs' tables name the same
//!   families.
//! - the harness reads a worker reply's fields only through `kbench_record::protocol::reply`:
//!   no by-key read of a frame's header outside the protocol module.
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
    "eval", "exec", "llm", "serve", "commands", "lib", "main",
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

/// Every folder holding kbench's own Rust and Python, tests and benchmarks included.
const SOURCE_DIRS: &[&str] = &[
    "harness",
    "suites",
    "baselines",
    "reports",
    "adversarial",
    "tests",
    "bench",
];

/// kbench's sources under `dirs` with one of `exts`: each as its path relative to the
/// repository's root and its text. The corpora's problem files and kernels
/// (`adversarial/exploits/`) and the tests' fixtures are data, not kbench's source.
fn sources(dirs: &[&str], exts: &[&str]) -> Vec<(String, String)> {
    let root = repo_root();
    let mut all = Vec::new();
    for dir in dirs {
        files(&root.join(dir), exts, &mut all);
    }
    all.into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            let data =
                rel.starts_with("adversarial/exploits/") || rel.starts_with("tests/fixtures/");
            if data {
                return None;
            }
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{rel}: {e}"));
            Some((rel, text))
        })
        .collect()
}

/// The crates' Rust sources outside the protocol module (record crate), the one place a
/// worker request's JSON is written and a reply's fields are read by key.
fn outside_the_protocol_module() -> Vec<(String, String)> {
    let mut all = sources(CRATES, &[".rs"]);
    all.retain(|(rel, _)| !rel.starts_with("harness/record/src/protocol/"));
    all
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
fn every_module_is_in_a_box() {
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
fn no_box_imports_from_a_higher_box() {
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
fn no_import_circles_between_files() {
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
fn clap_only_in_cli_and_commands() {
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
fn main_is_a_dispatcher_and_no_source_file_is_over_800_lines() {
    let main = std::fs::read_to_string(src().join("main.rs")).unwrap();
    assert!(
        main.lines().count() <= MAX_MAIN_LINES,
        "main.rs has {} lines",
        main.lines().count()
    );
    let mut long = Vec::new();
    for (rel, text) in sources(SOURCE_DIRS, &[".rs", ".py"]) {
        let n = text.lines().count();
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

// Names and comments that outlive the tracker: a file, test or comment says what it guards
// or why, never only which tracker entry asked for it (the number means nothing to whoever
// inherits the code).

/// Where `text` cites a tracker entry: "issue" (any case), then at most one of ` `, `_` or
/// `-`, an optional `#`, and a digit ("issue 6", "Issue #21", "issue_10", "issue26").
fn cites_issue(text: &str) -> Vec<usize> {
    let lower = text.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut at = Vec::new();
    for (i, _) in lower.match_indices("issue") {
        let mut j = i + "issue".len();
        if matches!(b.get(j), Some(b' ' | b'_' | b'-')) {
            j += 1;
        }
        if b.get(j) == Some(&b'#') {
            j += 1;
        }
        if b.get(j).is_some_and(u8::is_ascii_digit) {
            at.push(i);
        }
    }
    at
}

/// Paths whose names keep their tracker numbers: the archive of past GPU runs and records.
fn archived(path: &str) -> bool {
    path.starts_with("archive/")
}

/// The repository's tracked files, relative to its root (every file under it, build output
/// and dot-folders skipped, outside a git checkout).
fn tracked() -> Vec<String> {
    let root = repo_root();
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect(),
        _ => {
            let mut all = Vec::new();
            files(&root, &[""], &mut all);
            all.iter()
                .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
                .collect()
        }
    }
}

#[test]
fn no_file_or_folder_name_carries_an_issue_number() {
    let bad: Vec<String> = tracked()
        .into_iter()
        .filter(|p| !archived(p) && !cites_issue(p).is_empty())
        .collect();
    assert!(
        bad.is_empty(),
        "name these for what they test or guard, not for a tracker entry:\n{}",
        bad.join("\n")
    );
}

/// The names `fn NAME` (Rust) or `def NAME` (Python) defines in `code`.
fn defined_names<'a>(code: &'a str, keyword: &str) -> Vec<&'a str> {
    let mut names = Vec::new();
    for line in code.lines() {
        let mut rest = line.trim_start();
        for prefix in ["pub(crate) ", "pub ", "async "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if let Some(after) = rest.strip_prefix(keyword) {
            let end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            names.push(&after[..end]);
        }
    }
    names
}

#[test]
fn no_test_function_name_carries_an_issue_number() {
    let root = repo_root();
    let mut bad = Vec::new();
    for rel in tracked().into_iter().filter(|p| !archived(p)) {
        let keyword = if rel.ends_with(".rs") {
            "fn "
        } else if rel.ends_with(".py") {
            "def "
        } else {
            continue;
        };
        let Ok(code) = std::fs::read_to_string(root.join(&rel)) else {
            continue;
        };
        for name in defined_names(&code, keyword) {
            if !cites_issue(name).is_empty() {
                bad.push(format!("{rel}: {name}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "name these for what they check, not for a tracker entry:\n{}",
        bad.join("\n")
    );
}

/// Whether the citation at `at` is part of a path into the archive (a run folder's or a
/// script's name there keeps its number): the word around it, up to white space or quotes.
fn in_archived_path(line: &str, at: usize) -> bool {
    let start = line[..at]
        .rfind(|c: char| c.is_whitespace() || "`'\"(".contains(c))
        .map_or(0, |i| i + 1);
    archived(&line[start..])
}

#[test]
fn no_comment_in_product_code_cites_an_issue_number() {
    let product = &SOURCE_DIRS[..5];
    let mut bad = Vec::new();
    for (rel, text) in sources(product, &[".rs", ".py", ".sh"]) {
        for (n, line) in text.lines().enumerate() {
            if cites_issue(line)
                .into_iter()
                .any(|at| !in_archived_path(line, at))
            {
                bad.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "say the reason itself (or point to docs/), not a tracker number:\n{}",
        bad.join("\n")
    );
}

#[test]
fn an_issue_citation_is_found_and_an_archived_path_is_not_one() {
    assert_eq!(cites_issue("see issue 6, Issue #21"), vec![4, 13]);
    assert_eq!(
        cites_issue("tests/issue_10.rs issue-3 issue26"),
        vec![6, 18, 26]
    );
    assert!(cites_issue("issues, issue tracker, tissue").is_empty());
    let line = "// measured (archive/runs/2026-11-28-h200x4-issue26-b) in issue 26";
    let at = cites_issue(line);
    assert_eq!(at.len(), 2);
    assert!(in_archived_path(line, at[0]));
    assert!(!in_archived_path(line, at[1]));
    assert_eq!(
        defined_names(
            "    pub fn Issue_2_works() {\ndef test_issue6(self):",
            "fn "
        ),
        vec!["Issue_2_works"]
    );
}

/// Lines within which every stress family's name, spelled as a string literal, counts as a
/// copy of the family list.
const LIST_SPAN: usize = 16;

/// The stress families' names, from the one list (`kbench_record::FAMILIES`).
fn stress_family_names() -> Vec<String> {
    kbench_record::CaseFamily::stress()
        .map(|f| f.to_string())
        .collect()
}

/// The one list of case families is `FAMILIES` in harness/record/src/case.rs: no other
/// source file, Rust or Python, tests included, spells every stress family's name as a
/// string literal within a few lines (derive the list from `FAMILIES` in Rust, from
/// `GENERATORS` of families.py in Python). The Python worker's generators are checked
/// against it in the next test.
#[test]
fn the_case_families_are_listed_once() {
    let names = stress_family_names();
    let mut copies = Vec::new();
    for (rel, text) in sources(SOURCE_DIRS, &[".rs", ".py"]) {
        if rel == "harness/record/src/case.rs" {
            continue;
        }
        // Per line, the family names it spells as a string literal.
        let spelled: Vec<Vec<&str>> = text
            .lines()
            .map(|line| {
                names
                    .iter()
                    .filter(|n| {
                        line.contains(&format!("\"{n}\"")) || line.contains(&format!("'{n}'"))
                    })
                    .map(String::as_str)
                    .collect()
            })
            .collect();
        for start in 0..spelled.len() {
            let window = &spelled[start..(start + LIST_SPAN).min(spelled.len())];
            if names
                .iter()
                .all(|n| window.iter().any(|l| l.contains(&n.as_str())))
            {
                copies.push(format!("{rel}:{}", start + 1));
                break;
            }
        }
    }
    assert!(
        copies.is_empty(),
        "a copy of the case family list (derive it from kbench_record::FAMILIES, or in Python \
         from kbench_worker.families.GENERATORS):\n{}",
        copies.join("\n")
    );
}

/// The Python worker has a generator for exactly the stress families of `FAMILIES`, in the
/// same order (its `@_generates("name")` lines), and the docs' family tables name the same
/// families: PROTOCOL.md's (every family, in order) and docs/correctness.md's.
#[test]
fn the_worker_and_the_docs_name_the_families_of_the_one_list() {
    let names = stress_family_names();
    let root = repo_root();
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    let python = read("harness/python/kbench_worker/families.py");
    let generated: Vec<&str> = python
        .lines()
        .filter_map(|l| l.trim().strip_prefix("@_generates(\"")?.strip_suffix("\")"))
        .collect();
    assert_eq!(
        generated, names,
        "families.py's generators against kbench_record::FAMILIES"
    );

    // The first column of the Markdown table whose header starts `| family |`.
    let table = |rel: &str| -> Vec<String> {
        let text = read(rel);
        let rows = text
            .lines()
            .skip_while(|l| !l.starts_with("| family |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'));
        rows.map(|r| r.split('|').nth(1).unwrap().trim().to_string())
            .collect()
    };
    let mut every = vec!["random".to_string()];
    every.extend(names.iter().cloned());
    let quoted = |v: &[String]| v.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>();
    assert_eq!(
        table("harness/python/PROTOCOL.md"),
        quoted(&every),
        "PROTOCOL.md's table of case families"
    );
    // correctness.md puts `large` and `small` in one row.
    let correctness = table("docs/correctness.md").join(" / ");
    assert_eq!(
        correctness,
        quoted(&names).join(" / "),
        "docs/correctness.md's table of case families"
    );
    let skills = read("harness/src/llm/skills.md");
    for n in &names {
        assert!(
            skills.contains(&format!("`{n}`")),
            "harness/src/llm/skills.md does not name the family `{n}`"
        );
    }
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
    let mut bad = Vec::new();
    for (rel, text) in outside_the_protocol_module() {
        for line in json_requests(&text) {
            bad.push(format!("{rel}:{line}"));
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

/// By-key header reads of the harness's own commands, not of a worker's reply: the reference
/// case's `run_case` (its argument list), and a command about to be sent (its exchange file).
const OWN_COMMAND_READS: &[&str] = &[
    "harness/src/measure/exchange.rs: run_frame.header.get(\"inputs\")",
    "harness/src/worker/process.rs: header.pointer(\"/exchange/path\")",
];

#[test]
fn worker_replies_are_read_through_the_typed_reply_module() {
    // Elsewhere replies are read with `Frame::reply::<reply::T>()`, `kind()` and `id()`.
    let (mut bad, mut used) = (Vec::new(), BTreeSet::new());
    for (rel, text) in outside_the_protocol_module() {
        for line in header_reads(&text) {
            let at = text.lines().nth(line - 1).unwrap().trim();
            let known = |e: &&&str| {
                e.split_once(": ")
                    .is_some_and(|(f, s)| at.contains(s) && f == rel)
            };
            match OWN_COMMAND_READS.iter().find(known) {
                Some(e) => drop(used.insert(e)),
                None => bad.push(format!("{rel}:{line}: {at}")),
            }
        }
    }
    assert!(
        bad.is_empty(),
        "reply fields read by key outside the protocol module (type them in \
         kbench_record::protocol::reply):\n{}",
        bad.join("\n")
    );
    assert_eq!(used.len(), OWN_COMMAND_READS.len(), "stale exception");
    let src = "let a = reply\n  .header\n  .get(\"x\");\nstr_field(&r.header, \"k\");\n\
               h.header[\"t\"];\nreply_header.pointer(\"/x\");\nheader[*i];\nreq.header(\"C\", j);";
    assert_eq!(header_reads(src), [2, 4, 5, 6]);
}

/// The lines where `text` reads a JSON header's field by key: `header` (or a name ending so)
/// then, across whitespace, `.get(`, `.pointer(` or `["`; or `str_field(` of a header.
fn header_reads(text: &str) -> Vec<usize> {
    let path = |c: char| c.is_alphanumeric() || "_.&".contains(c);
    let mut hits = BTreeSet::new();
    for (at, _) in text.match_indices("header") {
        let rest = text[at + "header".len()..].trim_start();
        let helper = text[..at].trim_end_matches(path).ends_with("str_field(");
        let keyed = [".get(", ".pointer(", "[\""]
            .iter()
            .any(|p| rest.starts_with(p));
        if keyed || (helper && rest.starts_with(',')) {
            hits.insert(text[..at].matches('\n').count() + 1);
        }
    }
    hits.into_iter().collect()
}
