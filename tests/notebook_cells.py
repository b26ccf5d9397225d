"""The notebook's cells, run piece by piece with stand-ins for what they start.

Shared by tests/test_notebook.py and tests/test_notebook_docs.py (not a test file).
The notebook's own Python (the kernel) imports no TensorFlow: every step that needs
it is a child process of the run's Python, PY. Here those children are stand-ins:
`Children` takes the place of the cells' `subprocess`, records each command, runs the
notebook's tf.io.gfile script (GFILE) in this process on a `FakeTensorFlow` whose
gs:// paths are folders under a local directory, and writes what the converter writes.
"""

import ast
import json
import os
import shutil
import subprocess
import sys
import types

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "adapter_bert_colab.ipynb")
TPU_DOCS = os.path.join(ROOT, "docs", "tpu.md")

# What convert_checkpoint.py writes (a Google BERT release's files).
CONVERTED_FILES = ("vocab.txt", "bert_config.json", "bert_model.ckpt.index",
                   "bert_model.ckpt.data-00000-of-00001")


def code_cells():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  return [c.source for c in notebook.cells if c.cell_type == "code"]


def markdown():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  return "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


def docs():
  with open(TPU_DOCS, encoding="utf-8") as f:
    return f.read()


def cell(marker, cells=None):
  """The one code cell that holds `marker`."""
  [found] = [c for c in (cells or code_cells()) if marker in c]
  return found


def setup_cell():
  return cell("def find_repo")


def run_settings_cell():
  return cell("TRAIN_BATCH_SIZE =")


def conversion_cell():
  return cell("convert_checkpoint.py")


def paths_cell():
  return cell("GFILE = ")


def run_cell():
  return cell('"--task_name=tsv"')


def results_cell():
  return cell("eval_results.txt\"), encoding")


def settings(use_tpu=False, bucket=None, tpu_name=None, repo_source=None):
  """The first code cell (the one a user edits), with the edits given."""
  source = code_cells()[0]
  for old, new, wanted in (("USE_TPU = False", "USE_TPU = True", use_tpu),
                           ("BUCKET = None", "BUCKET = %r" % (bucket,), bucket is not None),
                           ('TPU_NAME = "local"', "TPU_NAME = %r" % (tpu_name,),
                            tpu_name is not None),
                           ('REPO_SOURCE = ""', "REPO_SOURCE = %r" % (repo_source,),
                            repo_source is not None)):
    if wanted:
      edited = source.replace(old, new, 1)
      assert edited != source, old
      source = edited
  return source


def definitions(source, *names):
  """The top-level statements of `source` that define `names` (functions, assignments),
  as source code, in their order there."""
  found = []
  for statement in ast.parse(source).body:
    if isinstance(statement, ast.FunctionDef) and statement.name in names:
      found.append(ast.get_source_segment(source, statement))
    elif isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id in names for t in statement.targets):
      found.append(ast.get_source_segment(source, statement))
  assert len(found) == len(names), (names, found)
  return "\n".join(found)


def make_checkout(target):
  """What `git clone` leaves, as far as the setup cell looks: a folder with run_classifier.py."""
  os.makedirs(target)
  open(os.path.join(target, "run_classifier.py"), "w").close()


def setup_as_on_colab(folder, monkeypatch, use_tpu=True, repo_source=None, on_clone=None,
                      colab=True):
  """Runs the settings cell and the setup cell with `folder` as the kernel's folder
  (Colab's /content), on Colab unless `colab` is False; returns the commands it ran,
  their `env` arguments, its namespace and the lines it printed. No command runs:
  `on_clone` stands in for git clone."""
  ran, envs = [], []

  def run(command, **kwargs):
    ran.append(list(command))
    envs.append(kwargs.get("env"))
    if command[:2] == ["git", "clone"] and on_clone:
      on_clone(os.path.abspath(command[-1]))
    return subprocess.CompletedProcess(command, 0)

  monkeypatch.chdir(folder)
  if colab:
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
  else:
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
  monkeypatch.setattr(subprocess, "run", run)
  namespace = {}
  exec(settings(use_tpu=use_tpu, repo_source=repo_source), namespace)
  lines = []
  namespace["print"] = lambda *args: lines.append(" ".join(str(a) for a in args))
  exec(setup_cell(), namespace)
  return ran, envs, namespace, lines


def stand_in_checkout(root):
  """A checkout at `root` after the conversion: run_classifier.py, models/minilm/ and the
  task's data (empty files, named as the real ones)."""
  root.mkdir(parents=True, exist_ok=True)
  (root / "run_classifier.py").write_text("")
  model = root / "models" / "minilm"
  model.mkdir(parents=True)
  for name in CONVERTED_FILES:
    (model / name).write_text("")
  data = root / "data" / "wordnet" / "wordnet_lexname"
  data.mkdir(parents=True)
  for name in os.listdir(os.path.join(ROOT, "data", "wordnet", "wordnet_lexname")):
    (data / name).write_text("")
  return str(root)


class FakeTensorFlow(types.ModuleType):
  """A `tensorflow` module with only tf.io.gfile, whose gs://B/P is the local BUCKETS/B/P.

  Records each copy (source, destination) and each tree removed, as the paths given."""

  def __init__(self, buckets):
    super().__init__("tensorflow")
    self.buckets, self.copies, self.removed = str(buckets), [], []
    self.io = types.SimpleNamespace(gfile=types.SimpleNamespace(
        isdir=lambda p: os.path.isdir(self.local(p)),
        exists=lambda p: os.path.exists(self.local(p)),
        makedirs=lambda p: os.makedirs(self.local(p), exist_ok=True),
        walk=self._walk, copy=self._copy, rmtree=self._rmtree))

  def local(self, path):
    return os.path.join(self.buckets, path[len("gs://"):]) if path.startswith("gs://") else path

  def _walk(self, top):
    for parent, dirs, files in os.walk(self.local(top)):
      yield top + parent[len(self.local(top)):], dirs, files

  def _copy(self, src, dst, overwrite=False):
    assert overwrite, "a rerun copies again over what is there"
    if not os.path.isdir(os.path.dirname(self.local(dst))):  # As a local file system.
      raise FileNotFoundError(dst)
    self.copies.append((src, dst))
    shutil.copyfile(self.local(src), self.local(dst))

  def _rmtree(self, path):
    self.removed.append(path)
    shutil.rmtree(self.local(path))


