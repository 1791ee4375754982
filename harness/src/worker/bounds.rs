//! What bounds a worker besides its timeouts: a memory cap for every worker, and for
//! untrusted workers in the sandbox an unprivileged uid when kbench runs as root.
//!
//! The memory cap is a cgroup's `memory.max` where the host gives kbench the memory
//! controller (`super::cgroup`), with a cap on all workers together; elsewhere, on the CPU,
//! the worker limits its own address space (RLIMIT_AS) at start-up, before any problem or
//! candidate code runs; on a GPU without the controller there is no cap (CUDA reserves far
//! more address space than it uses, so an address-space limit breaks it), and records say so.

use std::path::Path;

use kbench_record::human_bytes;

/// The uid sandboxed candidates run as when kbench runs as root: a number, or `off` to keep
/// them as root (for a driver that refuses something across users). Unset: [`NOBODY`].
pub(crate) const CANDIDATE_UID_ENV: &str = "KBENCH_CANDIDATE_UID";

/// `nobody` on Debian, Ubuntu, Fedora and Arch: owns no file.
pub(crate) const NOBODY: u32 = 65534;

/// The smallest cap `auto` gives a worker: a worker of a small problem needs well under a GiB
/// beside torch.
pub(crate) const MIN_AUTO_CAP: u64 = 2 << 30;

/// Workers that can be alive at once for each device: the reference and the candidate being
/// evaluated, and those started ahead (`docs/running.md`, "Workers started ahead").
pub(crate) const WORKERS_PER_DEVICE: u64 = 4;

/// `--memory-cap` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum MemoryCapChoice {
    /// A share of the host's memory ([`auto_cap`]).
    #[default]
    Auto,
    /// No cap.
    Off,
    /// This many bytes for each worker.
    Bytes(u64),
}

/// Reads `--memory-cap`: `auto`, `none`, or a size (`6GiB`, `512MiB`, `8G`, bytes).
pub(crate) fn parse_memory_cap(s: &str) -> Result<MemoryCapChoice, String> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "auto" => return Ok(MemoryCapChoice::Auto),
        "none" | "off" => return Ok(MemoryCapChoice::Off),
        _ => {}
    }
    let bad = || {
        format!(
            "--memory-cap {s:?}: not a size; give `auto` (the default), `none`, or bytes with a \
             unit, such as 8GiB or 512MiB"
        )
    };
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = value * scale as f64;
    if !(bytes.is_finite() && bytes >= (64u64 << 20) as f64 && bytes < u64::MAX as f64) {
        return Err(format!(
            "--memory-cap {s:?}: at least 64MiB (a worker imports torch), or `none` for no cap"
        ));
    }
    Ok(MemoryCapChoice::Bytes(bytes as u64))
}

/// `auto`: three quarters of the host's memory (`host_bytes`: the smaller of `MemTotal` and
/// kbench's own cgroup limit, such as a Slurm job's `--mem`), shared among the workers that
/// can be alive at once, at least [`MIN_AUTO_CAP`] each. The same three quarters cap all
/// workers together where a cgroup can hold them ([`all_workers_cap`]); the rest is kbench's
/// own (the reference cases it keeps) and the host's.
pub(crate) fn auto_cap(host_bytes: Option<u64>, workers_alive: u64) -> u64 {
    let budget = host_bytes.map_or(16 << 30, |b| b / 4 * 3);
    (budget / workers_alive.max(1)).max(MIN_AUTO_CAP)
}

/// The cap on all workers together, where a cgroup holds them: three quarters of the host's
/// memory, and never less than one worker's cap.
pub(crate) fn all_workers_cap(host_bytes: Option<u64>, each: u64) -> Option<u64> {
    host_bytes.map(|b| (b / 4 * 3).max(each))
}

/// How a run's workers are capped, decided once it knows its devices and its cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryPlan {
    /// Each worker's cap, and whether a worker without a cgroup cap limits its own address
    /// space (true on the CPU device only).
    pub(crate) each: Option<u64>,
    pub(crate) rlimit_fallback: bool,
    /// Whether the cap is a cgroup's (`memory.max`).
    pub(crate) by_cgroup: bool,
    /// The cap on all workers together (a cgroup's).
    pub(crate) all: Option<u64>,
    /// Why there is no cap, when there is none.
    pub(crate) none_why: Option<String>,
}

