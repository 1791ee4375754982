//! Building the comparison kernels: `kernels.cu` compiled by NVRTC to a CUBIN for the GPU's
//! architecture (cached once per architecture and process), or to PTX for the driver to JIT
//! when no CUBIN loads. Imports nothing of the harness.

use std::ffi::CString;
use std::sync::Mutex;

use cudarc::nvrtc::Ptx;
use kbench_record::Dtype;

/// Threads per block of the scan kernels (a multiple of 32; the kernels assume 256).
pub(super) const THREADS: u32 = 256;

/// The scan kernels. One template instantiated per dtype (and, for floats, with and
/// without a float64 reference); each thread walks 16-byte vectors grid-stride, then the
/// tail elements one at a time, and each block writes one `Acc`. Beside them, the
/// denormal family's flush-count kernels ([`FLUSH_KERNELS`]).
///
/// `kernels.cu` holds exactly the bytes NVRTC compiles (it begins with an empty line); the
/// CUBIN cache is keyed by architecture only (it lives in this process).
const KERNEL_SRC: &str = include_str!("kernels.cu");

/// Every dtype's kernel: (dtype, with a float64 reference, entry point).
pub(super) const KERNELS: [(Dtype, bool, &str); 14] = [
    (Dtype::F64, false, "devcmp_f64"),
    (Dtype::F64, true, "devcmp_f64_t"),
    (Dtype::F32, false, "devcmp_f32"),
    (Dtype::F32, true, "devcmp_f32_t"),
    (Dtype::F16, false, "devcmp_f16"),
    (Dtype::F16, true, "devcmp_f16_t"),
    (Dtype::Bf16, false, "devcmp_bf16"),
    (Dtype::Bf16, true, "devcmp_bf16_t"),
    (Dtype::I64, false, "devcmp_i64"),
    (Dtype::I32, false, "devcmp_i32"),
    (Dtype::I16, false, "devcmp_i16"),
    (Dtype::I8, false, "devcmp_i8"),
    (Dtype::U8, false, "devcmp_u8"),
    (Dtype::Bool, false, "devcmp_bool"),
];

/// The denormal family's flush-count kernels, one per float dtype: (dtype, entry point).
/// Each takes (candidate, reference, n, out) and writes two u64 counts per block.
pub(super) const FLUSH_KERNELS: [(Dtype, &str); 4] = [
    (Dtype::F64, "devflush_f64"),
    (Dtype::F32, "devflush_f32"),
    (Dtype::F16, "devflush_f16"),
    (Dtype::Bf16, "devflush_bf16"),
];

/// Options that make the kernel's arithmetic the Rust code's: no contraction of `a·b + c`
/// into an FMA (it rounds once where Rust rounds twice), no flushing of subnormals, IEEE
/// division.
const NVRTC_OPTS: [&str; 4] = [
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
];

/// Whether libnvrtc can be loaded (cudarc panics calling into an absent library).
pub(super) fn nvrtc_present() -> bool {
    // SAFETY: only probes for libnvrtc by its known names; loading runs the library's
    // initialisers, nothing else.
    #[allow(unsafe_code)]
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    present
}

/// Compiles the kernels to a CUBIN for `arch` (`sm_90`); also returns NVRTC's log.
///
/// A CUBIN, unlike PTX, loads on a driver older than NVRTC within the same CUDA major
/// version, and skips the driver's JIT.
pub(super) fn compile_cubin(
    arch: &str,
    extra: &[&str],
) -> std::result::Result<(Vec<u8>, String), String> {
    use cudarc::nvrtc::{result as nvrtc, sys as nvsys};
    let src = CString::new(KERNEL_SRC).map_err(|e| e.to_string())?;
    let name = CString::new("kbench_devcmp.cu").map_err(|e| e.to_string())?;
    let prog = nvrtc::create_program(&src, Some(&name)).map_err(|e| format!("{e:?}"))?;
    let mut opts: Vec<String> = vec![format!("--gpu-architecture={arch}")];
    opts.extend(NVRTC_OPTS.iter().map(|s| s.to_string()));
    opts.extend(extra.iter().map(|s| s.to_string()));
    // SAFETY: `prog` was created above and is destroyed only at the end of this function;
    // `src` and `name`, which it may reference, outlive it.
    #[allow(unsafe_code)]
    let compiled = unsafe { nvrtc::compile_program(prog, &opts) };
    // SAFETY: as above.
    #[allow(unsafe_code)]
    let log = unsafe { nvrtc::get_program_log(prog) }
        .map(|raw| {
            let bytes: Vec<u8> = raw
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let out = match compiled {
        Err(e) => Err(format!("NVRTC failed ({e:?}) for {arch}: {log}")),
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
            #[allow(unsafe_code)]
            let rc = unsafe { nvsys::nvrtcGetCUBINSize(prog, &mut size) };
            match rc.result() {
                Err(e) => Err(format!("nvrtcGetCUBINSize: {e:?}")),
                Ok(()) => {
                    let mut cubin = vec![0u8; size];
                    // SAFETY: `cubin` has the `size` bytes NVRTC asked for.
                    #[allow(unsafe_code)]
                    let rc = unsafe { nvsys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) };
                    rc.result()
                        .map(|()| (cubin, log))
                        .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))
                }
            }
        }
    };
    // SAFETY: `prog` is live and destroyed exactly once, here.
    #[allow(unsafe_code)]
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

/// [`compile_cubin`] once per architecture and process (NVRTC takes seconds; a machine
/// with eight GPUs of one kind compiles once).
pub(super) fn cached_cubin(arch: &str) -> std::result::Result<Vec<u8>, String> {
    static CUBINS: Mutex<Vec<(String, Vec<u8>)>> = Mutex::new(Vec::new());
    let mut cache = CUBINS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, cubin)) = cache.iter().find(|(a, _)| a == arch) {
        return Ok(cubin.clone());
    }
    let (cubin, _) = compile_cubin(arch, &[])?;
    cache.push((arch.to_string(), cubin.clone()));
    Ok(cubin)
}

/// The kernels as PTX for NVRTC's default architecture (the driver JIT-compiles it).
pub(super) fn compile_ptx() -> std::result::Result<Ptx, String> {
    let opts = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        name: Some("kbench_devcmp.cu".to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SRC, opts).map_err(|e| format!("{e}"))
}
