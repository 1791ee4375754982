//! GPU memory the harness owns, shared with worker processes through CUDA IPC.
//!
//! On CUDA, tensors never travel through pipes: the harness allocates plain device buffers
//! (`cuMemAlloc`, never the stream-ordered pool, whose memory cannot be exported with
//! `cuIpcGetMemHandle`), hands their IPC handles to the worker that must fill or read them,
//! and keeps the reference's buffers in its own process, where no candidate can reach them.
//! A candidate is only ever given the handles of its own input copies and output slots.
//!
//! Like the rest of `gpu/`, this module is part of kbench's cudarc boundary: the `unsafe`
//! blocks here call the CUDA driver on pointers this module allocated and sized itself.

use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{result, CudaContext, CudaStream};

/// One GPU as the harness uses it: its primary context and a stream for harness work.
pub(crate) struct Gpu {
    pub(crate) ordinal: usize,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
}

impl Gpu {
    /// Opens device `ordinal` (an index among the devices the harness sees).
    pub(crate) fn open(ordinal: usize) -> Result<Arc<Self>> {
        let inv = crate::gpu::inventory::inventory();
        if ordinal >= inv.count() {
            bail!(
                "GPU {ordinal} is not available: {} (visible: {})",
                inv.why_none(),
                inv.count()
            );
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| anyhow!("opening a CUDA context on GPU {ordinal}: {e:?}"))?;
        let stream = ctx.default_stream();
        Ok(Arc::new(Self {
            ordinal,
            ctx,
            stream,
        }))
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| anyhow!("binding GPU {}'s context: {e:?}", self.ordinal))
    }

    /// Free and total device memory, bytes.
    pub(crate) fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        self.ctx
            .mem_get_info()
            .map_err(|e| anyhow!("cuMemGetInfo on GPU {}: {e:?}", self.ordinal))
    }

    /// The device's L2 cache size in bytes, when the driver says.
    pub(crate) fn l2_bytes(&self) -> Option<usize> {
        self.ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .ok()
            .and_then(|v| usize::try_from(v).ok())
            .filter(|&v| v > 0)
    }

    /// A new buffer of `nbytes` (at least 1), contents undefined, exportable through IPC.
    pub(crate) fn alloc(self: &Arc<Self>, nbytes: usize) -> Result<DevBuf> {
        self.bind()?;
        // SAFETY: cuMemAlloc with the context bound to this thread; the pointer is owned by
        // the returned DevBuf, which frees it exactly once in Drop.
        #[allow(unsafe_code)]
        let ptr = unsafe { result::malloc_sync(nbytes.max(1)) }.map_err(|e| {
            anyhow!(
                "allocating {nbytes} bytes on GPU {}: {e:?} (free memory is short; evaluate fewer or smaller problems per GPU)",
                self.ordinal
            )
        })?;
        let mut buf = DevBuf {
            gpu: Arc::clone(self),
            ptr,
            nbytes,
            handle: String::new(),
        };
        let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: `ptr` is the base of a live cuMemAlloc allocation in the bound context, and
        // `handle` is a valid out-pointer to a 64-byte struct.
        #[allow(unsafe_code)]
        let rc = unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            bail!("cuIpcGetMemHandle on GPU {}: {rc:?}", self.ordinal);
        }
        let hex: String = handle
            .reserved
            .iter()
            .map(|b| format!("{:02x}", *b as u8))
            .collect();
        buf.handle = hex;
        Ok(buf)
    }

    /// Waits for the work queued on the legacy default (NULL) stream, where `copy`, `fill`
    /// and `write` run: the driver's "synchronous" device-to-device copy, memset and
    /// host-to-device copy from pageable memory return before the device has done them,
    /// and a worker given the buffer's handle next reads it on a stream of its own
    /// process, which nothing orders after them.
    fn wait_default_stream(&self, what: &str) -> Result<()> {
        // SAFETY: the NULL stream always exists in the bound context.
        #[allow(unsafe_code)]
        unsafe { result::stream::synchronize(result::stream::null()) }
            .map_err(|e| anyhow!("waiting for the {what} on GPU {}: {e:?}", self.ordinal))
    }

    /// Copies `n` bytes from `src` to `dst` (device to device) and waits for the copy.
    pub(crate) fn copy(&self, dst: &DevBuf, src: &DevBuf, n: usize) -> Result<()> {
        if n > dst.nbytes || n > src.nbytes {
            bail!(
                "device copy of {n} bytes between buffers of {} and {}",
                src.nbytes,
                dst.nbytes
            );
        }
        self.bind()?;
        // SAFETY: both pointers are live allocations of at least `n` bytes (checked above).
        #[allow(unsafe_code)]
        unsafe { result::memcpy_dtod_sync(dst.ptr, src.ptr, n) }
            .map_err(|e| anyhow!("device copy on GPU {}: {e:?}", self.ordinal))?;
        // Without this wait a candidate read its input copy before the copy reached it: L1/5
        // (a 4 GiB input) on an H200, 8832 elements read as zeros by the reference's own Model.
        self.wait_default_stream("device copy")
    }

    /// Reads `n` bytes from `offset` into host memory.
    pub(crate) fn read(&self, buf: &DevBuf, offset: usize, n: usize) -> Result<Vec<u8>> {
        if offset.checked_add(n).is_none_or(|end| end > buf.nbytes) {
            bail!(
                "read of {n} bytes at {offset} from a {}-byte buffer",
                buf.nbytes
            );
        }
        self.bind()?;
        let mut out = vec![0u8; n];
        if n > 0 {
            // SAFETY: `out` has `n` bytes; the source range lies inside the allocation.
            #[allow(unsafe_code)]
            unsafe { result::memcpy_dtoh_sync(&mut out, buf.ptr + offset as u64) }
                .map_err(|e| anyhow!("device-to-host copy on GPU {}: {e:?}", self.ordinal))?;
        }
        Ok(out)
    }

    #[cfg(test)]
    /// Writes `bytes` at the start of `buf` and waits for them to land.
    pub(crate) fn write(&self, buf: &DevBuf, bytes: &[u8]) -> Result<()> {
        if bytes.len() > buf.nbytes {
            bail!(
                "write of {} bytes into a {}-byte buffer",
                bytes.len(),
                buf.nbytes
            );
        }
        self.bind()?;
        if !bytes.is_empty() {
            // SAFETY: the destination range lies inside the allocation (checked above).
            #[allow(unsafe_code)]
            unsafe { result::memcpy_htod_sync(buf.ptr, bytes) }
                .map_err(|e| anyhow!("host-to-device copy on GPU {}: {e:?}", self.ordinal))?;
            // From pageable memory the call returns once the bytes are staged, before the
            // DMA into the buffer has finished.
            self.wait_default_stream("host-to-device copy")?;
        }
        Ok(())
    }

    #[cfg(test)]
    /// A buffer holding `bytes`.
    pub(crate) fn upload(self: &Arc<Self>, bytes: &[u8]) -> Result<DevBuf> {
        let buf = self.alloc(bytes.len())?;
        self.write(&buf, bytes)?;
        Ok(buf)
    }

    /// Fills `buf` with the byte `value` and waits for the fill.
    pub(crate) fn fill(&self, buf: &DevBuf, value: u8) -> Result<()> {
        self.bind()?;
        // SAFETY: writes exactly the allocation's `nbytes` bytes.
        #[allow(unsafe_code)]
        unsafe { result::memset_d8_sync(buf.ptr, value, buf.nbytes) }
            .map_err(|e| anyhow!("memset on GPU {}: {e:?}", self.ordinal))?;
        // An output slot's fill landing after the candidate wrote it would read as unwritten.
        self.wait_default_stream("memset")
    }

    /// Queues a copy of `n` bytes from `src` to `dst` on the NULL stream without waiting
    /// ([`Self::wait`] does): several copies and fills then cost one wait.
    pub(crate) fn copy_queued(&self, dst: &DevBuf, src: &DevBuf, n: usize) -> Result<()> {
        if n > dst.nbytes || n > src.nbytes {
            bail!(
                "device copy of {n} bytes between buffers of {} and {}",
                src.nbytes,
                dst.nbytes
            );
        }
        self.bind()?;
        // SAFETY: both pointers are live allocations of at least `n` bytes (checked above);
        // the buffers outlive the wait that follows (the caller holds them).
        #[allow(unsafe_code)]
        unsafe { result::memcpy_dtod_async(dst.ptr, src.ptr, n, result::stream::null()) }
            .map_err(|e| anyhow!("device copy on GPU {}: {e:?}", self.ordinal))
    }

    /// Queues a fill of `buf` with `value` on the NULL stream without waiting.
    pub(crate) fn fill_queued(&self, buf: &DevBuf, value: u8) -> Result<()> {
        self.bind()?;
        // SAFETY: writes exactly the allocation's `nbytes` bytes; the caller holds `buf`
        // until the wait that follows.
        #[allow(unsafe_code)]
        unsafe { result::memset_d8_async(buf.ptr, value, buf.nbytes, result::stream::null()) }
            .map_err(|e| anyhow!("memset on GPU {}: {e:?}", self.ordinal))
    }

    /// Waits for everything queued on the NULL stream.
    pub(crate) fn wait(&self) -> Result<()> {
        self.bind()?;
        self.wait_default_stream("queued copies and fills")
    }
}