impl MemoryPlan {
    /// The plan for `choice` with `workers_alive` workers at most: `cgroup_memory` says
    /// whether worker groups can have `memory.max` (else `no_cgroup_why`), `gpu` whether the
    /// workers use CUDA.
    pub(crate) fn decide(
        choice: MemoryCapChoice,
        host_bytes: Option<u64>,
        workers_alive: u64,
        cgroup_memory: bool,
        no_cgroup_why: &str,
        gpu: bool,
    ) -> MemoryPlan {
        let each = match choice {
            MemoryCapChoice::Off => {
                return MemoryPlan {
                    each: None,
                    rlimit_fallback: false,
                    by_cgroup: false,
                    all: None,
                    none_why: Some("--memory-cap none".into()),
                }
            }
            MemoryCapChoice::Bytes(b) => b,
            MemoryCapChoice::Auto => auto_cap(host_bytes, workers_alive),
        };
        if cgroup_memory {
            return MemoryPlan {
                each: Some(each),
                rlimit_fallback: false,
                by_cgroup: true,
                all: all_workers_cap(host_bytes, each),
                none_why: None,
            };
        }
        if gpu {
            return MemoryPlan {
                each: None,
                rlimit_fallback: false,
                by_cgroup: false,
                all: None,
                none_why: Some(format!(
                    "a GPU run without a cgroup memory controller ({no_cgroup_why}): CUDA's \
                     address-space reservations rule out RLIMIT_AS"
                )),
            };
        }
        MemoryPlan {
            each: Some(each),
            rlimit_fallback: true,
            by_cgroup: false,
            all: None,
            none_why: None,
        }
    }

    /// How records name the enforcement: `cgroup`, `rlimit` or `none: <why>`.
    pub(crate) fn method(&self) -> String {
        match (&self.each, self.by_cgroup) {
            (Some(_), true) => "cgroup".into(),
            (Some(_), false) => "rlimit".into(),
            (None, _) => format!(
                "none: {}",
                self.none_why.as_deref().unwrap_or("no cap asked for")
            ),
        }
    }
}

/// The uid sandboxed candidates run as: `KBENCH_CANDIDATE_UID` (`value`) when kbench runs
/// as root (`euid` 0), [`NOBODY`] when unset; `None` when it is `off`, or when kbench is not
/// root (only root can change uid; candidates then run as the invoking user).
pub(crate) fn candidate_uid(value: Option<&str>, euid: u32) -> Result<Option<u32>, String> {
    let value = value.map(str::trim).filter(|v| !v.is_empty());
    let uid = match value {
        None => NOBODY,
        Some(v) if v.eq_ignore_ascii_case("off") => return Ok(None),
        Some(v) => match v.parse::<u32>() {
            Ok(0) | Err(_) => {
                return Err(format!(
                    "{CANDIDATE_UID_ENV}={v:?}: give an unprivileged uid that owns no file \
                     (default {NOBODY}), or `off` to run sandboxed candidates as the invoking \
                     user"
                ))
            }
            Ok(n) => n,
        },
    };
    Ok((euid == 0).then_some(uid))
}

/// A worker's memory cap: its cgroup's `memory.max` where its tree has the memory
/// controller; otherwise, with `rlimit_fallback` (the CPU device), the worker's own
/// address-space limit on top of what importing torch maps (`kbench_worker/startup.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryCap {
    pub(crate) bytes: u64,
    pub(crate) rlimit_fallback: bool,
}

/// How a running worker's memory is capped.
/// A worker that went past a memory cap: the cap's bytes, whether it is the cap of all
/// workers together, and how it was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapMet {
    pub(crate) limit_bytes: u64,
    pub(crate) all_workers: bool,
    pub(crate) how: String,
}

