//! The light C++ header (`KBENCH_CXX_HEADER=light`): a binding that torch/types.h and
//! torch/python.h serve is built against them, one that needs more of torch (here
//! `torch::nn::functional`) is built again against torch's own header, as is one whose library
//! is left with a symbol of torch's namespace undefined (read in the sandboxed build job with
//! the real torch's libraries loaded), all are built ahead by sandboxed build jobs, and every
//! verdict is the one a run with torch's own header gives.
//! The run says which header it compiled with (manifest and records), `kbench setup` makes the
//! light header's precompiled forms, and resuming under the other choice is refused. Real
//! worker, real torch, real g++, real ninja, sandboxed. Fixtures: `tests/fixtures/light_cxx_header`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{by_candidate, kbench, repo_root, show, RunBuilder};

/// The interpreter of the shared environment `kbench setup` made (`KBENCH_PYTHON` first).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("KBENCH_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::path::absolute(kbench::worker::python::cache_dir().join("venv/bin/python3")).unwrap()
}

/// A run of both fixtures on smoke problem 1 into `out`, with build jobs, in `cache`.
fn run(cache: &Path, out: &Path, light: Option<&str>, resume: bool) -> Output {
    let mut c = kbench();
    c.args(
        RunBuilder::new()
            .suite("smoke")
            .select("1")
            .agent("replay")
            .build(),
    )
    .args(["--device", "cpu", "--families", "random", "--no-timing"])
    .args(["--build-jobs", "2", "--quiet", "--replay-dir"])
    .arg(repo_root().join("tests/fixtures/light_cxx_header"))
    .arg("--out")
    .arg(out)
    .env("KBENCH_CACHE_DIR", cache)
    .env("KBENCH_PYTHON", python())
    .env_remove("KBENCH_PCH")
    .env_remove("KBENCH_CUDA_HEADER");
    if resume {
        c.arg("--resume");
    }
    match light {
        Some(v) => c.env("KBENCH_CXX_HEADER", v),
        None => c.env_remove("KBENCH_CXX_HEADER"),
    };
    c.output().expect("running kbench")
}

/// Each extension build folder's C++ header marker, keyed by which fixture it built.
fn markers(cache: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(cache.join("torch_extensions"))
        .unwrap()
        .flatten()
    {
        let main = walk(&d.path(), "main.cpp");
        let Some(main) = main else { continue };
        let text = std::fs::read_to_string(main).unwrap();
        let which = if text.contains("nn::functional") {
            "needs_the_full_header"
        } else if text.contains("kbench_defined_nowhere") {
            "leaves_a_torch_symbol_undefined"
        } else {
            "light"
        };
        let marker = std::fs::read_to_string(d.path().join("kbench-cxx-header.txt"))
            .or_else(|_| {
                // torch builds in a folder named after the extension inside the build folder.
                walk(&d.path(), "kbench-cxx-header.txt")
                    .map_or(Ok(String::new()), std::fs::read_to_string)
            })
            .unwrap_or_default();
        out.push((which.to_string(), marker.trim().to_string()));
    }
    out.sort();
    out
}

fn walk(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if p.is_dir() {
            if let Some(found) = walk(&p, name) {
                return Some(found);
            }
        }
    }
    None
}

