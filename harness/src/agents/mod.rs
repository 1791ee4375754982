//! Agents produce candidate kernels for a problem. The built-in agents need no model:
//! `reference` (the problem's own code as `ModelNew`) and `replay` (kernels already on disk);
//! [`baseline`] proposes the baseline modes (eager, `torch.compile`) still to measure. The
//! LLM agents are in `llm/`.
//!
//! May import: `exit`, `gpu/`, `worker/` and the small crates (today only `suites` and
//! `baselines`): a candidate is plain data that `config/` and every box above it carry.

pub(crate) mod baseline;
pub(crate) mod untrusted_file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_suites::Problem;
use untrusted_file::{Refusal, UntrustedDir};

use kbench_suites::sha256_hex;

/// One kernel to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    /// Unique within its problem and agent, e.g. a file stem.
    pub(crate) name: String,
    pub(crate) sample: u32,
    pub(crate) source: String,
    pub(crate) source_path: Option<PathBuf>,
    pub(crate) sha256: String,
    /// Call the model once while loading (baseline modes: torch.compile compiles there).
    pub(crate) warm_up: bool,
    /// An LLM agent's re-measurement of one of its kernels while choosing its final one.
    pub(crate) selection: Option<kbench_record::Selection>,
    /// What producing it cost the LLM agent that wrote it; goes into its record.
    pub(crate) cost: Option<kbench_record::AgentCost>,
    /// Why its file was not taken as a kernel (a link out of its folder, not UTF-8, too
    /// large, a FIFO): recorded as this kernel's `compile_error` without starting a worker.
    pub(crate) unreadable: Option<String>,
}

impl Candidate {
    pub(crate) fn new(
        name: String,
        sample: u32,
        source: String,
        source_path: Option<PathBuf>,
    ) -> Self {
        let sha256 = sha256_hex(source.as_bytes());
        Self {
            name,
            sample,
            source,
            source_path,
            sha256,
            warm_up: false,
            selection: None,
            cost: None,
            unreadable: None,
        }
    }

    /// The candidate of kernel file `rel` of `dir`, read through [`UntrustedDir`]: its
    /// source, or for a file that may not be read (or is not UTF-8) an empty source and
    /// `unreadable` saying why and what to do. Nothing of a refused file is kept: not its
    /// bytes, nor their hash.
    pub(crate) fn from_file(dir: &UntrustedDir, rel: &Path, name: String, sample: u32) -> Self {
        let path = dir.path().join(rel);
        let why = match dir.read(rel, untrusted_file::KERNEL_CAP) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(source) => return Candidate::new(name, sample, source, Some(path)),
                Err(e) => Refusal::NotUtf8 {
                    offset: e.utf8_error().valid_up_to(),
                },
            },
            Err(why) => why,
        };
        let mut c = Candidate::new(name, sample, String::new(), Some(path.clone()));
        c.unreadable = Some(format!("kernel file {} not run: it {why}", path.display()));
        c
    }

    /// No kernel at all: an empty or whitespace-only source (a placeholder file, an agent
    /// that gave nothing). Recorded as `no_kernel` without starting a worker.
    pub(crate) fn is_blank(&self) -> bool {
        self.source.trim().is_empty()
    }

    /// The candidate standing for a problem its agent gave no kernel for: named
    /// [`NO_KERNEL`], with an empty source.
    pub(crate) fn missing() -> Self {
        Candidate::new(NO_KERNEL.into(), 0, String::new(), None)
    }
}

/// The candidate name of the `no_kernel` record of a problem that got no kernel at all.
pub(crate) const NO_KERNEL: &str = "no_kernel";

