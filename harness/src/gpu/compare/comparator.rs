//! [`DeviceComparator`]: the comparison kernels loaded on one GPU, and
//! [`DeviceComparator::compare`], the CPU comparator's checks and verdict around one or two
//! scans of device buffers.

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use kbench_adversarial::{
    float64_gate, tolerance, unravel_index, CompareError, Comparison, ElementMismatch, Float64Gate,
    Float64Status, Tolerance, ValueReport,
};
use kbench_record::{Dtype, FlushCount, Precision, ToleranceProfile};

use super::compile::{cached_cubin, compile_ptx, nvrtc_present, FLUSH_KERNELS, KERNELS, THREADS};
use super::stats::{decode, float64_check, Params, Rescue, Stats, PARTIAL_BYTES};
use crate::gpu::devmem::{DevBuf, Gpu};

/// A tensor in device memory: `buf` holds at least `numel(shape)` elements of `dtype`,
/// row-major, from its start.
pub(crate) struct DevTensor<'a> {
    pub(crate) buf: &'a DevBuf,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
}

struct Kernel {
    dtype: Dtype,
    truth: bool,
    func: CudaFunction,
    /// Resident blocks on the whole GPU: the grid of a large scan.
    max_blocks: u32,
}

/// Bytes one block of a flush-count kernel writes: two u64 counts.
const FLUSH_PARTIAL_BYTES: usize = 16;

/// Compares output tensors on one GPU with the CPU comparator's rules (see the module
/// docs). Compiled once per GPU; [`DeviceComparator::compare`] may be called from several
/// threads (scans take turns on the one partials buffer).
pub(crate) struct DeviceComparator {
    pub(super) gpu: Arc<Gpu>,
    kernels: Vec<Kernel>,
    /// The flush-count kernels (`truth` false).
    flush_kernels: Vec<Kernel>,
    /// One `Acc` per block of the largest grid, or two u64 per block of the largest
    /// flush-count grid, whichever is more.
    partials: Mutex<DevBuf>,
    _module: Arc<CudaModule>,
}

