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

pub(crate) mod compare;
pub(crate) mod devmem;
mod health;
mod inventory;
mod listing;
pub(crate) mod nvml;
pub(crate) mod quiet;
mod uuid;

pub(crate) use health::health_check;
pub use inventory::inventory;
pub(crate) use inventory::{cuda_driver_version, cuda_uuid, describe, peaks_of};
pub(crate) use listing::{listing, render_listing};
pub(crate) use uuid::format_uuid;