/// Something that proposes kernels for problems.
pub(crate) trait Agent {
    /// Name recorded in every eval record.
    fn name(&self) -> &str;
    /// The candidates for one problem (possibly none).
    fn candidates(&self, problem: &Problem) -> Result<Vec<Candidate>>;
    /// Whether the agent answers every selected problem, so that a problem it proposes no
    /// kernel for is a wrong answer (a `no_kernel` record) and a broken problem file gets a
    /// `problem_error` record. False for agents that measure rather than answer.
    fn answers_every_problem(&self) -> bool {
        true
    }
    /// Why `problem` has no kernel, for its `no_kernel` record.
    fn why_no_kernel(&self, problem: &Problem) -> String {
        format!(
            "agent {} gave no kernel for {} ({})",
            self.name(),
            problem.key(),
            problem.file
        )
    }
}

/// Kernels handed over by an LLM agent (`crate::llm`), by problem key.
pub(crate) struct GivenAgent {
    pub(crate) agent: &'static str,
    pub(crate) candidates: Vec<(String, Candidate)>,
}

impl Agent for GivenAgent {
    fn name(&self) -> &str {
        self.agent
    }
    fn candidates(&self, problem: &Problem) -> Result<Vec<Candidate>> {
        let key = problem.key();
        Ok(self
            .candidates
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, c)| c.clone())
            .collect())
    }
}

/// Submits each problem's own code with `Model` renamed to `ModelNew`: it must come out
/// correct with a speedup near 1, which checks the harness itself.
pub(crate) struct ReferenceAgent;

impl Agent for ReferenceAgent {
    fn name(&self) -> &str {
        "reference"
    }
    fn candidates(&self, problem: &Problem) -> Result<Vec<Candidate>> {
        let source = rename_identifier(&problem.source, "Model", "ModelNew");
        Ok(vec![Candidate::new("reference".into(), 0, source, None)])
    }
}

/// Replaces whole-word occurrences of `from` (identifier boundaries) with `to`.
pub(crate) fn rename_identifier(source: &str, from: &str, to: &str) -> String {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(source.len() + 64);
    let mut rest = source;
    while let Some(pos) = rest.find(from) {
        let before = rest[..pos].chars().next_back();
        let after = rest[pos + from.len()..].chars().next();
        out.push_str(&rest[..pos]);
        if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[pos + from.len()..];
    }
    out.push_str(rest);
    out
}

/// Evaluates kernel files already on disk. Understands:
/// - KernelBench's `runs/<name>/level_<L>_problem_<P>_sample_<S>_kernel.py`;
/// - `<dir>/level<L>/<P>_<anything>.py`;
/// - `<dir>/<P>_<anything>.py`, when problem ids are unique in the selected suite.
///
/// Files are read through [`UntrustedDir`]: an entry named like a kernel that may not be
/// read (a link out of the folder or to kbench's own run files, a FIFO, a dangling link, an
/// oversized or non-UTF-8 file) is still a candidate, recorded as its own `compile_error`.
pub(crate) struct ReplayAgent {
    /// The replay folder.
    dir: PathBuf,
    /// (level, id) → candidates.
    by_problem: BTreeMap<(u8, u32), Vec<Candidate>>,
    /// Files that matched no selected problem.
    pub(crate) unmatched: Vec<PathBuf>,
    /// `level<L>` folders not read, and entries named like no kernel that are neither files
    /// nor folders (a dangling link, a FIFO), and why: each said, none skipped unseen.
    pub(crate) skipped: Vec<String>,
}

