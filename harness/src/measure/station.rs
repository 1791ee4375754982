//! One executor's device: the CPU, or one GPU with the harness's own CUDA context on it.

use std::sync::Arc;

use anyhow::{Context, Result};
use kbench_record::Device;

use crate::gpu::compare::DeviceComparator;
use crate::gpu::devmem::Gpu;

/// One executor's device: the CPU, or one GPU with the harness's own context on it (for
/// buffers shared with workers and the comparison kernels).
pub(crate) struct Station {
    pub(crate) device: Device,
    pub(crate) gpu: Option<Arc<Gpu>>,
    pub(crate) cmp: Option<DeviceComparator>,
    /// The core both timing workers run on while timing (see `affinity`).
    pub(crate) timing_cpu: Option<usize>,
    /// The GPU's UUID as the driver names it (`GPU-xxxxxxxx-...`), read once when the
    /// station opens; records carry it as `env.gpu_uuid`. None on the CPU.
    pub(crate) gpu_uuid: Option<String>,
}

impl Station {
    pub(crate) fn open(device: Device, timing_cpu: Option<usize>) -> Result<Self> {
        match device {
            Device::Cpu => Ok(Self {
                device,
                gpu: None,
                cmp: None,
                timing_cpu: None,
                gpu_uuid: None,
            }),
            Device::Cuda(i) => {
                let gpu = Gpu::open(i as usize)?;
                let cmp = DeviceComparator::new(&gpu)
                    .with_context(|| format!("preparing the comparison kernels on GPU {i}"))?;
                Ok(Self {
                    device,
                    gpu: Some(gpu),
                    cmp: Some(cmp),
                    timing_cpu,
                    gpu_uuid: crate::gpu::cuda_uuid(i as usize)
                        .map(|u| crate::gpu::format_uuid(&u)),
                })
            }
        }
    }

    /// The GPU's total memory in bytes; 0 on the CPU (or when the driver cannot say).
    pub(crate) fn gpu_memory(&self) -> u64 {
        self.gpu
            .as_ref()
            .and_then(|g| g.mem_info().ok())
            .map_or(0, |(_, total)| total as u64)
    }
}
