r"""Lists, adds and removes the tasks of an adapter bank (adapter_bert/bank/).

  python manage_bank.py --adapter_bank=DIR list
  python manage_bank.py --adapter_bank=DIR add TASK RUN_OUTPUT_DIR/adapter_model
  python manage_bank.py --adapter_bank=DIR remove TASK

`list` prints one row per task and the parameter accounting of the paper
(base parameters P, what the tasks add, the total as a multiple of P:
bank/listing.py). `add` creates the bank if there is none, from the run's
run_config.json beside its adapter_model/ (where its base came from:
bank/adapter_bank.base_from_run). A mistake in the bank or the files is one
`ERROR:` line on stderr, exit status 2; a usage mistake prints the usage
(argparse), status 2.
"""

import argparse
import sys
from typing import List, Optional

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import logging

from adapter_bert.bank import adapter_bank
from adapter_bert.bank import listing
from adapter_bert.cli import renamed_flags
from adapter_bert import errors
from adapter_bert.storage import path_checks

PROG = "manage_bank.py"


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog=PROG,
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
    print("\n".join(listing.list_bank(bank_dir)))
  elif args.command == "add":
    adapter_bank.check_task_name(args.task)
    # A new bank is created only once the file is checked: a refusal leaves none.
    new_base = (None if adapter_bank.find_bank(bank_dir)
                else adapter_bank.base_from_run(args.adapter_model))
    print(adapter_bank.add_task(bank_dir, args.task, args.adapter_model, new_base))
  else:
    adapter_bank.remove_task(bank_dir, args.task)


if __name__ == "__main__":
  errors.exit_on_user_error(main)(None)
