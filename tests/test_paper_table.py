"""scripts/paper_table.py: the commands it runs and what it reads back (no training here)."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def paper_table():
  spec = importlib.util.spec_from_file_location(
      "paper_table", os.path.join(ROOT, "scripts", "paper_table.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


SETTINGS = dict(num_train_epochs=2.0, max_seq_length=32, train_batch_size=32,
                eval_batch_size=64, seed=1, machine="test")


def test_commands_differ_only_in_method_flags_and_learning_rate(paper_table):
  def command(task, method):
    return paper_table.run_command(".venv/bin/python", paper_table.TASKS[task],
                                   paper_table.METHODS[method], SETTINGS, "models/minilm",
                                   "data/wordnet", "out")

  pair = command("wordnet_example", "top_layers_3")
  assert "--text_a_column=gloss" in pair and "--text_b_column=example" in pair
  assert "--train_mode=top_layers:3" in pair and "--adapter_size=0" in pair
  assert "--learning_rate=0.0001" in pair and "--data_dir=data/wordnet/wordnet_example" in pair
  shared = set(command("wordnet_lexname", "adapters_8"))
  for method in paper_table.METHODS.values():
    varying = set(command("wordnet_lexname", method.name)) - shared
    assert varying <= set(method.flags) | {f"--learning_rate={method.learning_rate:g}"}


def test_reads_log_counts_and_eval_results(paper_table):
  log = ("I1122 trainable.py:124] ***** Total Parameters = 23312266 *****\n"
         "I1122 trainable.py:125] ***** Adapter Parameters = 595200 *****\n"
         "I1122 trainable.py:126] ***** Total Trainable Parameters = 609034 *****\n")
  assert paper_table.parse_parameter_counts(log) == {
      "total": 23312266, "adapter": 595200, "trainable": 609034}
  with pytest.raises(ValueError, match="missing"):
    paper_table.parse_parameter_counts(log.splitlines()[0])
  assert paper_table.parse_eval_results(
      "eval_accuracy = 0.853\neval_loss = 0.445\nglobal_step = 250\n") == {
          "eval_accuracy": 0.853, "eval_loss": 0.445, "global_step": 250.0}


def test_markdown_table_rows_and_delta_to_full(paper_table):
  def run(method, accuracy, trainable):
    return dict(task="wordnet_lexname", method=method, eval_accuracy=accuracy,
                trainable=trainable, total=1000, trained_share=trainable / 1000,
                wall_seconds=12.4)

  table = paper_table.markdown_table({"settings": SETTINGS, "runs": [
      run("adapters_64", 0.853, 26), run("full", 0.861, 1000)]})
  lines = table.splitlines()
  assert len(lines) == 4  # Header, rule, one row per method, in METHODS order.
  assert lines[2].startswith("| adapters, size 64") and "| 0.853 | -0.8 | 12 s |" in lines[2]
  assert "26 (2.60%)" in lines[2]
  assert lines[3].startswith("| full fine-tuning") and "| 0.861 |  | 12 s |" in lines[3]