impl CapMet {
    /// What the harness says of it (the cap, how it was met, the option that raises it),
    /// `when` it happened (`""`, or e.g. " while making case random#0").
    pub(crate) fn text(&self, when: &str) -> String {
        cap_met_text(self.limit_bytes, self.all_workers, &self.how, when)
    }
}

/// Gives `path` and everything below it to `uid` (gid the same number): what a candidate
/// running as `uid` must write (its working folder, its build folder). Links are changed
/// themselves, never followed (`lchown`), so a link a candidate planted cannot hand it a file
/// elsewhere; an entry removed meanwhile (a build job's compiler working in the folder) is
/// passed over. Hand-written: a dozen lines of the standard library's `lchown` over a walk.
pub(crate) fn hand_over(path: &Path, uid: u32) -> std::io::Result<()> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    match std::os::unix::fs::lchown(path, Some(uid), Some(uid)) {
        Err(e) if gone(&e) => return Ok(()),
        other => other?,
    }
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if gone(&e) => return Ok(()),
        other => other?,
    };
    if meta.is_dir() {
        let entries = match std::fs::read_dir(path) {
            Err(e) if gone(&e) => return Ok(()),
            other => other?,
        };
        for entry in entries {
            hand_over(&entry?.path(), uid)?;
        }
    }
    Ok(())
}

/// Whether a worker's error text is an allocation refused for want of memory: what torch's
/// CPU allocator, Python, numpy and C++ say when the address-space limit is met.
pub(crate) fn allocation_failed(message: &str) -> bool {
    const SIGNS: &[&str] = &[
        "can't allocate memory",
        "Cannot allocate memory",
        "MemoryError",
        "std::bad_alloc",
        "Unable to allocate",
        "DefaultCPUAllocator: not enough memory",
    ];
    SIGNS.iter().any(|s| message.contains(s))
}

/// What the harness says of a worker that met its cap `while` doing something (`""`, or
/// e.g. " while making case random#0"): which cap, how much, how it was told, and how to
/// raise it.
pub(crate) fn cap_met_text(limit: u64, all_workers: bool, how: &str, when: &str) -> String {
    let whose = if all_workers {
        "the memory cap of all workers together"
    } else {
        "its memory cap"
    };
    format!(
        "went past {whose} of {}{when} ({how}); raise it with --memory-cap (e.g. --memory-cap \
         {}), or lift it with --memory-cap none",
        human_bytes(limit),
        suggest_larger(limit)
    )
}

