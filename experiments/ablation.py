r"""Adapter ablation (Houlsby et al. 2019, Figure 6): a trained model without some layers' adapters.

A trained adapter model is evaluated on the dev set as it is, and once for
every span of layers 0 <= i <= j < L with the adapters of layers i..j removed
(each skipped, i.e. the identity, exactly what a layer built without adapters
computes); nothing is retrained, the LayerNorms and the head stay as trained.
The paper reports that removing one layer's adapters costs little, removing
all of them a lot, and that the lower layers' adapters matter less than the
higher ones'.

The flags are run_classifier.py's for an eval (--do_eval is the default): the
model comes from the latest checkpoint in --output_dir, or from
--init_checkpoint with --adapter_checkpoint (or --adapter_bank/--bank_task) on
top, with the same --adapter_size and --adapter_placement it was trained with:

  python -m experiments.ablation --task_name=MRPC --data_dir=$GLUE_DIR/MRPC \
    --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --output_dir=/tmp/mrpc_output/

Files in --ablation_dir (default OUTPUT_DIR/ablation), each written whole or
not at all:
  ablation.json          every metric of the full model and of each span, and
                         per metric the L x L matrix [i][j] (null for j < i)
  ablation.csv           one row per span (the full model first, no layers)
  ablation_heatmap.png   the matrix of --ablation_metric
  ablation_heatmap.csv   the values drawn there: row i, column j
  eval.tf_record         the dev set's features (reused when unchanged); tf.data
                         reads it, so on a TPU --ablation_dir is a bucket path
                         as --output_dir is (the TPU host reads only buckets)
L(L+1)/2 + 1 evaluations: 79 for BERT-base, 22 for a 6-layer model.
"""

import contextlib
import csv
import dataclasses
import io
import json
import math
import posixpath
import sys
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.classification import task as classifier_task
from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import prediction
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import startup
from adapter_bert.storage import file_io
from adapter_bert.storage import path_checks
from adapter_bert import tokenization

RESULTS_FILE = "ablation.json"
TABLE_FILE = "ablation.csv"
HEATMAP_FILE = "ablation_heatmap.png"
HEATMAP_DATA_FILE = "ablation_heatmap.csv"

Span = Tuple[int, int]  # (first, last) layer whose adapters are removed, inclusive.


@contextlib.contextmanager
def adapters_removed(model, layers: Iterable[int]):
  """Within it, the adapters of Transformer layers `layers` (indices) are skipped.

  For the ablation of Houlsby et al. (2019, Figure 6): a skipped adapter is the
  identity, so the layer computes what it would without adapters; no weight
  changes. The switch is read when a call is traced, so the model's compiled
  prediction loops are dropped on the way in and out (a tf.function traced
  before would keep what it traced).

  Args:
    model: a task model of modeling.py or a BertEncoder.
  Raises:
    ValueError: a layer index the model does not have.
  """
  blocks = (model if isinstance(model, modeling.BertEncoder) else model.bert).transformer_layers
  layers = sorted(set(layers))
  bad = [i for i in layers if not 0 <= i < len(blocks)]
  if bad:
    raise ValueError(f"the model has layers 0..{len(blocks) - 1}, not layer "
                     f"{', '.join(map(str, bad))}")
  previous = [block.adapters_enabled for block in blocks]
  try:
    for i in layers:
      blocks[i].adapters_enabled = False
    prediction.forget_predict_functions(model)
    yield
  finally:
    for block, enabled in zip(blocks, previous):
      block.adapters_enabled = enabled
    prediction.forget_predict_functions(model)



def define_flags(flag_values=flags.FLAGS):
  """run_classifier.py's flags (an eval by default) and where the results go."""
  cli_flags.define_classifier_flags(flag_values)
  flag_values.set_default("do_eval", True)
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("ablation_dir", None, "Where the results go. Default: "
                      "OUTPUT_DIR/ablation.", **fv)
  flags.DEFINE_string("ablation_metric", None, "The eval metric of the heatmap (a key of "
                      "eval_results.txt). Default: eval_accuracy, eval_pearson for "
                      "regression.", **fv)
  flag_checks.check_flags_together(
      flag_values, ("do_train", "do_predict"),
      lambda do_train, do_predict: "the ablation evaluates a trained model on the dev set: "
      "train it with run_classifier.py; leave --do_train and --do_predict out"
      if do_train or do_predict else None)


def spans(num_layers: int) -> List[Span]:
  """Every span 0 <= i <= j < num_layers, by first then last layer."""
  return [(i, j) for i in range(num_layers) for j in range(i, num_layers)]


