"""A matrix product whose backward pass multiplies by a transposed copy of the kernel."""

import tensorflow as tf


def matmul(inputs, kernel, hand_written_gradient: bool = True):
    """[..., d_in] @ [d_in, d_out], differentiated as dx = dy @ copy(kernel^T), dW = x^T @ dy.

    Autodiff of x @ W takes dx = dy @ W^T with W read transposed in place, which oneDNN runs
    well below its plain-layout rate on CPUs, even with the transposed copy paid for
    (docs/results/training_speed.md, "Hand-written kernels"). On a GPU the copy costs microseconds. Without
    `hand_written_gradient` (inference: the same product, autodiff's gradient) the graph holds
    no custom-gradient op, which a SavedModel would warn about at every load.
    """
    input_dim, output_dim = kernel.shape
    flat = tf.reshape(inputs, [-1, input_dim]) if inputs.shape.rank != 2 else inputs

    @tf.custom_gradient
    def product(flat, kernel):
        def gradient(upstream):
            return tf.matmul(upstream, transposed_copy(kernel)), tf.matmul(flat, upstream, transpose_a=True)

        return tf.matmul(flat, kernel), gradient

    outputs = product(flat, kernel) if hand_written_gradient else tf.matmul(flat, kernel)
    if inputs.shape.rank == 2:
        return outputs
    outputs = tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [output_dim]], axis=0))
    outputs.set_shape(inputs.shape[:-1].concatenate([output_dim]))
    return outputs


def transposed_copy(matrix):
    """matrix^T as a new row-major tensor. Taken through a rank-3 view so that TensorFlow's
    graph optimizer does not fold the transpose back into the consuming matmul's flags."""
    rows, columns = tf.shape(matrix)[0], tf.shape(matrix)[1]
    return tf.reshape(tf.transpose(matrix[tf.newaxis], (0, 2, 1)), [columns, rows])
