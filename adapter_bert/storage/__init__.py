"""Writing files safely on any tf.io.gfile path (local, gs://, ram://).

  file_io      outputs that appear whole or not at all: temporary sibling, then rename
  path_checks  a user's path refused up front if it cannot be what it must be
               (file or directory, present, writable, reachable within a bound)
  renamed_keys recorded settings renamed since: older runs' files read under the
               current names
"""
