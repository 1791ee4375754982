//! The `times-itself` advisory: a candidate whose source times code at run time (CUDA events
//! with `elapsed_time`, `perf_counter`, `time.time()`, Triton's `do_bench`,
//! `torch.utils.benchmark`), or lets an autotuner time alternatives for it. Such a kernel may time alternatives at its first call and keep
//! the faster (one published kernel timed an fp16 matmul against an fp32 one and kept the
//! winner: claimed 6.17x, measured 0.99x on the fp32 path it chose under kbench), so what it
//! runs, and its speedup, depend on what it measured there. Read from the source, so a
//! diagnosis for reports (the claims report's `times itself` reason), never a verdict: a
//! kernel that hides its clock is not named, and one that times itself is not wrong.

/// What marks run-time timing in a source line, spaces removed: its own clocks, and the
/// autotuners that time candidates for it (cuDNN's benchmark mode here; Triton's
/// `@triton.autotune` and `torch.compile`'s `max-autotune` modes in [`asks_an_autotuner`]).
const MARKS: [&str; 8] = [
    "elapsed_time(",
    "perf_counter",
    "time.time(",
    "time.monotonic",
    "do_bench",
    "torch.utils.benchmark",
    "enable_timing=True",
    "cudnn.benchmark=True",
];

/// Autotuners, named only where code asks for them (a decorator starting its line, a
/// `mode=` argument), not where a docstring mentions them.
fn asks_an_autotuner(code: &str) -> bool {
    code.starts_with("@triton.autotune")
        || code.contains("mode=\"max-autotune")
        || code.contains("mode='max-autotune")
}

/// The first line of `source` (1-based, trimmed) that times code, outside comments.
pub(crate) fn scan(source: &str) -> Option<(usize, String)> {
    source.lines().enumerate().find_map(|(i, line)| {
        let code: String = line
            .split('#')
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        (MARKS.iter().any(|m| code.contains(m)) || asks_an_autotuner(&code))
            .then(|| (i + 1, line.trim().chars().take(120).collect()))
    })
}

/// The record's note for a candidate [`scan`] found timing itself.
pub(crate) fn note(line: usize, text: &str) -> String {
    format!(
        "{}: line {line} times code at run time (`{text}`): what the kernel runs may be chosen by what it measured there",
        super::integrity::TIMES_ITSELF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_time_timing_is_found_outside_comments() {
        let src = "import torch\n# we used elapsed_time( to tune this\nclass ModelNew:\n    def pick(self):\n        s = torch.cuda.Event(enable_timing=True)\n";
        assert_eq!(
            scan(src),
            Some((5, "s = torch.cuda.Event(enable_timing=True)".into()))
        );
        let src = "t0 = time.perf_counter()  # timing\n";
        assert_eq!(scan(src).map(|s| s.0), Some(1));
        assert_eq!(scan("import torch\nx = 1 # perf_counter\n"), None);
        // Autotuners time alternatives for the kernel.
        assert_eq!(
            scan("@triton.autotune(configs=[], key=['n'])\n").map(|s| s.0),
            Some(1)
        );
        let compiled = "f = torch.compile(g, mode=\"max-autotune-no-cudagraphs\")\n";
        assert_eq!(scan(compiled).map(|s| s.0), Some(1));
        assert_eq!(
            scan("torch.backends.cudnn.benchmark = True\n").map(|s| s.0),
            Some(1)
        );
        assert_eq!(scan("torch.backends.cudnn.benchmark = False\n"), None);
        // Named in prose, not asked for: nothing.
        assert_eq!(
            scan("    \"\"\"Beats max-autotune; no @triton.autotune here.\"\"\"\n"),
            None
        );
        assert!(note(3, "t = time.time()").starts_with("times-itself: line 3"));
    }
}
