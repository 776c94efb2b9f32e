"""Process-level settings for the command-line programs, benchmarks and tests."""

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Stops glibc malloc from handing large freed blocks back to the OS.

    TensorFlow frees and reallocates its big activation buffers (e.g. the [tokens, vocab]
    logits) every training step; by default glibc serves blocks over 32 MB with mmap and
    returns them with munmap, so each step page-faults hundreds of MB back in. On a 2-core
    CPU that doubled the step time (measured: 3.0 s -> 1.6 s for the bench's tiny shape).
    The process keeps its peak memory instead. Call before TensorFlow allocates; returns
    False where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**30))
