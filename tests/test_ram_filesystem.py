"""Every command with every path on ram://: nothing may land on the local disk.

ram:// is TensorFlow's in-memory file system; it stands in for gs:// (a Colab
TPU's data and outputs sit in a bucket). A command that opens a path with
Python's `open`, `os` or `shutil` instead of tf.io.gfile fails on it or writes
a local file. Each test copies the inputs to ram://, runs one command's main
in this process (ram:// is per process) with cwd an empty directory and TMPDIR
a watched one, and checks that its outputs are on ram:// and that the cwd, the
temporary directory (whatever a command puts there it must remove; only
AutoGraph's generated code, which TensorFlow removes at exit, may stay) and
the repository hold no new file.

The experiments start their runs as subprocesses, which could not see this
process's ram://: they take a `popen`, and here `InProcess` runs the child's
script in this process instead, its log lines as the child's output. On gs://
the real subprocesses read and write the same bucket.
"""

import contextlib
import csv
import io
import json
import logging as py_logging
import os
import tempfile
import time
import uuid

from absl import flags
import pytest
import tensorflow as tf

import convert_checkpoint
import export_savedmodel
import manage_bank
from experiments import ablation
from experiments import embedding_baseline
from experiments import multitask_comparison
from experiments import paper_table
from experiments import plots
from experiments import select
from experiments import sweep
import run_classifier
import run_multitask
import run_squad
from adapter_bert.squad import evaluate as squad_evaluate
from hf_checkpoints import hf_state, write_hf_dir
from run_harness import Records, run_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = f"ram://ram_fs_test_{uuid.uuid4().hex[:8]}"
BASE = f"{ROOT}/base"
DATA = f"{ROOT}/data"
WORDNET_TASKS = ("wordnet_lexname", "wordnet_pos", "wordnet_example", "wordnet_relation")
TINY_RUN = dict(max_seq_length=32, train_batch_size=4, eval_batch_size=4,
                predict_batch_size=4, learning_rate=1e-3, seed=1)


def _copy_dir(local_dir, ram_dir):
  tf.io.gfile.makedirs(ram_dir)
  for name in os.listdir(local_dir):
    tf.io.gfile.copy(os.path.join(local_dir, name), f"{ram_dir}/{name}", overwrite=True)


def _write(path, text):
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(text)


def _read(path):
  with tf.io.gfile.GFile(path, "r") as f:
    return f.read()


def _tiny_wordnet_task(name, train_rows=24, dev_rows=12):
  """The first rows of a WordNet task on ram://, dev only with labels train has."""
  def rows(split):
    with open(os.path.join(REPO, "data", "wordnet", name, f"{split}.tsv")) as f:
      return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  train = rows("train")
  if "gloss_synset" in train[0]:  # Both examples of a gloss, for the pairwise choice.
    column = train[0].index("gloss_synset")
    train = train[:1] + sorted(train[1:], key=lambda r: r[column])
  train = train[:train_rows + 1]
  label = train[0].index("label")
  labels = {r[label] for r in train[1:]}
  dev = rows("dev")
  if "gloss_synset" in dev[0]:
    dev = dev[:1] + sorted(dev[1:], key=lambda r: r[column])
  dev = dev[:1] + [r for r in dev[1:] if r[label] in labels][:dev_rows]
  test = rows("test")[:dev_rows + 1]
  for split, table in (("train", train), ("dev", dev), ("test", test)):
    _write(f"{DATA}/wordnet/{name}/{split}.tsv", "".join("\t".join(r) + "\n" for r in table))


@pytest.fixture(scope="module", autouse=True)
def ram_inputs(base):
  """The tiny base, the GLUE / SQuAD samples and WordNet subsets, copied to ram://;
  after the module, no file of the repository's virtualenvs is new or changed (each
  test checks the rest of the repository: the virtualenvs are most of its files)."""
  start = time.time() - 1
  _copy_dir(base["dir"], BASE)
  _copy_dir(os.path.join(REPO, "data", "glue", "MRPC"), f"{DATA}/MRPC")
  _copy_dir(os.path.join(REPO, "data", "tsv_example"), f"{DATA}/tsv_example")
  for name in ("train-v1.1.json", "dev-v1.1.json"):
    tf.io.gfile.copy(os.path.join(REPO, "data", "squad", name), f"{DATA}/squad/{name}")
  for name in WORDNET_TASKS:
    _tiny_wordnet_task(name)
  yield
  try:
    tf.io.gfile.rmtree(ROOT)
  except tf.errors.OpError:  # ram:// lists names that only share a prefix, then misses them.
    pass
  assert _repo_files_changed_since(start, virtualenvs=True) == [], "written into a virtualenv"


