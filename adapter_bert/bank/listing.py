"""What manage_bank.py `list` prints of an adapter bank: one row per task (TaskInfo,
read from the task's header: no weights are loaded), then the parameter
accounting of the paper (base parameters P, what the tasks add, the total as a
multiple of P: accounting_lines)."""

import dataclasses
import posixpath
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert import errors
from adapter_bert.model.modeling import variable_role
from adapter_bert.storage import file_io


@dataclasses.dataclass(frozen=True)
class TaskInfo:
  """One task of a bank, read from its header (no weights are loaded)."""
  name: str
  path: str  # tasks/<name>
  header: dict
  shapes: Dict[str, tuple]  # trained variable -> shape, from the safetensors header
  num_bytes: int  # of both files

  @property
  def metadata(self) -> dict:
    return self.header.get("metadata") or {}

  @property
  def adapter_size(self) -> int:
    return int((self.header.get("adapter_config") or {}).get("size", 0))

  def parameters(self, role: Optional[str] = None) -> int:
    """Trained parameters: all, or those of one variable role (adapter, layer_norm, head)."""
    return sum(_product(shape) for name, shape in self.shapes.items()
               if role is None or variable_role(name) == role)



def read_task_info(bank_dir: str, task: str) -> TaskInfo:
  """A task's header, variable shapes and size on disk (weights are not read)."""
  path = adapter_bank.task_dir(bank_dir, task)
  file_io.recover_directory(path)
  weights = posixpath.join(path, adapter_weights.WEIGHTS_FILE)
  if not tf.io.gfile.exists(weights):
    raise errors.UserError(
        f"task {task!r} of adapter bank {bank_dir} has no {adapter_weights.WEIGHTS_FILE} "
        f"(remove it with python manage_bank.py --adapter_bank={bank_dir} "
        f"remove {task})", path)
  header, shapes = adapter_weights.read_adapter_shapes(weights)
  num_bytes = sum(tf.io.gfile.stat(posixpath.join(path, n)).length
                  for n in tf.io.gfile.listdir(path)
                  if not tf.io.gfile.isdir(posixpath.join(path, n)))
  return TaskInfo(task, path, header, shapes, num_bytes)


def list_tasks(bank_dir: str) -> List[TaskInfo]:
  adapter_bank.open_bank(bank_dir)
  return [read_task_info(bank_dir, name) for name in adapter_bank.task_names(bank_dir)]


def _product(shape) -> int:
  result = 1
  for d in shape:
    result *= int(d)
  return result


_COLUMNS = ("task", "labels", "max_seq_length", "adapter_size", "trained_params", "bytes",
            "global_step")
_MAX_LABELS_WIDTH = 40


def _labels_cell(metadata: dict) -> str:
  if metadata.get("is_regression"):
    return "regression"
  labels = metadata.get("labels") or []
  text = ",".join(labels)
  return text if len(text) <= _MAX_LABELS_WIDTH else f"{len(labels)} labels"


def table_rows(tasks) -> List[List[str]]:
  rows = []
  for t in tasks:
    m = t.metadata
    rows.append([t.name, _labels_cell(m), str(m.get("max_seq_length", "?")),
                 str(t.adapter_size), str(t.parameters()), str(t.num_bytes),
                 str(m.get("global_step", "?"))])
  return rows


def format_table(rows: List[List[str]]) -> List[str]:
  """Left-aligned text columns, right-aligned numbers, two spaces apart."""
  rows = [list(_COLUMNS)] + rows
  widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
  lines = []
  for row in rows:
    cells = [c.ljust(w) if i < 2 else c.rjust(w)
             for i, (c, w) in enumerate(zip(row, widths))]
    lines.append("  ".join(cells).rstrip())
  return lines


def list_bank(bank_dir: str) -> List[str]:
  """The lines `list` prints: the table, a blank line, the accounting."""
  base = adapter_bank.open_bank(bank_dir)
  tasks = list_tasks(bank_dir)
  acc = accounting(bank_dir, tasks)
  return (format_table(table_rows(tasks)) + [""]
          + accounting_lines(acc, base.fingerprint))


# --- accounting in the paper's terms -----------------------------------------

def base_parameter_count(bert_config: dict) -> int:
  """P: every weight of the encoder, pooler included (no adapters, no task head).

  BERT-base (V 30522, H 768, L 12, I 3072, 512 positions, 2 token types):
  23,837,184 embeddings + 12 x 7,087,872 per layer + 590,592 pooler = 109,482,240.
  """
  c = bert_config
  h, i = c["hidden_size"], c["intermediate_size"]
  embeddings = (c["vocab_size"] + c["max_position_embeddings"] + c["type_vocab_size"]) * h
  embeddings += 2 * h  # LayerNorm gamma, beta
  attention = 4 * (h * h + h)  # query, key, value, output dense
  feed_forward = (h * i + i) + (i * h + h)
  layer = attention + feed_forward + 2 * 2 * h  # two LayerNorms
  pooler = h * h + h
  return embeddings + c["num_hidden_layers"] * layer + pooler


@dataclasses.dataclass(frozen=True)
class Accounting:
  """Parameters of a bank as the paper counts them (Houlsby et al. 2019, Table 1)."""
  base_parameters: int  # P
  tasks: Sequence[TaskInfo]

  @property
  def trained_parameters(self) -> int:
    return sum(t.parameters() for t in self.tasks)

  @property
  def total_parameters(self) -> int:
    return self.base_parameters + self.trained_parameters

  @property
  def multiple_of_base(self) -> float:
    """(P + sum of the tasks' trained parameters) / P: 1.3x for the paper's nine GLUE tasks."""
    return self.total_parameters / self.base_parameters

  @property
  def num_bytes(self) -> int:
    return sum(t.num_bytes for t in self.tasks)


def accounting(bank_dir: str, tasks: Optional[Sequence[TaskInfo]] = None) -> Accounting:
  bank = adapter_bank.open_bank(bank_dir)
  return Accounting(base_parameter_count(bank.bert_config),
                    list_tasks(bank_dir) if tasks is None else list(tasks))


def accounting_lines(acc: Accounting, fingerprint: str = "") -> List[str]:
  """The summary that `python manage_bank.py list` prints under its table (list_bank above)."""
  n, p = len(acc.tasks), acc.base_parameters
  base = f"Base parameters P = {p} (encoder with pooler)"
  if fingerprint:
    base += f", fingerprint {fingerprint[:16]}..."
  return [
      base,
      f"Trained parameters of {n} task{'s' if n != 1 else ''} = {acc.trained_parameters} "
      f"({100 * acc.trained_parameters / p:.2f}% of P), {acc.num_bytes} bytes",
      f"Total parameters = {acc.total_parameters} = {acc.multiple_of_base:.3f}x P "
      f"(full fine-tuning: {n}x P)",
  ]