#[test]
fn bindings_build_light_where_it_serves_torchs_header_where_not_and_the_verdicts_are_the_same() {
    common::ensure_python();
    let _g = common::shared();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");

    // The light header made first, as `kbench setup` makes it: a run's own helper writes it in
    // the background, and a build that starts before it is there is built (and marked) with
    // torch's header, which would leave the first assertion below to a race.
    let o = kbench()
        .args(["setup", "--quiet"])
        .env("KBENCH_CACHE_DIR", &cache)
        .env("KBENCH_PYTHON", python())
        .env("KBENCH_CXX_HEADER", "light")
        .env_remove("KBENCH_PCH")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let light_out = dir.path().join("light");
    // Exit 3: everything evaluated, a kernel not `ok` (the one whose library cannot load).
    let o = run(&cache, &light_out, Some("light"), false);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let light = by_candidate(&light_out);
    for name in ["1_binding_light", "1_binding_needs_the_full_header"] {
        assert_eq!(light[name]["outcome"]["kind"], "ok", "{}", light[name]);
        assert_eq!(light[name]["env"]["cxx_header"], "light", "{}", light[name]);
    }
    let undefined = &light["1_binding_leaves_a_torch_symbol_undefined"];
    assert_ne!(undefined["outcome"]["kind"], "ok", "{undefined}");
    assert!(
        undefined.to_string().contains("kbench_defined_nowhere"),
        "the verdict names the symbol the import could not find: {undefined}"
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(light_out.join("run.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["cxx_header"], "light", "{manifest}");
    // The binding torch/types.h + torch/python.h serve was built with them (none of the
    // hundreds of torch's symbols its library needs was taken for undefined); the others
    // compiled again with torch's own header.
    let m = markers(&cache);
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!(m[0].0, "leaves_a_torch_symbol_undefined");
    assert!(
        m[0].1.starts_with(
            "full: torch/extension.h (the light build left _ZN2at22kbench_defined_nowhere"
        ),
        "{m:?}"
    );
    assert_eq!(m[1].0, "light");
    assert!(
        m[1].1.starts_with("light: torch/types.h + torch/python.h"),
        "{m:?}"
    );
    assert_eq!(m[2].0, "needs_the_full_header");
    assert!(m[2].1.starts_with("full: torch/extension.h"), "{m:?}");
    // Built ahead, by sandboxed build jobs: the evaluating workers found them built (the
    // library that cannot load built too, its job incomplete: its import failed there).
    let builds = std::fs::read_to_string(light_out.join("logs/builds.jsonl")).unwrap_or_default();
    assert_eq!(builds.lines().count(), 3, "{builds}");
    for line in builds.lines() {
        let complete = !line.contains("kbench_light_cxx_undefined")
            && !line.contains("leaves_a_torch_symbol_undefined");
        assert!(
            line.contains(&format!("\"complete\":{complete}")),
            "{builds}"
        );
    }
    // Setup made the light header's precompiled forms in the cache, beside torch's.
    let forms: Vec<_> = std::fs::read_dir(cache.join("pch"))
        .unwrap()
        .flatten()
        .flat_map(|k| std::fs::read_dir(k.path()).into_iter().flatten().flatten())
        .filter(|l| l.file_name().to_string_lossy().starts_with("light-"))
        .flat_map(|l| {
            std::fs::read_dir(l.path().join("torch/extension.h.gch"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(forms.len(), 2, "{forms:?}");

    // Resuming under torch's header is refused, naming the setting.
    let o = run(&cache, &light_out, None, true);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("KBENCH_CXX_HEADER: recorded light, now full"),
        "{}",
        show(&o)
    );

    // With torch's own header: the same verdicts, folders of their own, no marker.
    let full_out = dir.path().join("full");
    let o = run(&cache, &full_out, None, false);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let full = by_candidate(&full_out);
    for name in ["1_binding_light", "1_binding_needs_the_full_header"] {
        assert_eq!(full[name]["outcome"], light[name]["outcome"], "{name}");
        assert!(full[name]["env"].get("cxx_header").is_none());
    }
    // The same failure, told the same way but for the run's and the build's folders.
    let name = "1_binding_leaves_a_torch_symbol_undefined";
    let said =
        "ImportError: <folder>: undefined symbol: _ZN2at22kbench_defined_nowhereERKNS_6TensorE";
    let tell = |r: &serde_json::Value| {
        let m = r["outcome"]["message"].as_str().unwrap_or_default();
        let first = m.split_once('\n').map_or(m, |(f, _)| f);
        let (_, import) = first.split_once("ImportError: ").unwrap_or_default();
        let (_, symbol) = import.split_once(": ").unwrap_or_default();
        (
            r["outcome"]["kind"].clone(),
            format!("ImportError: <folder>: {symbol}"),
        )
    };
    assert_eq!(tell(&full[name]), tell(&light[name]), "{name}");
    assert_eq!(tell(&light[name]).1, said, "{}", light[name]);
    let m = markers(&cache);
    assert_eq!(m.len(), 6, "{m:?}");
    assert_eq!(m.iter().filter(|(_, k)| k.is_empty()).count(), 3, "{m:?}");

    // Without the precompiled-header folder the light header has nowhere to lie: refused.
    let o = kbench()
        .args([
            "run", "--suite", "smoke", "--select", "1", "--device", "cpu", "--out",
        ])
        .arg(dir.path().join("nopch"))
        .env("KBENCH_CACHE_DIR", &cache)
        .env("KBENCH_PYTHON", python())
        .env("KBENCH_CXX_HEADER", "light")
        .env("KBENCH_PCH", "off")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("KBENCH_CXX_HEADER=light needs"),
        "{}",
        show(&o)
    );

    // A value that is neither choice is refused before anything runs.
    let o = run(&cache, &dir.path().join("typo"), Some("lite"), false);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("KBENCH_CXX_HEADER=\"lite\""),
        "{}",
        show(&o)
    );
}
