"""The state one worker process keeps between commands, and the helpers every command
group uses. The command groups are mixins over this class (server.Worker puts them
together)."""

import gc
import os
import time

import torch

from .protocol import WorkerError, _error_from, driver_step
from .tensors import _sync, seed_all


# Free blocks a worker's allocator may keep cached between commands: small beside any GPU
# kbench runs on (80 GB and up), and more than a level-2 or level-3 case's working set, so
# those cases reuse their blocks; a level-1 case of GBs releases everything.
# KBENCH_KEEP_CACHED_BYTES (whole bytes, checked by the harness before a run starts) sets
# another bound, for measuring what releasing costs: with four GPUs busy the driver calls of
# `empty_cache` took 1.7-2.6x as long per call as with one
# (tests/gpu/runs/2026-11-28-h200x4-issue26-half-a-abba). A larger bound leaves less memory
# to the other worker on the GPU, so it is not the default until a GPU run shows that every
# problem's cases still fit.
KEEP_CACHED_ENV = "KBENCH_KEEP_CACHED_BYTES"


def keep_cached_bytes(value):
    """The bound on cached free blocks: `value` (the environment variable's text, or None for
    the default of 1 GiB) as whole bytes."""
    if value is None or value == "":
        return 1 << 30
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"{KEEP_CACHED_ENV}={value!r}: not a whole number of bytes "
                         f"(unset it for the default of 1 GiB, or give bytes such as 8589934592)")
    return int(value)


KEEP_CACHED_BYTES = keep_cached_bytes(os.environ.get(KEEP_CACHED_ENV))


class Session:
    """What a worker keeps between commands: the loaded model, its device and dtype, the
    current case."""

    def __init__(self, role, channel):
        self.role = role
        self.channel = channel
        self.model = None
        self.model64 = None
        self.f64_error = None
        self.get_inputs = None
        self.device = None
        self.dtype = None
        self.num_threads = None
        self.case = None  # the current case: the argument list of the last make/run_case
        self.flush_buffer = None  # allocated once, on first use
        self.pending = None  # a device case made but not yet exported (name -> tensor)
        self.l2_bytes = None
        # The reference's outputs ({dtype, nbytes}) of the current case: the sizes the
        # integrity probes poison before a candidate call (run_case's `poison`).
        self.poison = None
        # `load`'s model_mode, the BatchNorm buffers as constructed (for `eval_case`), and
        # whether the running-statistics probe has run (modes.py).
        self.model_mode = "train"
        self.initial_buffers = {}
        self.stats_probed = False

    # -- helpers ------------------------------------------------------------------------

    def _require_model(self, phase):
        if self.model is None:
            raise WorkerError("protocol", phase, "no model is loaded (send a successful load first)")

    def _pin_threads(self):
        # A candidate may call torch.set_num_threads itself (or patch get_num_threads), so
        # every call is made after setting the count the harness asked for.
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)

    def _forward(self, model, args, seed, phase):
        self._pin_threads()
        seed_all(seed)
        t0 = time.perf_counter()
        try:
            out = model(*args)
            _sync(self.device)
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", phase)
        return out, time.perf_counter() - t0

    def _restore_inputs(self, inputs, pristine):
        """Writes the pristine values (host or device copies, by input index) back into the
        case's tensors, which the model may have written to; a tensor that cannot be written
        (an expanded view) is replaced by a fresh copy."""
        for i, src in pristine.items():
            x = inputs[i]
            try:
                x.copy_(src)
            except RuntimeError:
                inputs[i] = src.to(device=x.device, copy=True)

    def _release_device_memory(self, keep=None):
        """Returns the caching allocator's free blocks to the driver when they are more than
        KEEP_CACHED_BYTES. The reference and a candidate share one GPU: memory cached here
        (float64 copies, old outputs) would make a correct candidate fail with an
        out-of-memory error that is not its fault. A little is kept: emptying the cache after
        every command freed and allocated the same blocks again each case, driver calls that
        took longer with four GPUs busy at once. `keep=0` releases every free block."""
        if self.device is not None and self.device.type == "cuda":
            with driver_step("gc"):
                gc.collect()
            idle = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
            if idle > (KEEP_CACHED_BYTES if keep is None else keep):
                with driver_step("empty_cache"):
                    torch.cuda.empty_cache()
