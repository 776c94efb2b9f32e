"""Process-level settings for the command-line programs, benchmarks and tests."""

import ctypes
import ctypes.util
import dataclasses
import os
import platform
import re
import sys
import tempfile

from absl import logging

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Stops glibc malloc from handing large freed blocks back to the OS.

    TensorFlow frees and reallocates its big activation buffers (e.g. the [tokens, vocab]
    logits) every training step; by default glibc serves blocks over 32 MB with mmap and
    returns them with munmap, so each step page-faults hundreds of MB back in. On a 2-core
    CPU that doubled the step time (docs/results/training_speed.md, "Hand-written kernels").
    The process keeps its peak memory instead. Call before TensorFlow allocates; returns
    False where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**30))


# oneDNN keeps the kernels it generates for each product shape in a cache of
# ONEDNN_PRIMITIVE_CACHE_CAPACITY entries (1024 by default). A decoding step's attention
# products change shape at every step (the prefix grows by one, settled sentences leave the
# batch), so decoding a file meets thousands of shapes: at 1024 the kernels were generated again
# and again, a third of the demo model's decode step on the Intel Xeon of 2026-12-03
# (docs/results/decoding_speed.md, "oneDNN's kernel cache"). 4096 held them all there, with no more
# memory; 16384 leaves room for larger batches, longer sentences and shortlists.
ONEDNN_KERNEL_CACHE = 16384


def keep_kernels_for_every_shape() -> None:
    """Sets oneDNN's kernel cache to `ONEDNN_KERNEL_CACHE` shapes, unless the environment sets it.
    Call before TensorFlow's first oneDNN op (oneDNN reads the variable once)."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNEL_CACHE))


# What TensorFlow's native code says as it starts on a CPU machine, none of it the user's business:
# the INFO lines written before absl's logging is set up (TF_CPP_MIN_LOG_LEVEL does not reach
# them), the CPU-feature note's second line, and the failed probe for a CUDA driver.
_START_UP_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\)|I\d{4} |To enable the following instructions"
    r"|[EW]\d{4} .*(cuInit|cuda|CUDA|TensorRT)"
)


def start_tensorflow_quietly() -> None:
    """Imports TensorFlow and lets it probe for GPUs (where it logs the failed CUDA probe of a
    CPU machine) with its native log, file descriptor 2, sent to a temporary file; then writes
    to stderr what it said besides `_START_UP_NOISE`. The Python API calls it first, so a
    program using it is as quiet as the commands. A no-op once TensorFlow is imported: its
    start-up has been said. Does not start TensorFlow's runtime (thread settings stay open)."""
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as native_log:
        terminal = os.dup(2)
        os.dup2(native_log.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices("GPU")
        finally:
            sys.stderr.flush()
            os.dup2(terminal, 2)
            os.close(terminal)
        native_log.seek(0)
        said = native_log.read().decode("utf-8", "replace").splitlines()
    sys.stderr.writelines(line + "\n" for line in said if not _START_UP_NOISE.match(line))


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name with its family and model numbers (/proc/cpuinfo): the name alone
    ("AMD EPYC") is the same for CPUs whose kernels differ; else what `platform` knows. What
    run.json's training log and every benchmark line record."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    return f"{fields['model name']} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"


def decoding_parts(requested: int, most: int = 8) -> int:
    """How many parts beam search splits a batch into (DecodeHParams.parallel_parts): as
    requested, or for 0 one per CPU core (at most `most`) where TensorFlow sees no GPU, else 1."""
    if requested:
        return requested
    import tensorflow as tf

    return 1 if tf.config.list_physical_devices("GPU") else min(cpu_cores(), most)


def one_thread_per_op(parallel_ops: int) -> None:
    """Runs each TensorFlow CPU op on a single thread, up to `parallel_ops` ops at once.

    For decoding in parts (`beam_search.search_in_parts`): a decode step is hundreds of small
    ops, which TensorFlow otherwise splits over every core and joins again, op by op; with
    one part per core and one thread per op the cores never wait for each other
    (docs/results/training_speed.md, "Hand-written kernels"). Call before TensorFlow
    runs its first op; training wants the defaults (its large matmuls use every core well).
    """
    import tensorflow as tf

    threads = (1, max(parallel_ops, 2))
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads[0])
        tf.config.threading.set_inter_op_parallelism_threads(threads[1])
    except RuntimeError:  # TensorFlow has run ops already: its thread pools are made
        current = (tf.config.threading.get_intra_op_parallelism_threads(),
                   tf.config.threading.get_inter_op_parallelism_threads())
        if current != threads:  # e.g. a model trained with fit, then decoded: no warning for a documented flow
            logging.info(
                "TensorFlow ran before decoding was set up, so its ops keep their thread settings (intra-op %d, "
                "inter-op %d; 0 = all cores), not one thread per op: decoding is slower than t2t-keras-decoder's "
                "(0.7-0.75x on the demo model: docs/results/library.md, \"After other TensorFlow work\"). Create the "
                "Translator before other TensorFlow work where that matters.", *current)


def cores_for_decoding(requested: int, configure: bool = True) -> int:
    """The parts a decoding program searches each batch in (`decoding_parts`); with
    `configure`, each given a core of its own when there are several (`one_thread_per_op`),
    freed memory kept (`keep_freed_memory`) and oneDNN's kernels kept for every shape
    (`keep_kernels_for_every_shape`), as t2t-keras-decoder runs. Returns the parts.
    Call before TensorFlow runs its first op."""
    parts = decoding_parts(requested)
    if configure:
        keep_freed_memory()
        keep_kernels_for_every_shape()
        if parts > 1:
            one_thread_per_op(parts)
    return parts


BFLOAT16_UNITS = "a CPU with AVX512_BF16 or AMX, or a GPU of compute capability 8.0+"


def bfloat16_units() -> str | None:
    """What multiplies bfloat16 matrices natively here: "GPU" (compute capability 8.0 or
    more), "AMX" or "AVX512_BF16" (the CPU's flags), or None. Elsewhere TensorFlow still runs
    bfloat16 ops, by converting them, no faster than float32."""
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        if tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0)) >= (8, 0):
            return "GPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:  # not Linux
        return None
    return "AMX" if "amx_bf16" in flags else "AVX512_BF16" if "avx512_bf16" in flags else None


def decode_precision(decode_hparams, for_export: bool = False):
    """`decode_hparams` (a DecodeHParams) with the precision it decodes in: the one place that
    decides. Decoding here, precision=bf16 becomes fp32 where this machine has no bfloat16 units
    (`bfloat16_units`), with one line saying so; an export keeps bf16 (it is decoded on the
    serving machine), with a line saying this one could not use it."""
    if decode_hparams.precision != "bf16" or bfloat16_units() is not None:
        return decode_hparams
    if for_export:
        logging.info(f"Exporting in bf16: it decodes faster than fp32 where it is served on bfloat16 units "
                     f"({BFLOAT16_UNITS}); this machine has none.")
        return decode_hparams
    logging.warning(f"precision=bf16: this machine has no bfloat16 units ({BFLOAT16_UNITS}), where bf16 is no "
                    "faster than fp32; decoding in fp32.")
    return dataclasses.replace(decode_hparams, precision="fp32")
