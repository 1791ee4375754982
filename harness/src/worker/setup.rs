//! `kbench setup`'s work: kbench's private virtual environment, built from the lock embedded in
//! the binary (`harness/python/requirements.lock`, every package pinned with hashes) so that
//! two machines get the same torch and the same numbers.
//!
//! uv installs it (a `uv` on `PATH`, else one kbench installs with pip from the embedded
//! `bootstrap.lock` into `<cache>/uv`). The environment records what it was built from in a
//! stamp file; a setup that wants the same is a no-op, a changed lock re-syncs it. The user may
//! ask for another torch (`--torch`, `--index-url`): then kbench resolves unlocked for it and
//! the stamp says so.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kbench_suites::sha256_hex;
use serde::{Deserialize, Serialize};

use super::python::{probe, PythonChoice, PythonInfo, PythonSource};

/// The lock `kbench setup` installs (regenerate it as its header says).
pub(crate) const LOCK: &str = include_str!("../../python/requirements.lock");
/// What the lock was compiled from; `--torch` resolves from it with the torch line replaced.
pub(crate) const REQUIREMENTS: &str = include_str!("../../python/requirements.in");
/// The uv release kbench installs with pip when no `uv` is on `PATH`.
const BOOTSTRAP_LOCK: &str = include_str!("../../python/bootstrap.lock");
/// The stamp file inside the virtual environment.
pub(crate) const STAMP: &str = "kbench-env.json";

/// What the user asked `kbench setup` for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SetupRequest {
    /// Another torch than the lock's (a version, e.g. `2.9.1`): resolved unlocked.
    pub(crate) torch: Option<String>,
    /// Package index replacing PyPI (e.g. `https://download.pytorch.org/whl/cu126`).
    pub(crate) index_url: Option<String>,
    /// Package indexes besides PyPI.
    pub(crate) extra_index_urls: Vec<String>,
    /// Keep an environment built for another torch (`kbench demo`) rather than going back to
    /// the lock.
    pub(crate) keep_chosen: bool,
}

impl SetupRequest {
    fn locked(&self) -> bool {
        self.torch.is_none() && self.index_url.is_none() && self.extra_index_urls.is_empty()
    }
}

/// What an environment was built from (the stamp's contents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    /// `locked` (the embedded lock) or `chosen` (resolved for the user's torch).
    pub(crate) mode: String,
    /// sha256 of the embedded lock (locked) or of the requirements resolved from (chosen).
    pub(crate) sha256: String,
    #[serde(default)]
    pub(crate) torch: Option<String>,
    #[serde(default)]
    pub(crate) index_url: Option<String>,
    #[serde(default)]
    pub(crate) extra_index_urls: Vec<String>,
}

impl Stamp {
    fn wanted(req: &SetupRequest) -> Self {
        if req.locked() {
            return Self {
                mode: "locked".into(),
                sha256: sha256_hex(LOCK.as_bytes()),
                torch: None,
                index_url: None,
                extra_index_urls: Vec::new(),
            };
        }
        Self {
            mode: "chosen".into(),
            sha256: sha256_hex(requirements_for(req.torch.as_deref()).as_bytes()),
            torch: req.torch.clone(),
            index_url: req.index_url.clone(),
            extra_index_urls: req.extra_index_urls.clone(),
        }
    }
}