impl ReplayAgent {
    /// Scans `dir`; files under `guarded` (the run's own folder, `--secret-from`) are never
    /// read, even when `dir` holds them.
    pub(crate) fn scan(dir: &Path, problems: &[Problem], guarded: &[PathBuf]) -> Result<Self> {
        let folder = UntrustedDir::new(dir, guarded)
            .with_context(|| format!("reading replay folder {}", dir.display()))?;
        let mut found: Vec<(Option<u8>, u32, Option<u32>, PathBuf)> = Vec::new();
        let mut skipped = Vec::new();
        scan_dir(dir, Path::new(""), None, &mut found, &mut skipped)?;
        for d in read_dir_sorted(dir, "replay folder")? {
            let Some(name) = d.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(level) = name
                .strip_prefix("level")
                .and_then(|l| l.parse::<u8>().ok())
            else {
                continue;
            };
            if !d.is_dir() {
                continue;
            }
            if !folder.holds(Path::new(name)) {
                skipped.push(format!(
                    "{} leads outside the replay folder (or to kbench's own run files): its kernels are not read; put the folder itself there",
                    d.display()
                ));
                continue;
            }
            scan_dir(&d, Path::new(name), Some(level), &mut found, &mut skipped)?;
        }
        if found.is_empty() {
            let also = if skipped.is_empty() {
                String::new()
            } else {
                format!(" (not read: {})", skipped.join("; "))
            };
            bail!(
                "replay folder {} holds no kernel files: expected level_<L>_problem_<P>_sample_<S>_kernel.py, <P>_<name>.py or level<L>/<P>_<name>.py{also}",
                dir.display()
            );
        }
        let mut by_problem: BTreeMap<(u8, u32), Vec<Candidate>> = BTreeMap::new();
        let mut unmatched = Vec::new();
        for (level, id, sample, rel) in found {
            let path = dir.join(&rel);
            let matches: Vec<&Problem> = problems
                .iter()
                .filter(|p| p.id == id && level.is_none_or(|l| l == p.level))
                .collect();
            let problem = match matches.as_slice() {
                [] => {
                    unmatched.push(path);
                    continue;
                }
                [p] => *p,
                many => bail!(
                    "replay file {} matches {} problems with id {id} (levels {:?}); put it under level<L>/ or use KernelBench's level_<L>_problem_<P>_sample_<S>_kernel.py names",
                    path.display(),
                    many.len(),
                    many.iter().map(|p| p.level).collect::<Vec<_>>()
                ),
            };
            let name = rel
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("kernel")
                .to_string();
            let list = by_problem.entry((problem.level, problem.id)).or_default();
            let sample = sample.unwrap_or(list.len() as u32);
            list.push(Candidate::from_file(&folder, &rel, name, sample));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            by_problem,
            unmatched,
            skipped,
        })
    }

    /// Number of candidate files matched to problems.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_problem.values().map(Vec::len).sum()
    }
}

impl Agent for ReplayAgent {
    fn name(&self) -> &str {
        "replay"
    }
    fn candidates(&self, problem: &Problem) -> Result<Vec<Candidate>> {
        Ok(self
            .by_problem
            .get(&(problem.level, problem.id))
            .cloned()
            .unwrap_or_default())
    }

    fn why_no_kernel(&self, p: &Problem) -> String {
        format!(
            "replay folder {} has no kernel for {} ({}): expected level_{}_problem_{}_sample_<S>_kernel.py, level{}/{}_<name>.py or {}_<name>.py",
            self.dir.display(),
            p.key(),
            p.file,
            p.level,
            p.id,
            p.level,
            p.id,
            p.id
        )
    }
}

/// The entries of `dir`, sorted by path; `what` names the folder in the error.
pub(crate) fn read_dir_sorted(dir: &Path, what: &str) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {what} {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    v.sort();
    Ok(v)
}

