"""Reading the user's input files: one place that turns a missing, unreadable,
non-UTF-8, empty or malformed file into an errors.UserError naming the file
(and the line), instead of a traceback from deep inside a parser.

Through tf.io.gfile, so gs:// and ram:// paths work like local ones.
"""

import json

import tensorflow as tf

from adapter_bert import errors


def read_text(path: str, what: str = "file", encoding: str = "utf-8-sig") -> str:
  """The text of `path`; `what` names the file in the messages ("vocabulary file").

  The default encoding drops a leading byte-order mark, as editors on Windows
  write one.
  """
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      data = f.read()
  except tf.errors.NotFoundError as e:
    raise errors.UserError(f"{what} not found", path) from e
  except tf.errors.OpError as e:  # A directory, no permission.
    raise errors.UserError(f"cannot read {what}: {e.message}", path) from e
  try:
    return data.decode(encoding)
  except UnicodeDecodeError as e:  # e.object: the bytes after any BOM.
    raise errors.UserError(
        f"not UTF-8 text ({e.reason}, byte 0x{e.object[e.start]:02x}): save the file as "
        f"UTF-8", path, e.object.count(b"\n", 0, e.start) + 1) from e


def read_json(path: str):
  """The JSON value in `path` (configs, SQuAD data, predictions)."""
  text = read_text(path)
  if not text.strip():
    raise errors.UserError("empty file, expected JSON", path)
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise errors.UserError(f"malformed JSON at column {e.colno}: {e.msg}", path,
                           e.lineno) from e
