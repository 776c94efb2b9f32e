"""Where a beam-search decode step's time goes, on decode_speed.py's setup.

    .venv/bin/python benchmarks/decode_profile.py

Times three graphs over the same 30 steps (tiny shape, 64 sentences x beam 4 = 256
hypotheses, sources of 20 tokens): the full search (the decoder's `SearchModule.best_ids` in one
part, its kernels chosen here), the model alone (`decode_step` in a bare while loop, growing
its cache, no search), and the search alone (`beam_search` over a step function that returns fixed logits). Prints one
JSON line with the median milliseconds per step of each (median of 5 runs after a warm-up).
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_speed  # noqa: E402  (shapes, keep_freed_memory)

shapes = decode_speed.shapes


def main():
    import tensorflow as tf

    from t2t_keras.decoding.beam_search import beam_search
    from t2t_keras.token_ids import EOS_ID

    tf.random.set_seed(shapes.SEED)
    dcfg = shapes.DECODE
    shape = shapes.SHAPES[dcfg.shape]
    steps, beam = dcfg.forced_steps, dcfg.beam_size
    modules = []
    decode_speed.build_decoder(shape, dcfg, parallel_parts=1, module=modules)  # the decoder's search, in one part
    module = modules[0]
    model, kernels = module.model, module.kernels
    sources = tf.constant(shapes.decode_sources(dcfg, shape.vocab))
    batch = int(sources.shape[0])

    def prepared():
        return model.init_decoding(model.encode(sources), beam)

    def full():
        return module.best_ids(sources)["ids"]

    @tf.function(autograph=False)
    def model_only():
        memory, cache = prepared()
        weights = model.output_weights(None, kernels.output_product)

        def body(index, ids, cache):
            logits, cache = model.decode_step(ids, index, cache, memory, weights)
            return index + 1, tf.argmax(logits, axis=-1, output_type=tf.int32), cache

        invariants = (tf.TensorShape([]), tf.TensorShape([None]), tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), cache))
        return tf.while_loop(lambda i, *_: i < steps, body, (tf.constant(0), tf.zeros([batch * beam], tf.int32), cache),
                             shape_invariants=invariants)[1]

    fixed_logits = tf.random.stateless_normal([batch * beam, shape.vocab], seed=[1, 2])

    @tf.function(autograph=False)
    def search_only():
        return beam_search(lambda ids, index, state, sentences: (fixed_logits[: tf.shape(ids)[0]], state), (), batch, beam,
                           dcfg.alpha, tf.fill([batch], steps), eos_id=EOS_ID, min_length=steps, kernels=kernels).ids

    result = {"bench": "decode_profile", "size": dcfg.shape, "hypotheses": batch * beam, "steps": steps,
              "kernel_choices": kernels.setting()}
    for name, function in (("full_ms_per_step", full), ("model_ms_per_step", model_only), ("search_ms_per_step", search_only)):
        function()  # trace and warm up
        times = []
        for _ in range(5):
            start = time.perf_counter()
            function().numpy()
            times.append(time.perf_counter() - start)
        result[name] = round(1000 * statistics.median(times) / steps, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
