"""Command-line programs: thin absl mains over library functions."""

import os

# Quiet TensorFlow's C++ INFO/WARNING start-up lines in the CLIs (errors still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