def _repo_files_changed_since(start, virtualenvs=False):
  """The repository's files new or changed since `start`: outside its virtualenvs
  (.venv*), or with `virtualenvs` in them alone."""
  changed = []
  for directory, dirs, names in os.walk(REPO):
    dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".pytest_cache") and (
        virtualenvs or not d.startswith(".venv"))]
    if virtualenvs and not any(p.startswith(".venv") for p in directory.split(os.sep)):
      names = []  # Above the virtualenvs: the tests' own checks.
    for name in names:
      path = os.path.join(directory, name)
      try:
        if os.lstat(path).st_mtime >= start:
          changed.append(os.path.relpath(path, REPO))
      except FileNotFoundError:
        pass
  return changed


@contextlib.contextmanager
def nothing_written_locally(tmp_path, monkeypatch):
  """Runs the body with cwd and TMPDIR empty directories; fails if either holds a file
  afterwards or a file of the repository is new or changed (its virtualenvs: once
  for the module, ram_inputs)."""
  cwd, temp = tmp_path / "cwd", tmp_path / "tmp"
  cwd.mkdir()
  temp.mkdir()
  monkeypatch.chdir(cwd)
  monkeypatch.setenv("TMPDIR", str(temp))
  monkeypatch.setattr(tempfile, "tempdir", str(temp))
  start = time.time() - 1  # mtimes are coarse on some file systems.
  yield
  assert sorted(os.listdir(cwd)) == [], "written to the working directory"
  # TensorFlow's AutoGraph writes the code it generates there and removes it at exit.
  left = [n for n in os.listdir(temp) if not n.startswith("__autograph_generated_file")]
  assert sorted(left) == [], "left in the temporary directory"
  assert _repo_files_changed_since(start) == [], "written into the repository"


@pytest.fixture
def local_disk(tmp_path, monkeypatch):
  with nothing_written_locally(tmp_path, monkeypatch):
    yield


class InProcess:
  """Stands in for subprocess.Popen: runs a run_classifier.py / run_multitask.py
  command's main in this process (where ram:// is), its log lines as its output."""
  SCRIPTS = {"run_classifier.py": run_classifier, "run_multitask.py": run_multitask}

  def __init__(self, cmd, stdout=None, stderr=None, cwd=None, env=None):
    del env  # In this process: its environment is the test's.
    del stdout, stderr, cwd
    script = self.SCRIPTS[os.path.basename(cmd[1])]
    fv = flags.FlagValues()
    script.define_flags(fv)
    fv([cmd[1]] + list(cmd[2:]))
    handler = Records()
    logger = py_logging.getLogger("absl")
    logger.addHandler(handler)
    try:
      script.main([], fv)
      self.returncode = 0
    except Exception as e:  # pylint: disable=broad-except
      handler.messages.append(f"ERROR: {e!r}")
      self.returncode = 1
    finally:
      logger.removeHandler(handler)
    self.stdout = io.BytesIO("".join(line + "\n" for line in handler.messages).encode())

  def wait(self):
    return self.returncode

  def poll(self):
    return self.returncode

  def send_signal(self, signum):
    del signum


def _base_flags(**overrides):
  return dict(bert_config_file=f"{BASE}/bert_config.json", vocab_file=f"{BASE}/vocab.txt",
              init_checkpoint=f"{BASE}/bert_model.ckpt", **TINY_RUN, **overrides)


def _parse(define_flags, argv):
  fv = flags.FlagValues()
  define_flags(fv)
  return fv, fv(argv)


def _results(path):
  return dict(line.split(" = ") for line in _read(path).splitlines())


@pytest.fixture(scope="module")
def classifier_run(base, tmp_path_factory):
  """run_classifier.py on ram://: train, eval, predict, the adapters added to a bank."""
  out, bank = f"{ROOT}/classifier", f"{ROOT}/bank"
  tmp = tmp_path_factory.mktemp("classifier")
  with pytest.MonkeyPatch.context() as monkeypatch:
    with nothing_written_locally(tmp, monkeypatch):
      run_main(**_base_flags(task_name="MRPC", data_dir=f"{DATA}/MRPC", output_dir=out,
                             adapter_size=8, do_train=True, do_eval=True, do_predict=True,
                             num_train_epochs=1, save_checkpoints_steps=1,
                             adapter_bank=bank))
  return out, bank


