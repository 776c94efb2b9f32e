import numpy as np
import pytest

from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy
from t2t_keras.optimization.losses import loss_sum_and_weight, padded_cross_entropy

V = 6
LOGITS = np.random.default_rng(0).normal(size=(2, 4, V)).astype("float32")
TARGETS = np.array([[3, 1, 4, 0], [2, 5, 0, 0]])  # 0 = padding


def _numpy_loss(targets, logits, eps):
    """Cross-entropy against the smoothed one-hot: 1-eps on the truth, eps/(V-1) elsewhere."""
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    total, count = 0.0, 0
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            if targets[b, t] == 0:
                continue
            q = np.full(V, eps / (V - 1))
            q[targets[b, t]] = 1 - eps
            total += -(q * log_probs[b, t]).sum()
            count += 1
    return total / count, total, count


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_numpy_with_padding(eps):
    expected_mean, expected_total, expected_count = _numpy_loss(TARGETS, LOGITS, eps)
    total, weight = loss_sum_and_weight(TARGETS, LOGITS, eps)
    assert float(weight) == expected_count == 5
    np.testing.assert_allclose(float(total), expected_total, rtol=1e-5)
    np.testing.assert_allclose(float(padded_cross_entropy(TARGETS, LOGITS, eps)), expected_mean, rtol=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_numpy_without_padding(eps):
    targets = np.array([[3, 1, 4, 2], [2, 5, 1, 3]])
    expected_mean, _, count = _numpy_loss(targets, LOGITS, eps)
    assert count == 8
    np.testing.assert_allclose(float(padded_cross_entropy(targets, LOGITS, eps)), expected_mean, rtol=1e-5)


def test_no_smoothing_is_negative_log_likelihood():
    log_probs = LOGITS - np.log(np.exp(LOGITS).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, TARGETS[..., None], -1)[..., 0]
    np.testing.assert_allclose(smoothed_cross_entropy(TARGETS, LOGITS, 0.0), nll, rtol=1e-5)


def test_padding_logits_do_not_matter():
    changed = LOGITS.copy()
    changed[TARGETS == 0] += 50.0
    np.testing.assert_allclose(
        float(padded_cross_entropy(TARGETS, changed, 0.1)), float(padded_cross_entropy(TARGETS, LOGITS, 0.1)), rtol=1e-6
    )


def test_all_padding_batch_is_zero_not_nan():
    assert float(padded_cross_entropy(np.zeros((1, 3), int), LOGITS[:1, :3], 0.1)) == 0.0


def _numpy_gradient(targets, logits, eps):
    """d mean loss / d logits: (softmax - smoothed one-hot) on real tokens, over their count."""
    logits = logits.astype(np.float64)
    vocab = logits.shape[-1]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    smoothed = np.full(logits.shape, eps / (vocab - 1))
    np.put_along_axis(smoothed, targets[..., None], 1 - eps, axis=-1)
    real = (targets != 0)[..., None]
    return (probs - smoothed) * real / real.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("vocab, scale", [(V, 1.0), (8192, 1.0), (8192, 40.0)])
def test_gradient_is_softmax_minus_smoothed_targets(eps, vocab, scale):
    """The written-out gradient, on flat rows and on rows so peaked that most probabilities
    underflow in float32; the loss there too against a float64 reference."""
    import tensorflow as tf

    rng = np.random.default_rng(vocab)
    logits = (rng.normal(size=(2, 4, vocab)) * scale).astype("float32")
    targets = TARGETS if vocab == V else rng.integers(1, vocab, size=(2, 4)) * (TARGETS != 0)
    variable = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(variable)
        loss = padded_cross_entropy(targets, variable, eps)
    np.testing.assert_allclose(tape.gradient(loss, variable).numpy(), _numpy_gradient(targets, logits, eps), atol=1e-7)
    wide = logits.astype(np.float64)
    log_probs = wide - (wide.max(-1, keepdims=True) + np.log(np.exp(wide - wide.max(-1, keepdims=True)).sum(-1, keepdims=True)))
    smoothed = np.full(wide.shape, eps / (vocab - 1))
    np.put_along_axis(smoothed, targets[..., None], 1 - eps, axis=-1)
    real = targets != 0
    expected = -(smoothed * log_probs).sum(-1)[real].mean()
    np.testing.assert_allclose(float(loss), expected, rtol=2e-6)
