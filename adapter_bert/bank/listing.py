"""What manage_bank.py `list` prints of an adapter bank: one row per task, then the
parameter accounting of the paper (base parameters P, what the tasks add, the
total as a multiple of P; adapter_bank.accounting_lines)."""

from typing import List

from adapter_bert.bank import adapter_bank

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
  tasks = adapter_bank.list_tasks(bank_dir)
  acc = adapter_bank.accounting(bank_dir, tasks)
  return (format_table(table_rows(tasks)) + [""]
          + adapter_bank.accounting_lines(acc, base.fingerprint))
