"""A TSV file read as rows that remember their file and line, and the checks of them:
a row's width, a header's columns found by name. Every error names the file and
its 1-based line, as an editor shows it.

  read_tsv       the rows of a file (tf.io.gfile: local, gs://, ram://)
  TsvLine        one row, with its path and line number
  fields         a row's columns by position, or an error naming file and line
  check_width    a row of the header's width (an extra tab shifts every column)
  find_columns   a header's columns by name: the one reading of a header
  TsvFormatError the error, naming file and line
"""

import csv
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

from adapter_bert import errors


class TsvFormatError(errors.UserError):
  """A TSV file does not have the layout its task expects."""

  def __init__(self, message: str, line: Optional["TsvLine"] = None, path: Optional[str] = None):
    if line is not None:
      super().__init__(message, line.path, line.line_number)
    else:
      super().__init__(message, path)


class TsvLine(list):
  """One TSV row (a list of fields) that remembers its file and 1-based line."""

  def __init__(self, values, path, line_number):
    super().__init__(values)
    self.path = path
    self.line_number = line_number

  @property
  def where(self) -> str:
    return f"{self.path}:{self.line_number}"


def read_tsv(input_file: str, quotechar: Optional[str] = None) -> List[TsvLine]:
  """Reads a tab-separated file through tf.io.gfile (local, gs://, ram://).

  With quotechar None (the original's default) quoting is off, so a field such
  as `"Fine," she said` keeps its quotes: GLUE's files are not CSV-quoted.

  Raises:
    errors.UserError: naming the file, if it does not exist or cannot be read.
    TsvFormatError: naming file and line, for undecodable or unreadable rows.
  """
  if not tf.io.gfile.exists(input_file):
    raise errors.UserError("TSV file not found", input_file)
  quoting = dict(quoting=csv.QUOTE_NONE) if quotechar is None else dict(quotechar=quotechar)
  lines = []
  reader = None
  try:
    with tf.io.gfile.GFile(input_file, "r") as f:
      reader = csv.reader(f, delimiter="\t", **quoting)
      for row in reader:
        lines.append(TsvLine(row, input_file, reader.line_num))
  except csv.Error as e:  # line_num already counts the offending line
    raise TsvFormatError(f"cannot read row: {e}", TsvLine([], input_file, reader.line_num)) from e
  except UnicodeDecodeError as e:  # raised before the line is counted
    raise TsvFormatError(
        f"not UTF-8 text ({e.reason}, byte 0x{e.object[e.start]:02x}): save the file as UTF-8",
        TsvLine([], input_file, reader.line_num + 1)) from e
  except tf.errors.OpError as e:  # a directory, no permission
    raise errors.UserError(f"cannot read: {e.message}", input_file) from e
  return lines


def fields(line: TsvLine, *indices: int) -> List[str]:
  """Returns `line[i]` for each index, or raises an error naming file and line."""
  need = max(i + 1 if i >= 0 else -i for i in indices)
  if len(line) < need:
    raise TsvFormatError(
        f"row has {len(line)} tab-separated column(s), expected at least {need}", line)
  return [line[i] for i in indices]


def check_width(line: TsvLine, width: int, header: Optional[TsvLine] = None) -> None:
  """Refuses a row with more or fewer columns than `width`.

  An extra column is as much an error as a missing one: it usually means a
  tab inside a text, which shifts every later column (a text read as label).
  """
  if len(line) != width:
    of = f"the header (line {header.line_number}) has" if header is not None else "expected"
    raise TsvFormatError(f"row has {len(line)} tab-separated column(s), {of} {width}", line)


def find_columns(header: TsvLine, wanted: Sequence[Tuple[Optional[str], str]]
                 ) -> List[Optional[int]]:
  """The positions of the columns named in `wanted` ((name or None, what the task
  reads there) each) in a header row: the one reading of a header by name.

  Raises:
    TsvFormatError: naming the file, the header's line and the missing column:
      a file of another layout, which reading by position would take in silence.
  """
  names = [name.lstrip("\ufeff").strip() for name in header]  # A BOM sticks to the first.
  indices = []
  for name, role in wanted:
    if name is not None and name not in names:
      raise TsvFormatError(f"no column named {name!r} (the {role} this task reads); the "
                           f"header has {names}: a file of another layout or task", header)
    indices.append(None if name is None else names.index(name))
  return indices


def no_examples(path: str, why: str = "") -> TsvFormatError:
  """The error for a split that yields nothing to train, evaluate or predict on."""
  return TsvFormatError(f"no examples in this file{why}", path=path)
