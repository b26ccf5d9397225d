r"""BERT with adapters on SQuAD v1.1 / v2.0: train, predict, score.

The flags and output files of google-research/bert `run_squad.py`, plus the
adapter flags of run_classifier.py (cli/flags.py). E.g.

  python run_squad.py --vocab_file=$BERT/vocab.txt \
    --bert_config_file=$BERT/bert_config.json --init_checkpoint=$BERT/bert_model.ckpt \
    --do_train --train_file=train-v1.1.json --do_predict --predict_file=dev-v1.1.json \
    --learning_rate=1e-4 --num_train_epochs=2 --adapter_size=64 --output_dir=/tmp/squad

Writes to output_dir: run_config.json (bert, adapter and run settings),
train.tf_record / eval.tf_record (features), model.ckpt-N
(the last 5), adapter_model/ (adapter-only weights, after training),
predictions.json, nbest_predictions.json, null_odds.json (v2) and, when
--predict_file has answers, eval_results.json (the official metrics, then the
global_step and checkpoint_path of the weights that predicted).
"""

import sys

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging

from adapter_bert.cli import flag_checks
from adapter_bert.cli import squad_flags
from adapter_bert.cli import parse
from adapter_bert import errors
from adapter_bert.runtime import task_run
from adapter_bert.tasks import registry


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The original run_squad.py flags (same names and defaults) + the adapter flags."""
  squad_flags.define_squad_flags(flag_values)


def main(argv, flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Runs what the flags ask for (returns None: app.run exits with main's result)."""
  del argv
  logging.set_verbosity(logging.INFO)
  task_run.run(registry.task_for(parse.squad(flag_values)))


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