def test_run_classifier(classifier_run):
  out, bank = classifier_run
  names = {n.rstrip("/") for n in tf.io.gfile.listdir(out)}
  assert {"run_config.json", "train.tf_record", "eval.tf_record", "predict.tf_record",
          "eval_results.txt", "test_results.tsv", "checkpoint", "adapter_model"} <= names
  assert _results(f"{out}/eval_results.txt")["global_step"] == "2"
  assert len(_read(f"{out}/test_results.tsv").splitlines()) == 6
  assert tf.io.gfile.exists(f"{bank}/bank.json")
  assert tf.io.gfile.exists(f"{bank}/tasks/mrpc/adapter_weights.safetensors")


def test_bank_manage(classifier_run, local_disk, capsys):
  out, bank = classifier_run
  # Not a name that starts with another task's: ram:// would list one in the other.
  manage_bank.main(["--adapter_bank", bank, "add", "paraphrase", f"{out}/adapter_model"])
  manage_bank.main(["--adapter_bank", bank, "list"])
  listed = capsys.readouterr().out
  assert "paraphrase" in listed and "mrpc" in listed
  manage_bank.main(["--adapter_bank", bank, "remove", "paraphrase"])
  assert [t.rstrip("/") for t in tf.io.gfile.listdir(f"{bank}/tasks")] == ["mrpc"]


def test_serving_export(classifier_run, local_disk):
  _, bank = classifier_run
  export_dir = f"{ROOT}/export/1"
  fv, _ = _parse(export_savedmodel.define_flags, ["export", f"--adapter_bank={bank}",
                                               f"--export_dir={export_dir}"])
  export_savedmodel.main(["export"], fv)
  names = {n.rstrip("/") for n in tf.io.gfile.listdir(export_dir)}
  assert {"saved_model.pb", "variables", "assets"} <= names


def test_ablation(classifier_run, local_disk):
  out, _ = classifier_run
  fv, _ = _parse(ablation.define_flags, ["ablation"] + [f"--{k}={v}" for k, v in _base_flags(
      task_name="MRPC", data_dir=f"{DATA}/MRPC", output_dir=out, adapter_size=8,
      ablation_dir=f"{ROOT}/ablation").items()])
  ablation.main([], fv)
  result = json.loads(_read(f"{ROOT}/ablation/ablation.json"))
  assert len(result["spans"]) == 3  # Layers 0, 1 and both of the tiny BERT.
  png = tf.io.gfile.GFile(f"{ROOT}/ablation/ablation_heatmap.png", "rb").read(8)
  assert png == b"\x89PNG\r\n\x1a\n"


def test_run_squad_and_evaluate(local_disk, capsys):
  out = f"{ROOT}/squad"
  fv, _ = _parse(run_squad.define_flags, ["run_squad.py"] + [f"--{k}={v}" for k, v in dict(
      bert_config_file=f"{BASE}/bert_config.json", vocab_file=f"{BASE}/vocab.txt",
      init_checkpoint=f"{BASE}/bert_model.ckpt", output_dir=out, adapter_size=8,
      train_file=f"{DATA}/squad/train-v1.1.json", predict_file=f"{DATA}/squad/dev-v1.1.json",
      max_seq_length=64, doc_stride=24, max_query_length=16, train_batch_size=4,
      predict_batch_size=4, num_train_epochs=1, learning_rate=1e-3, seed=1).items()]
                  + ["--do_train", "--do_predict"])
  run_squad.main([], fv)
  written = json.loads(_read(f"{out}/eval_results.json"))
  squad_evaluate.main(["--version=1.1", f"{DATA}/squad/dev-v1.1.json",
                       f"{out}/predictions.json", f"--out-file={ROOT}/squad_eval.json"])
  # The command's scores of run_squad.py's predictions are the ones run_squad.py wrote.
  scored = json.loads(_read(f"{ROOT}/squad_eval.json"))
  assert scored["exact_match"] == pytest.approx(written["exact_match"])
  assert scored["f1"] == pytest.approx(written["f1"])


def test_run_multitask(local_disk):
  out = f"{ROOT}/multitask"
  run_main(run_multitask, **_base_flags(
      task_name="mrpc,tsv", data_dir=f"{DATA}/MRPC,{DATA}/tsv_example", output_dir=out,
      multitask_adapters="shared", adapter_size=8, do_train=True, do_eval=True, do_predict=True,
      num_train_epochs=1))
  assert "mrpc/eval_accuracy" in _results(f"{out}/eval_results.txt")
  for task in ("mrpc", "tsv_example"):
    assert tf.io.gfile.exists(f"{out}/{task}/test_results.tsv")


