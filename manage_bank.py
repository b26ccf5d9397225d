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

The base's place, where it moved: --init_checkpoint (or --bert_hub_module_handle),
--vocab_file and --bert_config_file, given before the command. The base is then
loaded and checked against the bank's fingerprint and config before the command
runs (into a new bank, against the adapter file's, and the new bank records
them instead of run_config.json's). No command needs the base: a bank lists,
adds and removes tasks wherever it is.
"""

import argparse
import sys
from typing import List, Optional

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import logging

from adapter_bert.bank import adapter_bank
from adapter_bert.bank import bank_tasks
from adapter_bert.bank import listing
from adapter_bert.cli import renamed_flags
from adapter_bert import errors
from adapter_bert.storage import path_checks

PROG = "manage_bank.py"


# The flags of the base's place (path_checks kinds; None: a hub handle).
_BASE_FLAGS = {"init_checkpoint": path_checks.CHECKPOINT, "bert_hub_module_handle": None,
               "vocab_file": path_checks.INPUT_FILE,
               "bert_config_file": path_checks.INPUT_FILE}


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog=PROG,
      description="Tasks of an adapter bank: adapter-only weights over one frozen BERT.")
  renamed_flags.add_renamed_argument(
      parser, "adapter_bank", "bank", required=True, metavar="DIR",
      help="The bank directory, as run_classifier.py's --adapter_bank (--bank: deprecated).")
  sources = parser.add_mutually_exclusive_group()
  sources.add_argument("--init_checkpoint", metavar="PATH",
                       help="The base checkpoint, where it moved (checked: the bank's "
                       "fingerprint).")
  sources.add_argument("--bert_hub_module_handle", metavar="HANDLE",
                       help="The base's TF Hub encoder, where it moved (checked as "
                       "--init_checkpoint).")
  parser.add_argument("--vocab_file", metavar="FILE", help="The base's vocabulary, where "
                      "it moved.")
  parser.add_argument("--bert_config_file", metavar="FILE", help="The base's "
                      "bert_config.json, where it moved (checked: the bank's config).")
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
  for name, kind in _BASE_FLAGS.items():
    value = getattr(args, name)
    if value and not (kind is None and value.startswith(("http://", "https://"))):
      path_checks.check(value, kind or path_checks.INPUT_DIR, f"flag --{name}={value}")
  # A new bank's base where the flags give it (None: an existing bank, or no flags).
  new_base = None
  if any(getattr(args, name) for name in _BASE_FLAGS):
    new_base = _check_given_base(args, bank_dir)
  if args.command == "list":
    print("\n".join(listing.list_bank(bank_dir)))
  elif args.command == "add":
    adapter_bank.check_task_name(args.task)
    # A new bank is created only once the file is checked: a refusal leaves none.
    if new_base is None and not adapter_bank.find_bank(bank_dir):
      new_base = adapter_bank.base_from_run(args.adapter_model)
    print(adapter_bank.add_task(bank_dir, args.task, args.adapter_model, new_base))
  else:
    adapter_bank.remove_task(bank_dir, args.task)


def _check_given_base(args, bank_dir: str) -> Optional[adapter_bank.BankBase]:
  """Loads the base the flags give and checks it against the bank's or, `add` into a
  new bank, the adapter file's; returns that new bank's base, at the places given."""
  bank = adapter_bank.find_bank(bank_dir)
  new_base = None
  if bank is None:
    if args.command != "add":
      adapter_bank.open_bank(bank_dir)  # Refuses: no bank here.
    run = adapter_bank.base_from_run(args.adapter_model)
    weights = (args.init_checkpoint, args.bert_hub_module_handle)
    if not any(weights):
      weights = (run.init_checkpoint, run.bert_hub_module_handle)
    bank = new_base = adapter_bank.BankBase.of_run(
        run.fingerprint, run.bert_config, *weights, args.vocab_file or run.vocab_file,
        run.do_lower_case)
  base = bank_tasks.read_base_weights(bank_dir, bank, args.init_checkpoint,
                                      args.bert_hub_module_handle, args.vocab_file,
                                      args.bert_config_file)
  logging.info("The base given (%s) is adapter bank %s's", base.source, bank_dir)
  return new_base


if __name__ == "__main__":
  errors.exit_on_user_error(main)(None)
