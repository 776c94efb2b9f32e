"""The data path: text files, SentencePiece vocabularies, TFRecord shards, tf.data batches."""
