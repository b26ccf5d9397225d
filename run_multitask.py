r"""Several classification tasks at once on one frozen BERT: HyperFormer++ or shared adapters.

run_classifier.py's flags, with the task flags as lists (task i is
--task_name[i] on --data_dir[i]), plus the multi-task ones:

  python run_multitask.py --multitask_adapters=hyperformer \
    --task_name=tsv,tsv,tsv,tsv \
    --data_dir=data/wordnet/wordnet_lexname,data/wordnet/wordnet_pos,... \
    --text_a_column=sentence,sentence,gloss,word_a \
    --text_b_column=,,example,word_b \
    --do_train --do_eval --vocab_file=... --bert_config_file=... \
    --init_checkpoint=... --adapter_size=64 --learning_rate=1e-3 \
    --num_train_epochs=1 --output_dir=/tmp/multitask

--multitask_adapters=hyperformer: one hypernetwork generates every task's adapters
(Mahabadi et al., ACL 2021, HyperFormer++; multitask/hypernetwork.py); the
encoder stays frozen (--train_mode=head, the default; layer_norm also trains
BERT's LayerNorms, as the authors' --unfreeze_layer_norms).
--multitask_adapters=shared: one set of Houlsby adapters for all tasks
(--train_mode=adapters: they, the LayerNorms and the heads train).
Each task has its own head either way. Every training batch is one task's,
task t drawn with probability proportional to n_t^(1/--sampling_temperature);
an epoch is the sum of the tasks' training examples.

Files in output_dir: run_config.json, model.ckpt-STEP.* (trained variables
only), adapter_model/ (them alone: the hypernetwork or the shared adapters,
the task embeddings and the heads), eval_results.txt (every task's metrics,
prefixed with its name); per task, TASK/{train,eval,predict}.tf_record,
TASK/eval_results.txt, TASK/test_results.tsv, TASK/eval (TensorBoard) and
with --eval_predictions TASK/eval_predictions.tsv.
`python export_savedmodel.py --multitask_run=OUTPUT_DIR` serves the tasks from
raw text.
"""

import sys

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging

from adapter_bert.cli import flag_checks
from adapter_bert.cli import multitask_flags
from adapter_bert.cli import parse
from adapter_bert import errors
from adapter_bert.runtime import task_run
from adapter_bert.tasks import registry


def define_flags(flag_values=flags.FLAGS):
  multitask_flags.define_multitask_flags(flag_values)


def main(argv, flag_values=None):
  del argv
  logging.set_verbosity(logging.INFO)
  task_run.run(registry.task_for(parse.multitask(flag_values or flags.FLAGS)))


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
