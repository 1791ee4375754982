//! The per-run secret seed and the seeds derived from it.
//!
//! Candidate processes never see the secret: the trusted reference worker receives derived
//! input seeds, and candidates receive only the tensors those seeds produced. Derived seeds are
//! sha256(secret ‖ label) truncated to 63 bits, so one derived seed reveals nothing about
//! another or about the secret. The secret also keys the MAC of every record line
//! (`runlog::records`), so that a line the harness did not write is recognised.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// 32 random bytes, kept in the run directory (mode 0600) so that `--resume` reproduces the
/// same inputs and record lines can be verified.
#[derive(Clone, PartialEq, Eq)]
pub struct RunSecret([u8; 32]);

impl std::fmt::Debug for RunSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunSecret(<hidden>)")
    }
}

impl RunSecret {
    /// Fresh secret from the operating system's random source.
    pub(crate) fn generate() -> Result<Self> {
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
        match decode_hex::<32>(text.trim()) {
            Some(b) => Ok(Self(b)),
            None => bail!(
                "run secret {} is corrupt (expected 64 hex digits); start a new run with another --out",
                path.display()
            ),
        }
    }

    /// Saves the secret with owner-only permissions.
    pub(crate) fn save(&self, path: &Path) -> Result<()> {
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
    pub(crate) fn derive(&self, label: &str) -> u64 {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(label.as_bytes());
        let d = h.finalize();
        u64::from_le_bytes(d[..8].try_into().unwrap_or_default()) & (u64::MAX >> 1)
    }

    /// HMAC-SHA256 of `bytes` keyed by the secret, as 64 lowercase hex digits.
    pub(crate) fn mac_hex(&self, bytes: &[u8]) -> String {
        self.hmac(bytes)
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// A key of its own for `purpose`: HMAC-SHA256 keyed by the secret over
    /// `kbench <purpose>`. Records and `run.json` are signed with keys of their own
    /// (`runlog::records`), so neither verifies as the other, and a record signed under one
    /// scheme never verifies under another.
    pub fn subkey(&self, purpose: &str) -> RunSecret {
        let mac = self.hmac(format!("kbench {purpose}").as_bytes()).finalize();
        let mut b = [0u8; 32];
        b.copy_from_slice(&mac.into_bytes());
        RunSecret(b)
    }

    /// Whether `mac_hex` (64 hex digits) is the HMAC of `bytes`; compared in constant time.
    pub(crate) fn verify_mac(&self, bytes: &[u8], mac_hex: &str) -> bool {
        let Some(mac) = decode_hex::<32>(mac_hex) else {
            return false;
        };
        self.hmac(bytes).verify_slice(&mac).is_ok()
    }

    fn hmac(&self, bytes: &[u8]) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key");
        m.update(bytes);
        m
    }
}

/// `N` bytes from exactly `2N` hex digits.
fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut b = [0u8; N];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(b)
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

    #[test]
    fn a_mac_verifies_only_its_bytes_under_its_secret() {
        let s = RunSecret::from_bytes([7; 32]);
        let mac = s.mac_hex(b"record");
        assert_eq!(mac.len(), 64);
        assert!(s.verify_mac(b"record", &mac));
        assert!(!s.verify_mac(b"recorD", &mac));
        assert!(!RunSecret::from_bytes([8; 32]).verify_mac(b"record", &mac));
        assert!(!s.verify_mac(b"record", &mac[..62]));
        assert!(!s.verify_mac(b"record", "zz"));
        // A subkey is another key: its MACs are not the secret's, and differ by purpose.
        let (a, b) = (s.subkey("records"), s.subkey("run.json"));
        assert!(!a.verify_mac(b"record", &mac));
        assert_ne!(a.mac_hex(b"record"), b.mac_hex(b"record"));
        assert_eq!(a, s.subkey("records"));
        // RFC 4231 test case 2: HMAC pads a short key with zeros, so "Jefe" and 28 zero
        // bytes is that case's key; the MAC is HMAC-SHA256 itself, not a look-alike.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        assert_eq!(
            RunSecret::from_bytes(key).mac_hex(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
