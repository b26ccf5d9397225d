"""What the tests of export_savedmodel.py share: its main run as its entry point runs
it, for the one ERROR line a user error ends with (export_error); and a server's
view of a bucket of SavedModel versions while an export moves one in (Poller,
files_in), for the tests that no version is ever seen half-written."""

import posixpath

from absl import flags
import pytest
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.serving import export
import export_savedmodel


def export_error(capsys, **flag_values):
  """Runs the command's main as its entry point does; returns the ERROR line."""
  fv = flags.FlagValues()
  export_savedmodel.define_flags(fv)
  fv(["export"] + [f"--{k}={v}" for k, v in flag_values.items()])
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(lambda argv: export_savedmodel.main(argv, fv))(["export"])
  assert exit_info.value.code == errors.USER_ERROR_EXIT_STATUS
  lines = capsys.readouterr().err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("ERROR: "), lines
  return lines[0]


def files_in(directory):
  """The files under `directory`, relative to it (ram:// lists prefix-sharing names too)."""
  return {posixpath.relpath(posixpath.join(d, n), directory)
          for d, _, names in tf.io.gfile.walk(directory) for n in names
          if tf.io.gfile.exists(posixpath.join(d, n))}


class Poller:
  """Looks at `base`'s numeric versions after every tf.io.gfile.rename, as a server would."""

  def __init__(self, base, monkeypatch):
    self.base, self.seen = base, []
    rename = tf.io.gfile.rename

    def renamed(src, dst, overwrite=False):
      rename(src, dst, overwrite)
      self.poll()

    monkeypatch.setattr(tf.io.gfile, "rename", renamed)

  def poll(self):
    if not tf.io.gfile.isdir(self.base):
      return
    for name in tf.io.gfile.listdir(self.base):
      version = posixpath.join(self.base, name.rstrip("/"))
      if (name.rstrip("/").isdigit()
          and tf.io.gfile.exists(posixpath.join(version, export.SAVED_MODEL_FILE))):
        self.seen.append(files_in(version))
