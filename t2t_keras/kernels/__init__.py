"""Hand-written primitives: each computes what a TensorFlow or Keras op computes (equal to it
in tests/kernels), with fewer or cheaper ops on a CPU, or with its gradient written out.

    layer_norm.py     layer_norm: LayerNormalization's formula, forward and backward by hand;
                      native_layer_norm, native_dropout_add_layer_norm: the same (and post-norm's
                      dropout + add before it) as one native kernel each way
    bias_relu.py      native_bias_relu: the FFN's max(0, x + b) as one native kernel each way
    native/           C++ kernels built on first use by the machine's compiler (training and in-process decoding)
    timing.py         best_milliseconds: kernel alternatives timed against each other
    matmul.py         matmul: x @ W whose backward multiplies by a transposed copy of W
    dropout.py        random_uint16, masked: a dropout mask from 16 random bits a unit
    softmax.py        log_normalizers_at: row logsumexp read from one softmax
    cross_entropy.py  smoothed_cross_entropy: label-smoothed cross-entropy from one softmax
    output_loss.py    projected_cross_entropy: the output projection and its loss in one piece,
                      in the layout timed fastest on the machine (training/kernel_choices.py)
    top_k.py          top_k_rows: tf.math.top_k by blocks, for vocabulary-sized rows
    beam_candidates.py  row_candidates: a search step's best tokens, their log-probabilities and EOS's

The Keras layers that use them (layers/normalization.py, dense.py, dropout.py) stay thin.
Why each exists, with the measurements, is in docs/results/training_speed.md, "Hand-written kernels".
"""
