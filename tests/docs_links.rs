//! The documentation a user navigates stays navigable. Every relative link in README.md,
//! docs/*.md, CONTRIBUTING.md, harness/python/PROTOCOL.md, tests/gpu/README.md and
//! archive/README.md must name a file that exists, and every `#anchor` into a Markdown file
//! must name one of its headings (GitHub's anchor rules). External http(s) links are not
//! checked. README.md stays short (≤ 250 lines).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

const README_MAX_LINES: usize = 250;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// The Markdown files whose links are checked, relative to the repository root.
fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(root).expect("under root").to_path_buf())
        .collect();
    docs.sort();
    files.extend(docs);
    for extra in [
        "CONTRIBUTING.md",
        "harness/python/PROTOCOL.md",
        "tests/gpu/README.md",
        "archive/README.md",
    ] {
        if root.join(extra).is_file() {
            files.push(PathBuf::from(extra));
        }
    }
    files
}

/// GitHub's anchor of a heading: lowercase, spaces to '-', punctuation dropped except '-' and
/// '_'; repeated headings get "-1", "-2", ...
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c == ' ' {
                Some('-')
            } else if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else {
                None
            }
        })
        .collect()
}

fn anchors_of(text: &str) -> HashSet<String> {
    let mut anchors = HashSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut current: Option<String> = None;
    for event in Parser::new_ext(text, Options::all()) {
        match event {
            Event::Start(Tag::Heading { .. }) => current = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = current.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = github_anchor(&current.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                anchors.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    anchors
}

/// Every link and image destination of a Markdown text.
fn links_of(text: &str) -> Vec<String> {
    Parser::new_ext(text, Options::all())
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => Some(dest_url.to_string()),
            _ => None,
        })
        .collect()
}

/// What is wrong with each relative link of `file` (relative to `root`), one line each.
fn broken_links(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let dir = file.parent().unwrap_or(Path::new(""));
    for link in links_of(text) {
        let lower = link.to_lowercase();
        if lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("mailto:")
        {
            continue;
        }
        let (path_part, anchor) = match link.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (link.as_str(), None),
        };
        let target_rel = if path_part.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path_part)
        };
        let target = root.join(&target_rel);
        if !target.exists() {
            problems.push(format!(
                "{}: link `{link}`: target {} does not exist",
                file.display(),
                target_rel.display()
            ));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if target.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let target_text = if path_part.is_empty() {
            text.to_string()
        } else {
            fs::read_to_string(&target)
                .unwrap_or_else(|e| panic!("reading {}: {e}", target.display()))
        };
        if !anchors_of(&target_text).contains(anchor) {
            problems.push(format!(
                "{}: link `{link}`: {} has no heading with anchor #{anchor}",
                file.display(),
                target_rel.display()
            ));
        }
    }
    problems
}

#[test]
fn relative_links_and_anchors_resolve() {
    let root = repo_root();
    let mut problems = Vec::new();
    for file in checked_files(&root) {
        let text = fs::read_to_string(root.join(&file))
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        problems.extend(broken_links(&root, &file, &text));
    }
    assert!(
        problems.is_empty(),
        "broken links in the docs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_is_short() {
    let text = fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail into docs/"
    );
}

#[test]
fn every_docs_page_is_linked_from_the_readme_and_links_back() {
    let root = repo_root();
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md");
    let readme_links: HashSet<String> = links_of(&readme)
        .into_iter()
        .map(|l| l.split('#').next().unwrap_or_default().to_string())
        .collect();
    for file in checked_files(&root) {
        if !file.starts_with("docs") {
            continue;
        }
        let name = file.to_string_lossy().replace('\\', "/");
        assert!(
            readme_links.contains(&name),
            "README.md does not link {name}"
        );
        let text = fs::read_to_string(root.join(&file)).expect("docs page");
        assert!(
            links_of(&text).iter().any(|l| l == "../README.md"),
            "{name} has no link back to ../README.md"
        );
    }
}

#[test]
fn the_checker_finds_broken_links_and_anchors() {
    let root = repo_root();
    let file = Path::new("docs/running.md");
    let text = "# T\n\n## Some heading\n\n[ok](#some-heading) [bad](#no-such) \
                [gone](../no/such/file.md) [anchor](../README.md#not-a-heading) \
                [web](https://example.invalid/x)\n";
    let problems = broken_links(&root, file, text);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("#no-such"), "{}", problems[0]);
    assert!(problems[1].contains("does not exist"), "{}", problems[1]);
    assert!(problems[2].contains("#not-a-heading"), "{}", problems[2]);
    assert_eq!(
        github_anchor("Hardware feedback: `kbench profile`, roofline"),
        "hardware-feedback-kbench-profile-roofline"
    );
}
