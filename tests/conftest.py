"""Makes the repository root importable in tests and keeps TensorFlow quiet."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
