//! kbench's end-to-end tests: the built binary, the real Python worker with real PyTorch on
//! the CPU, real sandboxes, a real Slurm, a loopback LLM server, headless Chromium.
//!
//! One test binary rather than one per file: the files' tests then run side by side (two at
//! a time on CI's 2 cores; libtest's default), where one binary after another ran a file's
//! tests mostly one at a time and left a core idle (user + system CPU was a third of two
//! cores' wall time); and the harness is linked once instead of 25 times. `common::serial()`
//! says how tests share the machine.
//!
//! Run one file's tests by its module: `cargo test -p kbench --test e2e exploit_corpus::`.

mod agents_common;
mod common;
mod common_slurm;

// The agents against the scripted loopback LLM server (no internet), CPU worker.
mod agents_coder_judge;
mod agents_cuda_command;
mod agents_kevin;
mod agents_selection;
mod audit;
mod baselines;
// Every worker ends with kbench, is capped in memory, and as root runs sandboxed as nobody.
mod bounded_workers;
// Builds ahead whatever the pattern (module level, __init__, first call): overlap, same verdicts.
mod build_ahead;
// The GPU benchmark scripts' sequencing, with stand-ins for kbench and nvidia-smi.
mod bench_scripts;
mod cli;
// A run's records against its signed plan; --out never takes another tool's folder.
mod complete_records;
// Every relative link and #anchor of the Markdown docs resolves.
mod docs_links;
mod e2e_cpu;
// The strict profile's fp32 error model: honest reorderings against precision downgrades.
mod error_model;
mod structured_inputs;
// Every CPU exploit of the corpus gets exactly its flag or outcome; honest kernels none.
mod exploit_corpus;
// A missing or empty kernel, a broken problem file and command-line faults: no_kernel and
// problem_error records, and each fault named once.
mod fault_outcomes;
// kbench import of published kernel sets; eval_results.json both ways.
mod import;
// kbench import reads a set as untrusted and removes only what it wrote itself.
mod import_untrusted;
// The pipeline's layering and the names and comments that outlive the tracker, read from the
// source.
mod layers;
mod leaderboard;
// The light C++ header: bindings built light where it serves, torch's header where not, same verdicts.
mod light_cxx_header;
// --model-mode and the mode-switch advisory, end to end on the CPU.
mod mode_switch;
mod nan_inf;
// The precompiled torch/extension.h: used by sandboxed builds, read-only, verdicts unchanged.
mod precompiled_header;
mod profile;
// A reference load sent ahead that ran out of GPU memory is tried once more.
mod reference_load;
mod report;
// Signed records, one writer per run folder, SIGTERM/SIGHUP: real runs on the CPU.
mod run_integrity;
// The harness attacks of the corpus, with and without the sandbox (needs bwrap).
mod sandbox_attacks;
// kbench serve on loopback: load, SIGKILL, hostile requests, PostgreSQL, the Python client.
mod serve_board;
mod serve_common;
mod serve_exploits;
mod serve_load;
mod serve_postgres;
mod serve_requests;
// The same commands as slurm_run/slurm_measure against a stand-in Slurm (no cluster needed).
mod slurm_fake;
// Need a Slurm cluster (tests/slurm/setup.sh); see the files' headers.
mod slurm_measure;
mod slurm_run;
// kbench setup installs the lock; a clone of HEAD stands alone.
mod standalone;
// Timing under other evaluators' conventions, recorded as a diagnosis.
mod stress;
mod time_as;
// Triton candidates under Triton's interpreter on the CPU.
mod triton_cpu;
// Files kbench reads for candidates (replay kernels, `check`): no link out, nothing leaked.
mod untrusted_files;
