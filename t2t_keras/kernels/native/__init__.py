"""C++ kernels for what TensorFlow runs on a CPU as chains of small ops, built on first use.

The `.cc` sources beside this file (and their `.h`) are compiled against the installed TensorFlow by the
machine's C++ compiler (`$CXX`, else g++), for the machine's own instruction set, into one
library per source text, TensorFlow, compiler and CPU, kept in `$T2T_KERAS_CACHE` (default
`$XDG_CACHE_HOME/t2t_keras` or ~/.cache/t2t_keras). The first start on a machine pays ~30 s of
compiling on 2 cores (each source by a compiler of its own, side by side); processes that start
together wait for one build (a file lock), which is written under a temporary name and renamed,
so a killed build leaves nothing half-written.

Without a compiler, or when the build fails, `library()` is None and `unavailable_reason()`
says why: every caller then keeps TensorFlow's own kernels (training/kernel_choices.py
offers a native kernel only where it loaded, and times it against the graph one).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import functools
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile

import tensorflow as tf
from absl import logging

SOURCES = ("layer_norm.cc", "residual_norm.cc", "bias_relu.cc", "cross_entropy.cc", "top_k.cc", "beam_candidates.cc",
           "int8_logits.cc", "attention_step.cc")
HEADERS = ("rows.h", "row_norm.h", "row_top_k.h")
SOURCE_DIR = pathlib.Path(__file__).parent
BUILD_SECONDS = 600  # a compiler that takes longer is stuck
# What a kernel choice between a TensorFlow-ops kernel and its native twin can take.
IMPLEMENTATIONS = ("graph", "native")


def library():
    """The loaded op library (its ops as snake_case functions), or None if it cannot be built here."""
    return _build_and_load()[0]


def unavailable_reason() -> str | None:
    """Why `library()` is None, in one line; None when it loaded."""
    return _build_and_load()[1]


def cache_dir() -> pathlib.Path:
    if os.environ.get("T2T_KERAS_CACHE"):
        return pathlib.Path(os.environ["T2T_KERAS_CACHE"])
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "t2t_keras"


@functools.cache
def _build_and_load():
    return build_and_load(os.environ.get("CXX", "g++"), cache_dir() / "native")


def build_and_load(compiler_name: str, directory: pathlib.Path):
    """(library, None), or (None, why not): the library of SOURCES built by `compiler_name` in
    `directory`, or the one built there before for the same sources, compiler and CPU."""
    compiler = shutil.which(compiler_name)
    if compiler is None:
        return None, f"no C++ compiler ('{compiler_name}' is not on PATH; set CXX to one)"
    try:
        compile_flags, link_flags = _build_flags(compiler)
        # TensorFlow's version, not where it is installed: two venvs of one TensorFlow share a build.
        flags = " ".join([compiler, *compile_flags, *link_flags]).replace(os.path.dirname(tf.__file__), "TENSORFLOW")
        key = hashlib.sha256("\n".join([
            *((SOURCE_DIR / name).read_text() for name in SOURCES + HEADERS), flags,
            tf.__version__,
            _compiler_version(compiler), cpu_flags()]).encode()).hexdigest()[:16]
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"ops-{key}.so"
        with open(directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                logging.info("Building the native kernels for this machine into %s (once; ~30 s).", target)
                _build(compiler, compile_flags, link_flags, target)
        return tf.load_op_library(str(target)), None
    except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
        return None, f"building the native kernels failed: {str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__}"


def _build_flags(compiler: str) -> tuple[list, list]:
    """(the flags that compile one source into an object, the flags that link the objects)."""
    arch = ["-march=native"]
    # TensorFlow's Eigen headers do not compile with AVX512-FP16 (their FP16 packet code), which
    # -march=native turns on where the CPU has it; nothing here uses half floats.
    if "__AVX512FP16__" in _predefined_macros(compiler, arch):
        arch.append("-mno-avx512fp16")
    return (["-c", "-fPIC", "-O3", *arch, "-fopenmp-simd", "-mprefer-vector-width=512", "-Wno-deprecated-declarations",
             f"-I{SOURCE_DIR}", *tf.sysconfig.get_compile_flags()],
            tf.sysconfig.get_link_flags())


def _build(compiler: str, compile_flags: list, link_flags: list, target: pathlib.Path) -> None:
    """The library at `target`: each source compiled by a compiler of its own, as many at once as
    this process may use cores (most of the build is compiling TensorFlow's headers once per
    source), then linked under a temporary name and renamed."""
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        objects = [str(pathlib.Path(scratch) / f"{name}.o") for name in SOURCES]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        with concurrent.futures.ThreadPoolExecutor(max_workers=cores) as pool:
            list(pool.map(_run_compiler, [[compiler, *compile_flags, str(SOURCE_DIR / name), "-o", obj]
                                          for name, obj in zip(SOURCES, objects)]))  # raises the first failure
        partial = pathlib.Path(scratch) / target.name
        _run_compiler([compiler, "-shared", *objects, *link_flags, "-o", str(partial)])
        os.replace(partial, target)


def _run_compiler(command: list) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_SECONDS)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()[-1:]
        raise subprocess.SubprocessError(f"{command[0]} exited with {done.returncode}: {errors[0] if errors else ''}")


def _predefined_macros(compiler: str, flags: list) -> str:
    return subprocess.run([compiler, *flags, "-dM", "-E", "-x", "c++", "-"], input="", capture_output=True,
                          text=True, timeout=60).stdout


def _compiler_version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout


def cpu_flags() -> str:
    """What -march=native compiles for: the CPU's model and feature flags (Linux), else the platform."""
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(line for line in lines[:40] if line.startswith(("model", "flags", "vendor_id", "cpu family")))
    except OSError:
        return platform.processor() + platform.machine()
