//! The `gpu/` box: everything kbench asks of the GPU itself, through the CUDA driver (cudarc,
//! loaded dynamically) and NVML. It owns the device inventory and properties, GPU identity
//! (UUIDs), the memory the harness shares with workers, live state and sampling (NVML), the
//! `kbench gpus` listing, the health check and the on-device output comparison.
//!
//! cudarc panics when it calls into a CUDA library that is not installed, so every use is
//! guarded by the library-present check first. This box is kbench's cudarc boundary.
//!
//! It sits just above `exit/` and imports nothing of the harness: only the record and
//! adversarial crates. Inside it, lowest first: `uuid` < `inventory` < `devmem`, `nvml` <
//! `health`, `compare`, `quiet`, `listing`; each file imports only from files before it. This file
//! only declares the modules and re-exports what the rest of the harness uses as
//! `crate::gpu::…`.

pub mod compare;
pub mod devmem;
mod health;
mod inventory;
mod listing;
pub mod nvml;
pub mod quiet;
mod uuid;

pub use health::{health_check, health_check_with, HealthKernel};
pub use inventory::{
    cuda_driver_version, cuda_uuid, describe, inventory, peaks_of, GpuInfo, GpuInventory,
};
pub use listing::{listing, render_gpus, render_listing, GpuEntry, GpuListing};
pub use uuid::{format_uuid, parse_uuid};