/// The stamp of the environment at `venv`, if it has a readable one.
pub(crate) fn read_stamp(venv: &Path) -> Option<Stamp> {
    let text = std::fs::read_to_string(venv.join(STAMP)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The torch version the lock pins (`2.11.0`).
pub(crate) fn locked_torch() -> &'static str {
    LOCK.lines()
        .find_map(|l| l.strip_prefix("torch=="))
        .and_then(|rest| rest.split([' ', ';', '\\']).next())
        .unwrap_or("?")
}

/// requirements.in with its torch line replaced by `torch==VERSION` (or kept, with `None`).
fn requirements_for(torch: Option<&str>) -> String {
    REQUIREMENTS
        .lines()
        .map(|l| match torch {
            Some(v) if l.trim_start().starts_with("torch") => format!("torch=={v}"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Creates kbench's private environment when needed and checks it. Idempotent and safe to
/// run concurrently (a lock file serialises installs). `quiet` hides the spinner.
pub(crate) fn setup(choice: &PythonChoice, quiet: bool, req: &SetupRequest) -> Result<PythonInfo> {
    let PythonSource::PrivateVenv(venv) = &choice.source else {
        // The user chose an interpreter: check it, never modify it.
        if !req.locked() {
            bail!("--torch and --index-url build kbench's own environment; they do not apply to an interpreter chosen with --python or KBENCH_PYTHON ({})", choice.python.display());
        }
        return probe(choice);
    };
    let cache = venv.parent().unwrap_or(Path::new(".")).to_path_buf();
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("creating kbench's cache directory {}", cache.display()))?;
    let lock_path = cache.join("setup.lock");
    let lock_file = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", lock_path.display()))?;

    let have = read_stamp(venv);
    let mut want = Stamp::wanted(req);
    if req.keep_chosen && req.locked() {
        if let Some(h) = have.as_ref().filter(|h| h.mode == "chosen") {
            want = h.clone();
        }
    }
    if have.as_ref() == Some(&want) {
        if let Ok(info) = probe(choice) {
            return Ok(info);
        }
    }

    let log_path = cache.join("setup.log");
    let mut log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let spinner = spinner(quiet);
    let mut step = |cmd: &mut Command, what: &str| -> Result<()> {
        run_logged(cmd, &mut log, &spinner, quiet).with_context(|| {
            format!(
                "{what} failed (log: {}); check the network (packages come from PyPI or the index given) and free disk space in {}, then run `kbench setup` again",
                log_path.display(),
                cache.display()
            )
        })
    };

    let uv = find_uv(&cache, &mut step, &spinner)?;
    let base = std::env::var("KBENCH_BASE_PYTHON").unwrap_or_else(|_| "python3".into());
    if !choice.python.exists() {
        spinner.set_message(format!(
            "creating a virtual environment in {}",
            venv.display()
        ));
        step(
            Command::new(&uv)
                .args(["venv", "--quiet", "--python"])
                .arg(&base)
                .arg(venv),
            &format!("creating the virtual environment {} with `uv venv --python {base}` (install Python 3.10+ or set KBENCH_BASE_PYTHON to one)", venv.display()),
        )?;
    }
    // An interrupted install must not read as done next time.
    let stamp_path = venv.join(STAMP);
    let _ = std::fs::remove_file(&stamp_path);
    let python = choice.python.as_os_str();
    let requirements = if want.mode == "locked" {
        let path = venv.join("kbench-requirements.lock");
        std::fs::write(&path, LOCK).with_context(|| format!("writing {}", path.display()))?;
        path
    } else {
        let input = venv.join("kbench-requirements.in");
        let torch = want.torch.as_deref();
        std::fs::write(&input, requirements_for(torch))
            .with_context(|| format!("writing {}", input.display()))?;
        let output = venv.join("kbench-requirements.txt");
        spinner.set_message(format!(
            "resolving packages for torch {}",
            torch.unwrap_or("(any)")
        ));
        let mut cmd = Command::new(&uv);
        cmd.args(["pip", "compile", "--quiet", "--python"])
            .arg(python)
            .arg(&input)
            .arg("-o")
            .arg(&output);
        index_args(&mut cmd, &want);
        step(
            &mut cmd,
            &format!(
                "resolving torch {} with `uv pip compile`",
                torch.unwrap_or("(any)")
            ),
        )?;
        output
    };
    spinner.set_message(format!(
        "installing {} (torch is large; the first time takes a few minutes)",
        requirements.display()
    ));
    let mut cmd = Command::new(&uv);
    cmd.args(["pip", "sync", "--python"]).arg(python);
    if want.mode == "locked" {
        cmd.arg("--require-hashes");
    }
    index_args(&mut cmd, &want);
    cmd.arg(&requirements);
    step(
        &mut cmd,
        &format!("`uv pip sync {}`", requirements.display()),
    )?;
    spinner.finish_and_clear();
    let info = probe(choice)?;
    if want.mode == "locked" && info.torch.split('+').next() != Some(locked_torch()) {
        bail!(
            "{} reports torch {} after installing the lock, which pins {}; remove {} and run `kbench setup` again",
            choice.python.display(),
            info.torch,
            locked_torch(),
            venv.display()
        );
    }
    let text = serde_json::to_string_pretty(&want)?;
    std::fs::write(&stamp_path, text)
        .with_context(|| format!("writing {}", stamp_path.display()))?;
    Ok(info)
}

fn index_args(cmd: &mut Command, want: &Stamp) {
    if let Some(u) = &want.index_url {
        cmd.arg("--index-url").arg(u);
    }
    for u in &want.extra_index_urls {
        cmd.arg("--extra-index-url").arg(u);
    }
}

/// `KBENCH_UV`, else a `uv` on `PATH`, else the one under `<cache>/uv` (installed there with
/// pip from the embedded bootstrap lock when missing).
fn find_uv(
    cache: &Path,
    step: &mut dyn FnMut(&mut Command, &str) -> Result<()>,
    spinner: &indicatif::ProgressBar,
) -> Result<PathBuf> {
    let works = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if let Some(p) = std::env::var_os("KBENCH_UV").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !works(&p) {
            bail!("KBENCH_UV={} does not run (`{0} --version` failed); point it at a uv binary or unset it", p.display());
        }
        return Ok(p);
    }
    if works(Path::new("uv")) {
        return Ok(PathBuf::from("uv"));
    }
    let dir = cache.join("uv");
    let ours = dir.join("bin").join("uv");
    if works(&ours) {
        return Ok(ours);
    }
    let lock = cache.join("uv-bootstrap.lock");
    std::fs::write(&lock, BOOTSTRAP_LOCK).with_context(|| format!("writing {}", lock.display()))?;
    let base = std::env::var("KBENCH_BASE_PYTHON").unwrap_or_else(|_| "python3".into());
    spinner.set_message(format!("installing uv into {}", dir.display()));
    let _ = std::fs::remove_dir_all(&dir);
    step(
        Command::new(&base)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--progress-bar",
                "off",
                "--require-hashes",
                "--no-deps",
                "--target",
            ])
            .arg(&dir)
            .arg("-r")
            .arg(&lock),
        &format!("installing uv with `{base} -m pip install --target {}` (or put uv on PATH: https://docs.astral.sh/uv/)", dir.display()),
    )?;
    if !works(&ours) {
        bail!(
            "pip installed uv into {} but {} does not run; put uv on PATH or set KBENCH_UV",
            dir.display(),
            ours.display()
        );
    }
    Ok(ours)
}

fn spinner(quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// Runs a command, copying its output to `log` and its latest line to the spinner (or to
/// stderr when stderr is not a terminal, so CI logs show progress).
fn run_logged(
    cmd: &mut Command,
    log: &mut std::fs::File,
    spinner: &indicatif::ProgressBar,
    quiet: bool,
) -> Result<()> {
    let _ = writeln!(log, "$ {cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning")?;
    let stdout = child.stdout.take();
    let out_thread = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stdout {
            for line in BufReader::new(s).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        text
    });
    // uv reports progress on stderr.
    let plain_lines = spinner.is_hidden() && !quiet;
    let mut err = String::new();
    if let Some(e) = child.stderr.take() {
        for line in BufReader::new(e).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            let short: String = line.chars().take(100).collect();
            if plain_lines {
                if line.starts_with("Installed")
                    || line.starts_with("Resolved")
                    || line.starts_with("Successfully")
                {
                    eprintln!("kbench setup: {short}");
                }
            } else {
                spinner.set_message(short);
            }
            err.push_str(&line);
            err.push('\n');
        }
    }
    let status = child.wait().context("waiting")?;
    let out = out_thread.join().unwrap_or_default();
    let _ = log.write_all(out.as_bytes());
    if !status.success() {
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("exited with {status}: {}", last.trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_pins_torch_and_every_package_with_hashes() {
        assert_eq!(locked_torch(), "2.11.0");
        let mut packages = 0;
        for block in LOCK
            .split("\n")
            .filter(|l| !l.starts_with([' ', '#']) && !l.is_empty())
        {
            assert!(block.contains("=="), "{block}");
            assert!(block.trim_end().ends_with('\\'), "no hashes: {block}");
            packages += 1;
        }
        assert!(packages > 20, "{packages}");
        // Every requirement of requirements.in is in the lock, pinned.
        for name in REQUIREMENTS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split(['=', '<', '>']).next().unwrap())
        {
            assert!(
                LOCK.lines().any(|l| l.starts_with(&format!("{name}=="))),
                "{name} missing from requirements.lock: regenerate it (see its header)"
            );
        }
        assert!(BOOTSTRAP_LOCK.contains("uv==") && BOOTSTRAP_LOCK.contains("--hash=sha256:"));
    }

    #[test]
    fn a_chosen_torch_replaces_only_the_torch_line() {
        let text = requirements_for(Some("2.9.1"));
        assert!(text.lines().any(|l| l == "torch==2.9.1"));
        assert!(!text.contains(&format!("torch=={}", locked_torch())));
        assert_eq!(text.lines().count(), REQUIREMENTS.lines().count(), "{text}");
        let locked = Stamp::wanted(&SetupRequest::default());
        let chosen = Stamp::wanted(&SetupRequest {
            torch: Some("2.9.1".into()),
            ..Default::default()
        });
        assert_eq!(locked.mode, "locked");
        assert_eq!(locked.sha256, sha256_hex(LOCK.as_bytes()));
        assert_eq!(chosen.mode, "chosen");
        assert_ne!(locked, chosen);
    }
}