impl DeviceComparator {
    /// Compiles the kernels with NVRTC for `gpu` (a CUBIN for its architecture, else PTX
    /// for the driver to JIT) and allocates the partials buffer.
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        if !nvrtc_present() {
            bail!("the GPU comparator needs NVRTC, and libnvrtc.so could not be loaded");
        }
        gpu.ctx
            .bind_to_thread()
            .map_err(|e| anyhow!("binding GPU {}'s context: {e:?}", gpu.ordinal))?;
        let (major, minor) = gpu
            .ctx
            .compute_capability()
            .map_err(|e| anyhow!("compute capability of GPU {}: {e:?}", gpu.ordinal))?;
        let arch = format!("sm_{major}{minor}");
        let module = match cached_cubin(&arch) {
            Ok(cubin) => gpu
                .ctx
                .load_module(Ptx::from_binary(cubin))
                .map_err(|e| format!("loading the {arch} CUBIN: {e:?}")),
            Err(e) => Err(e),
        };
        let module = match module {
            Ok(m) => m,
            Err(cubin_err) => {
                let ptx = compile_ptx().map_err(|e| {
                    anyhow!("compiling the comparison kernels: {cubin_err}; as PTX: {e}")
                })?;
                gpu.ctx.load_module(ptx).map_err(|e| {
                    anyhow!(
                        "loading the comparison kernels on GPU {}: {cubin_err}; as PTX: {e:?}",
                        gpu.ordinal
                    )
                })?
            }
        };
        let sms = gpu
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| anyhow!("SM count of GPU {}: {e:?}", gpu.ordinal))?
            .max(1) as u32;
        let load = |dtype: Dtype, truth: bool, name: &str| -> Result<Kernel> {
            let func = module
                .load_function(name)
                .map_err(|e| anyhow!("loading kernel {name}: {e:?}"))?;
            let per_sm = func
                .occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)
                .map_err(|e| anyhow!("occupancy of kernel {name}: {e:?}"))?
                .max(1);
            Ok(Kernel {
                dtype,
                truth,
                func,
                max_blocks: sms * per_sm,
            })
        };
        let kernels = KERNELS
            .iter()
            .map(|&(dtype, truth, name)| load(dtype, truth, name))
            .collect::<Result<Vec<_>>>()?;
        let flush_kernels = FLUSH_KERNELS
            .iter()
            .map(|&(dtype, name)| load(dtype, false, name))
            .collect::<Result<Vec<_>>>()?;
        let bytes = |ks: &[Kernel], per_block: usize| {
            ks.iter().map(|k| k.max_blocks as usize * per_block).max()
        };
        let most = bytes(&kernels, PARTIAL_BYTES)
            .max(bytes(&flush_kernels, FLUSH_PARTIAL_BYTES))
            .unwrap_or(PARTIAL_BYTES);
        let partials = gpu.alloc(most)?;
        Ok(Self {
            gpu: Arc::clone(gpu),
            kernels,
            flush_kernels,
            partials: Mutex::new(partials),
            _module: module,
        })
    }

    /// Compares `candidate` with `reference` exactly as [`kbench_adversarial::compare`]
    /// compares host tensors. The outer `Err` is a CUDA failure or tensors that do not fit
    /// their buffers or this GPU; the inner result is the comparator's.
    pub(crate) fn compare(
        &self,
        candidate: &DevTensor,
        reference: &DevTensor,
        reference_f64: Option<&DevTensor>,
        profile: ToleranceProfile,
        precision: Precision,
    ) -> Result<std::result::Result<Comparison, CompareError>> {
        self.compare_case(
            candidate,
            reference,
            reference_f64,
            None,
            profile,
            precision,
            float64_gate(precision),
        )
    }

    /// [`Self::compare`] with a `nan-inf` case's probe reference and the case's own float64
    /// gate, exactly as [`kbench_adversarial::compare_case`].
    #[allow(clippy::too_many_arguments)] // the CPU function's six, plus `self`
    pub(crate) fn compare_case(
        &self,
        candidate: &DevTensor,
        reference: &DevTensor,
        reference_f64: Option<&DevTensor>,
        alt: Option<&DevTensor>,
        profile: ToleranceProfile,
        precision: Precision,
        gate: Float64Gate,
    ) -> Result<std::result::Result<Comparison, CompareError>> {
        if let Some(a) = alt {
            if a.dtype != reference.dtype || a.shape != reference.shape {
                return Ok(Err(CompareError::ProbeReference {
                    expected_dtype: reference.dtype,
                    expected: reference.shape.clone(),
                    got_dtype: a.dtype,
                    got: a.shape.clone(),
                }));
            }
        }
        if let Some(r64) = reference_f64 {
            if r64.dtype != Dtype::F64 {
                return Ok(Err(CompareError::ReferenceF64Dtype(r64.dtype)));
            }
            if r64.shape != reference.shape {
                return Ok(Err(CompareError::ReferenceF64Shape {
                    expected: reference.shape.clone(),
                    got: r64.shape.clone(),
                }));
            }
        }
        if candidate.shape != reference.shape {
            return Ok(Ok(Comparison::WrongShape {
                expected: reference.shape.clone(),
                got: candidate.shape.clone(),
            }));
        }
        if candidate.dtype != reference.dtype {
            return Ok(Ok(Comparison::WrongDtype {
                expected: reference.dtype,
                got: candidate.dtype,
            }));
        }
        let dtype = reference.dtype;
        let numel = element_count(&reference.shape)?;
        if usize::try_from(numel).is_err() {
            return Ok(Err(CompareError::TooLarge(numel)));
        }
        let is_float = dtype.is_float();
        let tol = if is_float {
            tolerance(profile, precision)
        } else {
            Tolerance::EXACT
        };
        let strict = profile == ToleranceProfile::Strict;
        let truth = reference_f64.filter(|_| is_float);
        let alt = alt.filter(|_| is_float);
        self.check_buffer("candidate", candidate, numel)?;
        self.check_buffer("reference", reference, numel)?;
        if let Some(t) = truth {
            self.check_buffer("float64 reference", t, numel)?;
        }
        if let Some(a) = alt {
            self.check_buffer("probe reference", a, numel)?;
        }
        let mut params = Params {
            tol,
            rescue: (strict && truth.is_some()).then_some(Rescue {
                factor: gate.element_factor,
                slack: tol.atol * gate.element_atol_scale,
                scales: kbench_adversarial::RescueScales::FIRST_PASS,
            }),
        };
        let run = |params: &Params| {
            self.scan(
                dtype,
                candidate.buf,
                reference.buf,
                truth.map(|t| t.buf),
                alt.map(|a| a.buf),
                numel,
                params,
            )
        };
        let mut stats = run(&params)?;
        // The CPU's second pass: elements the first pass could not rescue may be as far
        // from float64 as the reference typically is, or as the candidate's own error
        // spread allows; the same scales as the CPU's.
        if let Some(rescue) = params.rescue.as_mut() {
            if stats.elementwise_failures > 0 && stats.gate_elements > 0 {
                rescue.scales = kbench_adversarial::rescue_scales(&gate, &stats.gate_sums());
                stats = run(&params)?;
            }
        }
        let shape = &reference.shape;
        let float64 = match truth {
            Some(_) => {
                let mut check = float64_check(&stats, gate, strict);
                if !check.passed {
                    check.worst_index = stats.worst.map(|(flat, _)| unravel_index(flat, shape));
                }
                Float64Status::Measured(check)
            }
            None if strict && is_float => Float64Status::Skipped,
            None => Float64Status::NotApplicable,
        };
        let first_mismatch = match stats.first {
            None => None,
            Some((flat, rule)) => Some(ElementMismatch {
                flat_index: flat,
                index: unravel_index(flat, shape),
                rule,
                candidate: self.element(candidate, flat)?,
                reference: self.element(reference, flat)?,
            }),
        };
        Ok(Ok(Comparison::Values(ValueReport {
            dtype,
            shape: shape.clone(),
            profile,
            tolerance: tol,
            elements: numel,
            mismatches: stats.elementwise_failures + stats.nonfinite_mismatches,
            nonfinite_mismatches: stats.nonfinite_mismatches,
            artefacts: stats.artefacts,
            first_artefact: stats.first_artefact.map(|f| unravel_index(f, shape)),
            tol_needed: stats.tol_needed,
            probed: alt.is_some(),
            rescued: stats.rescued,
            max_abs: stats.max_abs,
            max_rel: stats.max_rel,
            first_mismatch,
            float64,
        })))
    }

    /// The denormal family's flush count, exactly as
    /// [`kbench_adversarial::flush_count`] counts host tensors: the reference's subnormal
    /// values and how many of them the candidate holds as exactly zero. Only the counts are
    /// read back. `None` for non-float outputs or mismatched shapes and dtypes (the
    /// comparison reports those); `Err` is a CUDA failure or a tensor that does not fit its
    /// buffer or this GPU.
    pub(crate) fn flush_count(
        &self,
        candidate: &DevTensor,
        reference: &DevTensor,
    ) -> Result<Option<FlushCount>> {
        if candidate.shape != reference.shape || candidate.dtype != reference.dtype {
            return Ok(None);
        }
        let dtype = reference.dtype;
        let Some(kernel) = self.flush_kernels.iter().find(|k| k.dtype == dtype) else {
            return Ok(None);
        };
        let numel = element_count(&reference.shape)?;
        let mut count = FlushCount {
            subnormal: 0,
            zeroed: 0,
        };
        if numel == 0 {
            return Ok(Some(count));
        }
        self.check_buffer("candidate", candidate, numel)?;
        self.check_buffer("reference", reference, numel)?;
        let cfg = grid(dtype, numel, kernel.max_blocks);
        let partials = self
            .partials
            .lock()
            .map_err(|_| anyhow!("the comparator's partials buffer is poisoned"))?;
        let (c, r, out) = (candidate.buf.ptr(), reference.buf.ptr(), partials.ptr());
        let stream = &self.gpu.stream;
        let mut launch = stream.launch_builder(&kernel.func);
        launch.arg(&c).arg(&r).arg(&numel).arg(&out);
        // SAFETY: the flush kernels take (const void* c, const void* r, u64 n, u64* out),
        // pushed above in that order with matching types. `c` and `r` hold `numel`
        // elements of `dtype`, 16-byte aligned (check_buffer); `out` holds two u64 per
        // block of this grid (the buffer was sized for the largest grid of every kernel,
        // flush kernels included). The partials lock is held until the counts are read
        // back.
        #[allow(unsafe_code)]
        let launched = unsafe { launch.launch(cfg) }.map(drop);
        let bytes = self.finish(
            launched,
            &partials,
            cfg.grid_dim.0 as usize * FLUSH_PARTIAL_BYTES,
            &format!("the {dtype} flush count"),
        )?;
        for block in bytes.chunks_exact(FLUSH_PARTIAL_BYTES) {
            let (s, z) = block.split_at(8);
            count.subnormal += u64::from_le_bytes(s.try_into().expect("8 bytes"));
            count.zeroed += u64::from_le_bytes(z.try_into().expect("8 bytes"));
        }
        Ok(Some(count))
    }

    /// `t` lives on this GPU, its buffer holds `numel` elements, and it starts on a 16-byte
    /// boundary (the kernels read 16-byte vectors; `cuMemAlloc` aligns to 256).
    fn check_buffer(&self, what: &str, t: &DevTensor, numel: u64) -> Result<()> {
        if t.buf.gpu().ordinal != self.gpu.ordinal {
            bail!(
                "the {what} is on GPU {}, the comparator on GPU {}",
                t.buf.gpu().ordinal,
                self.gpu.ordinal
            );
        }
        let need = numel
            .checked_mul(t.dtype.size() as u64)
            .ok_or_else(|| anyhow!("the {what} of {numel} elements overflows"))?;
        if need > t.buf.nbytes() as u64 {
            bail!(
                "the {what} ({} {:?}) needs {need} bytes, its buffer has {}",
                t.dtype,
                t.shape,
                t.buf.nbytes()
            );
        }
        if !t.buf.ptr().is_multiple_of(16) {
            bail!("the {what}'s buffer is not 16-byte aligned");
        }
        Ok(())
    }

    /// Element `flat` of `t`, decoded on the host as the CPU comparator decodes it.
    fn element(&self, t: &DevTensor, flat: u64) -> Result<f64> {
        let size = t.dtype.size();
        let bytes = self
            .gpu
            .read(t.buf, flat as usize * size, size)
            .context("reading back the first mismatching element")?;
        Ok(decode(t.dtype, &bytes))
    }

    /// One pass over the tensors: a kernel, then the partials folded on the host.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        dtype: Dtype,
        cand: &DevBuf,
        refr: &DevBuf,
        truth: Option<&DevBuf>,
        alt: Option<&DevBuf>,
        numel: u64,
        p: &Params,
    ) -> Result<Stats> {
        if numel == 0 {
            return Ok(Stats::EMPTY);
        }
        let kernel = self
            .kernels
            .iter()
            .find(|k| k.dtype == dtype && k.truth == (truth.is_some() && dtype.is_float()))
            .ok_or_else(|| anyhow!("no comparison kernel for {dtype}"))?;
        let cfg = grid(dtype, numel, kernel.max_blocks);
        let partials = self
            .partials
            .lock()
            .map_err(|_| anyhow!("the comparator's partials buffer is poisoned"))?;
        let (c, r, t, a, out) = (
            cand.ptr(),
            refr.ptr(),
            truth.map_or(0, DevBuf::ptr),
            alt.map_or(0, DevBuf::ptr),
            partials.ptr(),
        );
        let rescue = p.rescue.unwrap_or(Rescue {
            factor: 0.0,
            slack: 0.0,
            scales: kbench_adversarial::RescueScales::FIRST_PASS,
        });
        let sc = rescue.scales;
        let rescue_on = i32::from(p.rescue.is_some());
        let stream = &self.gpu.stream;
        let mut launch = stream.launch_builder(&kernel.func);
        if dtype.is_float() {
            launch
                .arg(&c)
                .arg(&r)
                .arg(&t)
                .arg(&a)
                .arg(&numel)
                .arg(&p.tol.atol)
                .arg(&p.tol.rtol)
                .arg(&rescue_on)
                .arg(&rescue.factor)
                .arg(&rescue.slack)
                .arg(&sc.rel_scale)
                .arg(&sc.abs_scale)
                .arg(&sc.own_rel)
                .arg(&sc.own_abs)
                .arg(&out);
        } else {
            launch.arg(&c).arg(&r).arg(&numel).arg(&out);
        }
        // SAFETY: the float kernels take (const void* c, const void* r, const double* t,
        // const void* alt, u64 n, double atol, double rtol, int rescue, double factor,
        // double slack, double rel_scale, double abs_scale, double own_rel, double own_abs,
        // Acc* out) and the integer kernels
        // (c, r, n, out), pushed above in that order with matching types. `c` and `r` hold
        // `numel` elements of `dtype`, `t` (float kernels with a float64 reference only)
        // `numel` f64s, `alt` (0 without a probe reference) `numel` elements of `dtype`,
        // 16-byte aligned (check_buffer); `out` holds one 128-byte Acc per block
        // of this grid (blocks ≤ max_blocks, the buffer was sized for the largest). The
        // partials lock is held until the results are read back.
        #[allow(unsafe_code)]
        let launched = unsafe { launch.launch(cfg) }.map(drop);
        let bytes = self.finish(
            launched,
            &partials,
            cfg.grid_dim.0 as usize * PARTIAL_BYTES,
            &format!("the {dtype} comparison"),
        )?;
        Ok(Stats::fold(&bytes))
    }

    /// After a pass was launched on the comparator's stream (`launched`, the launch's own
    /// result): waits for it and reads back the first `n` bytes of the partials, which the
    /// caller's lock still holds. `what` names the pass in errors.
    fn finish(
        &self,
        launched: std::result::Result<(), cudarc::driver::DriverError>,
        partials: &DevBuf,
        n: usize,
        what: &str,
    ) -> Result<Vec<u8>> {
        let ordinal = self.gpu.ordinal;
        launched.map_err(|e| anyhow!("launching {what} on GPU {ordinal}: {e:?}"))?;
        self.gpu
            .stream
            .synchronize()
            .map_err(|e| anyhow!("running {what} on GPU {ordinal}: {e:?}"))?;
        self.gpu.read(partials, 0, n)
    }
}

/// The number of elements of `shape`, or an error when it overflows.
fn element_count(shape: &[u64]) -> Result<u64> {
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| anyhow!("shape {shape:?} overflows the element count"))
}

/// The grid of one pass over `numel` elements of `dtype`, read as 16-byte vectors: a thread
/// per vector, at most `max_blocks` blocks (the kernels' grid-stride loops do the rest).
fn grid(dtype: Dtype, numel: u64, max_blocks: u32) -> LaunchConfig {
    let per_vector = (16 / dtype.size()) as u64;
    let blocks = (numel / per_vector)
        .div_ceil(u64::from(THREADS))
        .clamp(1, u64::from(max_blocks)) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
