"""Command-line programs: thin absl mains over library functions."""

import os

from t2t_keras.system import keep_freed_memory, keep_kernels_for_every_shape

# Quiet TensorFlow's C++ INFO/WARNING start-up lines in the CLIs (errors still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keep_freed_memory()
keep_kernels_for_every_shape()
