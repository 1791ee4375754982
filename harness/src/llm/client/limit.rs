//! Client-side rate limits of one `[models.NAME]` table (`rpm`, `tpm`), shared by every
//! task and trajectory of a run that calls that model, so a run stays under the provider's
//! limits instead of collecting 429s.
//!
//! Both are governor GCRA buckets. Requests are spaced evenly (one every 60/rpm seconds, no
//! burst: providers enforce their per-minute limits over short windows too). Tokens: the
//! bucket holds one second's allowance (tpm/60, at least 1); a charge larger than that is
//! taken in bucket-sized parts, so any request passes, at the rate tpm allows. Before a
//! request its prompt is charged at an estimate (the JSON body's bytes / 4); after the reply
//! the rest of what the usage reports (prompt beyond the estimate, plus the completion) is
//! charged, the caller waiting for it, so the next request of any task finds the bucket
//! emptied by what was really used. An over-estimate is not refunded (governor cannot give
//! capacity back): the error is on the side of fewer 429s.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::model::ModelConfig;

/// Bytes of request JSON per estimated prompt token.
const BYTES_PER_TOKEN: u64 = 4;

pub(super) struct Limits {
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
}

impl Limits {
    pub(super) fn new(m: &ModelConfig) -> Self {
        let requests = m.rpm.and_then(NonZeroU32::new).and_then(|rpm| {
            Quota::with_period(Duration::from_secs_f64(60.0 / f64::from(rpm.get())))
                .map(RateLimiter::direct)
        });
        let tokens = m.tpm.and_then(NonZeroU32::new).map(|tpm| {
            let per_s = NonZeroU32::new((tpm.get() / 60).max(1)).unwrap_or(NonZeroU32::MIN);
            let quota = Quota::per_minute(tpm).allow_burst(per_s);
            (RateLimiter::direct(quota), per_s)
        });
        Self { requests, tokens }
    }

    /// Waits until one more request may be sent.
    pub(super) fn request(&self) {
        if let Some(l) = &self.requests {
            while let Err(not_until) = l.check() {
                std::thread::sleep(not_until.wait_time_from(l.clock().now()));
            }
        }
    }

    /// The estimated prompt tokens of a request body of `bytes` bytes.
    pub(super) fn estimate(bytes: usize) -> u64 {
        (bytes as u64).div_ceil(BYTES_PER_TOKEN)
    }

    /// Waits until `n` tokens have been taken from the token bucket.
    pub(super) fn tokens(&self, mut n: u64) {
        let Some((l, part)) = &self.tokens else {
            return;
        };
        while n > 0 {
            let take = n.min(u64::from(part.get())) as u32;
            let Some(take_nz) = NonZeroU32::new(take) else {
                return;
            };
            loop {
                match l.check_n(take_nz) {
                    Ok(Ok(())) => break,
                    Ok(Err(not_until)) => {
                        std::thread::sleep(not_until.wait_time_from(l.clock().now()))
                    }
                    // Not reachable: parts are never above the bucket's size.
                    Err(_) => return,
                }
            }
            n -= u64::from(take);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn model(rpm: Option<u32>, tpm: Option<u32>) -> ModelConfig {
        toml::from_str::<ModelConfig>(&format!(
            "base_url = 'http://127.0.0.1:9/v1'\nmodel = 'm'\n{}{}",
            rpm.map(|r| format!("rpm = {r}\n")).unwrap_or_default(),
            tpm.map(|t| format!("tpm = {t}\n")).unwrap_or_default()
        ))
        .unwrap()
    }

    #[test]
    fn requests_are_spaced_and_large_token_charges_pass_in_parts() {
        let l = Limits::new(&model(Some(600), None));
        let t = Instant::now();
        for _ in 0..4 {
            l.request();
        }
        let took = t.elapsed().as_secs_f64();
        // 600 rpm: one request each 0.1 s, the first at once.
        assert!(
            (0.28..0.6).contains(&took),
            "4 requests at 600 rpm took {took}s"
        );
        // 6000 tpm = 100 tokens/s; 250 tokens beyond the first second's 100 take ~1.5 s,
        // though the bucket holds only 100.
        let l = Limits::new(&model(None, Some(6000)));
        let t = Instant::now();
        l.tokens(250);
        let took = t.elapsed().as_secs_f64();
        assert!(
            (1.4..2.2).contains(&took),
            "250 tokens at 6000 tpm took {took}s"
        );
        // No limits: no wait.
        let l = Limits::new(&model(None, None));
        let t = Instant::now();
        l.request();
        l.tokens(1 << 40);
        assert!(t.elapsed().as_secs_f64() < 0.05);
    }
}
