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
    if precision == Precision::Fp32 {
        if let Some(a) = reduced_precision_advisory(&kernels, source) {
            advisories.push(a);
        }
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

/// `reduced-precision-kernel: ...` when the call ran a half-precision or TF32 kernel, naming
/// the first (the candidate's own before a library's) and whose it is. A library's is most
/// often cuDNN's TF32 convolution: PyTorch allows TF32 in cuDNN convolutions by default
/// (`torch.backends.cudnn.allow_tf32`), in the reference's worker as in the candidate's,
/// so it is no choice of the candidate's. (Seen on KernelBenchLeaderboard on an H200: 12
/// level-2 kernels calling `nn.ConvTranspose3d` ran `..._f32f32_tf32f32_f32_...`.)
fn reduced_precision_advisory(kernels: &[Value], source: &str) -> Option<String> {
    let reduced: Vec<(&str, ig::KernelClass)> = kernels
        .iter()
        .filter_map(|k| k.get("name").and_then(Value::as_str))
        .filter(|n| ig::reduced_precision_kernel(n))
        .map(|n| (n, ig::classify_kernel(n, source)))
        .collect();
    let (name, class) = reduced
        .iter()
        .find(|(_, c)| *c == ig::KernelClass::Own)
        .or_else(|| reduced.first())?;
    let base = ig::kernel_base_name(name);
    let lower = name.to_ascii_lowercase();
    let whose = match class {
        ig::KernelClass::Own => format!("the candidate's own kernel {base}"),
        ig::KernelClass::Library if lower.contains("cudnn") && lower.contains("tf32") => {
            format!(
            "library kernel {base} (cuDNN's TF32; PyTorch allows TF32 in cuDNN convolutions by default, torch.backends.cudnn.allow_tf32, for the reference too)"
        )
        }
        ig::KernelClass::Library => format!("library kernel {base}"),
        ig::KernelClass::Other => format!("kernel {base}"),
    };
    Some(format!("{}: {whose}", ig::REDUCED_PRECISION_KERNEL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reduced_precision_kernel_is_named_with_whose_it_is() {
        let cudnn = "sm90_xmma_dgrad_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1_strided_execute_kernel__5x_cudnn";
        let own = "void gemm_half_kernel(__half const*, float*)";
        let plain = "void fused_add_hardswish_kernel(float const*, float*)";
        let names = |ns: &[&str]| ns.iter().map(|n| json!({"name": n})).collect::<Vec<_>>();
        let source = "__global__ void gemm_half_kernel(const __half* a, float* c) {}";
        // Only cuDNN's TF32 convolution: a library's, PyTorch's default.
        let a = reduced_precision_advisory(&names(&[plain, cudnn]), source).unwrap();
        assert!(
            a.starts_with("reduced-precision-kernel: library kernel sm90_xmma_dgrad"),
            "{a}"
        );
        assert!(a.contains("torch.backends.cudnn.allow_tf32"), "{a}");
        // The candidate's own half kernel is named first, whatever the order.
        let a = reduced_precision_advisory(&names(&[cudnn, own]), source).unwrap();
        assert_eq!(
            a,
            "reduced-precision-kernel: the candidate's own kernel gemm_half_kernel"
        );
        // A half-precision cuDNN kernel is not PyTorch's default: no excuse given.
        let half = "void cudnn::engine::conv_fwd_fp16_kernel(__half const*)";
        let a = reduced_precision_advisory(&names(&[half]), source).unwrap();
        assert_eq!(
            a,
            "reduced-precision-kernel: library kernel conv_fwd_fp16_kernel"
        );
        // fp32 kernels only: no advisory.
        assert_eq!(reduced_precision_advisory(&names(&[plain]), source), None);
    }
}
