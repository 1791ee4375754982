//! Health check: after a worker crash, before a GPU takes new work, a tiny kernel writes a
//! known pattern that the host reads back and verifies. Imports only `gpu::devmem` (and, in
//! tests, `gpu::inventory`) of the harness.

/// Elements the health kernel writes: 4 MiB, a few microseconds of GPU time.
const HEALTH_N: u32 = 1 << 20;
const HEALTH_MUL: u32 = 2_654_435_761;
const HEALTH_SRC: &str = r#"
extern "C" __global__ void kbench_health(unsigned int* out, unsigned int seed, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 2654435761u ^ seed;
}
"#;

/// The same kernel written by hand in old PTX (ISA 6.0, sm_50), for when NVRTC cannot be
/// loaded (it is a toolkit library, often absent where only the driver and torch's wheels
/// are) or when the driver is older than the NVRTC that compiled the kernel and rejects its
/// PTX. Any driver from CUDA 9 on JIT-compiles it for its GPU.
const HEALTH_PTX_BUILTIN: &str = r#"
.version 6.0
.target sm_50
.address_size 64

.visible .entry kbench_health(
    .param .u64 kbench_health_out,
    .param .u32 kbench_health_seed,
    .param .u32 kbench_health_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [kbench_health_out];
    ld.param.u32 %r2, [kbench_health_seed];
    ld.param.u32 %r3, [kbench_health_n];
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mov.u32 %r6, %tid.x;
    mad.lo.s32 %r1, %r4, %r5, %r6;
    setp.ge.u32 %p1, %r1, %r3;
    @%p1 bra L_done;
    cvta.to.global.u64 %rd2, %rd1;
    mul.lo.s32 %r7, %r1, -1640531535;
    xor.b32 %r8, %r7, %r2;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
L_done:
    ret;
}
"#;

/// Which PTX the health check loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HealthKernel {
    /// NVRTC's PTX when NVRTC works and the driver loads it, else the built-in PTX.
    Auto,
    /// Only the built-in hand-written PTX (a test exercises it; the product never picks it).
    #[cfg(test)]
    Builtin,
}

/// The health kernel compiled by NVRTC, once per process, or why it could not be.
fn health_ptx_nvrtc() -> Result<&'static cudarc::nvrtc::Ptx, &'static str> {
    static PTX: std::sync::OnceLock<Result<cudarc::nvrtc::Ptx, String>> =
        std::sync::OnceLock::new();
    PTX.get_or_init(|| {
        // SAFETY: only probes for libnvrtc by its known names (cudarc would panic calling into
        // an absent library); loading runs the library's initialisers, nothing else.
        #[allow(unsafe_code)]
        let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        if !present {
            return Err("NVRTC (libnvrtc.so) could not be loaded".to_string());
        }
        cudarc::nvrtc::compile_ptx(HEALTH_SRC).map_err(|e| format!("NVRTC failed: {e:?}"))
    })
    .as_ref()
    .map_err(|e| e.as_str())
}

/// What element `i` of the health buffer must hold.
fn health_value(i: u32, seed: u32) -> u32 {
    i.wrapping_mul(HEALTH_MUL) ^ seed
}

/// Checks every element of the health buffer; the first wrong one and how many are wrong.
fn verify_health(out: &[u32], seed: u32) -> Result<(), String> {
    if out.len() != HEALTH_N as usize {
        return Err(format!(
            "read back {} elements, expected {HEALTH_N}",
            out.len()
        ));
    }
    let mut bad = out
        .iter()
        .enumerate()
        .filter(|(i, v)| **v != health_value(*i as u32, seed));
    match bad.next() {
        None => Ok(()),
        Some((i, v)) => Err(format!(
            "wrong value read back: element {i} is {v:#010x}, expected {:#010x} ({} of {} elements wrong)",
            health_value(i as u32, seed),
            1 + bad.count(),
            out.len()
        )),
    }
}

/// Checks that `gpu` still computes: loads a tiny kernel (NVRTC-compiled once per process,
/// with a built-in PTX fallback), has it write `i * 2654435761 ^ seed` into 2^20 `u32`s with a
/// fresh seed, reads them back and checks every one on the host. Returns the time this took
/// (module load, launch, copy back, verification; not the one-time NVRTC compile). Any CUDA
/// error, wrong value or panic in the CUDA bindings is an `Err` naming the GPU.
pub(crate) fn health_check(
    gpu: &std::sync::Arc<crate::gpu::devmem::Gpu>,
) -> anyhow::Result<std::time::Duration> {
    health_check_with(gpu, HealthKernel::Auto)
}

/// [`health_check`] with a choice of kernel (tests use it to exercise the built-in PTX).
pub(crate) fn health_check_with(
    gpu: &std::sync::Arc<crate::gpu::devmem::Gpu>,
    kernel: HealthKernel,
) -> anyhow::Result<std::time::Duration> {
    let ordinal = gpu.ordinal;
    let run = std::panic::AssertUnwindSafe(|| health_check_inner(gpu, kernel));
    match std::panic::catch_unwind(run) {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(why)) => Err(anyhow::anyhow!(
            "GPU {ordinal} failed its health check: {why}"
        )),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(anyhow::anyhow!(
                "GPU {ordinal} failed its health check: the CUDA bindings panicked: {msg}"
            ))
        }
    }
}

