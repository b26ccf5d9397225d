"""Tables (lists of flat rows) as JSON and CSV, written whole or not at all, through
tf.io.gfile (so a bucket path works)."""

import csv
import io
import json
import math
from typing import Dict, List, Mapping, Optional, Sequence

import tensorflow as tf

from adapter_bert.storage import file_io


def columns_of(rows: Sequence[Mapping[str, object]], first: Sequence[str] = ()) -> List[str]:
  """`first` (those present), then every other key in the order rows bring them."""
  present = {k for row in rows for k in row}
  columns = [c for c in dict.fromkeys(first) if c in present]
  for row in rows:
    columns += [k for k in row if k not in columns]
  return columns


def _cell(value) -> str:
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return ""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, float):
    return repr(value)
  if isinstance(value, (list, tuple)):
    return ";".join(_cell(v) for v in value)
  if isinstance(value, dict):
    return json.dumps(value, sort_keys=True)
  return str(value)


def csv_text(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
  out = io.StringIO()
  writer = csv.writer(out, lineterminator="\n")
  writer.writerow(columns)
  for row in rows:
    writer.writerow([_cell(row.get(c)) for c in columns])
  return out.getvalue()


def json_text(data) -> str:
  # NaN is not JSON: a metric that is undefined (e.g. a correlation of constant
  # predictions) is written as null.
  def clean(value):
    if isinstance(value, float) and not math.isfinite(value):
      return None
    if isinstance(value, dict):
      return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
      return [clean(v) for v in value]
    return value
  return json.dumps(clean(data), indent=2) + "\n"


def write_json(path: str, data) -> None:
  file_io.atomic_write(path, json_text(data))


def write_table(json_path: str, csv_path: Optional[str], rows: Sequence[Dict[str, object]],
                columns: Sequence[str], **extra) -> None:
  """{"columns", "rows", **extra} to `json_path`, the rows to `csv_path`."""
  write_json(json_path, {**extra, "columns": list(columns), "rows": list(rows)})
  if csv_path:
    file_io.atomic_write(csv_path, csv_text(rows, columns))


def read_json(path: str):
  """The JSON value in `path`, through tf.io.gfile.

  Raises:
    OSError: if it cannot be read (missing, say), as Python's open would.
    ValueError: if it is not JSON (a file cut short by a crash, say).
  """
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      data = f.read()
  except tf.errors.NotFoundError as e:
    raise FileNotFoundError(f"{path}: {e.message}") from e
  except tf.errors.OpError as e:
    raise OSError(f"{path}: {e.message}") from e
  return json.loads(data)
