//! The baseline modes: how PyTorch itself runs a problem's `Model`.

use std::fmt;

/// One way of running the reference `Model` that candidates are compared against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// PyTorch eager: the `Model` as written.
    Eager,
    /// `torch.compile(mode="default")` (inductor).
    Compile,
    /// `torch.compile(mode="max-autotune")`.
    MaxAutotune,
    /// `torch.compile(mode="reduce-overhead")` (CUDA graphs).
    ReduceOverhead,
    /// `torch.compile(mode="max-autotune-no-cudagraphs")`.
    MaxAutotuneNoCudagraphs,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Eager,
        Mode::Compile,
        Mode::MaxAutotune,
        Mode::ReduceOverhead,
        Mode::MaxAutotuneNoCudagraphs,
    ];

    /// The name used on the command line, in records and as the store's file stem.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Compile => "compile",
            Mode::MaxAutotune => "max-autotune",
            Mode::ReduceOverhead => "reduce-overhead",
            Mode::MaxAutotuneNoCudagraphs => "max-autotune-no-cudagraphs",
        }
    }

    /// The `mode=` argument of `torch.compile`, or `None` for eager.
    pub fn torch_compile_mode(self) -> Option<&'static str> {
        match self {
            Mode::Eager => None,
            Mode::Compile => Some("default"),
            m => Some(m.as_str()),
        }
    }

    /// Whether compiling this mode times kernels on the GPU (inductor's autotuning): such
    /// compiles started ahead compete for the GPU with each other, unlike the CPU-bound
    /// compile of the default mode.
    pub fn autotunes(self) -> bool {
        matches!(self, Mode::MaxAutotune | Mode::MaxAutotuneNoCudagraphs)
    }

    /// Parses one mode name (`default` is accepted for `compile`).
    pub fn parse(s: &str) -> Result<Mode, String> {
        let s = s.trim();
        if s == "default" || s == "inductor" {
            return Ok(Mode::Compile);
        }
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown baseline mode '{s}': expected one of {}",
                    Mode::ALL.map(Mode::as_str).join(", ")
                )
            })
    }

    /// Parses a comma-separated list, keeping the given order and dropping repeats.
    pub fn parse_list(s: &str) -> Result<Vec<Mode>, String> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let m = Mode::parse(part)?;
            if !out.contains(&m) {
                out.push(m);
            }
        }
        if out.is_empty() {
            return Err(format!("no baseline mode in '{s}'"));
        }
        Ok(out)
    }

    /// The file name KernelBench gives this mode's timings.
    pub fn kernelbench_file_name(self) -> String {
        match self.torch_compile_mode() {
            None => "baseline_time_torch.json".into(),
            Some(m) => format!("baseline_time_torch_compile_inductor_{m}.json"),
        }
    }

    /// The mode of a KernelBench baseline file (inductor backends only).
    pub fn from_kernelbench(m: &crate::KernelBenchMode) -> Option<Mode> {
        match m {
            crate::KernelBenchMode::Eager => Some(Mode::Eager),
            crate::KernelBenchMode::Compile { backend, mode } if backend == "inductor" => {
                Mode::parse(mode.as_deref().unwrap_or("default")).ok()
            }
            crate::KernelBenchMode::Compile { .. } => None,
        }
    }

    /// Source of a candidate file that runs the problem's `Model` in this mode: `ModelNew`
    /// subclasses `Model` (so it is built with the same weights from the same seed) and, for
    /// a compile mode, sends `forward` through `torch.compile`. Appended to the problem's own
    /// source, so nothing of the problem is rewritten.
    pub fn candidate_source(self, problem_source: &str) -> String {
        let mut s = String::with_capacity(problem_source.len() + 600);
        s.push_str(problem_source);
        if !problem_source.ends_with('\n') {
            s.push('\n');
        }
        s.push_str("\n\n# --- kbench baseline: ");
        s.push_str(self.as_str());
        s.push_str(" (generated) ---\n");
        match self.torch_compile_mode() {
            None => s.push_str(
                "class ModelNew(Model):\n    \"\"\"The problem's Model, run eagerly.\"\"\"\n",
            ),
            Some(mode) => {
                s.push_str("import torch as _kbench_torch\n");
                if self.autotunes() {
                    // torch 2.11: once inductor's pool of compile processes is ready (in a
                    // worker it is, by the time the baseline compiles), each template choice
                    // is compiled in the pool and then again, one at a time, in this process
                    // inside its own benchmark. On an H200, LeNet5's max-autotune compile took
                    // 126 s with the pool ready and 30 s without it; ResNet18's ran past 500 s.
                    // At compile_threads 1 inductor starts no pool and precompiles the choices
                    // with a thread per core, then benchmarks them: the same choices, timed the
                    // same way. An exported TORCHINDUCTOR_COMPILE_THREADS still decides.
                    s.push_str(AUTOTUNE_NO_POOL);
                }
                s.push_str("\n\n");
                s.push_str("class ModelNew(Model):\n");
                s.push_str(&format!(
                    "    \"\"\"The problem's Model through torch.compile(mode={mode:?}).\"\"\"\n\n"
                ));
                s.push_str("    def __init__(self, *args, **kwargs):\n");
                s.push_str("        super().__init__(*args, **kwargs)\n");
                s.push_str(&format!(
                    "        self._kbench_forward = _kbench_torch.compile(super().forward, mode={mode:?})\n\n"
                ));
                s.push_str("    def forward(self, *args, **kwargs):\n");
                s.push_str("        return self._kbench_forward(*args, **kwargs)\n");
            }
        }
        s
    }
}

