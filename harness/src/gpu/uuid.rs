//! GPU identity: UUIDs as the CUDA driver and NVML report them, for matching the driver's
//! devices to NVML's by UUID, never by index (the CUDA driver orders devices fastest first and
//! honours CUDA_VISIBLE_DEVICES; NVML sees every GPU in PCI bus order). Pure byte and string
//! handling: imports nothing of the harness.

/// The 16 bytes of a driver `CUuuid`.
pub(crate) fn uuid_bytes(u: &cudarc::driver::sys::CUuuid) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(u.bytes.iter()) {
        *o = *b as u8;
    }
    out
}

/// A UUID as NVML and `nvidia-smi -L` spell it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub(crate) fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The 16 bytes of a UUID written NVML's way (`GPU-…` or `MIG-…`) or as 32 bare hex digits;
/// any case, dashes anywhere. None for anything else (including the old
/// `MIG-GPU-<uuid>/<gi>/<ci>` form, which names no single UUID).
pub(crate) fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let s = s.trim();
    let body = match s.get(..4) {
        Some(p) if p.eq_ignore_ascii_case("GPU-") || p.eq_ignore_ascii_case("MIG-") => &s[4..],
        _ => s,
    };
    let hex: Vec<u8> = body.bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (o, pair) in out.iter_mut().zip(hex.chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_round_trip_in_both_spellings() {
        let bytes: [u8; 16] = [
            0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7,
            0xf8, 0x09,
        ];
        let s = format_uuid(&bytes);
        assert_eq!(s, "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809");
        assert_eq!(parse_uuid(&s), Some(bytes));
        // The bare hex describe() used to print, upper case, and MIG spellings parse too.
        assert_eq!(parse_uuid("1a2b3c4d5e6f708192a3b4c5d6e7f809"), Some(bytes));
        assert_eq!(
            parse_uuid("GPU-1A2B3C4D-5E6F-7081-92A3-B4C5D6E7F809"),
            Some(bytes)
        );
        assert_eq!(
            parse_uuid("MIG-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"),
            Some(bytes)
        );
        for bad in [
            "",
            "GPU-",
            "0",
            "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f8",
            "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f8zz",
            "MIG-GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809/1/0",
            "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809ab",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }
}
