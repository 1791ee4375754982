//! What a client is told of an evaluation record (its verdict), the names kernels get in the
//! service's run log, and the verdict cache's key.

use kbench_record::{EvalRecord, Outcome};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A record's verdict, as the API and the board read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Verdict {
    pub(crate) outcome: String,
    pub(crate) correct: bool,
    pub(crate) speedup: Option<f64>,
    /// An integrity check failed the kernel.
    pub(crate) flagged: bool,
    /// The integrity flag that failed it (and none else: advisories do not fail a kernel).
    pub(crate) flags: Vec<String>,
    pub(crate) message: Option<String>,
}

impl Verdict {
    pub(crate) fn of(r: &EvalRecord) -> Verdict {
        let flags = match &r.outcome {
            Outcome::Integrity { flag, .. } => vec![flag.clone()],
            _ => Vec::new(),
        };
        let correct = r.outcome.is_ok();
        Verdict {
            outcome: r.outcome.kind().to_string(),
            correct,
            speedup: r.timing.as_ref().filter(|_| correct).map(|t| t.speedup),
            flagged: !flags.is_empty(),
            flags,
            message: (!correct).then(|| r.outcome.to_string()),
        }
    }

    /// Whether this verdict lets an entry count on the board (and run its ranked pass).
    pub(crate) fn counts(&self) -> bool {
        self.correct && !self.flagged
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name a kernel gets in the run log: the same for the same problem file and source, so
/// that the log itself answers a kernel it holds (after a restart, too).
pub(crate) fn kernel_name(problem_sha256: &str, source: &str) -> String {
    let mut h = Sha256::new();
    h.update(problem_sha256.as_bytes());
    h.update([0]);
    h.update(source.as_bytes());
    format!("k{}", &hex(&h.finalize())[..24])
}

/// The verdict cache's key: the problem's content, the source, and the fleet (settings, run
/// secret's identity, kbench, GPU model, torch: [`super::fleet`]).
pub(crate) fn cache_key(fleet: &str, problem_sha256: &str, source: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        fleet.as_bytes(),
        problem_sha256.as_bytes(),
        source.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex(&h.finalize())
}

/// sha256 of `s` in hex (tokens are kept as these).
pub(crate) fn sha256_hex(s: &[u8]) -> String {
    hex(&Sha256::digest(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_with_every_part_and_do_not_run_parts_together() {
        let k = cache_key("f", "p", "src");
        assert_ne!(k, cache_key("g", "p", "src"));
        assert_ne!(k, cache_key("f", "q", "src"));
        assert_ne!(k, cache_key("f", "p", "src2"));
        assert_ne!(cache_key("ab", "c", "x"), cache_key("a", "bc", "x"));
        assert_eq!(k, cache_key("f", "p", "src"));
        assert_ne!(kernel_name("p", "a"), kernel_name("q", "a"));
        assert!(kernel_name("p", "a").starts_with('k'));
    }
}
