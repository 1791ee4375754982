//! Which kernels one profiled call launched (CUDA): advisories, and `no-custom-kernel` under
//! `--require-custom-kernels`.

use kbench_record::protocol::{reply, Frame};
use kbench_record::{Outcome, Precision};
use serde_json::Value;

use super::integrity as ig;
use crate::worker::error_text;

/// Records which kernels one profiled call ran (the worker's `profile` answer); with
/// `require_custom_kernels` a candidate none of whose own kernels ran fails with
/// `no-custom-kernel`.
pub(crate) fn judge_profile(
    reply: &Frame,
    precision: Precision,
    require_custom_kernels: bool,
    source: &str,
    integrity: &mut kbench_record::IntegrityReport,
) -> Option<Outcome> {
    if reply.kind() != "profile" {
        integrity.advisories.push(format!(
            "profile-unavailable: {}",
            error_text(reply).lines().next().unwrap_or_default()
        ));
        return None;
    }
    let profiled: reply::Profile = reply.reply();
    let kernels = profiled.kernels.unwrap_or_default();
    let default_stream = profiled.default_stream;
    let profile = ig::kernel_profile(&kernels, default_stream, source);
    let mut advisories = Vec::new();
    let no_own = profile.own.is_empty();
    if no_own {
        advisories.push(ig::NO_CUSTOM_KERNEL.to_string());
    }
    if profile.side_stream {
        advisories.push(ig::SIDE_STREAM.to_string());
    }
    if precision == Precision::Fp32
        && kernels.iter().any(|k| {
            k.get("name")
                .and_then(Value::as_str)
                .is_some_and(ig::reduced_precision_kernel)
        })
    {
        advisories.push(ig::REDUCED_PRECISION_KERNEL.to_string());
    }
    let detail = format!(
        "one profiled call launched {} device activities: {:.0}% in the candidate's own kernels, {:.0}% in library kernels ({}), {:.0}% other",
        profile.launches,
        100.0 * profile.own_fraction,
        100.0 * profile.library_fraction,
        profile.library.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
        100.0 * profile.other_fraction
    );
    integrity.kernels = Some(profile);
    integrity.advisories.extend(advisories);
    if no_own && require_custom_kernels {
        return Some(Outcome::Integrity {
            flag: ig::NO_CUSTOM_KERNEL.into(),
            detail: format!(
                "--require-custom-kernels: none of the candidate's own kernels ran; {detail}"
            ),
        });
    }
    None
}
