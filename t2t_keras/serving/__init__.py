"""Export for TensorFlow Serving: SavedModels with text-to-text signatures and warmup requests."""
