"""The state one worker process keeps between commands, and the helpers every command
group uses. The command groups are mixins over this class (server.Worker puts them
together)."""

import gc
import os
import time

import torch

from .integrity import POISON_CAP_BYTES
from .protocol import WorkerError, _error_from, driver_step
from .tensors import _sync, seed_all


# Between commands the reference's worker gives its allocator's free blocks back to the driver
# (`empty_cache`) unless the GPU has room for them: the reference and a candidate share one
# GPU, and blocks cached here (float64 copies, old outputs) must not make an honest candidate
# run out of memory. With four GPUs busy those driver calls took 1.7-2.6x as long per call as
# with one (archive/runs/2026-11-28-h200x4-half-a-abba), and the blocks freed were
# allocated again through the driver by the next case, so it keeps them while the GPU's free
# memory is at least what it reserves plus an eighth of the GPU (the candidate and the
# harness's buffers for a case need about what the reference needed at its peak). Up to
# FLOOR_CACHED_BYTES stays cached whatever the GPU holds (a level-2 or level-3 case's working
# set). Everything else keeps only that floor: a candidate's worker (its kept blocks would be
# memory the reference's next case, with its float64 forward, may need, and a reference that
# runs out making a random case is not tried again), and `load` (a worker loaded ahead sits
# beside another problem's evaluation, out of reach of the harness's memory retries).
# KBENCH_KEEP_CACHED_BYTES (whole bytes, checked by the harness before a run starts) replaces
# the rule with a fixed bound, no looking at the GPU (1073741824 is the floor everywhere, the
# rule before 2026-11-28), for measuring what the releasing costs; a candidate's worker keeps
# no more than POISON_CAP_BYTES whatever the bound (the poisoning before its calls covers that
# much).
KEEP_CACHED_ENV = "KBENCH_KEEP_CACHED_BYTES"
FLOOR_CACHED_BYTES = 1 << 30
# The part of the GPU's memory left free beyond the reference's own reservation for it to
# keep its cached blocks.
FREE_MARGIN_DIVISOR = 8


def keep_cached_bytes(value):
    """The fixed bound on cached free blocks that `value` (the environment variable's text)
    sets, or None (unset or empty) for the rule that looks at the GPU's free memory."""
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"{KEEP_CACHED_ENV}={value!r}: not a whole number of bytes "
                         f"(unset it for the default: 1 GiB, and the reference's worker more "
                         f"while the GPU has room; or give bytes such as 1073741824)")
    return int(value)


KEEP_CACHED_BYTES = keep_cached_bytes(os.environ.get(KEEP_CACHED_ENV))


def fixed_bound(role, keep):
    """The fixed bound on cached free blocks for a worker of `role` asked to keep `keep`
    (None: the default), or None when the reference's rule on the GPU's free memory decides.
    Fails closed: a role other than the reference keeps the floor (or the environment's bound)
    and never more than POISON_CAP_BYTES."""
    if keep is None:
        keep = KEEP_CACHED_BYTES
    if role == "reference":
        return keep
    return min(FLOOR_CACHED_BYTES if keep is None else keep, POISON_CAP_BYTES)


def should_release(idle, reserved, free, total, fixed):
    """Whether a worker holding `idle` free blocks of `reserved` bytes gives them back, on a
    GPU with `free` of `total` bytes free (None when the driver was not asked), under the
    fixed bound `fixed` (None: the reference's rule)."""
    if fixed is not None:
        return idle > fixed
    if idle <= FLOOR_CACHED_BYTES:
        return False
    if free is None or total is None:
        return True
    return free < reserved + total // FREE_MARGIN_DIVISOR


class Session:
    """What a worker keeps between commands: the loaded model, its device and dtype, the
    current case."""

    def __init__(self, role, channel):
        self.role = role
        self.channel = channel
        self.model = None
        self.loads = 0  # `load` commands received (loading.py: the first thaws nothing)
        self.model64 = None
        self.f64_error = None
        self.get_inputs = None
        self.device = None
        self.dtype = None
        self.num_threads = None
        self.case = None  # the current case: the argument list of the last make/run_case
        self.gated = None  # the open timing phase (timing.py)
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

    def _release_device_memory(self, keep=None, collected=False):
        """Returns the caching allocator's free blocks to the driver unless this worker may
        keep them (`fixed_bound`, `should_release`; the module comment says why). `keep=0`
        releases every free block; another `keep` is a fixed bound. `collected`: the caller
        has just run a full collection (a second one finds nothing and costs as much, 0.1 s
        and more in a process that imported torch)."""
        if self.device is not None and self.device.type == "cuda":
            if not collected:
                with driver_step("gc"):
                    gc.collect()
            reserved = torch.cuda.memory_reserved(self.device)
            idle = reserved - torch.cuda.memory_allocated(self.device)
            fixed = fixed_bound(self.role, keep)
            free = total = None
            if fixed is None and idle > FLOOR_CACHED_BYTES:
                with driver_step("mem_info"):
                    free, total = torch.cuda.mem_get_info(self.device)
            if should_release(idle, reserved, free, total, fixed):
                with driver_step("empty_cache"):
                    torch.cuda.empty_cache()
