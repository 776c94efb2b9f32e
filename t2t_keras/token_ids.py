"""The reserved token ids every vocabulary, model, loss and search agrees on.

tensor2tensor's convention: padding and the decoder's start symbol share id 0, so a
target shifted right by one position starts with padding; id 1 ends every sequence.
"""

PAD_ID = 0  # padding: masked in attention, ignored by the loss and the metrics
START_ID = PAD_ID  # the decoder's input at position 0 (teacher forcing and search)
EOS_ID = 1  # end of sequence: appended to every source and target, and where search stops
UNK_ID = 2  # unknown piece: never produced, SentencePiece's byte fallback spells the unknown
