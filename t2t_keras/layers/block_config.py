"""The configuration every encoder and decoder block of a stack shares."""

from __future__ import annotations

import dataclasses

NORM_TYPES = ("post", "pre")


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """What an `EncoderBlock` or `DecoderBlock` is made of.

    Attributes:
      num_heads, key_depth, value_depth: of every attention (h, d_k, d_v per head).
      filter_size: d_ff, the inner size of the position-wise FFN.
      dropout: P_drop on each sub-layer output, before the residual add.
      attention_dropout: on the attention weights (training only).
      relu_dropout: on the FFN's inner activations (training only).
      norm_type: "post" (LayerNorm after the residual add, as published) or "pre".
      layer_norm_epsilon: of every LayerNorm.
    """

    num_heads: int
    key_depth: int
    value_depth: int
    filter_size: int
    dropout: float = 0.0
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    norm_type: str = "post"
    layer_norm_epsilon: float = 1e-6

    def __post_init__(self):
        if self.norm_type not in NORM_TYPES:
            raise ValueError(f"BlockConfig: norm_type must be one of {NORM_TYPES}, got {self.norm_type!r}.")

    @classmethod
    def of(cls, config: "BlockConfig | dict") -> "BlockConfig":
        """`config` itself, or the BlockConfig of its dict (as `get_config` wrote it)."""
        return config if isinstance(config, cls) else cls(**config)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
