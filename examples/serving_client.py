"""Translate with an exported SavedModel the way a serving host does: only TensorFlow and
tensorflow_text, no t2t_keras.

    python examples/serving_client.py EXPORT_DIR/<version> "A dog runs in the snow." ...
"""

import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)


def main(argv):
    if len(argv) < 3:
        sys.exit(f"usage: {argv[0]} SAVED_MODEL_DIR SENTENCE [SENTENCE ...]")
    serving_default = tf.saved_model.load(argv[1]).signatures["serving_default"]
    result = serving_default(inputs=tf.constant(argv[2:]))
    for source, output, score, log_prob in zip(argv[2:], result["outputs"].numpy(), result["scores"].numpy(),
                                               result["log_probs"].numpy()):
        print(f"{source}\n  -> {output.decode('utf-8')}  (score {score:.2f}, log P {log_prob:.2f})")


if __name__ == "__main__":
    main(sys.argv)
