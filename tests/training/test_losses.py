import numpy as np
import pytest

from t2t_keras.training.losses import loss_sum_and_weight, padded_cross_entropy, smoothed_cross_entropy

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
