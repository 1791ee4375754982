//! The service's clients: the tokens file (a token is kept only as its sha256), each client's
//! rate limits and quotas, and telling a request's client from its bearer token.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::Path;

use anyhow::{bail, Context, Result};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;

use super::verdict::sha256_hex;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    client: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token_sha256: String,
    #[serde(default = "default_submissions_per_minute")]
    submissions_per_minute: u32,
    #[serde(default = "default_requests_per_minute")]
    requests_per_minute: u32,
    #[serde(default = "default_max_queued")]
    max_queued: u64,
    #[serde(default)]
    max_submissions: Option<u64>,
}

fn default_submissions_per_minute() -> u32 {
    600
}
fn default_requests_per_minute() -> u32 {
    6000
}
fn default_max_queued() -> u64 {
    1000
}

/// One client: its name (in its records' exports and on the board) and its limits.
pub(crate) struct Client {
    pub(crate) name: String,
    pub(crate) max_queued: u64,
    pub(crate) max_submissions: Option<u64>,
    submissions: DefaultDirectRateLimiter,
    requests: DefaultDirectRateLimiter,
    /// Its long polls under way.
    waits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// One long poll of a client, counted while it lives.
pub(crate) struct Waiting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Why a request of a known client must wait.
pub(crate) struct TooFast {
    pub(crate) retry_after_s: u64,
}

fn per_minute(n: u32) -> Quota {
    let n = NonZeroU32::new(n.max(1)).expect("max(1) is non-zero");
    Quota::per_minute(n)
}

fn wait_of(
    nu: governor::NotUntil<<governor::clock::DefaultClock as governor::clock::Clock>::Instant>,
) -> TooFast {
    use governor::clock::{Clock, DefaultClock};
    let wait = nu.wait_time_from(DefaultClock::default().now());
    TooFast {
        retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
    }
}

/// A client's long polls at once.
pub(crate) const MAX_WAITS: usize = 16;

impl Client {
    /// A long poll, unless the client has [`MAX_WAITS`] under way.
    pub(crate) fn long_poll(&self) -> Option<Waiting> {
        use std::sync::atomic::Ordering;
        if self.waits.fetch_add(1, Ordering::SeqCst) >= MAX_WAITS {
            self.waits.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Waiting(std::sync::Arc::clone(&self.waits)))
    }

    /// One request (any route).
    pub(crate) fn request(&self) -> Result<(), TooFast> {
        self.requests.check().map_err(wait_of)
    }

    /// `n` submissions at once.
    pub(crate) fn submissions(&self, n: u32) -> Result<(), TooFast> {
        let Some(n) = NonZeroU32::new(n) else {
            return Ok(());
        };
        match self.submissions.check_n(n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(nu)) => Err(wait_of(nu)),
            // More at once than a minute allows: never, whatever the wait.
            Err(_) => Err(TooFast { retry_after_s: 60 }),
        }
    }
}

/// The clients of the tokens file, by token hash.
pub(crate) struct Clients {
    by_hash: HashMap<String, Client>,
}

impl Clients {
    pub(crate) fn load(path: &Path) -> Result<Clients> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the tokens file {}", path.display()))?;
        let file: File = toml::from_str(&text).with_context(|| {
            format!(
                "{}: not a tokens file ([[client]] entries of name, token_sha256 and limits)",
                path.display()
            )
        })?;
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for (i, e) in file.client.into_iter().enumerate() {
            let at = format!("{}: client {} ({:?})", path.display(), i + 1, e.name);
            let h = e.token_sha256.to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("{at}: token_sha256 must be 64 hex digits (the sha256 of the token; `kbench serve --new-token NAME` makes one)");
            }
            if e.name.is_empty() || e.name.len() > 64 || e.name.chars().any(|c| c.is_control()) {
                bail!("{at}: a name of 1 to 64 printable characters");
            }
            if !names.insert(e.name.clone()) {
                bail!("{at}: the name is used twice");
            }
            let client = Client {
                name: e.name,
                max_queued: e.max_queued,
                max_submissions: e.max_submissions,
                submissions: RateLimiter::direct(per_minute(e.submissions_per_minute)),
                requests: RateLimiter::direct(per_minute(e.requests_per_minute)),
                waits: Default::default(),
            };
            if by_hash.insert(h, client).is_some() {
                bail!("{at}: the same token as an earlier client");
            }
        }
        if by_hash.is_empty() {
            bail!(
                "{}: no [[client]] entry: nobody could submit",
                path.display()
            );
        }
        Ok(Clients { by_hash })
    }

    /// The client whose token `authorization` (the header's value) bears.
    pub(crate) fn find(&self, authorization: Option<&str>) -> Option<&Client> {
        // The scheme is case-insensitive (RFC 7235).
        let (scheme, token) = authorization?.trim().split_once(char::is_whitespace)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim();
        if token.is_empty() || token.len() > 256 {
            return None;
        }
        self.by_hash.get(&sha256_hex(token.as_bytes()))
    }
}

/// A fresh token and the tokens-file entry that admits it.
pub(crate) fn new_token(name: &str) -> Result<(String, String)> {
    use std::io::Read;
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom for a token")?;
    let token: String = format!(
        "kb_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    );
    let entry = format!(
        "[[client]]\nname = {}\ntoken_sha256 = \"{}\"\n# submissions_per_minute = 600\n# max_queued = 1000\n# max_submissions = 100000\n",
        toml::Value::String(name.to_string()),
        sha256_hex(token.as_bytes())
    );
    Ok((token, entry))
}
