"""Writing files safely on any tf.io.gfile path (local, gs://, ram://).

  file_io      outputs that appear whole or not at all: temporary sibling, then rename;
               a directory replaces only its writer's files, the user's others kept
  path_checks  a user's path refused up front if it cannot be what it must be
               (file or directory, present, writable, reachable within a bound), and
               a non-empty output directory without --overwrite (check_output_dir)
  renamed_keys recorded settings renamed since: older runs' files read under the
               current names
"""
