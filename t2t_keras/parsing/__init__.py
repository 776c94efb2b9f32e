"""The parsing side of the model garden: trees as token sequences and back."""
