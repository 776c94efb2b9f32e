"""Experiment (issue 73): the whole beam search as one XLA program, against the graph path.

The search of `beam_search.beam_search` rewritten with static shapes, so that the while loop
and its step compile under `jit_compile`: self-attention caches of a fixed length T (the step
writes its key and value at its position and attends over the positions up to it), token
buffers [B, K, T], and settled sentences masked (their finished sets frozen) instead of
dropped from the batch. Same stop rule (the default, not exact), same candidates
(`top_k_rows`, `log_normalizers_at`). Source lengths are padded to a multiple of 8 and T is
the padded length + `--extra_length`, so that a few shapes compile.

    .venv/bin/python benchmarks/compiled_search.py --output_dir=out/demo/train_avg

Prints one JSON line: sentences/s of each path over the shipped Multi30k en-de val set (each
the best of `--rounds` after a warm-up that compiles), how many best outputs agree, and the
CPU. A measurement script, not the decoder: the result decides whether the decoder gains a
compiled path (docs/results/decoding_speed.md, "Tried, not adopted").
"""

import argparse
import gzip
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from t2t_keras.system import cpu_model  # noqa: E402

def compiled_search(model, input_ids, length, beam_size, alpha, extra_length):
    """Best ids [B, length], their lengths [B]: beam search with every shape static."""
    import tensorflow as tf

    from t2t_keras.decoding import graph_search
    from t2t_keras.decoding.beam_search import NEG_INF, length_penalty
    from t2t_keras.kernels.softmax import log_normalizers_at
    from t2t_keras.kernels.top_k import top_k_rows
    from t2t_keras.layers.attention import MASKED_LOGIT
    from t2t_keras.models.transformer import _end_of_stack
    from t2t_keras.token_ids import EOS_ID, START_ID

    hparams = model.hparams
    heads, width = hparams.num_heads, hparams.hidden_size
    depth = width // heads
    batch, beams = tf.shape(input_ids)[0], beam_size
    rows = batch * beams
    max_lengths = tf.minimum(graph_search.max_lengths(input_ids, extra_length), length)
    memory, _ = model.init_decoding(model.encode(input_ids, training=False), beams)
    output_weights = model.output_weights()
    positions = tf.range(length)

    def step(ids, index, caches):
        x, _ = model._embed_targets(ids[:, None], index, training=False, copied_before=tf.zeros([rows], tf.int32))
        x = tf.reshape(x, [rows, width])
        here = tf.equal(positions, index)[None, None, :, None]
        bias = tf.where(positions <= index, 0.0, MASKED_LOGIT)[None, None, None, :]
        new_caches = []
        for layer, block in enumerate(model.decoder_blocks):
            keys, values = caches[layer]
            attention = block.self_attention
            y = block.self_attention_residual.prepare(x)
            split = lambda t: tf.reshape(t, [rows, heads, 1, depth])  # noqa: E731
            keys = tf.where(here, split(attention.key_dense(y)), keys)
            values = tf.where(here, split(attention.value_dense(y)), values)
            queries = split(attention.query_dense(y)) * depth**-0.5
            weights = tf.nn.softmax(tf.matmul(queries, keys, transpose_b=True) + bias, axis=-1)
            y = attention.output_dense(tf.reshape(tf.matmul(weights, values), [rows, width]))
            x = block.self_attention_residual.finish(x, y, training=False)
            x, _ = block._cross_attention_and_feed_forward(x, memory.keys[layer], memory.values[layer], memory.mask, False)
            new_caches.append((keys, values))
        logits = model.softmax_projection.step_logits(_end_of_stack(model.decoder_norm, x), output_weights)
        return tf.cast(logits, tf.float32), new_caches

    def body(index, last, caches, alive_seqs, alive_log_probs, finished_seqs, finished_scores, finished_flags, done):
        logits, caches = step(last, index, caches)
        room = tf.repeat(max_lengths, beams) - (index + 1)
        row_k = 2 * beams
        row_logits, row_tokens = top_k_rows(logits, row_k)
        normalizers, _ = log_normalizers_at(logits, row_tokens[:, 0])
        row_log_probs = row_logits - normalizers[:, None]
        eos_log_probs = logits[:, EOS_ID : EOS_ID + 1] - normalizers[:, None]
        at_limit = (room <= 0)[:, None]
        first = tf.range(row_k)[None, :] == 0
        row_log_probs = tf.where(at_limit, tf.where(first, eos_log_probs, NEG_INF), row_log_probs)
        row_tokens = tf.where(at_limit, EOS_ID, row_tokens)
        candidates = tf.reshape(alive_log_probs[:, :, None] + tf.reshape(row_log_probs, [batch, beams, row_k]),
                                [batch, beams * row_k])
        candidate_log_probs, flat = tf.math.top_k(candidates, k=2 * beams)
        candidate_beams = flat // row_k
        candidate_tokens = tf.gather(tf.reshape(row_tokens, [batch, beams * row_k]), flat, batch_dims=1)
        candidate_seqs = tf.where(tf.equal(positions, index)[None, None, :], candidate_tokens[:, :, None],
                                  tf.gather(alive_seqs, candidate_beams, batch_dims=1))
        ended = tf.equal(candidate_tokens, EOS_ID)
        alive_log_probs, choice = tf.math.top_k(tf.where(ended, NEG_INF, candidate_log_probs), k=beams)
        alive_seqs = tf.gather(candidate_seqs, choice, batch_dims=1)
        parents = tf.gather(candidate_beams, choice, batch_dims=1)
        just_finished = ended & (candidate_log_probs > NEG_INF / 2)
        new_scores = tf.where(just_finished, candidate_log_probs / length_penalty(index + 1, alpha), NEG_INF)
        scores, pick = tf.math.top_k(tf.concat([finished_scores, new_scores], axis=1), k=beams)
        flags = tf.gather(tf.concat([finished_flags, just_finished], axis=1), pick, batch_dims=1)
        seqs = tf.gather(tf.concat([finished_seqs, candidate_seqs], axis=1), pick, batch_dims=1)
        frozen = done[:, None]
        finished_seqs = tf.where(frozen[:, :, None], finished_seqs, seqs)
        finished_scores = tf.where(frozen, finished_scores, scores)
        finished_flags = tf.where(frozen, finished_flags, flags)
        best_finished = tf.where(finished_flags, finished_scores, NEG_INF)[:, 0]
        settled = (index + 1 >= max_lengths) | (alive_log_probs[:, 0] / length_penalty(index + 2, alpha) <= best_finished)
        hypothesis_rows = tf.reshape(tf.range(batch)[:, None] * beams + parents, [-1])
        caches = [(tf.gather(keys, hypothesis_rows), tf.gather(values, hypothesis_rows)) for keys, values in caches]
        last = tf.reshape(tf.gather(alive_seqs, index, axis=2), [-1])
        return (index + 1, last, caches, alive_seqs, alive_log_probs, finished_seqs, finished_scores, finished_flags,
                done | settled)

    empty_cache = tf.zeros([rows, heads, length, depth])
    state = (tf.constant(0), tf.fill([rows], START_ID), [(empty_cache, empty_cache)] * len(model.decoder_blocks),
             tf.zeros([batch, beams, length], tf.int32), tf.tile(tf.constant([[0.0] + [NEG_INF] * (beams - 1)]), [batch, 1]),
             tf.zeros([batch, beams, length], tf.int32), tf.fill([batch, beams], NEG_INF), tf.zeros([batch, beams], tf.bool),
             max_lengths <= 0)
    state = tf.while_loop(lambda index, *rest: (index < length) & tf.reduce_any(~rest[-1]), body, state)
    best = state[5][:, 0]
    lengths = tf.reduce_sum(tf.cast(tf.cumsum(tf.cast(tf.equal(best, EOS_ID), tf.int32), axis=-1, exclusive=True) == 0,
                                    tf.int32), axis=-1)
    return tf.where(tf.sequence_mask(lengths, length), best, 0), lengths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", required=True, help="a trained run dir")
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=1.4)
    parser.add_argument("--extra_length", type=int, default=50, help="T = padded source length + this")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from t2t_keras import Translator
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

    translator = Translator.from_preset(args.output_dir, beam_size=args.beam_size, alpha=args.alpha)
    module = translator.search_module()
    import tensorflow as tf

    from t2t_keras.decoding import line_decoding

    with gzip.open(os.path.join(MULTI30K_DIR, "val.en.gz"), "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    encoded, row_batches = line_decoding.sorted_batches(lines, translator.vocabularies.source, module.decode_hparams)
    row_batches = list(row_batches)
    parts = module.parallel_parts
    search = tf.function(
        lambda ids, length: compiled_search(module.model, ids, length, args.beam_size, args.alpha, args.extra_length),
        jit_compile=True, autograph=False)

    @tf.function(autograph=False)
    def in_parts(ids, length):  # as the graph path: a part of the batch per core, as branches of one graph
        bounds = [tf.shape(ids)[0] * part // parts for part in range(parts + 1)]
        results = [search(ids[bounds[part] : bounds[part + 1]], length) for part in range(parts)]
        return tf.concat([r[0] for r in results], 0), tf.concat([r[1] for r in results], 0)

    def compiled():
        outputs = {}
        for rows in row_batches:
            batch = line_decoding.padded_batch([encoded[i] for i in rows])
            padded = -(-batch.shape[1] // 8) * 8
            batch = np.pad(batch, [[0, 0], [0, padded - batch.shape[1]]])
            ids, lengths = in_parts(tf.constant(batch), padded + args.extra_length)
            ids, lengths = ids.numpy(), lengths.numpy()
            outputs.update((i, ids[r, : lengths[r]].tolist()) for r, i in enumerate(rows))
        return outputs

    def graph():
        outputs = {}
        for rows in row_batches:
            result = module.best_ids(tf.constant(line_decoding.padded_batch([encoded[i] for i in rows])))
            ids, lengths = result["ids"].numpy(), result["lengths"].numpy()
            outputs.update((i, ids[r, 0, : lengths[r, 0]].tolist()) for r, i in enumerate(rows))
        return outputs

    rates, outputs = {"graph": [], "compiled": []}, {}
    for name, decode in (("graph", graph), ("compiled", compiled)):
        outputs[name] = decode()  # warm-up: traces and compiles
    for _ in range(args.rounds):
        for name, decode in (("graph", graph), ("compiled", compiled)):
            start = time.perf_counter()
            decode()
            rates[name].append(len(lines) / (time.perf_counter() - start))
    same = sum(outputs["graph"][i] == outputs["compiled"][i] for i in outputs["graph"])
    print(json.dumps({
        "benchmark": "compiled_search", "model": args.output_dir, "beam_size": args.beam_size, "alpha": args.alpha,
        "extra_length": args.extra_length, "parts": parts, "sentences": len(lines),
        "graph_sentences_per_s": round(max(rates["graph"]), 1), "compiled_sentences_per_s": round(max(rates["compiled"]), 1),
        "compiled_over_graph": round(max(rates["compiled"]) / max(rates["graph"]), 3),
        "same_best_outputs": same, "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
