r"""Lists, adds and removes the tasks of an adapter bank (bank/adapter_bank.py).

  python -m adapter_bert.bank.manage --adapter_bank=DIR list
  python -m adapter_bert.bank.manage --adapter_bank=DIR add TASK RUN_OUTPUT_DIR/adapter_model
  python -m adapter_bert.bank.manage --adapter_bank=DIR remove TASK

`list` prints one row per task and the parameter accounting of the paper
(base parameters P, what the tasks add, the total as a multiple of P).
`add` creates the bank if there is none, from the run's run_config.json beside
its adapter_model/ (where its base came from). A mistake in the bank or the
files is one `ERROR:` line on stderr, exit status 2; a usage mistake prints the
usage (argparse), status 2.
"""

import argparse
import json
import posixpath
import sys
from typing import List, Optional

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

import tensorflow as tf
from absl import logging

from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.cli import renamed_flags
from adapter_bert import errors
from adapter_bert.storage import path_checks

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


def base_from_run(adapter_model: str) -> adapter_bank.BankBase:
  """The base of a new bank, from a run's adapter file and the run_config.json beside it."""
  weights, header, _ = adapter_weights.read_adapter_file(adapter_model)
  run_dir = posixpath.dirname(posixpath.dirname(weights))
  config_path = posixpath.join(run_dir, "run_config.json")
  if not tf.io.gfile.exists(config_path):
    raise errors.UserError(
        f"cannot create a bank from {adapter_model}: no run_config.json in {run_dir or '.'} "
        f"says which base it was trained on (create the bank by training with "
        f"run_classifier.py --adapter_bank)")
  with tf.io.gfile.GFile(config_path, "r") as f:
    config = json.loads(f.read())
  return adapter_bank.BankBase(
      fingerprint=header["base_fingerprint"], bert_config=header.get("bert_config"),
      init_checkpoint=config.get("init_checkpoint"),
      bert_hub_module_handle=config.get("bert_hub_module_handle"),
      vocab_file=config.get("vocab_file"),
      do_lower_case=bool(config.get("do_lower_case",
                                    header.get("metadata", {}).get("do_lower_case"))))


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m adapter_bert.bank.manage",
      description="Tasks of an adapter bank: adapter-only weights over one frozen BERT.")
  renamed_flags.add_renamed_argument(
      parser, "adapter_bank", "bank", required=True, metavar="DIR",
      help="The bank directory, as run_classifier.py's --adapter_bank (--bank: deprecated).")
  commands = parser.add_subparsers(dest="command", required=True)
  commands.add_parser("list", help="One row per task, then the parameter accounting.")
  add = commands.add_parser("add", help="Add (or replace) a task from a run's adapter_model/.")
  add.add_argument("task", help="Task name in the bank: " + adapter_bank.TASK_NAMES_ALLOWED)
  add.add_argument("adapter_model", help="A run's OUTPUT_DIR/adapter_model.")
  remove = commands.add_parser("remove", help="Delete a task's files.")
  remove.add_argument("task")
  return parser


def main(argv: Optional[List[str]] = None) -> None:
  """Runs a command on argv (default sys.argv[1:]); a UserError propagates."""
  args = _parser().parse_args(argv)
  logging.set_verbosity(logging.INFO)
  # `add` creates the bank; the other commands read it.
  bank_dir = args.adapter_bank
  path_checks.check(bank_dir, path_checks.OUTPUT_DIR if args.command == "add"
                    else path_checks.INPUT_DIR, f"flag --adapter_bank={bank_dir}")
  if args.command == "add":
    path_checks.check(args.adapter_model, path_checks.INPUT_FILE_OR_DIR,
                      f"argument ADAPTER_MODEL {args.adapter_model}")
  if args.command == "list":
    print("\n".join(list_bank(bank_dir)))
  elif args.command == "add":
    adapter_bank.check_task_name(args.task)
    # A new bank is created only once the file is checked: a refusal leaves none.
    new_base = None if adapter_bank.find_bank(bank_dir) else base_from_run(args.adapter_model)
    print(adapter_bank.add_task(bank_dir, args.task, args.adapter_model, new_base))
  else:
    adapter_bank.remove_task(bank_dir, args.task)


if __name__ == "__main__":
  errors.exit_on_user_error(main)(None)
