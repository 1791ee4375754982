//! Baseline times that candidate kernels are compared against: PyTorch eager,
//! `torch.compile` and its modes. The modes and the candidate sources that run them
//! ([`Mode`]), the per-GPU, per-torch-version store ([`Store`], [`BaselineFile`]), and the
//! importer of KernelBench's published baseline JSON ([`KernelBenchBaselines`], [`import`]),
//! and the baselines a run compares against ([`BaselineTable`], [`BaselineRequest`]).

mod coverage;
mod estimate;
mod import;
mod kernelbench;
mod mode;
mod store;
mod table;

pub use coverage::{coverage_of, entries_of, LevelCoverage};
pub use estimate::{default_root, CompileTimes, EagerTimes};
pub use import::{import_kernelbench, known_caveats, ImportOptions};
pub use kernelbench::{BaselineError, KernelBenchBaselines, KernelBenchMode, KernelBenchTiming};
pub use mode::Mode;
pub use store::{
    gpu_slug, BaselineEnv, BaselineFile, Entry, ErrorEntry, Lookup, Origin, Store, StoreError,
    StoreMeta, TimingSettings, FORMAT,
};
pub use table::{BaselineRequest, BaselineTable, RequestError, UsedFile, AGENT};