/// A round larger cap to suggest: twice `limit`, in whole GiB.
fn suggest_larger(limit: u64) -> String {
    format!("{}GiB", (limit * 2).div_ceil(1 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn memory_caps_read_sizes_auto_and_none() {
        assert_eq!(parse_memory_cap("auto"), Ok(MemoryCapChoice::Auto));
        assert_eq!(parse_memory_cap("none"), Ok(MemoryCapChoice::Off));
        assert_eq!(
            parse_memory_cap("2GiB"),
            Ok(MemoryCapChoice::Bytes(2 * GIB))
        );
        assert_eq!(
            parse_memory_cap("1.5g"),
            Ok(MemoryCapChoice::Bytes(3 * GIB / 2))
        );
        assert_eq!(
            parse_memory_cap("512MiB"),
            Ok(MemoryCapChoice::Bytes(512 << 20))
        );
        assert_eq!(
            parse_memory_cap("1073741824"),
            Ok(MemoryCapChoice::Bytes(GIB))
        );
        for bad in ["", "lots", "2 parsecs", "-1G", "1k", "NaNG"] {
            let e = parse_memory_cap(bad).unwrap_err();
            assert!(e.contains("--memory-cap"), "{bad}: {e}");
        }
    }

    #[test]
    fn auto_shares_three_quarters_of_the_host_among_the_workers_alive() {
        // This CI host: 24 GiB, one device, no build jobs.
        assert_eq!(auto_cap(Some(24 * GIB), 4), 18 * GIB / 4);
        // A small host still gives each worker room for torch and a small problem.
        assert_eq!(auto_cap(Some(4 * GIB), 4), MIN_AUTO_CAP);
        assert_eq!(auto_cap(None, 0), 16 * GIB);
        assert_eq!(all_workers_cap(Some(24 * GIB), 4 * GIB), Some(18 * GIB));
        assert_eq!(all_workers_cap(Some(4 * GIB), 8 * GIB), Some(8 * GIB));
    }

    #[test]
    fn the_plan_uses_cgroups_then_rlimit_on_the_cpu_and_nothing_on_a_gpu_without_cgroups() {
        let auto = MemoryCapChoice::Auto;
        let host = Some(24 * GIB);
        let p = MemoryPlan::decide(auto, host, 4, true, "", true);
        assert_eq!(
            (p.each, p.all, p.method().as_str()),
            (Some(18 * GIB / 4), Some(18 * GIB), "cgroup")
        );
        let p = MemoryPlan::decide(auto, host, 4, false, "no controller", false);
        assert_eq!(
            (p.each, p.rlimit_fallback, p.method().as_str()),
            (Some(18 * GIB / 4), true, "rlimit")
        );
        let p = MemoryPlan::decide(auto, host, 4, false, "no controller", true);
        assert_eq!(p.each, None);
        assert!(p.method().starts_with("none: a GPU run") && p.method().contains("no controller"));
        let p = MemoryPlan::decide(MemoryCapChoice::Off, host, 4, true, "", false);
        assert_eq!(
            (p.each, p.method().as_str()),
            (None, "none: --memory-cap none")
        );
        let p = MemoryPlan::decide(MemoryCapChoice::Bytes(GIB), host, 4, true, "", false);
        assert_eq!((p.each, p.all), (Some(GIB), Some(18 * GIB)));
    }

    #[test]
    fn candidates_drop_to_nobody_only_as_root_and_unless_turned_off() {
        assert_eq!(candidate_uid(None, 0), Ok(Some(NOBODY)));
        assert_eq!(candidate_uid(Some(""), 0), Ok(Some(NOBODY)));
        assert_eq!(candidate_uid(Some("1234"), 0), Ok(Some(1234)));
        assert_eq!(candidate_uid(Some("off"), 0), Ok(None));
        assert_eq!(candidate_uid(None, 1000), Ok(None));
        for bad in ["0", "root", "-5"] {
            let e = candidate_uid(Some(bad), 0).unwrap_err();
            assert!(e.contains(CANDIDATE_UID_ENV) && e.contains("off"), "{e}");
        }
    }

    #[test]
    fn allocation_failures_are_recognised_and_cap_texts_name_the_option() {
        assert!(allocation_failed("get_inputs failed: RuntimeError: [enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 10737418240 bytes. Error code 12 (Cannot allocate memory)"));
        assert!(allocation_failed("MemoryError"));
        assert!(allocation_failed(
            "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8.00 GiB"
        ));
        assert!(!allocation_failed(
            "RuntimeError: CUDA error: an illegal memory access"
        ));
        let t = cap_met_text(
            2 * GIB,
            false,
            "an allocation was refused",
            " while loading",
        );
        assert!(
            t.contains("its memory cap of 2.0 GiB while loading (an allocation was refused)")
                && t.contains("--memory-cap 4GiB")
                && t.contains("--memory-cap none"),
            "{t}"
        );
        assert!(cap_met_text(GIB, true, "x", "").contains("all workers together"));
    }

    #[test]
    fn hand_over_changes_links_not_what_they_point_to() {
        if nix::unistd::geteuid().as_raw() != 0 {
            eprintln!("skipped: only root can give files away");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        let inner = dir.path().join("sub");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(inner.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), inner.join("link")).unwrap();
        hand_over(dir.path(), NOBODY).unwrap();
        use std::os::unix::fs::MetadataExt;
        let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(owner(dir.path()), NOBODY);
        assert_eq!(owner(&inner.join("f")), NOBODY);
        assert_eq!(owner(&inner.join("link")), NOBODY);
        assert_eq!(owner(outside.path()), 0, "the link's target was given away");
    }
}
