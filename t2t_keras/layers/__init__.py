"""Keras 3 layers of the Transformer, one concept per module."""

from t2t_keras.layers.attention import MultiHeadAttention
from t2t_keras.layers.block_config import BlockConfig
from t2t_keras.layers.decoder_block import DecoderBlock
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.embedding import SharedEmbedding
from t2t_keras.layers.encoder_block import EncoderBlock
from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.normalization import LayerNorm
from t2t_keras.layers.position import CopyPositionEncoding, LearnedPositionEmbedding, SinusoidalPositionEncoding
from t2t_keras.layers.residual import ResidualNorm

__all__ = [
    "BlockConfig",
    "CopyPositionEncoding",
    "DecoderBlock",
    "Dense",
    "Dropout",
    "EncoderBlock",
    "FeedForward",
    "LayerNorm",
    "LearnedPositionEmbedding",
    "MultiHeadAttention",
    "ResidualNorm",
    "SharedEmbedding",
    "SinusoidalPositionEncoding",
]
