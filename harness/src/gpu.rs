//! Finding GPUs through the CUDA driver (cudarc, loaded dynamically).
//!
//! cudarc panics when it calls into a CUDA library that is not installed, so every use is
//! guarded by the library-present check first. This module is kbench's cudarc boundary.

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
    pub fn why_none(&self) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!((g.peak_bandwidth_gbs() - 3352.3).abs() < 0.1);
        let table = render_gpus(&[g]);
        assert!(
            table.contains("H100") && table.contains("9.0") && table.contains("50MiB"),
            "{table}"
        );
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
}

/// What the CUDA driver reports about one device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// (major, minor), e.g. (9, 0) for Hopper.
    pub compute_capability: (i32, i32),
    pub sms: i32,
    pub memory_bytes: u64,
    pub l2_bytes: i32,
    pub shared_memory_per_sm_bytes: i32,
    /// Peak SM clock, kHz (cuDeviceGetAttribute CLOCK_RATE).
    pub sm_clock_khz: i32,
    /// Peak memory clock, kHz (MEMORY_CLOCK_RATE).
    pub memory_clock_khz: i32,
    pub memory_bus_bits: i32,
}

impl GpuInfo {
    /// Theoretical DRAM bandwidth, GB/s: 2 transfers per clock (double data rate) × clock ×
    /// bus width in bytes. The CUDA samples' deviceQuery prints the same figure.
    pub fn peak_bandwidth_gbs(&self) -> f64 {
        2.0 * self.memory_clock_khz as f64 * 1e3 * (self.memory_bus_bits as f64 / 8.0) / 1e9
    }
}

/// Every visible device with its properties, or the reason there are none.
pub fn describe() -> Result<Vec<GpuInfo>, GpuInventory> {
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
            .map(|u| {
                u.bytes
                    .iter()
                    .map(|b| format!("{:02x}", *b as u8))
                    .collect::<String>()
            })
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

/// A plain table of [`describe`]'s result.
pub fn render_gpus(gpus: &[GpuInfo]) -> String {
    let mut s = format!(
        "{:<3} {:<28} {:>5} {:>5} {:>9} {:>7} {:>9} {:>9} {:>6} {:>9}\n",
        "gpu", "name", "cc", "SMs", "memory", "L2", "SM clock", "mem clock", "bus", "peak BW"
    );
    for g in gpus {
        s.push_str(&format!(
            "{:<3} {:<28} {:>5} {:>5} {:>6.1}GiB {:>4}MiB {:>6}MHz {:>6}MHz {:>3}bit {:>5.0}GB/s\n",
            g.index,
            g.name,
            format!("{}.{}", g.compute_capability.0, g.compute_capability.1),
            g.sms,
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            g.l2_bytes / (1 << 20),
            g.sm_clock_khz / 1000,
            g.memory_clock_khz / 1000,
            g.memory_bus_bits,
            g.peak_bandwidth_gbs()
        ));
    }
    s
}
