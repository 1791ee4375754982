//! Hardware feedback for one kernel (`kbench profile --problem P --kernel K`, printed by
//! `commands::profile`).
//!
//! The candidate runs in kbench's own worker (`python -m kbench_worker profile SPEC`, see PROTOCOL.md,
//! "Profiling script mode"): it loads the problem and the kernel as an evaluation does, makes
//! inputs, warms up, and runs `--calls` forwards between cudaProfilerStart/Stop inside an
//! NVTX range, so `ncu --profile-from-start off` captures only the candidate's calls.
//!
//! ncu is run with `--csv --page raw --print-units base`: one CSV row per kernel launch, one
//! column per metric (ncu sorts them by name), a second row giving each metric's unit, and
//! values in base units (bytes, nanoseconds) with `,` as the thousands separator. The parser
//! also accepts scaled units (`Kbyte`, `usecond`, ...) and `==PROF==` lines mixed in. The
//! metrics are CudaForge's 24 ([`CUDAFORGE_METRICS`]) plus the roofline's
//! ([`ROOFLINE_METRICS`]). Launches are aggregated per kernel name and per call, and each gets
//! a roofline verdict ([`kbench_record::perf::roofline`]).
//!
//! Without ncu, on a CPU, or when ncu cannot read the counters (ERR_NVGPUCTRPERM, no kernel
//! captured), it falls back to the PyTorch profiler and says so: CUDA kernels' device times
//! on a GPU, aten operators' CPU times on a CPU, with no counters and no roofline verdict.
//!
//! - `ncu`: the metrics, ncu's CSV and its aggregation (pure data).
//! - `run`: the worker and ncu processes, into a [`ProfileReport`] ([`profile`]).
//!
//! Part of `measure/`: imports `config/` (the device), `worker/` (the Python environment and
//! worker script) and `gpu/` (peaks, architecture), never what prints.

mod ncu;
mod run;

pub(crate) use ncu::cudaforge_metrics_json;
#[cfg(test)]
pub(crate) use ncu::{aggregate, parse_ncu_raw_csv, NcuProfile};
pub(crate) use run::{profile, ProfileConfig, ProfileReport};
