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
