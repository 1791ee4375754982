//! What the CUDA driver says about the machine: whether it loads, the visible devices, each
//! one's properties and peak rates ([`GpuInfo`]), its UUID and the driver's CUDA version.
//! Imports only `gpu::uuid` of the harness.

use crate::gpu::uuid::{format_uuid, uuid_bytes};

/// What the driver says about the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuInventory {
    /// No CUDA driver library could be loaded.
    NoDriver,
    /// The driver loaded but initialising it or counting devices failed.
    DriverError(String),
    /// The driver is present; `names` lists the visible devices (possibly none).
    Devices { names: Vec<String> },
}

impl GpuInventory {
    /// Number of usable devices.
    pub fn count(&self) -> usize {
        match self {
            GpuInventory::Devices { names } => names.len(),
            _ => 0,
        }
    }

    /// A plain sentence for users when no GPU can be used.
    pub(crate) fn why_none(&self) -> String {
        match self {
            GpuInventory::NoDriver => {
                "no CUDA driver found (libcuda.so could not be loaded); use --device cpu".into()
            }
            GpuInventory::DriverError(e) => {
                format!("the CUDA driver failed: {e}; use --device cpu")
            }
            GpuInventory::Devices { names } if names.is_empty() => {
                "the CUDA driver sees no devices (check CUDA_VISIBLE_DEVICES); use --device cpu"
                    .into()
            }
            GpuInventory::Devices { names } => format!("{} device(s)", names.len()),
        }
    }
}

/// Asks the CUDA driver which devices are visible. Never panics on machines without CUDA.
pub fn inventory() -> GpuInventory {
    // SAFETY: `is_culib_present` only tries to dlopen libcuda by its known names and drops the
    // handle; it calls no CUDA function. It is `unsafe` because loading a library runs its
    // initialisers, which is what any CUDA program does at start-up.
    #[allow(unsafe_code)]
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if !present {
        return GpuInventory::NoDriver;
    }
    let count = match cudarc::driver::CudaContext::device_count() {
        Ok(n) => n.max(0) as usize,
        Err(e) => return GpuInventory::DriverError(format!("{e:?}")),
    };
    let mut names = Vec::with_capacity(count);
    for i in 0..count {
        let name = cudarc::driver::result::device::get(i as i32)
            .and_then(cudarc::driver::result::device::get_name)
            .unwrap_or_else(|e| format!("<name unavailable: {e:?}>"));
        names.push(name);
    }
    GpuInventory::Devices { names }
}

/// What the CUDA driver reports about one device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct GpuInfo {
    pub(crate) index: u32,
    pub(crate) name: String,
    /// As NVML and `nvidia-smi -L` spell it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
    /// (empty if the driver would not say). [`parse_uuid`](crate::gpu::parse_uuid) reads it back.
    pub(crate) uuid: String,
    /// (major, minor), e.g. (9, 0) for Hopper.
    pub(crate) compute_capability: (i32, i32),
    pub(crate) sms: i32,
    pub(crate) memory_bytes: u64,
    pub(crate) l2_bytes: i32,
    pub(crate) shared_memory_per_sm_bytes: i32,
    /// Peak SM clock, kHz (cuDeviceGetAttribute CLOCK_RATE).
    pub(crate) sm_clock_khz: i32,
    /// Peak memory clock, kHz (MEMORY_CLOCK_RATE).
    pub(crate) memory_clock_khz: i32,
    pub(crate) memory_bus_bits: i32,
}

impl GpuInfo {
    /// Theoretical DRAM bandwidth, GB/s: 2 transfers per clock (double data rate) × clock ×
    /// bus width in bytes. The CUDA samples' deviceQuery prints the same figure.
    pub(crate) fn peak_bandwidth_gbs(&self) -> f64 {
        2.0 * self.memory_clock_khz as f64 * 1e3 * (self.memory_bus_bits as f64 / 8.0) / 1e9
    }

    /// Peak FLOP/s per precision and DRAM bytes/s: the per-architecture table
    /// ([`kbench_record::perf::ArchRates`], sources cited there) × SMs × the driver's max SM
    /// clock. None for an architecture outside the table (before Ampere, Jetson parts) or
    /// when the driver did not report SMs or clocks.
    pub(crate) fn peaks(&self) -> Option<kbench_record::perf::Peaks> {
        let (major, minor) = self.compute_capability;
        let rates = kbench_record::perf::ArchRates::for_cc(major, minor)?;
        if self.sms <= 0 || self.sm_clock_khz <= 0 || self.peak_bandwidth_gbs() <= 0.0 {
            return None;
        }
        Some(kbench_record::perf::Peaks::from_rates(
            &rates,
            self.sms as u32,
            self.sm_clock_khz as f64 / 1e3,
            self.peak_bandwidth_gbs() * 1e9,
        ))
    }
}

/// The peaks of CUDA device `ordinal` ([`GpuInfo::peaks`]), asked of the driver once per
/// process; None without a driver, for an unknown ordinal or an architecture outside the
/// table.
pub(crate) fn peaks_of(ordinal: u32) -> Option<kbench_record::perf::Peaks> {
    static ALL: std::sync::OnceLock<Vec<GpuInfo>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| describe().unwrap_or_default())
        .iter()
        .find(|g| g.index == ordinal)
        .and_then(GpuInfo::peaks)
}