fn health_check_inner(
    gpu: &std::sync::Arc<crate::gpu::devmem::Gpu>,
    kernel: HealthKernel,
) -> Result<std::time::Duration, String> {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    use cudarc::nvrtc::Ptx;
    let nvrtc = match kernel {
        HealthKernel::Auto => Some(health_ptx_nvrtc()),
        #[cfg(test)]
        HealthKernel::Builtin => None,
    };
    let started = std::time::Instant::now();
    let load = |ptx: Ptx| {
        gpu.ctx
            .load_module(ptx)
            .and_then(|m| m.load_function("kbench_health"))
    };
    let func = match nvrtc {
        Some(Ok(ptx)) => match load(ptx.clone()) {
            Ok(f) => f,
            // The driver may reject PTX from a newer NVRTC; if the built-in PTX loads, the
            // GPU is fine. If it does not either, report both.
            Err(e) => load(Ptx::from_src(HEALTH_PTX_BUILTIN)).map_err(|e2| {
                format!("loading the kernel: {e:?} (NVRTC's PTX), {e2:?} (built-in PTX)")
            })?,
        },
        Some(Err(_)) | None => load(Ptx::from_src(HEALTH_PTX_BUILTIN))
            .map_err(|e| format!("loading the kernel: {e:?}"))?,
    };
    let seed = health_seed();
    let n = HEALTH_N;
    let stream = &gpu.stream;
    let mut buf = stream
        .alloc_zeros::<u32>(n as usize)
        .map_err(|e| format!("allocating {} bytes: {e:?}", 4 * n))?;
    let mut launch = stream.launch_builder(&func);
    launch.arg(&mut buf).arg(&seed).arg(&n);
    // SAFETY: `kbench_health(unsigned int*, unsigned int, unsigned int)` gets a device buffer
    // of exactly `n` u32s and the two integers, in that order; it writes only below `n`.
    #[allow(unsafe_code)]
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }
        .map_err(|e| format!("launching the kernel: {e:?}"))?;
    stream
        .synchronize()
        .map_err(|e| format!("running the kernel: {e:?}"))?;
    let out = stream
        .clone_dtoh(&buf)
        .map_err(|e| format!("copying the result back: {e:?}"))?;
    stream
        .synchronize()
        .map_err(|e| format!("copying the result back: {e:?}"))?;
    verify_health(&out, seed)?;
    drop(buf);
    Ok(started.elapsed())
}

/// A seed that differs between calls, so a stale buffer from an earlier check never passes.
fn health_seed() -> u32 {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
        .unwrap_or(0);
    let k = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    nanos ^ k.wrapping_mul(0x9E37_79B9) ^ 0xA5A5_5A5A
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::inventory::inventory;

    #[test]
    fn health_values_are_verified_element_by_element() {
        let seed = 0xdead_beef;
        let mut out: Vec<u32> = (0..HEALTH_N).map(|i| health_value(i, seed)).collect();
        assert_eq!(verify_health(&out, seed), Ok(()));
        assert_eq!(health_value(0, seed), seed);
        assert_eq!(health_value(1, 0), 2_654_435_761);
        // The C expression `i * 2654435761u ^ seed` is `(i * K) ^ seed`, wrapping.
        assert_eq!(
            health_value(3, 1),
            (3u64 * 2_654_435_761 % (1 << 32)) as u32 ^ 1
        );
        out[12345] ^= 1;
        out[777_777] = 0;
        let e = verify_health(&out, seed).unwrap_err();
        assert!(
            e.contains("element 12345") && e.contains("2 of 1048576"),
            "{e}"
        );
        let e = verify_health(&out[..10], seed).unwrap_err();
        assert!(e.contains("read back 10 elements"), "{e}");
        // A buffer the kernel never wrote (all zeros) fails.
        assert!(verify_health(&vec![0; HEALTH_N as usize], seed).is_err());
        assert_ne!(health_seed(), health_seed());
    }

    #[test]
    fn nvrtc_probe_never_panics() {
        match health_ptx_nvrtc() {
            Ok(ptx) => assert!(ptx.to_src().contains("kbench_health")),
            Err(why) => {
                println!("NVRTC unavailable here: {why}");
                assert!(why.contains("NVRTC"), "{why}");
            }
        }
        // Cached: the second call gives the same answer.
        assert_eq!(health_ptx_nvrtc().is_ok(), health_ptx_nvrtc().is_ok());
    }

    #[test]
    fn health_check_passes_on_a_real_gpu() {
        if inventory().count() == 0 {
            println!("skipped: {}", inventory().why_none());
            assert!(crate::gpu::devmem::Gpu::open(0).is_err());
            return;
        }
        let gpu = crate::gpu::devmem::Gpu::open(0).expect("open GPU 0");
        println!("NVRTC: {:?}", health_ptx_nvrtc().err());
        for kernel in [
            HealthKernel::Auto,
            HealthKernel::Auto,
            HealthKernel::Builtin,
        ] {
            let d = health_check_with(&gpu, kernel).unwrap_or_else(|e| panic!("{kernel:?}: {e:#}"));
            println!("health check ({kernel:?}) on GPU 0: {d:?}");
            assert!(d > std::time::Duration::ZERO && d < std::time::Duration::from_secs(10));
        }
        // The harness's own buffers still work after the checks.
        let b = gpu.upload(&[7u8; 64]).unwrap();
        assert_eq!(gpu.read(&b, 0, 64).unwrap(), vec![7u8; 64]);
    }
}
