"""What a training run records as it goes: evaluations (run.json, TensorBoard, the best
checkpoint, early stopping), its part of the training log (steps, seconds, tokens, CPU), the
progress lines, and at the end the decode alpha chosen on the dev set."""

from __future__ import annotations

import os
import time

import tensorflow as tf
from absl import logging

from t2t_keras.checkpoints import BEST_DIR, RunDir
from t2t_keras.system import cpu_model


def summary_writers(output_dir, chief):
    if not chief:
        return {"train": tf.summary.create_noop_writer(), "eval": tf.summary.create_noop_writer()}
    return {name: tf.summary.create_file_writer(os.path.join(output_dir, name)) for name in ("train", "eval")}


class EvaluationRecorder:
    """Evaluates a saved step, logs it, offers it as the best checkpoint, records it in
    run.json and says whether to stop early."""

    def __init__(self, evaluator, writer, run_dir, best, model, patience=0):
        self.evaluator, self.writer, self.run_dir, self.best, self.model = evaluator, writer, run_dir, best, model
        self.patience = patience
        self.stopped = None  # the early-stopping record, once it applies

    def evaluate(self, step: int) -> dict:
        metrics = self.evaluator.evaluate()
        logging.info("eval at step %d: %s", step, "  ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        with self.writer.as_default(step=step):
            for name, value in metrics.items():
                tf.summary.scalar(name, value)
        if self.best is not None and self.best.offer(self.model, step, metrics[self.best.metric]):
            logging.info("New best checkpoint by dev %s: step %d (%.4g).", self.best.metric, step, metrics[self.best.metric])
        if self.run_dir is not None:
            info = self.run_dir.run_info()
            evaluations = [e for e in info.get("evaluations", []) if e["step"] != step]
            info["evaluations"] = sorted(evaluations + [{"step": step, **metrics}], key=lambda e: e["step"])
            if self.best is not None:
                info["best"] = self.best.record()
            self.run_dir.write_run_info(info)
            if self.best is not None:
                self.stopped = early_stop_record(self.run_dir, self.best.metric, self.patience)
        return metrics


def early_stop_record(run_dir: RunDir, metric: str | None, patience: int) -> dict | None:
    """{"step", "best_step", "metric", "patience"} if the evaluations run.json holds already
    went `patience` times without beating the best; else None."""
    if not patience or not metric or not run_dir.exists():
        return None
    info = run_dir.run_info()
    best = info.get("best")
    if not best or best.get("metric") != metric:
        return None
    since = [e["step"] for e in info.get("evaluations", []) if e["step"] > best["step"]]
    if len(since) < patience:
        return None
    return {"step": since[patience - 1], "best_step": best["step"], "metric": metric, "patience": patience}


class TrainingLog:
    """This invocation's part of the run in run.json's "training" list, rewritten at every
    checkpoint: steps (from, to), wall seconds since the invocation began training, target tokens
    (R-Drop's counted twice: they were computed twice), replicas and the chief's CPU. A run resumed on
    other machines thereby states its compute (steps x tokens) and where its time went; what a
    kill loses after the last checkpoint is neither kept nor recorded."""

    def __init__(self, run_dir, start_step: int, replicas: int):
        self.run_dir = run_dir  # None but on the chief
        self.entry = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "from_step": start_step,
                      "replicas": replicas, "cpu": cpu_model()}
        self.started = time.perf_counter()
        self.tokens = 0.0
        self.index = None  # of this invocation's entry, once written

    def add(self, tokens: float) -> None:
        self.tokens += tokens

    def record(self, step: int) -> None:
        if self.run_dir is None:
            return
        info = self.run_dir.run_info()
        entries = info.get("training", [])
        entry = {**self.entry, "to_step": step, "seconds": round(time.perf_counter() - self.started, 1),
                 "target_tokens": int(self.tokens)}
        if self.index is None:
            self.index = len(entries)
            entries.append(entry)
        else:
            entries[self.index] = entry
        self.run_dir.write_run_info({**info, "training": entries})


class ProgressWindow:
    """Loss, steps/s and tokens/s since the last progress line."""

    def __init__(self, step):
        self.start_time, self.start_step = time.perf_counter(), step
        self.losses, self.tokens = [], 0.0

    def add(self, loss, tokens):
        self.losses.append(loss)
        self.tokens += tokens

    def flush(self, step) -> dict:
        seconds = max(time.perf_counter() - self.start_time, 1e-9)
        stats = {
            "loss": sum(self.losses) / max(len(self.losses), 1),
            "steps_per_s": (step - self.start_step) / seconds,
            "tokens_per_s": self.tokens / seconds,
        }
        self.__init__(step)
        return stats


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def choose_alpha(evaluator, run_dir: RunDir, alphas, step: int, sentences: int = 0) -> float:
    """The length-penalty alpha whose decoding of the first `sentences` dev sentences (0: the
    evaluations') scores best (the smaller of equals), recorded in run.json as the run's decode
    default (and best/'s, if kept) with the search it was chosen under (its beam and stop rule):
    the paper's 0.6 left a small model's outputs 9% short (docs/own_data.md, "Two text files
    in"), which a user should not have to find out. --decode_hparams=alpha=... still overrides it."""
    sources, references = evaluator.dev_examples(sentences)
    scored = len(sources)
    logging.info("Choosing the decoding alpha: decoding %d dev sentences with each of %s.",
                 scored, ", ".join(f"{a:g}" for a in alphas))
    scores = evaluator.scores_by_alpha(alphas, sources, references)
    alpha = max(alphas, key=lambda a: (scores[a], -a))
    search = evaluator.translator.settings
    record = {"decode_defaults": {"alpha": alpha}, "alpha_choice": {
        "step": step, "sentences": scored, "metric": evaluator.problem.score_name,
        "beam_size": search.beam_size, "exact_search": search.exact_search,
        "scores": {str(a): round(scores[a], 2) for a in alphas}}}
    for directory in (run_dir, RunDir(os.path.join(run_dir.path, BEST_DIR))):
        if directory.exists():
            directory.write_run_info({**directory.run_info(), **record})
    logging.info("Decoding default: alpha %g, whose %s on %d dev sentences was the best of %s.", alpha,
                 evaluator.problem.score_name, scored, ", ".join(f"{a:g}: {scores[a]:.2f}" for a in alphas))
    return alpha