def sweep(evaluate: Callable[[Sequence[int]], Mapping[str, object]],
          num_layers: int) -> Dict[Span, Mapping[str, object]]:
  """The metrics with each span's adapters removed.

  Args:
    evaluate: the indices of the layers whose adapters are removed -> metrics.
  """
  results = {}
  all_spans = spans(num_layers)
  for n, (i, j) in enumerate(all_spans, 1):
    results[(i, j)] = evaluate(range(i, j + 1))
    logging.info("Ablation %d/%d: adapters of layers %d..%d removed: %s", n, len(all_spans),
                 i, j, ", ".join(f"{k} = {v}" for k, v in sorted(results[(i, j)].items())))
  return results


def _number(value):
  """A metric as JSON: ints as they are; floats as eval_results.txt prints them
  (float32, shortest digits); None where not finite (strict JSON has no NaN)."""
  if isinstance(value, (int, np.integer)):
    return int(value)
  value = float(str(np.float32(value)))
  return value if math.isfinite(value) else None


def summary(full: Mapping[str, object], by_span: Mapping[Span, Mapping[str, object]],
            num_layers: int, metric: str, **about) -> dict:
  """What ablation.json holds (module docstring); `about`: task, adapter config, step."""
  metrics = sorted(k for k in full if k != "global_step")
  matrices = {}
  for name in metrics:
    matrices[name] = [[_number(by_span[(i, j)][name]) if j >= i else None
                       for j in range(num_layers)] for i in range(num_layers)]
  return dict(about, metric=metric, num_layers=num_layers,
              full_model={k: _number(v) for k, v in sorted(full.items())},
              spans=[{"first_layer": i, "last_layer": j,
                      "metrics": {k: _number(by_span[(i, j)][k]) for k in metrics}}
                     for i, j in spans(num_layers)],
              matrices=matrices)


def _csv(rows) -> str:
  buffer = io.StringIO()
  csv.writer(buffer, lineterminator="\n").writerows(rows)
  return buffer.getvalue()


def _cell(value) -> str:
  return "" if value is None else repr(value)


def table_csv(result: dict) -> str:
  metrics = sorted(result["matrices"])
  rows = [["first_layer", "last_layer", "layers_removed"] + metrics,
          ["", "", 0] + [_cell(result["full_model"][k]) for k in metrics]]
  rows += [[s["first_layer"], s["last_layer"], s["last_layer"] - s["first_layer"] + 1]
           + [_cell(s["metrics"][k]) for k in metrics] for s in result["spans"]]
  return _csv(rows)


def heatmap_csv(result: dict) -> str:
  """The heatmap's values: row i (first layer removed), column j (last)."""
  matrix = result["matrices"][result["metric"]]
  rows = [["first_layer\\last_layer"] + list(range(result["num_layers"]))]
  rows += [[i] + [_cell(v) for v in row] for i, row in enumerate(matrix)]
  return _csv(rows)


def read_heatmap_csv(text: str) -> List[List[Optional[float]]]:
  """The matrix back from `heatmap_csv`'s text."""
  rows = list(csv.reader(io.StringIO(text)))[1:]
  return [[float(v) if v else None for v in row[1:]] for row in rows]


def heatmap_png(result: dict) -> bytes:
  """The matrix of result["metric"] as a heatmap, lower triangle blank."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")  # No display; set before anything draws.
  from matplotlib import figure  # pylint: disable=g-import-not-at-top

  metric, n = result["metric"], result["num_layers"]
  values = np.array([[np.nan if v is None else v for v in row]
                     for row in result["matrices"][metric]], np.float64)
  side = 0.5 * max(n, 6)
  fig = figure.Figure(figsize=(side + 2.5, side + 1.5))
  ax = fig.subplots()
  image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis")
  fig.colorbar(image, ax=ax, label=metric)
  if n <= 16:
    finite = values[np.isfinite(values)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i in range(n):
      for j in range(i, n):
        if np.isfinite(values[i, j]):
          ax.text(j, i, f"{values[i, j]:.3f}", ha="center", va="center", fontsize=7,
                  color="black" if values[i, j] > middle else "white")
  ax.set_xticks(range(n))
  ax.set_yticks(range(n))
  ax.set_xlabel("last layer j")
  ax.set_ylabel("first layer i")
  full = result["full_model"].get(metric)
  adapters = result.get("adapter_config") or {}
  ax.set_title(f"{result.get('task', '')}: adapters of layers i..j removed\n"
               f"full model {full} (adapter size {adapters.get('size')}, "
               f"{adapters.get('placement')})", fontsize=9)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=100)
  return buffer.getvalue()


def write_results(directory: str, result: dict) -> None:
  """ablation.json, ablation.csv, the heatmap and its data, each atomically."""
  tf.io.gfile.makedirs(directory)
  file_io.atomic_write(posixpath.join(directory, RESULTS_FILE),
                       json.dumps(result, indent=2, sort_keys=True) + "\n")
  file_io.atomic_write(posixpath.join(directory, TABLE_FILE), table_csv(result))
  file_io.atomic_write(posixpath.join(directory, HEATMAP_DATA_FILE), heatmap_csv(result))
  file_io.atomic_write(posixpath.join(directory, HEATMAP_FILE), heatmap_png(result),
                       binary=True)
  logging.info("Wrote the ablation of %d spans to %s", len(result["spans"]), directory)


def _check_has_adapters(options: model_setup.ModelOptions) -> None:
  if not options.adapter_config().enabled:
    named = errors.flags_named(adapter_size=options.adapter_size,
                               train_mode=options.train_mode)
    raise errors.UserError(f"{named}: the model has no adapters to remove")


def _with_bank_task(options: startup.RunOptions, bank_dir, bank_task, base,
                    do_lower_case) -> startup.RunOptions:
  """The options with the adapters of the bank's task, the bank checked against the base."""
  bank = adapter_bank.open_bank(bank_dir)
  adapter_bank.check_base(bank_dir, bank, None, base.bert_config.to_dict(), do_lower_case,
                          "this run's base")
  return dataclasses.replace(options, model=dataclasses.replace(
      options.model, adapter_checkpoint=adapter_bank.task_checkpoint(bank_dir, bank_task)))


