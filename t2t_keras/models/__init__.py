"""Models, registered by name (`registry.model("transformer")`)."""

from t2t_keras.models.transformer import DecoderCache, DecoderMemory, Encoded, Transformer

__all__ = ["DecoderCache", "DecoderMemory", "Encoded", "Transformer"]
