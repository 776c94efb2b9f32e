"""keras-hub's Transformer layers: the training step of the shapes in shapes.py, the Keras
peer (what a Keras user would assemble without this package).

    benchmarks/peers/.venvs/keras-hub/bin/python benchmarks/peers/train_keras_hub.py --size tiny [--precision bf16] [--xla]

The model: `keras_hub.layers.TransformerEncoder` / `TransformerDecoder` (post-norm, ReLU,
causal self-attention), one `ReversibleEmbedding` for both sides and the output layer (scaled
by sqrt(d_model)), `SinePositionEncoding`, dropout on the embeddings and inside the layers
(keras-hub has none after the ReLU). A `tf.function` step with a `GradientTape` (XLA with
--xla), the loss PyTorch's `cross_entropy(label_smoothing=...)` computes, Keras's Adam; bf16 is
the `mixed_bfloat16` policy. One JSON line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

STARTED = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # noqa: E402


def build(shape: shapes.Shape):
    import keras
    import keras_hub

    class KerasHubTransformer(keras.Model):
        def __init__(self):
            super().__init__()
            self.scale = math.sqrt(shape.d_model)
            self.embedding = keras.layers.ReversibleEmbedding(
                shape.vocab, shape.d_model, tie_weights=True,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=shape.d_model ** -0.5))
            self.positions = keras_hub.layers.SinePositionEncoding()
            self.source_dropout = keras.layers.Dropout(shape.dropout)
            self.target_dropout = keras.layers.Dropout(shape.dropout)
            settings = dict(intermediate_dim=shape.d_ff, num_heads=shape.num_heads, dropout=shape.dropout,
                            activation="relu", layer_norm_epsilon=shape.layer_norm_eps, normalize_first=False)
            self.encoder = [keras_hub.layers.TransformerEncoder(**settings) for _ in range(shape.num_layers)]
            self.decoder = [keras_hub.layers.TransformerDecoder(**settings) for _ in range(shape.num_layers)]

        def embed(self, ids, dropout, training):
            states = self.embedding(ids) * self.scale
            return dropout(states + self.positions(states), training=training)

        def call(self, inputs, training=False):
            sources, targets_in = inputs
            memory = self.embed(sources, self.source_dropout, training)
            for layer in self.encoder:
                memory = layer(memory, training=training)
            states = self.embed(targets_in, self.target_dropout, training)
            for layer in self.decoder:
                states = layer(states, memory, training=training)
            return self.embedding(states, reverse=True)

    model = KerasHubTransformer()
    model([keras.ops.zeros((1, shape.src_len), "int32"), keras.ops.zeros((1, shape.tgt_len), "int32")])
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=list(shapes.SHAPES), default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--xla", action="store_true", help="jit_compile=True")
    args = parser.parse_args()
    shape = shapes.SHAPES[args.size]

    import keras
    import keras_hub
    import tensorflow as tf

    keras.utils.set_random_seed(shapes.SEED)
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = build(shape)
    optimizer = keras.optimizers.Adam(learning_rate=shape.learning_rate, beta_1=shape.adam_beta1,
                                      beta_2=shape.adam_beta2, epsilon=shape.adam_eps)
    sources, inputs, targets = (tf.constant(array) for array in shapes.train_batch(shape))
    smoothing = shape.label_smoothing

    @tf.function(jit_compile=args.xla)
    def step(sources, inputs, targets):
        with tf.GradientTape() as tape:
            log_probs = tf.nn.log_softmax(tf.cast(model([sources, inputs], training=True), tf.float32))
            picked = tf.gather(log_probs, targets, axis=-1, batch_dims=2)
            loss = tf.reduce_mean(-(1.0 - smoothing) * picked - smoothing * tf.reduce_mean(log_probs, axis=-1))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    times, first = shapes.time_steps(lambda: step(sources, inputs, targets), sync=lambda loss: loss.numpy())
    peer = "keras_hub_custom_" + ("xla" if args.xla else "nojit") + ("" if args.precision == "fp32" else "_bf16")
    shapes.emit(shapes.train_result(peer, shape, times, first, {
        "framework": f"tensorflow {tf.__version__}, keras {keras.__version__}, keras-hub {keras_hub.__version__}",
        "precision": args.precision}), STARTED)


if __name__ == "__main__":
    main()
