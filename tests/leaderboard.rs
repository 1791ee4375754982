//! `kbench leaderboard` in a real browser: headless Chromium (Debian's `chromium`) loads
//! the page from disk, sorts a column through its click handler, renders a screenshot, and
//! the test asserts on the resulting DOM. The page must work offline: nothing external. A
//! run named with markup must show as text and run nothing.
//!
//! Chromium is required, not optional: without it this test fails and says how to install
//! it (`.ci/run` installs it).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{kbench, repo_root, show};

fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "headless Chromium is needed for the leaderboard test and is not on PATH: \
         install it with `apt-get install -y chromium` (.ci/run does this)"
    );
}

/// Runs headless Chromium on `url` with a throw-away profile; `extra` picks the output.
pub fn browse(url: &str, extra: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    Command::new(chromium())
        .args([
            "--headless",
            // Root in CI and in containers: Chromium's sandbox cannot start there.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("running chromium")
}

fn dump_dom(page: &Path, fragment: &str) -> String {
    let out = browse(
        &format!("file://{}{fragment}", page.display()),
        &["--dump-dom".to_string()],
    );
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        show(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Run labels of the first table of the active tab, in row order.
fn run_order(dom: &str) -> Vec<String> {
    let panel = &dom[dom.find("class=\"panel active\"").expect("an active tab")..];
    let table = &panel[..panel.find("</table>").unwrap()];
    table
        .split("<tr")
        .skip(2) // before the header row, the header row
        .filter_map(|row| {
            let at = row.find("data-v=\"")? + 8;
            Some(row[at..at + row[at..].find('"')?].to_string())
        })
        .collect()
}

#[test]
fn leaderboard_sorts_renders_and_links_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("board.html");
    let runs = repo_root().join("tests/fixtures/report_runs");
    let out = kbench()
        .args(["leaderboard", "--title", "fixture board", "--out"])
        .arg(&page)
        .arg(runs.join("kevin-style"))
        .arg(runs.join("one-shot"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    // One file, nothing fetched: no external scripts, styles, images or fonts.
    for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!html.contains(external), "page references {external}");
    }

    // As written: runs in the order given.
    let dom = dump_dom(&page, "");
    assert_eq!(run_order(&dom), ["kevin-style", "one-shot"]);
    assert!(!dom.contains("data-sorted="));

    // Sorting by a column (the fragment clicks the header): correct rate ascending puts
    // one-shot (50%) before kevin-style (75%); descending reverses it.
    let dom = dump_dom(&page, "#tab=all&sort=correct&dir=asc");
    assert!(
        dom.contains("data-sorted=\"correct:asc\""),
        "the click handler did not run"
    );
    assert_eq!(run_order(&dom), ["one-shot", "kevin-style"]);
    assert!(dom.contains("<th data-key=\"correct\" class=\"asc\">"));
    let dom = dump_dom(&page, "#tab=all&sort=correct&dir=desc");
    assert_eq!(run_order(&dom), ["kevin-style", "one-shot"]);

    // Per-level tabs: on L1 one-shot is correct on both tasks, kevin-style on one.
    let dom = dump_dom(&page, "#tab=L1&sort=correct&dir=desc");
    assert!(dom.contains("<div class=\"panel active\" id=\"tab-L1\">"));
    assert_eq!(run_order(&dom), ["one-shot", "kevin-style"]);
    for tab in ["all", "L1", "L2", "L3"] {
        assert!(
            dom.contains(&format!("<button data-tab=\"{tab}\"")),
            "tab {tab}"
        );
    }
    // Plots are inline SVG with text; integrity flags are listed and linked to the record.
    assert!(
        dom.matches("<svg").count() >= 8,
        "expected the plots inline"
    );
    assert!(dom.contains("id=\"plot-fast_p-L1-eager\""));
    assert!(dom.contains(">side-stream</td>"));
    assert!(dom.contains("href=\"#rec-kevin-style-kernelbench_L1_19\""));
    assert!(dom.contains("<details id=\"rec-kevin-style-kernelbench_L1_19\">"));

    // A screenshot renders (a real layout pass, fonts and SVG included).
    let shot = tmp.path().join("board.png");
    let out = browse(
        &format!("file://{}#tab=all&sort=correct&dir=asc", page.display()),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1400".to_string(),
        ],
    );
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {}",
        show(&out)
    );
    let png = std::fs::read(&shot).expect("chromium wrote no screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // A blank page compresses to a few KB; tables and plots do not.
    assert!(png.len() > 40_000, "screenshot is only {} bytes", png.len());
    if let Some(dir) = std::env::var_os("KBENCH_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, Path::new(&dir).join("leaderboard.png")).unwrap();
    }
}

/// A run whose directory name is markup that would run script: the page shows it as text
/// and the browser runs none of it (the handler would mark the body `data-pwned`).
#[test]
fn a_hostile_run_name_is_shown_as_text_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let label = "\"><img src=x onerror=document.body.setAttribute('data-pwned',1)>";
    let run = tmp.path().join(label);
    std::fs::create_dir(&run).unwrap();
    let fixture = repo_root().join("tests/fixtures/report_runs/one-shot");
    for file in ["records.jsonl", "run.json", "secret"] {
        std::fs::copy(fixture.join(file), run.join(file)).unwrap();
    }
    let page = tmp.path().join("board.html");
    let out = kbench()
        .args([
            "leaderboard",
            "--title",
            "<script>document.title='pwned'</script>",
        ])
        .arg("--out")
        .arg(&page)
        .arg(&run)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let dom = dump_dom(&page, "#tab=all&sort=correct&dir=asc");
    assert!(
        dom.contains("data-sorted=\"correct:asc\""),
        "the page's own script did not run"
    );
    let body = &dom[dom.find("<body").unwrap()..];
    let body = &body[..body.find('>').unwrap()];
    assert!(
        body.contains("data-sorted") && !body.contains("data-pwned"),
        "the run name ran as markup: {body}"
    );
    // An element would serialize as `<img src="x" ...>`; the text keeps `src=x`.
    assert!(
        !dom.contains("<img src=\"x\""),
        "the run name made an element"
    );
    // Chromium escapes `"` in attribute values, newer versions `<` and `>` too.
    let shown: Vec<String> = run_order(&dom)
        .iter()
        .map(|v| v.replace("&lt;", "<").replace("&gt;", ">"))
        .collect();
    assert_eq!(shown, [label.replace('"', "&quot;")]);
    // The title is text in <title> and <h1>, not a script.
    assert!(dom.contains("<h1>&lt;script&gt;document.title='pwned'&lt;/script&gt;</h1>"));
    assert_eq!(dom.matches("<script").count(), 1);
}
