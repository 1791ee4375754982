"""Where a problem's memory lies against how long its forward takes, on a GPU: one table per
problem, a row per offset of its inputs and a column per offset of the call's temporaries and
outputs, each offset counted in MiB from a 256 MiB boundary, each cell the median of 8 timed
calls in ms. Some kernels have speed states set by these offsets (KernelBench L2/77 on an
H200: 4.9 or 6.5 ms; `archive/runs/2026-12-03-h200-placement-states`); the table says which
memory decides and at what granularity, and whether two processes agree (run it twice).

    python3 tests/gpu/placement_states.py PROBLEM.py [PROBLEM.py ...]

Every allocation of interest comes from a `torch.cuda.MemPool` holding one segment, taken and
freed first so that the pool's blocks are carved from it in order: a shim up to the segment's
first 256 MiB boundary, then a filler of the offset, then the inputs (or, for the other pool,
the call's temporaries and outputs). Requests under 1 MiB go to the allocator's small pool,
outside these segments, and are not placed. Needs a torch with `torch.cuda.MemPool`."""

import os
import statistics
import sys

import torch
from problem_load import load_problem

ALIGN = 256 << 20
MIB = 1 << 20
OFFSETS_MIB = [int(x) for x in os.environ.get("OFFSETS_MIB", "0,1,2,3,4,6,8").split(",")]
CALLS = int(os.environ.get("CALLS", "8"))


class Arena:
    """A pool whose next large block begins `offset` bytes past a 256 MiB boundary."""

    def __init__(self, device, size):
        self.device = device
        self.pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(self.pool, device):
            block = torch.empty(size + ALIGN + max(OFFSETS_MIB) * MIB, dtype=torch.uint8, device=device)
            gap = -block.data_ptr() % ALIGN
            del block
            if 0 < gap < MIB:
                gap += ALIGN
            self.shim = torch.empty(gap, dtype=torch.uint8, device=device) if gap else None
        self.filler = None

    def place(self, offset):
        """Moves the next large block to `offset` (whole MiB) past the boundary; everything
        taken from the pool after the shim must have been freed."""
        self.filler = None
        if offset:
            with torch.cuda.use_mem_pool(self.pool, self.device):
                self.filler = torch.empty(offset, dtype=torch.uint8, device=self.device)


def footprint(model, inputs, device):
    """Bytes of the segments one call's temporaries and outputs take in a pool of their own."""
    probe = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(probe, device):
        out = model(*inputs)
        torch.cuda.synchronize()
        del out
    size = sum(s["total_size"] for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", ())) == tuple(probe.id))
    del probe
    torch.cuda.empty_cache()
    return size


def timed(model, args, arena):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.use_mem_pool(arena.pool, arena.device):
        model(*args)  # one untimed call at this placement
        torch.cuda.synchronize()
        times = []
        for _ in range(CALLS):
            start.record()
            out = model(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            del out
    return statistics.median(times)


def table(path, device):
    model, inputs = load_problem(path, device)
    with torch.no_grad():
        model(*inputs)
        tmp = Arena(device, 2 * footprint(model, inputs, device))
        in_bytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
        ins = Arena(device, 2 * in_bytes + MIB)
        rows = []
        for oi in OFFSETS_MIB:
            ins.place(oi * MIB)
            with torch.cuda.use_mem_pool(ins.pool, device):
                args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            row = []
            for ot in OFFSETS_MIB:
                tmp.place(ot * MIB)
                row.append(timed(model, args, tmp))
            rows.append(row)
            del args
    name = os.path.basename(path)
    cells = [t for r in rows for t in r]
    print(f"{name}: pid {os.getpid()}, spread {max(cells) / min(cells) - 1:.1%}, min {min(cells):.3f} ms, max {max(cells):.3f} ms")
    print("inputs \\ temporaries (MiB) " + " ".join(f"{o:>7}" for o in OFFSETS_MIB))
    for oi, r in zip(OFFSETS_MIB, rows):
        print(f"{oi:>26} " + " ".join(f"{t:7.3f}" for t in r))
    print(flush=True)


def main():
    if not torch.cuda.is_available() or not hasattr(torch.cuda, "MemPool"):
        sys.exit("placement_states.py needs a CUDA GPU and a torch with torch.cuda.MemPool")
    device = torch.device("cuda:0")
    for path in sys.argv[1:]:
        table(path, device)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