/// A device allocation owned by the harness, freed on drop.
pub(crate) struct DevBuf {
    gpu: Arc<Gpu>,
    ptr: CUdeviceptr,
    nbytes: usize,
    /// The CUDA IPC handle, 128 hex digits, as workers receive it.
    handle: String,
}

impl DevBuf {
    pub(crate) fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
    pub(crate) fn nbytes(&self) -> usize {
        self.nbytes
    }
    pub(crate) fn ipc_handle(&self) -> &str {
        &self.handle
    }
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

impl std::fmt::Debug for DevBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DevBuf(gpu {}, {:#x}, {} bytes)",
            self.gpu.ordinal, self.ptr, self.nbytes
        )
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed only here.
            // Workers that mapped it through IPC hold their own mapping; the harness never
            // frees a buffer while it waits on a worker that uses it.
            #[allow(unsafe_code)]
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `copy` and `fill` return only once the device has done them: right after each, the
    /// NULL stream has nothing left to do, and the bytes are there. Before the wait was
    /// added a 1 GiB copy was still running when `copy` returned (it takes about 0.3 ms on
    /// an H100, the call microseconds). Skipped without a GPU.
    #[test]
    fn copy_and_fill_are_done_when_they_return() {
        if crate::gpu::inventory::inventory().count() == 0 {
            println!("skipped: no GPU");
            return;
        }
        let gpu = Gpu::open(0).expect("open GPU 0");
        let n = 1 << 30;
        let (a, b) = (gpu.alloc(n).unwrap(), gpu.alloc(n).unwrap());
        let idle = || {
            // SAFETY: queries the NULL stream of the context `copy`/`fill` bound.
            #[allow(unsafe_code)]
            let r = unsafe { sys::cuStreamQuery(result::stream::null()) };
            r == sys::CUresult::CUDA_SUCCESS
        };
        for round in 0..5u8 {
            let want = round * 37 + 1;
            gpu.fill(&a, want).unwrap();
            assert!(idle(), "round {round}: fill returned with work queued");
            gpu.copy(&b, &a, n).unwrap();
            assert!(idle(), "round {round}: copy returned with work queued");
            for at in [0, n / 2, n - 64] {
                assert_eq!(
                    gpu.read(&b, at, 64).unwrap(),
                    vec![want; 64],
                    "round {round} at {at}"
                );
            }
        }
    }
}
