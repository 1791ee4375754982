//! Finding GPUs through the CUDA driver (cudarc, loaded dynamically).
//!
//! cudarc panics when it calls into a CUDA library that is not installed, so every use is
//! guarded by the library-present check first. This module is kbench's cudarc boundary.

pub mod compare;
pub mod devmem;
pub mod nvml;

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

/// What the CUDA driver reports about one device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    /// As NVML and `nvidia-smi -L` spell it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
    /// (empty if the driver would not say). [`parse_uuid`] reads it back.
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

    /// Peak FLOP/s per precision and DRAM bytes/s: the per-architecture table
    /// ([`kbench_record::perf::ArchRates`], sources cited there) × SMs × the driver's max SM
    /// clock. None for an architecture outside the table (before Ampere, Jetson parts) or
    /// when the driver did not report SMs or clocks.
    pub fn peaks(&self) -> Option<kbench_record::perf::Peaks> {
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

impl GpuInfo {
    /// The GPU as an agent's prompt describes it (CudaForge's "# Target GPU" section): name,
    /// architecture, the driver's properties and the peak rates, as markdown bullets.
    pub fn spec_markdown(&self) -> String {
        let (major, minor) = self.compute_capability;
        let mut s = format!(
            "- GPU: {}\n- Compute capability: {major}.{minor}{}\n- SMs: {}\n- Max SM clock: {} MHz\n- Memory: {:.1} GiB, {:.0} GB/s peak DRAM bandwidth ({}-bit bus at {} MHz)\n- L2 cache: {} MiB\n- Shared memory per SM: {} KiB\n",
            self.name,
            kbench_record::perf::ArchRates::for_cc(major, minor)
                .map_or(String::new(), |r| format!(" ({})", r.arch)),
            self.sms,
            self.sm_clock_khz / 1000,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.peak_bandwidth_gbs(),
            self.memory_bus_bits,
            self.memory_clock_khz / 1000,
            self.l2_bytes / (1 << 20),
            self.shared_memory_per_sm_bytes / 1024,
        );
        if let Some(p) = self.peaks() {
            let t = |x: f64| format!("{:.1}", x / 1e12);
            s.push_str(&format!(
                "- Peak dense TFLOP/s: FP64 {}, FP64 tensor {}, FP32 {}, TF32 tensor {}, FP16/BF16 tensor {}, FP8 tensor {}, INT8 tensor {} TOPS\n",
                t(p.fp64),
                t(p.fp64_tensor),
                t(p.fp32),
                t(p.tf32_tensor),
                t(p.fp16_tensor),
                p.fp8_tensor.map_or("-".into(), t),
                t(p.int8_tensor)
            ));
        }
        s
    }
}

/// The peaks of CUDA device `ordinal` ([`GpuInfo::peaks`]), asked of the driver once per
/// process; None without a driver, for an unknown ordinal or an architecture outside the
/// table.
pub fn peaks_of(ordinal: u32) -> Option<kbench_record::perf::Peaks> {
    static ALL: std::sync::OnceLock<Vec<GpuInfo>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| describe().unwrap_or_default())
        .iter()
        .find(|g| g.index == ordinal)
        .and_then(GpuInfo::peaks)
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

/// A plain table of [`describe`]'s result (static properties only; see [`render_listing`]).
pub fn render_gpus(gpus: &[GpuInfo]) -> String {
    let rows: Vec<(&GpuInfo, Option<&LiveState>)> = gpus.iter().map(|g| (g, None)).collect();
    render_table(&rows, false)
}

fn render_table(rows: &[(&GpuInfo, Option<&LiveState>)], live: bool) -> String {
    let mut s = format!(
        "{:<3} {:<28} {:>5} {:>5} {:>9} {:>7} {:>9} {:>9} {:>6} {:>9}",
        "gpu", "name", "cc", "SMs", "memory", "L2", "SM clock", "mem clock", "bus", "peak BW"
    );
    if live {
        s.push_str(&format!(" {:>8} {:>5} {:>5}", "SM now", "temp", "util"));
    }
    s.push('\n');
    for (g, state) in rows {
        s.push_str(&format!(
            "{:<3} {:<28} {:>5} {:>5} {:>6.1}GiB {:>4}MiB {:>6}MHz {:>6}MHz {:>3}bit {:>5.0}GB/s",
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
        if live {
            let show =
                |v: Option<u32>, unit: &str| v.map_or("-".to_string(), |v| format!("{v}{unit}"));
            let st = |f: fn(&LiveState) -> Option<u32>| state.and_then(f);
            s.push_str(&format!(
                " {:>8} {:>5} {:>5}",
                show(st(|l| l.sm_clock_mhz), "MHz"),
                show(st(|l| l.temp_c), "C"),
                show(st(|l| l.util_pct), "%"),
            ));
        }
        s.push('\n');
    }
    s
}

// ---------------------------------------------------------------------------------------------
// GPU identity: matching the CUDA driver's devices to NVML's by UUID, never by index (the CUDA
// driver orders devices fastest first and honours CUDA_VISIBLE_DEVICES; NVML sees every GPU in
// PCI bus order).

/// The 16 bytes of a driver `CUuuid`.
fn uuid_bytes(u: &cudarc::driver::sys::CUuuid) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(u.bytes.iter()) {
        *o = *b as u8;
    }
    out
}

/// A UUID as NVML and `nvidia-smi -L` spell it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
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
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
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

/// The UUID the CUDA driver reports for device `ordinal`; None without a driver or device.
pub fn cuda_uuid(ordinal: usize) -> Option<[u8; 16]> {
    use cudarc::driver::result::device;
    if ordinal >= inventory().count() {
        return None;
    }
    let dev = device::get(ordinal as i32).ok()?;
    device::get_uuid(dev).ok().map(|u| uuid_bytes(&u))
}

/// The CUDA version the installed driver supports (cuDriverGetVersion), e.g. "13.0".
pub fn cuda_driver_version() -> Option<String> {
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

// ---------------------------------------------------------------------------------------------
// `kbench gpus`: the driver's static properties with NVML's live state.

use crate::gpu::nvml::LiveState;

/// One device as `kbench gpus` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuEntry {
    #[serde(flatten)]
    pub info: GpuInfo,
    /// NVML's view now (clocks, temperature, utilisation, memory, power); None without NVML
    /// or when NVML has no device with this UUID.
    pub live: Option<LiveState>,
    /// Peak rates from the architecture table ([`GpuInfo::peaks`]); None outside it.
    pub peaks: Option<kbench_record::perf::Peaks>,
}

/// What `kbench gpus` prints.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuListing {
    pub gpus: Vec<GpuEntry>,
    /// The NVIDIA driver's version from NVML, e.g. "580.65.06"; None without NVML.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, e.g. "13.0".
    pub cuda_driver_version: Option<String>,
    /// Why NVML cannot be used; None when it can.
    pub nvml_unavailable: Option<String>,
}

/// Every visible device with its static properties and, where NVML works, its live state.
pub fn listing() -> Result<GpuListing, GpuInventory> {
    let infos = describe()?;
    let nvml_unavailable = crate::gpu::nvml::unavailable_reason();
    let gpus = infos
        .into_iter()
        .map(|info| {
            let live = if nvml_unavailable.is_none() {
                crate::gpu::nvml::live(info.uuid.as_str())
            } else {
                None
            };
            let peaks = info.peaks();
            GpuEntry { info, live, peaks }
        })
        .collect();
    Ok(GpuListing {
        gpus,
        driver_version: crate::gpu::nvml::driver_version(),
        cuda_driver_version: cuda_driver_version(),
        nvml_unavailable,
    })
}

/// [`listing`] as a table, with a last line about the driver and NVML.
pub fn render_listing(l: &GpuListing) -> String {
    let rows: Vec<(&GpuInfo, Option<&LiveState>)> =
        l.gpus.iter().map(|g| (&g.info, g.live.as_ref())).collect();
    let mut s = render_table(&rows, l.nvml_unavailable.is_none());
    for g in &l.gpus {
        match &g.peaks {
            Some(p) => s.push_str(&format!("gpu {} peaks: {}\n", g.info.index, p.describe())),
            None => s.push_str(&format!(
                "gpu {} peaks: compute capability {}.{} is not in kbench's table (Ampere to Blackwell)\n",
                g.info.index, g.info.compute_capability.0, g.info.compute_capability.1
            )),
        }
    }
    let cuda = l
        .cuda_driver_version
        .as_deref()
        .map(|v| format!(", CUDA {v}"))
        .unwrap_or_default();
    match (&l.nvml_unavailable, &l.driver_version) {
        (Some(why), _) => s.push_str(&format!("NVML: not available ({why}){cuda}\n")),
        (None, Some(v)) => s.push_str(&format!("NVML: driver {v}{cuda}\n")),
        (None, None) => s.push_str(&format!("NVML: driver version unknown{cuda}\n")),
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Health check: after a worker crash, before a GPU takes new work.

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
pub enum HealthKernel {
    /// NVRTC's PTX when NVRTC works and the driver loads it, else the built-in PTX.
    Auto,
    /// Only the built-in hand-written PTX.
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
pub fn health_check(
    gpu: &std::sync::Arc<crate::gpu::devmem::Gpu>,
) -> anyhow::Result<std::time::Duration> {
    health_check_with(gpu, HealthKernel::Auto)
}

/// [`health_check`] with a choice of kernel (tests use it to exercise the built-in PTX).
pub fn health_check_with(
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
        // The spec table at the driver's clocks: NVIDIA's 989.4 TF dense BF16, 66.9 FP32.
        let p = g.peaks().expect("sm90 is in the table");
        assert!(
            (p.bf16_tensor / 1e12 - 989.4).abs() < 0.5,
            "{}",
            p.bf16_tensor
        );
        assert!((p.fp32 / 1e12 - 66.9).abs() < 0.1, "{}", p.fp32);
        assert!((p.dram_bytes_per_s / 1e12 - 3.35).abs() < 0.01);
        let md = g.spec_markdown();
        assert!(
            md.contains("- Compute capability: 9.0 (Hopper (sm90))"),
            "{md}"
        );
        assert!(md.contains("3352 GB/s") && md.contains("228 KiB"), "{md}");
        assert!(md.contains("FP16/BF16 tensor 989.4"), "{md}");
        let mut volta = g.clone();
        volta.compute_capability = (7, 0);
        assert_eq!(volta.peaks(), None);
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

    #[test]
    fn listing_explains_nvml_and_keeps_the_table_columns() {
        let g = GpuInfo {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809".into(),
            compute_capability: (9, 0),
            sms: 132,
            memory_bytes: 85_520_809_984,
            l2_bytes: 52_428_800,
            shared_memory_per_sm_bytes: 233_472,
            sm_clock_khz: 1_980_000,
            memory_clock_khz: 2_619_000,
            memory_bus_bits: 5120,
        };
        let without = GpuListing {
            gpus: vec![GpuEntry {
                peaks: g.peaks(),
                info: g.clone(),
                live: None,
            }],
            driver_version: None,
            cuda_driver_version: Some("13.0".into()),
            nvml_unavailable: Some("cannot load libnvidia-ml.so.1".into()),
        };
        let t = render_listing(&without);
        assert!(t.contains("SMs") && t.contains("peak BW"), "{t}");
        assert!(!t.contains("SM now"), "{t}");
        assert!(
            t.contains("NVML: not available (cannot load libnvidia-ml.so.1), CUDA 13.0"),
            "{t}"
        );
        let v = serde_json::to_value(&without).unwrap();
        assert_eq!(v["gpus"][0]["live"], serde_json::Value::Null);
        assert_eq!(v["gpus"][0]["sms"], 132);
        assert_eq!(v["driver_version"], serde_json::Value::Null);

        let live = LiveState {
            uuid: g.uuid.clone(),
            nvml_index: 3,
            sm_clock_mhz: Some(1755),
            mem_clock_mhz: Some(2619),
            temp_c: Some(41),
            power_w: Some(70.5),
            util_pct: Some(0),
            mem_util_pct: Some(0),
            mem_used_bytes: Some(1 << 20),
            mem_total_bytes: Some(85_520_809_984),
            driver_version: Some("580.65.06".into()),
        };
        let with = GpuListing {
            gpus: vec![GpuEntry {
                peaks: g.peaks(),
                info: g,
                live: Some(live),
            }],
            driver_version: Some("580.65.06".into()),
            cuda_driver_version: Some("13.0".into()),
            nvml_unavailable: None,
        };
        let t = render_listing(&with);
        assert!(
            t.contains("SM now") && t.contains("1755MHz") && t.contains("41C"),
            "{t}"
        );
        assert!(t.contains("NVML: driver 580.65.06, CUDA 13.0"), "{t}");
        assert!(t.contains("gpu 0 peaks: Hopper (sm90)"), "{t}");
        assert!(t.contains("FP16/BF16 989.4 TF"), "{t}");
        let v = serde_json::to_value(&with).unwrap();
        assert_eq!(v["gpus"][0]["live"]["sm_clock_mhz"], 1755);
        assert_eq!(v["driver_version"], "580.65.06");
    }

    #[test]
    fn listing_never_panics() {
        match listing() {
            Ok(l) => {
                println!("{}", render_listing(&l));
                assert!(!l.gpus.is_empty());
            }
            Err(why) => assert!(why.why_none().contains("--device cpu")),
        }
    }
}