/// Every visible device with its properties, or the reason there are none.
pub(crate) fn describe() -> Result<Vec<GpuInfo>, GpuInventory> {
    use cudarc::driver::result::device;
    use cudarc::driver::sys::CUdevice_attribute as A;
    let inv = inventory();
    let count = match &inv {
        GpuInventory::Devices { names } if !names.is_empty() => names.len(),
        _ => return Err(inv),
    };
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let dev = device::get(i as i32).map_err(|e| GpuInventory::DriverError(format!("{e:?}")))?;
        // SAFETY: `dev` comes from cuDeviceGet for an ordinal below cuDeviceGetCount, which is
        // what cuDeviceGetAttribute and cuDeviceTotalMem require; both only write an integer.
        #[allow(unsafe_code)]
        let attr = |a: A| unsafe { device::get_attribute(dev, a) }.unwrap_or(-1);
        #[allow(unsafe_code)]
        let memory_bytes = unsafe { device::total_mem(dev) }
            .map(|b| b as u64)
            .unwrap_or(0);
        let uuid = device::get_uuid(dev)
            .map(|u| format_uuid(&uuid_bytes(&u)))
            .unwrap_or_default();
        out.push(GpuInfo {
            index: i as u32,
            name: device::get_name(dev).unwrap_or_default(),
            uuid,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            ),
            sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            memory_bytes,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            shared_memory_per_sm_bytes: attr(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            ),
            sm_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            memory_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            memory_bus_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        });
    }
    Ok(out)
}

/// The UUID the CUDA driver reports for device `ordinal`; None without a driver or device.
pub(crate) fn cuda_uuid(ordinal: usize) -> Option<[u8; 16]> {
    use cudarc::driver::result::device;
    if ordinal >= inventory().count() {
        return None;
    }
    let dev = device::get(ordinal as i32).ok()?;
    device::get_uuid(dev).ok().map(|u| uuid_bytes(&u))
}

/// The CUDA version the installed driver supports (cuDriverGetVersion), e.g. "13.0".
pub(crate) fn cuda_driver_version() -> Option<String> {
    // SAFETY: see `inventory`; only probes for the library.
    #[allow(unsafe_code)]
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if !present {
        return None;
    }
    let mut v: std::ffi::c_int = 0;
    // SAFETY: libcuda is present (checked above); cuDriverGetVersion writes one int through a
    // valid pointer and needs no cuInit.
    #[allow(unsafe_code)]
    let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (rc == cudarc::driver::sys::CUresult::CUDA_SUCCESS && v > 0)
        .then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::{abs_diff_eq, assert_abs_diff_eq};

    #[test]
    fn peak_bandwidth_from_clock_and_bus() {
        // H100 SXM: 2619 MHz HBM3 clock, 5120-bit bus -> 3352 GB/s (NVIDIA quotes 3.35 TB/s).
        let g = GpuInfo {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: String::new(),
            compute_capability: (9, 0),
            sms: 132,
            memory_bytes: 85_520_809_984,
            l2_bytes: 52_428_800,
            shared_memory_per_sm_bytes: 233_472,
            sm_clock_khz: 1_980_000,
            memory_clock_khz: 2_619_000,
            memory_bus_bits: 5120,
        };
        assert_abs_diff_eq!(g.peak_bandwidth_gbs(), 3352.3, epsilon = 0.1);
        // The spec table at the driver's clocks: NVIDIA's 989.4 TF dense BF16, 66.9 FP32.
        let p = g.peaks().expect("sm90 is in the table");
        assert!(
            abs_diff_eq!(p.bf16_tensor / 1e12, 989.4, epsilon = 0.5),
            "{}",
            p.bf16_tensor
        );
        assert!(
            abs_diff_eq!(p.fp32 / 1e12, 66.9, epsilon = 0.1),
            "{}",
            p.fp32
        );
        assert_abs_diff_eq!(p.dram_bytes_per_s / 1e12, 3.35, epsilon = 0.01);
        let mut volta = g.clone();
        volta.compute_capability = (7, 0);
        assert_eq!(volta.peaks(), None);
    }

    #[test]
    fn inventory_never_panics_and_explains_itself() {
        let inv = inventory();
        // On CI there is no driver; on a GPU machine there are devices. Either way a reason.
        assert!(!inv.why_none().is_empty());
        if inv == GpuInventory::NoDriver {
            assert_eq!(inv.count(), 0);
            assert!(inv.why_none().contains("--device cpu"));
        }
    }

    #[test]
    fn cuda_uuid_is_none_without_a_driver_and_matches_describe_with_one() {
        match describe() {
            Err(why) => {
                println!("skipped the GPU half: {}", why.why_none());
                assert_eq!(cuda_uuid(0), None);
            }
            Ok(gpus) => {
                for g in &gpus {
                    let u = cuda_uuid(g.index as usize).expect("uuid of a visible device");
                    assert_eq!(format_uuid(&u), g.uuid);
                }
                assert_eq!(cuda_uuid(gpus.len()), None);
            }
        }
    }
}
