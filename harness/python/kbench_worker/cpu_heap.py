"""CPU poisoning through glibc's heap (PROTOCOL.md, "Integrity"): on a GPU the harness
poisons the caching allocator's free blocks; on the CPU the candidate's tensors come from
malloc, so the poisoned blocks have to be the free heap chunks its next allocation will be
given. Imports only torch and ctypes.

Hand-written: no library exposes the heap's layout. It relies on glibc's documented
behaviour (mallopt thresholds, best fit, the top chunk carved last) and is best effort
elsewhere: on another C library the blocks are still poisoned and freed, but nothing says
the candidate gets them back.
"""

import ctypes
import functools

import torch

# glibc's largest mmap threshold (HEAP_MAX_SIZE / 2): blocks below it come from the heap;
# larger ones are fresh (zeroed) mmap pages that no poisoning reaches.
MMAP_THRESHOLD = 32 << 20
# Most blocks and bytes poisoned per output size, and the stretch poisoned at the top.
_MAX_BLOCKS = 4096
_MAX_BYTES = 64 << 20
_TOP_BYTES = 1 << 20
# Blocks of torch's own request taken one right after another before they are taken to be
# cut from a larger chunk (more than the 7 that glibc's per-thread cache holds of a size).
_CARVED_RUN = 16
# c10's CPU allocator: posix_memalign(64, n) (c10/core/alignment.h, gAlignment).
_TORCH_ALIGNMENT = 64
_SIZE_SZ, _MINSIZE = 8, 32  # glibc's chunk header word and smallest chunk, 64-bit


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


