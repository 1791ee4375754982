//! Baseline times that candidate kernels are compared against (PyTorch eager,
//! `torch.compile`, ...). For now: the importer of KernelBench's published baseline JSON.

mod kernelbench;

pub use kernelbench::{BaselineError, KernelBenchBaselines, KernelBenchMode, KernelBenchTiming};
