"""Writing files safely on any tf.io.gfile path (local, gs://, ram://).

  file_io  outputs that appear whole or not at all: temporary sibling, then rename
"""
