r"""BERT with adapters for sequence (pair) classification: GLUE tasks and your own TSV data.

The command line of google-research/bert `run_classifier.py` (same flags, same
defaults, same output files and log lines), plus adapter-bert's settings:

  python run_classifier.py --task_name=MRPC --do_train --do_eval \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=3e-4 --num_train_epochs=5 \
    --adapter_size=64 --output_dir=/tmp/mrpc_output/

Files in output_dir: run_config.json (bert, adapter and run settings),
{train,eval,predict}.tf_record (+ .meta.json), model.ckpt-STEP.*, checkpoint,
events for TensorBoard (training in output_dir, eval in output_dir/eval),
adapter_model/ (the task's adapter-only weights, after training),
eval_results.txt and test_results.tsv. With --adapter_bank the adapter-only
weights also go to (or, without --do_train, come from) an adapter bank:
BANK/tasks/<--bank_task> (bank/adapter_bank.py).
"""

import sys

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging

from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import parse
from adapter_bert import errors
from adapter_bert.runtime import task_run
from adapter_bert.tasks import registry


def define_flags(flag_values=flags.FLAGS):
  """Defines the flags; called by `__main__` (and by tests on their own FlagValues)
  rather than at import, so other scripts' same-named flags never clash."""
  cli_flags.define_classifier_flags(flag_values)


def main(argv, flag_values=None):
  del argv
  logging.set_verbosity(logging.INFO)
  task_run.run(registry.task_for(parse.classifier(flag_values or flags.FLAGS)))


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
