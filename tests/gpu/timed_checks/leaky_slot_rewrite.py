# Against timed calls checked with the candidate's own outputs (level-1 problem 20, whose
# cases the reference session does not keep): while its correctness cases run, keep the IPC
# handles of the harness's output slots (they are in the worker's command, a few frames up);
# under timing, map the last case's slot through the worker's own IPC helper, zero it, and
# return zeros. Were the kept outputs those slots, zeros would match zeros. kbench keeps
# private copies made before judging: timed-output-mismatch.
import sys

import torch
import torch.nn as nn

_slots = []


def _timed():
    f = sys._getframe(1)
    while f is not None:
        if "time" in f.f_code.co_name and f.f_code.co_name != "_timed":
            return True
        f = f.f_back
    return False


def _grab_slots():
    f = sys._getframe(1)
    while f is not None:
        slots = f.f_locals.get("slots")
        if isinstance(slots, list) and slots and isinstance(slots[0], dict) and "handle" in slots[0]:
            _slots.append(slots[0])
            return
        f = f.f_back


def _say(what):
    # The worker's log (the run folder's logs/) is where this shows: the GPU script greps
    # it, so that a verdict of timed-output-mismatch can be told apart from an attack that
    # never reached the slot.
    print(f"leaky_slot_rewrite: {what}", file=sys.stderr, flush=True)


def _zero_last_slot():
    if not _slots:
        return _say("no slot handle found in the worker's frames")
    spec = _slots[-1]
    ipc = sys.modules.get("kbench_worker.ipc")
    if ipc is None:
        return _say("kbench_worker.ipc not loaded")
    try:
        ptr = ipc._Ipc.open(spec["handle"], "time")
    except Exception as e:  # the slot is gone: nothing to rewrite
        return _say(f"could not open the kept handle: {e!r}")
    raw = torch.as_tensor(ipc._DeviceBytes(ptr, spec["nbytes"]), device="cuda")
    raw.zero_()
    torch.cuda.synchronize()
    _say(f"zeroed {spec['nbytes']} bytes through the kept handle; first values now {raw[:4].tolist()}")
    ipc._Ipc.close(ptr)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope
        self._rewritten = False

    def forward(self, x):
        if _timed():
            if not self._rewritten:
                _zero_last_slot()
                self._rewritten = True
            return torch.zeros_like(x)
        _grab_slots()
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)