def ablate(run: startup.Run, processor, task_name, metric, record, batch_size) -> dict:
  """The full model's and every span's eval metrics, as ablation.json holds them."""
  def evaluate(layers):
    with adapters_removed(run.model, layers):
      outputs = classifier_task.predict_record(run.strategy, run.model, run.options, record,
                                               batch_size, processor.is_regression)
    return classifier_task.eval_results(task_name, outputs, batch_size, run.global_step,
                                        processor.is_regression)

  num_layers = run.base.bert_config.num_hidden_layers
  full = evaluate(())
  if metric not in full or metric == "global_step":
    raise errors.UserError(f"flag --ablation_metric={metric}: must be one of "
                           f"{', '.join(sorted(k for k in full if k != 'global_step'))}")
  logging.info("Full model: %s", ", ".join(f"{k} = {v}" for k, v in sorted(full.items())))
  by_span = sweep(evaluate, num_layers)
  return summary(full, by_span, num_layers, metric,
                 task=processors.canonical_task_name(task_name),
                 adapter_config=dataclasses.asdict(run.options.model.adapter_config()),
                 global_step=int(run.global_step))


def main(argv, flag_values=None):
  del argv
  F = flag_values or flags.FLAGS
  logging.set_verbosity(logging.INFO)

  # As run_classifier.py's eval: every check before anything is written.
  flag_checks.validate(F)
  path_flags.check_path_flags(F, dict(cli_flags.classifier_path_flags(do_train=False),
                                      ablation_dir=path_checks.OUTPUT_DIR))
  processor = classifier_task.make_processor(F.task_name, F.data_dir,
                                             cli_options.tsv_options(F))
  options = cli_options.run_options(F)
  base = startup.read_base(options)
  _check_has_adapters(options.model)
  task_name = processors.canonical_task_name(F.task_name)
  if F.adapter_bank:
    options = _with_bank_task(options, F.adapter_bank, F.bank_task or task_name, base,
                              F.do_lower_case)
  metric = F.ablation_metric or ("eval_pearson" if processor.is_regression
                                 else "eval_accuracy")
  examples = classifier_task.read_examples(processor, F.data_dir, False, True, False)["eval"]
  tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                         do_lower_case=F.do_lower_case)
  if not (run_checkpoints.latest(F.output_dir) or options.model.adapter_checkpoint):
    logging.warning("%s holds no checkpoint and no --adapter_checkpoint or --adapter_bank "
                    "is given: the adapters are --init_checkpoint's, or untrained if it "
                    "has none", F.output_dir)
  run = classifier_task.set_up(options, base, processor, task_name, None)

  # From here on files are written, all under ablation_dir.
  directory = F.ablation_dir or posixpath.join(F.output_dir, "ablation")
  tf.io.gfile.makedirs(directory)
  logging.info("***** Running ablation evaluations *****")
  padded = classifier_features.pad_examples_for_tpu(examples,
                                                    F.eval_batch_size if F.use_tpu else 1)
  record = posixpath.join(directory, "eval.tf_record")
  classifier_features.ensure_feature_record(padded, processor.get_labels(), F.max_seq_length,
                                            tokenizer, record)
  write_results(directory, ablate(run, processor, F.task_name, metric, record,
                                  F.eval_batch_size))


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
