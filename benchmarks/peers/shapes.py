"""The protocol every training and decoding speed benchmark shares, ours and the peers'.

The shapes of the model and batch, the random data, the FLOP count of a training step, the
timing loop and the JSON line each benchmark prints. Only the standard library and numpy, so
that the peers' environments (PyTorch, keras-hub) import it as they are.

    python benchmarks/peers/shapes.py      # the shapes, their FLOPs per step, the decode setup
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np

SEED = 1234
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2  # ids below FIRST_WORD_ID never appear in the random data
FIRST_WORD_ID = 3
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class Shape:
    """A Transformer and one training batch: post-norm, ReLU, one vocabulary shared by both
    sides and the output layer, the paper's regularisation and Adam, a constant learning rate
    (the schedule changes no step's cost)."""

    name: str
    num_layers: int  # per stack
    d_model: int
    d_ff: int
    num_heads: int
    vocab: int
    batch: int  # sentences
    src_len: int
    tgt_len: int
    dropout: float = 0.1
    label_smoothing: float = 0.1
    layer_norm_eps: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    learning_rate: float = 1e-4

    @property
    def src_tokens(self) -> int:
        return self.batch * self.src_len

    @property
    def tgt_tokens(self) -> int:
        return self.batch * self.tgt_len


SHAPES = {
    "tiny": Shape("tiny", num_layers=2, d_model=256, d_ff=1024, num_heads=4, vocab=8192, batch=64, src_len=32, tgt_len=32),
    "base": Shape("base", num_layers=6, d_model=512, d_ff=2048, num_heads=8, vocab=8192, batch=32, src_len=32, tgt_len=32),
}


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """Beam search on the tiny model with random weights: every engine runs exactly
    `forced_steps` steps (no hypothesis may end before), so all do the same work."""

    shape: str = "tiny"
    num_sentences: int = 64
    src_len: int = 20
    beam_size: int = 4
    alpha: float = 0.6  # GNMT length penalty ((5 + length) / 6) ** alpha
    extra_len: int = 50
    forced_steps: int = 30

    @property
    def max_len(self) -> int:
        return self.src_len + self.extra_len


DECODE = DecodeConfig()
WARMUP_STEPS, TIMED_STEPS = 3, 10


def train_batch(shape: Shape, seed: int = SEED):
    """int32 (sources [B, S], decoder inputs [B, T] = BOS + targets shifted right, targets
    [B, T]): random word ids, no padding."""
    rng = np.random.default_rng(seed)
    sources = rng.integers(FIRST_WORD_ID, shape.vocab, size=(shape.batch, shape.src_len))
    targets = rng.integers(FIRST_WORD_ID, shape.vocab, size=(shape.batch, shape.tgt_len))
    inputs = np.concatenate([np.full((shape.batch, 1), BOS_ID), targets[:, :-1]], axis=1)
    return sources.astype(np.int32), inputs.astype(np.int32), targets.astype(np.int32)


def decode_sources(dcfg: DecodeConfig = DECODE, vocab: int = 8192, seed: int = SEED):
    """int32 [sentences, src_len] random word ids (without EOS: each engine adds its own)."""
    rng = np.random.default_rng(seed + 1)
    return rng.integers(FIRST_WORD_ID, vocab, size=(dcfg.num_sentences, dcfg.src_len)).astype(np.int32)


def layer_params(shape: Shape) -> tuple[int, int]:
    """Weights, biases and layer-norm parameters of one encoder and one decoder layer."""
    d, f = shape.d_model, shape.d_ff
    attention = 4 * d * d + 4 * d
    feed_forward = 2 * d * f + f + d
    norm = 2 * d
    return attention + feed_forward + 2 * norm, 2 * attention + feed_forward + 3 * norm


def flops_per_step(shape: Shape) -> dict:
    """A training step's FLOPs (forward and backward, 3x the forward pass):

        dense     = 6 (N P_enc B S + (N P_dec + V d) B T)
        attention = 12 N B d (S^2 + T^2 + T S)

    P_enc, P_dec the parameters of a layer (`layer_params`), V d the output layer (tied to the
    embedding, but computed); attention's two products (Q K^T, A V: 2 Lq Lk d each forward),
    the causal half included (dense kernels compute it). Lookups, softmax, norms and the loss
    are left out."""
    B, S, T, N, d, V = shape.batch, shape.src_len, shape.tgt_len, shape.num_layers, shape.d_model, shape.vocab
    p_enc, p_dec = layer_params(shape)
    dense = 6 * (N * p_enc * B * S + (N * p_dec + V * d) * B * T)
    attention = 12 * N * B * d * (S * S + T * T + T * S)
    return {"nonembedding_params": N * (p_enc + p_dec), "output_projection_params": V * d,
            "flops_dense": dense, "flops_attention": attention, "flops_per_step": dense + attention}


def time_steps(step, warmup: int = WARMUP_STEPS, timed: int = TIMED_STEPS, sync=None):
    """(seconds of each timed step, seconds of the first warm-up step: tracing or compiling
    included). `sync(result)` waits for a step's result (`.numpy()`, `.item()`)."""
    first, times = None, []
    for index in range(warmup + timed):
        start = time.perf_counter()
        result = step()
        if sync is not None:
            sync(result)
        elapsed = time.perf_counter() - start
        if index == 0:
            first = elapsed
        if index >= warmup:
            times.append(elapsed)
    return times, first


def time_runs(run, argument, runs: int = 3):
    """One warm-up call of `run(argument)`, then `runs` timed: (times, first call's seconds,
    the last output)."""
    start = time.perf_counter()
    output = run(argument)
    first = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        output = run(argument)
        times.append(time.perf_counter() - start)
    return times, first, output


def train_result(peer: str, shape: Shape, times, first_step_s, extra=None) -> dict:
    median = statistics.median(times)
    flops = flops_per_step(shape)
    return {
        "bench": "train", "peer": peer, "size": shape.name,
        "median_step_s": round(median, 4), "min_step_s": round(min(times), 4), "max_step_s": round(max(times), 4),
        "timed_steps": len(times), "first_step_s": None if first_step_s is None else round(first_step_s, 2),
        "tgt_tok_per_s": round(shape.tgt_tokens / median, 1),
        "src_tgt_tok_per_s": round((shape.src_tokens + shape.tgt_tokens) / median, 1),
        "gflop_per_step": round(flops["flops_per_step"] / 1e9, 2),
        "achieved_gflop_s": round(flops["flops_per_step"] / median / 1e9, 1),
        "nonembedding_params": flops["nonembedding_params"],
        **(extra or {}),
    }


def decode_result(peer: str, dcfg: DecodeConfig, times, first_run_s, out_len: int, extra=None) -> dict:
    median = statistics.median(times)
    return {
        "bench": "decode", "peer": peer, "size": dcfg.shape, "sentences": dcfg.num_sentences,
        "src_len": dcfg.src_len, "beam": dcfg.beam_size, "alpha": dcfg.alpha, "forced_steps": dcfg.forced_steps,
        "output_len": int(out_len), "median_s": round(median, 3), "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "first_run_s": round(first_run_s, 2), "sentences_per_s": round(dcfg.num_sentences / median, 2),
        "decode_steps_per_s": round(dcfg.forced_steps / median, 2),
        **(extra or {}),
    }


def cpu() -> str:
    """The CPU's name with lscpu's family and model (t2t_keras.system.cpu_model's form: the
    peers' environments do not have the package)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    return f"{fields['model name']} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"


def commit() -> str | None:
    """The commit measured: $BENCH_COMMIT if set (paired.sh names the --against commit so),
    else the repository's short HEAD, "+changes" when the tree differs from it; None outside git."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+changes" if dirty else "")


def command() -> str:
    """This process's command as run from a clone's root: the script's path from its
    `benchmarks/` folder on (a temporary worktree's or this one's), never a machine's own folders."""
    parts = os.path.abspath(sys.argv[0]).split(os.sep)
    script = "/".join(parts[len(parts) - 1 - parts[::-1].index("benchmarks"):]) if "benchmarks" in parts else parts[-1]
    return " ".join(["python", shlex.quote(script), *map(shlex.quote, sys.argv[1:])])


def emit(result: dict, started: float | None = None) -> None:
    """Prints `result` as one JSON line, with the script's wall time, the CPU, the date, the
    commit and the command; appends it to $BENCH_RESULTS if set."""
    if started is not None:
        result["script_wall_s"] = round(time.perf_counter() - started, 1)
    record = {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu": cpu(),
              "date": datetime.date.today().isoformat(), "commit": commit(), "command": command()}
    result.update({key: value for key, value in record.items() if key not in result})
    line = json.dumps(result)
    print(line, flush=True)
    if os.environ.get("BENCH_RESULTS"):
        with open(os.environ["BENCH_RESULTS"], "a") as handle:
            handle.write(line + "\n")


if __name__ == "__main__":
    for shape in SHAPES.values():
        print(shape.name, flops_per_step(shape))
    print(DECODE, "max_len", DECODE.max_len)
