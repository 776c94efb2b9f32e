"""CTranslate2 (OpenNMT's C++ inference engine): beam search on the decode setup of shapes.py,
the peer the decoding headline is measured against.

    .venv/bin/python benchmarks/peers/decode_ct2.py [--compute_type float32|int8|bfloat16] [--parts 2]

The tiny shape with random weights, written as a CTranslate2 model with its own specification
API (no converter, no other framework): post-norm, ReLU, biases on every product, one
embedding for both sides and the output layer, CTranslate2's sinusoids. The 64 sources of 20
random ids end with EOS; beam 4, length penalty 0.6, and exactly 30 steps
(min_decoding_length = max_decoding_length), as every engine of the protocol. --parts N
decodes the batch in N parts side by side, one worker each (inter_threads=N, intra_threads =
cores / N), as t2t-keras-decoder splits its batch: on 2 cores, CTranslate2's faster setting.
CTranslate2 is pinned by the package's constraints.txt (the `ctranslate2` extra), so the
project's .venv runs this. One JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

STARTED = time.perf_counter()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import shapes  # noqa: E402


def random_model_spec(shape: shapes.Shape, rng: np.random.Generator):
    """A `TransformerSpec` of `shape` with random weights and the id vocabulary `vocabulary()`."""
    from ctranslate2.specs import common_spec, transformer_spec

    d, f = shape.d_model, shape.d_ff

    def linear(spec, rows: int, columns: int) -> None:
        spec.weight = rng.uniform(-1, 1, (rows, columns)).astype(np.float32) * np.float32(columns ** -0.5)
        spec.bias = np.zeros(rows, np.float32)

    def norm(spec) -> None:
        spec.gamma, spec.beta = np.ones(d, np.float32), np.zeros(d, np.float32)

    def feed_forward(spec) -> None:
        linear(spec.linear_0, f, d)
        linear(spec.linear_1, d, f)
        norm(spec.layer_norm)

    stack = dict(num_layers=shape.num_layers, num_heads=shape.num_heads, pre_norm=False,
                 activation=common_spec.Activation.RELU)
    spec = transformer_spec.TransformerSpec(transformer_spec.TransformerEncoderSpec(**stack),
                                            transformer_spec.TransformerDecoderSpec(**stack))
    spec.config.layer_norm_epsilon = shape.layer_norm_eps
    embedding = (rng.standard_normal((shape.vocab, d)) * d ** -0.5).astype(np.float32)
    spec.encoder.embeddings[0].weight = embedding
    spec.decoder.embeddings.weight = embedding
    spec.decoder.projection.weight = embedding
    for layer in spec.encoder.layer:
        linear(layer.self_attention.linear[0], 3 * d, d)
        linear(layer.self_attention.linear[1], d, d)
        norm(layer.self_attention.layer_norm)
        feed_forward(layer.ffn)
    for layer in spec.decoder.layer:
        linear(layer.self_attention.linear[0], 3 * d, d)
        linear(layer.self_attention.linear[1], d, d)
        norm(layer.self_attention.layer_norm)
        linear(layer.attention.linear[0], d, d)
        linear(layer.attention.linear[1], 2 * d, d)
        linear(layer.attention.linear[2], d, d)
        norm(layer.attention.layer_norm)
        feed_forward(layer.ffn)
    pieces = vocabulary(shape.vocab)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token, spec.config.eos_token = pieces[0], pieces[shapes.EOS_ID]
    spec.config.bos_token = spec.config.decoder_start_token = pieces[shapes.BOS_ID]
    return spec


def vocabulary(size: int) -> list[str]:
    """Token i's piece: the special tokens at their protocol ids (<unk> stands in the padding's
    place, which CTranslate2 does not name), then one piece per id."""
    return ["<unk>", "</s>", "<s>"] + [f"w{i}" for i in range(shapes.FIRST_WORD_ID, size)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compute_type", default="float32")
    parser.add_argument("--parts", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import ctranslate2

    dcfg = shapes.DECODE
    shape = shapes.SHAPES[dcfg.shape]
    spec = random_model_spec(shape, np.random.default_rng(shapes.SEED))
    spec.validate()
    spec.optimize(quantization=None if args.compute_type == "float32" else args.compute_type)
    pieces = vocabulary(shape.vocab)
    ids = {piece: i for i, piece in enumerate(pieces)}
    with tempfile.TemporaryDirectory() as folder:
        spec.save(folder)
        translator = ctranslate2.Translator(folder, device="cpu", compute_type=args.compute_type,
                                            inter_threads=args.parts, intra_threads=max(1, os.cpu_count() // args.parts))
    batch = [[pieces[i] for i in row] + [pieces[shapes.EOS_ID]] for row in shapes.decode_sources(dcfg, shape.vocab).tolist()]

    def run(batch):
        results = translator.translate_batch(
            batch, beam_size=dcfg.beam_size, length_penalty=dcfg.alpha, min_decoding_length=dcfg.forced_steps,
            max_decoding_length=dcfg.forced_steps, return_end_token=False, max_batch_size=-(-len(batch) // args.parts))
        return np.array([[ids[token] for token in result.hypotheses[0]] for result in results])

    times, first, output = shapes.time_runs(run, batch, args.runs)
    shapes.emit(shapes.decode_result(f"ctranslate2_{args.compute_type}", dcfg, times, first, output.shape[-1], {
        "framework": "ctranslate2 " + ctranslate2.__version__, "parts": args.parts}), STARTED)


if __name__ == "__main__":
    main()