/// What a generated autotuning candidate runs before its `torch.compile` (see
/// [`Mode::candidate_source`]).
const AUTOTUNE_NO_POOL: &str = "import os as _kbench_os\n\
import torch._inductor.config as _kbench_inductor_config\n\n\
if \"TORCHINDUCTOR_COMPILE_THREADS\" not in _kbench_os.environ:\n    \
_kbench_inductor_config.compile_threads = 1\n";

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_lists_parse() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.as_str()), Ok(m));
        }
        assert_eq!(
            Mode::parse_list("eager, compile,eager,max-autotune"),
            Ok(vec![Mode::Eager, Mode::Compile, Mode::MaxAutotune])
        );
        let err = Mode::parse_list("eager,fast").unwrap_err();
        assert!(
            err.contains("'fast'") && err.contains("max-autotune"),
            "{err}"
        );
        assert!(Mode::parse_list(",").is_err());
    }

    #[test]
    fn kernelbench_names_map_to_modes() {
        for m in Mode::ALL {
            let kb = crate::KernelBenchMode::from_file_name(&m.kernelbench_file_name()).unwrap();
            assert_eq!(Mode::from_kernelbench(&kb), Some(m), "{m}");
        }
        let cg =
            crate::KernelBenchMode::from_file_name("baseline_time_torch_compile_cudagraphs.json")
                .unwrap();
        assert_eq!(Mode::from_kernelbench(&cg), None);
    }

    #[test]
    fn candidate_source_subclasses_model() {
        let problem = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n";
        let eager = Mode::Eager.candidate_source(problem);
        assert!(eager.starts_with(problem));
        assert!(eager.contains("class ModelNew(Model):"));
        assert!(!eager.contains("torch.compile"));
        let ma = Mode::MaxAutotune.candidate_source(problem);
        assert!(ma.contains("_kbench_torch.compile(super().forward, mode=\"max-autotune\")"));
        assert!(ma.contains("compile_threads = 1"));
        let c = Mode::Compile.candidate_source(problem);
        assert!(c.contains("mode=\"default\""));
        // The default mode keeps inductor's compile-process pool (no template autotuning).
        assert!(!c.contains("compile_threads"));
    }
}
