"""Boolean attention masks, True = may attend, shaped to broadcast to [batch, queries, keys]."""

from keras import ops

from t2t_keras.token_ids import PAD_ID


def padding_mask(ids, pad_id: int = PAD_ID):
    """[B, L] bool: True where `ids` is a real token, False on padding."""
    return ops.not_equal(ids, pad_id)


def key_padding_mask(ids, pad_id: int = PAD_ID):
    """[B, 1, L] bool: every query may attend to the real (non-padding) keys."""
    return ops.expand_dims(padding_mask(ids, pad_id), axis=1)


def causal_mask(length):
    """[1, L, L] bool: query i may attend to keys 0..i."""
    positions = ops.arange(length)
    return ops.expand_dims(positions[:, None] >= positions[None, :], axis=0)

