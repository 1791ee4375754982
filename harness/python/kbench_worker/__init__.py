"""kbench worker: the Python executor behind the Rust harness.

    python3 -u -m kbench_worker reference|candidate

It loads, runs and times models; it never decides whether a kernel is correct. The wire
protocol is specified in PROTOCOL.md next to this package (embedded into the kbench binary
and written to a cache directory at run time, so this package imports nothing but the
standard library, torch and numpy).

Trust: the `reference` role only ever executes the problem file. The `candidate` role
executes hostile code in this very process, so nothing it reports is trusted by the
harness; the harness validates every frame and bounds every time from outside.

Modules, lowest first (a module imports only modules above it in this list; the one
exception is Channel.encode, which imports tensors for frames that carry tensors):

- protocol: exit codes, errors, frames, command fields (standard library only)
- startup: the process set-up before torch is imported (standard library only)
- tensors: wire dtypes, payload tensors, the casting rule, output checks
- measure: float64 reductions behind the stability and audit measurements
- families: the case families' input values
- cpu_heap: poisoning the CPU's free heap chunks through glibc (torch and ctypes only)
- integrity: the integrity probes, and the `profile` command
- timing: the timing loop both roles use, and the `time` command
- session: the state a worker keeps between commands, and shared helpers
- loading: executing the problem and the candidate, the `load` command
- cases: cases through the frame payload (`make_case`, `run_case`)
- ipc: cases through harness buffers mapped with CUDA IPC (`export`, device I/O)
- cost, audit: the `cost` and `audit` commands
- server: the Worker (every command group over one session) and its command loop
- profiling: the `profile SPEC` script mode (standard library only until torch loads)
- __main__: the entry point

Only protocol, startup, profiling and __main__ may be imported before torch: every other
module imports torch at its top, and __main__ imports them once torch has loaded.
"""
