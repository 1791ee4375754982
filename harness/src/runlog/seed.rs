//! The per-run secret seed and the seeds derived from it.
//!
//! Candidate processes never see the secret: the trusted reference worker receives derived
//! input seeds, and candidates receive only the tensors those seeds produced. Derived seeds are
//! sha256(secret ‖ label) truncated to 63 bits, so one derived seed reveals nothing about
//! another or about the secret.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// 32 random bytes, kept in the run directory (mode 0600) so that `--resume` reproduces the
/// same inputs.
#[derive(Clone, PartialEq, Eq)]
pub struct RunSecret([u8; 32]);

impl std::fmt::Debug for RunSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunSecret(<hidden>)")
    }
}

impl RunSecret {
    /// Fresh secret from the operating system's random source.
    pub fn generate() -> Result<Self> {
        let mut b = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut b))
            .context("reading /dev/urandom for the run's secret seed")?;
        Ok(Self(b))
    }

    pub fn from_bytes(b: [u8; 32]) -> Self {
        Self(b)
    }

    /// Loads the secret saved by [`RunSecret::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the run secret {}", path.display()))?;
        let text = text.trim();
        if text.len() != 64 || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
            bail!(
                "run secret {} is corrupt (expected 64 hex digits); start a new run with another --out",
                path.display()
            );
        }
        let mut b = [0u8; 32];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap_or(0);
        }
        Ok(Self(b))
    }

    /// Saves the secret with owner-only permissions.
    pub fn save(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("creating the run secret {}", path.display()))?;
        f.write_all(hex.as_bytes())?;
        f.sync_all()?;
        Ok(())
    }

    /// A 63-bit seed for `label` (e.g. `input/<problem sha>/random/3`).
    pub fn derive(&self, label: &str) -> u64 {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(label.as_bytes());
        let d = h.finalize();
        u64::from_le_bytes(d[..8].try_into().unwrap_or_default()) & (u64::MAX >> 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_seeds_are_stable_and_distinct() {
        let s = RunSecret::from_bytes([7; 32]);
        assert_eq!(s.derive("a"), s.derive("a"));
        assert_ne!(s.derive("a"), s.derive("b"));
        assert!(s.derive("a") < (1 << 63));
        let t = RunSecret::from_bytes([8; 32]);
        assert_ne!(s.derive("a"), t.derive("a"));
    }

    #[test]
    fn save_and_load_round_trip_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        let s = RunSecret::generate().unwrap();
        s.save(&p).unwrap();
        assert_eq!(RunSecret::load(&p).unwrap(), s);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(format!("{s:?}").contains("hidden"));
    }
}