@functools.cache
def _process_libc():
    """The C library this process is linked with, or None."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


@functools.cache
def _libc():
    """(malloc, free, mallinfo2, sbrk, posix_memalign) of glibc, or None where one is missing
    (glibc before 2.33, other C libraries)."""
    libc = _process_libc()
    try:
        malloc, free, mallinfo2, sbrk = libc.malloc, libc.free, libc.mallinfo2, libc.sbrk
        memalign = libc.posix_memalign
    except AttributeError:  # no mallinfo2, or no C library at all (None)
        return None
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    mallinfo2.restype = _MallInfo2
    sbrk.restype, sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
    memalign.restype = ctypes.c_int
    memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
    return malloc, free, mallinfo2, sbrk, memalign


def reuse_freed_blocks():
    """Large blocks come from the heap instead of fresh (zeroed) mmap pages, and freed
    memory stays in the process, so a poisoned block freed before a call is what the
    candidate's next allocation of that size gets, as a GPU caching allocator would hand
    it. Called once at start-up, before any problem or candidate code."""
    m_trim_threshold, m_mmap_threshold = -1, -3
    try:
        mallopt = _process_libc().mallopt
    except AttributeError:  # not glibc, or no C library at all (None)
        return
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    mallopt(m_trim_threshold, 1 << 30)


def _memalign_request(n):
    """The bytes glibc's memalign asks its allocator for when torch allocates `n` bytes
    (_int_memalign: the chunk size of `n`, plus the alignment and a minimum chunk, so that
    an aligned start can be cut out of what it gets). malloc of this many bytes asks for
    the same chunk, without memalign trimming what it does not use."""
    nb = max((n + _SIZE_SZ + 15) & ~15, _MINSIZE)
    return nb + _TORCH_ALIGNMENT + _MINSIZE


def _pattern(nbytes, bits, int_dtype):
    """A ctypes buffer of `nbytes` holding the poison pattern (whole elements; a byte
    pattern when `int_dtype` is None), copied into each block with one memmove: a tensor
    view and fill per block took 5-10 us, and a fragmented heap has thousands of blocks."""
    buf = ctypes.create_string_buffer(nbytes)
    if int_dtype is None:
        torch.frombuffer(buf, dtype=torch.uint8, count=nbytes).fill_(bits)
    else:
        size = torch.tensor([], dtype=int_dtype).element_size()
        torch.frombuffer(buf, dtype=int_dtype, count=nbytes // size).fill_(bits)
    return buf


def poison_heap(n, bits, int_dtype):
    """Poisons every free heap chunk that torch's next allocation of `n` bytes could be
    given, and the top of the heap; returns the blocks' addresses, which the caller frees
    (free_blocks) just before the candidate's call, or None where glibc's functions are
    missing (the caller then poisons torch tensors of about the size, best effort).

    glibc hands a request the smallest free chunk that fits and carves the top only when
    none does, so blocks asking for exactly the chunk torch's request asks for are taken
    and filled until one comes from the top (at most _MAX_BLOCKS, _MAX_BYTES in all). Three
    tensors of about the size were not enough: memalign trims what it does not use, so a
    freed tensor of exactly `n` bytes no longer fits a request for `n`; freed together the
    larger ones merged, and under CPU load a free chunk never poisoned was the better fit
    for the candidate's output (test_uninitialised_output_holds_the_poison failed 10 runs
    in 90 on 2 busy cores)."""
    fns = _libc()
    if fns is None or n >= MMAP_THRESHOLD:
        return None
    malloc, _, mallinfo2, sbrk, memalign = fns
    brk, keepcost = sbrk(0), mallinfo2().keepcost
    if not brk or keepcost > brk:
        return None
    top_start = brk - keepcost  # everything from here up is carved from the top
    req = _memalign_request(n)
    # The top itself, where a request that no freed chunk fits is carved, last.
    tail = min(req + _TOP_BYTES, MMAP_THRESHOLD - 4096)
    pattern = _pattern(tail, bits, int_dtype)
    blocks = _take_fitting(malloc, req, pattern, top_start)
    # Within the same bytes in all: what glibc's memalign hands out without carving.
    budget = max(0, _MAX_BYTES - len(blocks) * req) // req
    blocks += _take_aligned(memalign, n, req, pattern, top_start, min(_MAX_BLOCKS, budget))
    addr = malloc(tail)
    if addr:
        blocks.append(addr)
        ctypes.memmove(addr, pattern, tail)
    return blocks


def _take_fitting(malloc, req, pattern, top_start):
    """Blocks of `req` bytes, each filled with the pattern, until one comes from the top
    (best fit: the smallest free chunks that fit torch's request go first)."""
    blocks = []
    for _ in range(min(_MAX_BLOCKS, max(1, _MAX_BYTES // req))):
        addr = malloc(req)
        if not addr:
            break
        blocks.append(addr)
        ctypes.memmove(addr, pattern, req)
        if addr >= top_start:
            break  # carved from the top: no free chunk that fits is left
    return blocks


def _take_aligned(memalign, n, req, pattern, top_start, most):
    """Blocks of torch's own request (`posix_memalign(64, n)`), each filled with the pattern,
    while memalign hands out free chunks it does not carve. glibc 2.38 and later first give
    such a request a free chunk already aligned and of about the size (from the per-thread
    cache, the chunk's bin, or a large bin's chunk less than `req`), which no request for
    `req` takes: on glibc 2.39 an output of 1000 bytes got one, never poisoned, and
    `_take_fitting` alone left 0% of it poisoned (test_integrity's CpuHeapTests). Older
    glibc carve at once, and the run of blocks side by side stops the loop."""
    blocks = []
    got, prev, carved = ctypes.c_void_p(), 0, 0
    for _ in range(most):
        if memalign(ctypes.byref(got), _TORCH_ALIGNMENT, n) != 0 or not got.value:
            break
        blocks.append(got.value)
        ctypes.memmove(got.value, pattern, n)
        if got.value >= top_start:
            break
        # Each block right after the last: memalign is cutting them from one larger free
        # chunk, as `_take_fitting` did, so no chunk it hands out whole is left (the cache
        # holds at most 7 of a size; free chunks side by side in a bin would have merged).
        carved = carved + 1 if 0 < got.value - prev <= req + _TORCH_ALIGNMENT else 0
        prev = got.value
        if carved >= _CARVED_RUN:
            break
    return blocks


def free_blocks(blocks):
    """Frees what poison_heap took, last first (the top's stretch goes back to the top)."""
    free = _libc()[1]
    for addr in reversed(blocks):
        free(addr)