def run_gfile_script(script, args, fake_tensorflow):
  """The notebook's GFILE script as `PY -c GFILE ARGS...` runs it, in this process, with
  `fake_tensorflow` for TensorFlow."""
  saved_argv, saved_module = sys.argv, sys.modules.get("tensorflow")
  sys.argv, sys.modules["tensorflow"] = ["-c"] + list(args), fake_tensorflow
  try:
    exec(compile(script, "<GFILE>", "exec"), {"__name__": "__main__"})
  finally:
    sys.argv = saved_argv
    if saved_module is None:
      del sys.modules["tensorflow"]
    else:
      sys.modules["tensorflow"] = saved_module


class _FinishedRun:
  """A run_classifier.py that prints `lines` and exits with status 0."""

  def __init__(self, lines):
    self.stdout, self.returncode = iter(lines), 0

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    return False


class Children:
  """Stands in for the `subprocess` module of the cells: the child processes they start.

  commands: each command given to run() or Popen(), in order; popen_kwargs: the keyword
  arguments of each Popen(). `PY -c GFILE ...` runs GFILE on `fake_tensorflow`; the
  query of the MiniLM package's folder prints `hf_dir`; convert_checkpoint.py writes the
  converted files (empty, with a bert_config.json); run_classifier.py prints `run_output`.
  """

  PIPE, STDOUT = subprocess.PIPE, subprocess.STDOUT
  CompletedProcess = subprocess.CompletedProcess

  def __init__(self, fake_tensorflow=None, hf_dir="HF_DIR", run_output=()):
    self.fake_tensorflow, self.hf_dir, self.run_output = fake_tensorflow, hf_dir, run_output
    self.commands, self.popen_kwargs = [], []

  def run(self, command, **kwargs):
    command = list(command)
    self.commands.append(command)
    stdout = None
    if command[1:2] == ["-c"] and "tf.io.gfile" in command[2]:
      run_gfile_script(command[2], command[3:], self.fake_tensorflow)
    elif command[1:2] == ["-c"] and "minilm_package_dir()" in command[2]:
      stdout = self.hf_dir + "\n"
    elif command[1:2] == ["convert_checkpoint.py"]:
      [output_dir] = [w.split("=", 1)[1] for w in command if w.startswith("--output_dir=")]
      os.makedirs(output_dir)
      for name in CONVERTED_FILES:
        with open(os.path.join(output_dir, name), "w", encoding="utf-8") as f:
          f.write(json.dumps(dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12,
                                  vocab_size=30522)) if name == "bert_config.json" else "")
    return subprocess.CompletedProcess(command, 0, stdout=stdout)

  def Popen(self, command, **kwargs):  # pylint: disable=invalid-name
    self.commands.append(list(command))
    self.popen_kwargs.append(kwargs)
    return _FinishedRun(self.run_output)


def run_cells(checkout, work=None, bucket=None, use_tpu=False, fresh_run=None,
              buckets=None, through="run", run_output=()):
  """Runs the notebook's cells from its settings to the cell `through` ("conversion",
  "paths", "run" or "results") as in `checkout` (REPO; WORK too unless given), with
  `Children` for their child processes; PY is the checkout's .venv-tpu/bin/python.
  The conversion cell runs when `through` is "conversion"; otherwise LOCAL_MODEL_DIR and
  LOCAL_DATA_DIR are set as the conversion and data cells set them. `fresh_run`:
  FRESH_RUN set to that. `buckets`: the folder that holds the fake gs:// buckets.
  Returns (the namespace, the Children, the FakeTensorFlow)."""
  cells = code_cells()
  fake_tensorflow = FakeTensorFlow(buckets or os.path.join(checkout, "buckets"))
  children = Children(fake_tensorflow, run_output=run_output)
  namespace = dict(os=os, sys=sys, subprocess=children, REPO=checkout,
                   WORK=work or checkout, IN_COLAB=False,
                   PY=os.path.join(checkout, ".venv-tpu", "bin", "python"))
  exec(settings(use_tpu=use_tpu or bool(bucket), bucket=bucket), namespace)
  exec(definitions(setup_cell(), "py"), namespace)
  exec(run_settings_cell(), namespace)
  if through == "conversion":
    exec(conversion_cell(), namespace)
    return namespace, children, fake_tensorflow
  local_dirs = [ast.unparse(statement) for c in cells for statement in ast.parse(c).body
                if isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0])
                in ("LOCAL_MODEL_DIR", "LOCAL_DATA_DIR")][:2]
  exec("\n".join(local_dirs), namespace)
  exec(paths_cell(), namespace)
  if through == "paths":
    return namespace, children, fake_tensorflow
  source = run_cell()
  if fresh_run is not None:
    edited = source.replace("FRESH_RUN = False", "FRESH_RUN = %s" % fresh_run, 1)
    assert edited != source or not fresh_run
    source = edited
  exec(source, namespace)
  if through == "results":
    exec(results_cell(), namespace)
  return namespace, children, fake_tensorflow


def flag_values(words, flags):
  return {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words
          if w.split("=", 1)[0] in flags}