def test_convert_checkpoint(tmp_path_factory, local_disk):
  hf_local = write_hf_dir(tmp_path_factory.mktemp("hf") / "hf", hf_state())
  _copy_dir(hf_local, f"{ROOT}/hf")
  fv, argv = _parse(convert_checkpoint.define_flags, [
      "convert_checkpoint.py", f"--hf_dir={ROOT}/hf", f"--output_dir={ROOT}/converted"])
  convert_checkpoint.main(argv, fv)
  assert sorted(tf.io.gfile.listdir(f"{ROOT}/converted")) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
      "vocab.txt"]


def test_sweep_select_and_plots(local_disk, capsys):
  out = f"{ROOT}/sweep"
  fixed = [f"--{k}={v}" for k, v in _base_flags(
      task_name="MRPC", data_dir=f"{DATA}/MRPC", adapter_size=8, num_train_epochs=1).items()
           if k != "seed"]
  fv, argv = _parse(sweep.define_flags, ["sweep", f"--output_dir={out}",
                                         "--vary=train_examples=4", "--vary=seed=1,2", "--"]
                    + fixed)
  assert sweep.main(argv, fv, popen=InProcess) == 0
  results = json.loads(_read(f"{out}/results.json"))
  assert [r["status"] for r in results["rows"]] == ["ok", "ok"]
  assert [r["num_train_examples"] for r in results["rows"]] == [4, 4]
  point = results["rows"][0]["output_dir"]
  assert "Running training" in _read(f"{out}/{point}/run.log")
  [subset] = tf.io.gfile.listdir(f"{out}/data")
  assert len(_read(f"{out}/data/{subset}/train.tsv").splitlines()) == 5  # Header + 4 rows.
  assert _read(f"{out}/data/{subset}/dev.tsv") == _read(f"{DATA}/MRPC/dev.tsv")

  fv, _ = _parse(select.define_flags, ["select", f"--results={out}/results.json"])
  assert select.main([], fv) == 0
  assert json.loads(_read(f"{out}/selected.json"))["rows"][0]["n_seeds"] == 2
  fv, _ = _parse(plots.define_flags, ["plots", f"--results={out}/results.json",
                                      "--kind=tradeoff"])
  assert plots.main([], fv) == 0
  assert tf.io.gfile.GFile(f"{out}/plots/tradeoff.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
  assert tf.io.gfile.exists(f"{out}/plots/tradeoff.csv")


def test_multitask_comparison(local_disk):
  out = f"{ROOT}/comparison"
  fv, _ = _parse(multitask_comparison.define_flags, [
      "comparison", f"--output_dir={out}", "--seeds=1", "--methods=shared",
      f"--model_dir={BASE}", f"--data_root={DATA}/wordnet", "--num_train_epochs=0.2",
      "--adapter_size=8", "--max_seq_length=32", "--train_batch_size=4"])
  multitask_comparison.main([], fv, popen=InProcess)
  rows = json.loads(_read(f"{out}/comparison.json"))["rows"]
  assert [r["task"] for r in rows] == list(multitask_comparison.WORDNET_TASKS) + ["average"]
  assert _read(f"{out}/comparison.md").startswith("| method |")
  assert tf.io.gfile.exists(f"{out}/shared/seed-1/{multitask_comparison.DONE_FILE}")


def test_paper_table(local_disk):
  fv, _ = _parse(paper_table.define_flags, [
      "paper_table", "--tasks=wordnet_lexname", "--methods=head", f"--model_dir={BASE}",
      f"--data_root={DATA}/wordnet", f"--output_root={ROOT}/paper_table/runs",
      f"--results_json={ROOT}/paper_table/table.json",
      f"--results_md={ROOT}/paper_table/table.md", "--num_train_epochs=0.5",
      "--train_batch_size=4"])
  paper_table.main([], fv, popen=InProcess)
  [run] = json.loads(_read(f"{ROOT}/paper_table/table.json"))["runs"]
  assert (run["task"], run["method"]) == ("wordnet_lexname", "head")
  assert tf.io.gfile.exists(f"{ROOT}/paper_table/runs/wordnet_lexname/head/run.log")
  assert "| head only (frozen features) |" in _read(f"{ROOT}/paper_table/table.md")


def test_embedding_baseline(local_disk, capsys):
  fv, _ = _parse(embedding_baseline.define_flags, [
      "embedding_baseline", f"--model_dir={BASE}",
      f"--data_dir={DATA}/wordnet/wordnet_example"])
  embedding_baseline.main([], fv)
  printed = capsys.readouterr().out
  assert "train: pairwise choice" in printed and "(12 glosses)" in printed
  assert "logistic regression on frozen embeddings" in printed
