//! Output comparison on the GPU: the statistics of [`kbench_adversarial::compare`], computed
//! where the tensors already are.
//!
//! The CPU comparator needs both tensors in host memory; for outputs of gigabytes the copy
//! alone takes longer than the comparison. [`DeviceComparator`] runs the same rules in an
//! NVRTC-compiled kernel over device buffers
//! ([`DevBuf`](crate::gpu::devmem::DevBuf)) and copies back only one partial
//! result per thread block (128 bytes each, a few thousand at most), which the host folds
//! into the very [`Comparison`](kbench_adversarial::Comparison) the CPU path builds:
//!
//! - shape, dtype and float64-reference checks run on the host before any kernel, in the CPU
//!   path's order;
//! - every element is decoded exactly to f64 (f16 through `cvt.f32.f16`, bf16 by a shift,
//!   integers and bools as i64) and judged in f64 with the module compiled `--fmad=false`,
//!   so `atol + rtol·|r|`, the rescue bound and the `max_rel` filter round exactly as the
//!   Rust code does;
//! - counts, the first mismatch (lowest flat index) and its rule, `max_abs`, `max_rel`,
//!   `tol_needed`, the reference artefacts of a `nan-inf` case (its probe reference is one
//!   more device buffer, read only where an element is not finite) and the worst
//!   element against the float64 reference are order-independent and therefore identical;
//!   the float64 gate's sums (`Σ(c − r64)²`, `Σ(r − r64)²`, `Σ r64²`) are added in another
//!   order than on the CPU and may differ in the last bits (they are deterministic for a
//!   given GPU: fixed grid, fixed reduction tree, blocks folded in order on the host);
//! - the first mismatch's `candidate` and `reference` values are read back from the device
//!   buffers (one element each) and decoded on the host.
//!
//! [`DeviceComparator::flush_count`] is the denormal family's
//! [`flush_count`](kbench_adversarial::flush_count) on device buffers: one kernel per float
//! dtype counts the reference's subnormal values and the candidate's zeros among them, and
//! only two counts per block come back.
//!
//! On an H100 80GB HBM3 (driver 580, CUDA 13.0): 1.6e9 fp32 elements compare in 4.3 ms
//! (3.0 TB/s of both tensors' bytes), 7.2 ms when every element is wrong; 256 MiB fp32
//! tensors in 0.24 ms, 0.40 ms under `strict` with a float64 reference; 22 µs for one
//! element. Building the comparator (NVRTC) takes about 4 s, once per architecture and
//! process.
//!
//! Like `devmem.rs` and the rest of `gpu/`, this module is part of kbench's cudarc boundary.
//!
//! Files: `kernels.cu` is the kernels' CUDA C source, built by `compile.rs` (NVRTC, a CUBIN
//! cached per architecture, PTX as the fallback); `stats.rs` folds the blocks' partial
//! results and decodes elements on the host; `comparator.rs` is the [`DeviceComparator`]
//! API; `tests/` checks it against the CPU comparator. Of the harness it imports only
//! `gpu::devmem`; otherwise the record and adversarial crates.

mod comparator;
mod compile;
mod stats;
#[cfg(test)]
mod tests;

pub(crate) use comparator::{DevTensor, DeviceComparator};