/// The kernel files of `dir` (`rel` inside the replay folder): every entry but folders whose
/// name is a kernel's, links, FIFOs and other non-files included, so that each is recorded
/// rather than skipped unseen. Other entries that are neither files nor folders (a dangling
/// `notes` link, a FIFO named `level2`) are named in `skipped`, never opened.
fn scan_dir(
    dir: &Path,
    rel: &Path,
    level: Option<u8>,
    found: &mut Vec<(Option<u8>, u32, Option<u32>, PathBuf)>,
    skipped: &mut Vec<String>,
) -> Result<()> {
    for path in read_dir_sorted(dir, "replay folder")? {
        if path.is_dir() {
            continue;
        }
        let Some(file) = path.file_name() else {
            continue;
        };
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let kernel = if path.extension().and_then(|e| e.to_str()) != Some("py") {
            None
        } else if let Some((l, p, s)) = parse_kernelbench_run_name(stem) {
            Some((Some(l), p, Some(s)))
        } else {
            leading_id(stem).map(|id| (level, id, None))
        };
        match kernel {
            Some((l, p, s)) => found.push((l, p, s, rel.join(file))),
            None => {
                if let Some(why) = untrusted_file::odd_entry(&path) {
                    skipped.push(format!(
                        "replay folder entry {} {why}; skipped, not named like a kernel file",
                        path.display()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `level_1_problem_19_sample_0_kernel` → (1, 19, 0).
fn parse_kernelbench_run_name(stem: &str) -> Option<(u8, u32, u32)> {
    let rest = stem.strip_prefix("level_")?;
    let (l, rest) = rest.split_once("_problem_")?;
    let (p, rest) = rest.split_once("_sample_")?;
    let s = rest.strip_suffix("_kernel")?;
    Some((l.parse().ok()?, p.parse().ok()?, s.parse().ok()?))
}

/// `19_relu_fast` → 19; requires digits then `_`.
fn leading_id(stem: &str) -> Option<u32> {
    let (id, rest) = stem.split_once('_')?;
    if rest.is_empty() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_only_whole_identifiers() {
        let src = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n# ModelX MyModel Model.\n";
        let out = rename_identifier(src, "Model", "ModelNew");
        assert!(out.contains("class ModelNew(nn.Module)"));
        assert!(out.contains("super(ModelNew, self)"));
        assert!(out.contains("ModelX MyModel ModelNew."));
    }

    fn problem(level: u8, id: u32) -> Problem {
        kbench_suites::smoke()
            .into_iter()
            .next()
            .map(|mut p| {
                p.level = level;
                p.id = id;
                p
            })
            .unwrap()
    }

    #[test]
    fn replay_understands_all_three_layouts() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("level_2_problem_5_sample_3_kernel.py"), "a").unwrap();
        std::fs::create_dir(d.join("level1")).unwrap();
        std::fs::write(d.join("level1/5_fast.py"), "b").unwrap();
        std::fs::write(d.join("level1/5_faster.py"), "c").unwrap();
        std::fs::write(d.join("7_plain.py"), "d").unwrap();
        std::fs::write(d.join("99_nobody.py"), "e").unwrap();
        std::fs::write(d.join("notes.txt"), "f").unwrap();
        let problems = vec![problem(1, 5), problem(2, 5), problem(3, 7)];
        let a = ReplayAgent::scan(d, &problems, &[]).unwrap();
        assert_eq!(a.len(), 4);
        let l2: Vec<_> = a.candidates(&problems[1]).unwrap();
        assert_eq!(
            (l2[0].name.as_str(), l2[0].sample),
            ("level_2_problem_5_sample_3_kernel", 3)
        );
        let l1: Vec<_> = a
            .candidates(&problems[0])
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.sample))
            .collect();
        assert_eq!(
            l1,
            vec![("5_fast".to_string(), 0), ("5_faster".to_string(), 1)]
        );
        assert_eq!(a.candidates(&problems[2]).unwrap()[0].source, "d");
        assert_eq!(a.unmatched.len(), 1);
        // A plain <id>_ file is ambiguous when two selected problems share the id.
        std::fs::write(d.join("5_which.py"), "g").unwrap();
        let err = ReplayAgent::scan(d, &problems, &[])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("5_which.py") && err.contains("level<L>"),
            "{err}"
        );
        // An empty folder says what it expected.
        let empty = tempfile::tempdir().unwrap();
        let err = ReplayAgent::scan(empty.path(), &problems, &[])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("level_<L>_problem_<P>_sample_<S>_kernel.py"),
            "{err}"
        );
    }

    #[test]
    fn replay_keeps_kernel_files_it_may_not_read_as_failed_candidates() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("set");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(t.path().join("outside.py"), "private = 1\n").unwrap();
        std::os::unix::fs::symlink("../outside.py", d.join("5_out.py")).unwrap();
        std::os::unix::fs::symlink("gone.py", d.join("5_gone.py")).unwrap();
        std::fs::write(d.join("5_bytes.py"), b"x = '\xff'\n").unwrap();
        std::fs::write(d.join("5_good.py"), "x = 1\n").unwrap();
        // A level folder that links out is not read at all, and said so.
        std::os::unix::fs::symlink(t.path(), d.join("level1")).unwrap();
        let problems = vec![problem(1, 5)];
        let a = ReplayAgent::scan(&d, &problems, &[]).unwrap();
        let c = a.candidates(&problems[0]).unwrap();
        let why: Vec<(&str, Option<&str>)> = c
            .iter()
            .map(|c| (c.name.as_str(), c.unreadable.as_deref()))
            .collect();
        assert_eq!(why.len(), 4, "{why:?}");
        assert!(why[0].1.unwrap().contains("not UTF-8"), "{why:?}");
        assert!(why[1].1.unwrap().contains("link to nothing"), "{why:?}");
        assert_eq!(why[2], ("5_good", None));
        assert!(why[3].1.unwrap().contains("outside"), "{why:?}");
        assert!(c.iter().all(|c| !c.source.contains("private")));
        assert!(
            a.skipped[0].contains("level1 leads outside"),
            "{:?}",
            a.skipped
        );
    }

    #[test]
    fn replay_names_entries_that_are_neither_kernels_nor_files_and_never_opens_them() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::write(d.join("5_good.py"), "x = 1\n").unwrap();
        std::fs::write(d.join("README.md"), "notes\n").unwrap();
        let fifo = |p: &Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Nobody writes to these FIFOs: opening one would hang the test.
        fifo(&d.join("pipe"));
        fifo(&d.join("level2"));
        std::os::unix::fs::symlink("nowhere", d.join("notes")).unwrap();
        std::os::unix::fs::symlink("gone", d.join("level3")).unwrap();
        std::fs::create_dir(d.join("level1")).unwrap();
        fifo(&d.join("level1/helper.py"));
        let problems = vec![problem(1, 5)];
        let a = ReplayAgent::scan(d, &problems, &[]).unwrap();
        assert_eq!(a.len(), 1);
        let said = |name: &str, why: &str| {
            let entry = format!("replay folder entry {} {why}", d.join(name).display());
            assert!(
                a.skipped.iter().any(|s| s.starts_with(&entry)),
                "{entry} not in {:?}",
                a.skipped
            );
        };
        said("pipe", "is a FIFO");
        said("level2", "is a FIFO");
        said("level1/helper.py", "is a FIFO");
        said("notes", "is a link to nothing (it points to nowhere)");
        said("level3", "is a link to nothing (it points to gone)");
        // A regular file named like no kernel is a user's notes, not worth a line.
        assert_eq!(a.skipped.len(), 5, "{:?}", a.skipped);
        // A folder with nothing else says what it did not read.
        std::fs::remove_file(d.join("5_good.py")).unwrap();
        let err = ReplayAgent::scan(d, &problems, &[])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("holds no kernel files") && err.contains("pipe is a FIFO"),
            "{err}"
        );
    }

    #[test]
    fn kernelbench_run_names_parse() {
        assert_eq!(
            parse_kernelbench_run_name("level_2_problem_40_sample_3_kernel"),
            Some((2, 40, 3))
        );
        assert_eq!(
            parse_kernelbench_run_name("level_2_problem_40_sample_x_kernel"),
            None
        );
        assert_eq!(leading_id("19_relu"), Some(19));
        assert_eq!(leading_id("relu_19"), None);
        assert_eq!(leading_id("19_"), None);
    }
}
