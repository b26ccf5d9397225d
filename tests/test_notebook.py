"""notebooks/adapter_bert_colab.ipynb runs top to bottom on CPU.

The code cells run in order in one fresh Python process, in one namespace, as a
Jupyter kernel would run them (the notebook uses no IPython magics, so no
kernel is needed). NOTEBOOK_SMOKE_TEST=1 shrinks the run to a few steps on a few
examples; ADAPTER_BERT_WORK_DIR keeps the generated model and outputs in tmp_path.

On a TPU VM the first process that loads the TPU library holds the TPU: the notebook's
own Python (which imports TensorFlow) must set TPU_LOAD_LIBRARY=0 before that import,
and the run_classifier.py it starts must not inherit it. Checked from the cells' code
in order, by running the run cell with a stand-in for subprocess.Popen, and in the real
run by watching the import and the child's environment.

What a Colab user goes through is checked from the cells' code too: a restarted runtime
reuses the clone; the copies to the bucket (the notebook's, and the commands docs/tpu.md
and the notebook's markdown give) land where the run command reads; stopping the run
cell sends the run SIGTERM and waits for it to end, and a rerun resumes unless
FRESH_RUN.
"""

import ast
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import types

import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "adapter_bert_colab.ipynb")

# Runs the cells given as a JSON list of sources; a failing cell is named. It also
# records TPU_LOAD_LIBRARY when tensorflow is first imported, and whether each child
# process started for run_classifier.py gets it, printed as one JSON line at the end.
_DRIVER = """
import json, os, subprocess, sys
watched = {"children": []}
class WatchTensorFlowImport:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" and "at_tensorflow_import" not in watched:
            watched["at_tensorflow_import"] = os.environ.get("TPU_LOAD_LIBRARY")
        return None
sys.meta_path.insert(0, WatchTensorFlowImport())
class WatchedPopen(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        if any("run_classifier.py" in str(a) for a in args):
            env = kwargs.get("env")
            watched["children"].append((env if env is not None else os.environ).get(
                "TPU_LOAD_LIBRARY"))
        super().__init__(args, *rest, **kwargs)
subprocess.Popen = WatchedPopen
namespace = {"__name__": "__main__"}
for index, source in enumerate(json.load(open(sys.argv[1]))):
    print("=== cell %d" % index, flush=True)
    exec(compile(source, "<cell %d>" % index, "exec"), namespace)
print("=== watched " + json.dumps(watched))
"""


def _code_cells():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  return [c.source for c in notebook.cells if c.cell_type == "code"]


def test_notebook_is_plain_python_with_tpu_settings_on_cpu():
  cells = _code_cells()
  for source in cells:
    compile(source, "<cell>", "exec")  # IPython magics (!cmd, %cd) are syntax errors here.
  settings = cells[0]
  # The cell a Colab TPU user edits: its defaults run on CPU, and the edit it
  # asks for (USE_TPU = True) is refused until BUCKET is a gs:// path.
  namespace = {}
  exec(settings, namespace)
  # TPU_NAME: Colab's TPU runtime is a TPU VM, whose TPU is "local" (a TPU Node's
  # address comes from its name; None would find nothing on a TPU VM).
  assert (namespace["USE_TPU"], namespace["TPU_NAME"], namespace["BUCKET"]) == (False, "local", None)
  on_tpu = settings.replace("USE_TPU = False", "USE_TPU = True", 1)
  assert on_tpu != settings
  with pytest.raises(ValueError, match="USE_TPU needs BUCKET = 'gs://...'"):
    exec(on_tpu, {})
  with pytest.raises(ValueError, match="USE_TPU needs BUCKET"):
    exec(on_tpu.replace("BUCKET = None", 'BUCKET = "/tmp/adapter_bert"', 1), {})
  namespace = {}
  exec(on_tpu.replace("BUCKET = None", 'BUCKET = "gs://bucket/adapter_bert"', 1), namespace)
  assert namespace["USE_TPU"] and namespace["BUCKET"] == "gs://bucket/adapter_bert"
  # Committed without outputs, so the diff shows code only.
  with open(NOTEBOOK, encoding="utf-8") as f:
    raw = json.load(f)
  assert all(not c.get("outputs") and c.get("execution_count") is None
             for c in raw["cells"] if c["cell_type"] == "code")


# Modules whose import loads TensorFlow: TensorFlow's own packages and every module of
# this repository (conversion, modeling, adapter_bert, ...), counted as one.
_TENSORFLOW_PACKAGES = {"tensorflow", "keras", "tf_keras", "tensorflow_hub", "tensorflow_text",
                        "official"}


def _loads_tensorflow(module):
  top = module.split(".")[0]
  return (top in _TENSORFLOW_PACKAGES or os.path.exists(os.path.join(ROOT, top + ".py"))
          or os.path.isdir(os.path.join(ROOT, top)))


def _sets_no_tpu_library(statement):
  """os.environ["TPU_LOAD_LIBRARY"] = "0" as a statement."""
  return (isinstance(statement, ast.Assign) and len(statement.targets) == 1
          and ast.unparse(statement.targets[0]) == "os.environ['TPU_LOAD_LIBRARY']"
          and isinstance(statement.value, ast.Constant) and statement.value.value == "0")


def test_the_kernel_sets_tpu_load_library_0_before_any_tensorflow_import():
  events = []  # ((cell, line, column), what), in the order the kernel runs them.
  for index, source in enumerate(_code_cells()):
    tree = ast.parse(source)
    for statement in tree.body:  # Unconditional: a statement of the cell itself.
      if _sets_no_tpu_library(statement):
        events.append(((index, statement.lineno, 0), "set"))
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        modules = [node.module]
      else:
        continue
      if any(_loads_tensorflow(m) for m in modules):
        events.append(((index, node.lineno, node.col_offset), "import " + ", ".join(modules)))
  events.sort()
  imports = [e for e in events if e[1] != "set"]
  assert imports, "no TensorFlow import found: the check would prove nothing"
  assert events[0][1] == "set", "the first TensorFlow import comes first: %s" % (events[:2],)


def test_the_run_cell_starts_run_classifier_without_tpu_load_library(tmp_path, monkeypatch):
  cells = _code_cells()
  settings = cells[0].replace("USE_TPU = False", "USE_TPU = True", 1).replace(
      "BUCKET = None", 'BUCKET = "gs://bucket/adapter_bert"', 1)
  [run_settings] = [c for c in cells if "TRAIN_BATCH_SIZE =" in c]
  [paths] = [c for c in cells if "def copy_dir" in c]
  [run_cell] = [c for c in cells if "run_classifier.py" in c and "Popen(" in c]
  started = []

  class Popen:  # Records the child's command and environment; the child exits at once.
    def __init__(self, command, **kwargs):
      started.append((command, kwargs))
      self.stdout, self.returncode = iter(()), 0

    def __enter__(self):
      return self

    def __exit__(self, *unused):
      return False

  # No files: the bucket's paths are computed (copying nothing); no output to remove.
  no_files = types.SimpleNamespace(io=types.SimpleNamespace(gfile=types.SimpleNamespace(
      exists=lambda path: False, walk=lambda path: iter(()))))
  monkeypatch.setenv("TPU_LOAD_LIBRARY", "0")  # As the kernel has it.
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  namespace = dict(os=os, sys=sys, tf=no_files, WORK=str(tmp_path), IN_COLAB=False,
                   LOCAL_MODEL_DIR="models/minilm", LOCAL_DATA_DIR="data",
                   subprocess=types.SimpleNamespace(Popen=Popen, PIPE=-1, STDOUT=-2))
  for cell in (settings, run_settings, paths, run_cell):
    exec(cell, namespace)

  [(command, kwargs)] = started
  assert command[1] == "run_classifier.py"
  assert "--use_tpu" in command and "--tpu_name=local" in command
  assert "--output_dir=gs://bucket/adapter_bert/output/demo" in command
  # docs/tpu.md's "Colab TPU VM, step by step" shows this command, for YOUR_BUCKET.
  with open(os.path.join(ROOT, "docs", "tpu.md"), encoding="utf-8") as f:
    block = f.read().split("```\npython run_classifier.py", 1)[1].split("```", 1)[0]
  documented = block.replace("\\\n", " ").replace("YOUR_BUCKET", "bucket").split()
  assert documented == command[2:]
  env = kwargs["env"]
  assert "TPU_LOAD_LIBRARY" not in env and os.environ["TPU_LOAD_LIBRARY"] == "0"
  assert env == dict({k: v for k, v in os.environ.items() if k != "TPU_LOAD_LIBRARY"},
                     TF_CPP_MIN_LOG_LEVEL="2")


@pytest.mark.slow  # About a minute on 2 CPU cores: MiniLM conversion and 3 training steps.
def test_notebook_runs_top_to_bottom_on_cpu(tmp_path):
  cells_file = tmp_path / "cells.json"
  cells_file.write_text(json.dumps(_code_cells()))
  env = dict(os.environ, NOTEBOOK_SMOKE_TEST="1", ADAPTER_BERT_WORK_DIR=str(tmp_path),
             TF_CPP_MIN_LOG_LEVEL="2")
  # Jupyter starts a notebook's kernel in the notebook's folder.
  result = subprocess.run([sys.executable, "-c", _DRIVER, str(cells_file)],
                          cwd=os.path.dirname(NOTEBOOK), env=env, capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  # TensorFlow was first imported with TPU_LOAD_LIBRARY=0; run_classifier.py started once,
  # without it.
  watched = json.loads(result.stdout.split("=== watched ", 1)[1])
  assert watched == {"at_tensorflow_import": "0", "children": [None]}

  output_dir = tmp_path / "output" / "notebook_demo"
  results = dict(line.split(" = ") for line in
                 (output_dir / "eval_results.txt").read_text().splitlines())
  assert 0.0 <= float(results["eval_accuracy"]) <= 1.0
  assert int(results["global_step"]) == 3  # int(48 examples / 16 * 1 epoch).
  assert (output_dir / "adapter_model" / "adapter_weights.safetensors").exists()
  assert (tmp_path / "models" / "minilm" / "bert_model.ckpt.index").exists()
  # The last cell printed the counts that run_classifier.py logged.
  assert "parameters: 23312266 total, 595200 adapter, 609034 trained" in result.stdout
  # ... and the accuracy line reports the accuracy run_classifier.py wrote.
  assert ("dev accuracy: %s (10 classes, chance 0.10)\n" % results["eval_accuracy"]
          in result.stdout)


def _template(node):
  """A regular expression for what a message's string or f-string can print."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return ".*".join(re.escape(p) for p in re.split(r"%[-+ #0-9.]*[sdfr]", node.value))
  if isinstance(node, ast.JoinedStr):
    return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".*"
                   for v in node.values)
  return None


def _log_templates():
  """A regular expression per message the product code logs through absl's logging,
  and for the progress line (an f-string of runtime/progress.py that loop.py logs)."""
  sources = [os.path.join(ROOT, "run_classifier.py")] + [
      os.path.join(parent, name) for parent, _, names in os.walk(os.path.join(ROOT, "adapter_bert"))
      for name in names if name.endswith(".py")]
  templates = []
  for path in sources:
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and ast.unparse(node.func.value) == "logging" and node.args):
        templates.append(_template(node.args[0]))
      elif isinstance(node, ast.JoinedStr) and path.endswith("progress.py"):
        templates.append(_template(node))
  # Not those that match nearly anything (a message given whole, as `logging.info(line)`).
  return [re.compile(t, re.S) for t in templates
          if t and len(re.sub(r"\.\*|\\", "", t)) >= 3]


def test_the_documented_first_lines_of_a_tpu_run_are_lines_the_code_logs():
  with open(os.path.join(ROOT, "docs", "tpu.md"), encoding="utf-8") as f:
    section = f.read().split("## Colab TPU VM, step by step", 1)[1]
  block = section.split("What a healthy run prints first", 1)[1].split("```\n", 2)[1]
  lines = [line for line in block.splitlines() if line != "..."]
  assert lines[0] == "TPU: local (--tpu_name)" and len(lines) > 10
  templates = _log_templates()
  # "..." in a line stands for what the run fills in.
  unknown = [line for line in lines
             if not any(t.fullmatch(line.replace("...", "0")) for t in templates)]
  assert not unknown


def _run_setup_cell_on_colab(tmp_path, monkeypatch, on_clone=None):
  """Runs the settings cell (USE_TPU with a bucket) and the code cell (clone and
  install) as on a Colab TPU runtime whose cwd is tmp_path (/content); returns the
  commands it ran and its namespace. No command runs: `on_clone` stands in for git."""
  cells = _code_cells()
  settings = cells[0].replace("USE_TPU = False", "USE_TPU = True", 1).replace(
      "BUCKET = None", 'BUCKET = "gs://bucket/adapter_bert"', 1)
  [setup] = [c for c in cells if "install_tpu.sh" in c]
  ran = []

  def run(command, **kwargs):
    ran.append(list(command))
    if command[:2] == ["git", "clone"] and on_clone:
      on_clone(os.path.abspath(command[-1]))
    return subprocess.CompletedProcess(command, 0)

  monkeypatch.chdir(tmp_path)
  monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
  monkeypatch.setattr(subprocess, "run", run)
  monkeypatch.setattr(sys, "path", list(sys.path))
  monkeypatch.setenv("TPU_LOAD_LIBRARY", "1")  # Restored after the cell sets it.
  namespace = {}
  exec(settings, namespace)
  exec(setup, namespace)
  return ran, namespace


def test_a_restarted_colab_runtime_reuses_the_clone_it_made(tmp_path, monkeypatch):
  def clone(target):  # What `git clone` leaves: a checkout.
    os.makedirs(target)
    open(os.path.join(target, "run_classifier.py"), "w").close()

  ran, namespace = _run_setup_cell_on_colab(tmp_path, monkeypatch, on_clone=clone)
  clone_dir = str(tmp_path / "adapter-bert-tf2")
  install = ["bash", os.path.join(clone_dir, "scripts", "install_tpu.sh"), sys.executable]
  [clone_command, install_command] = ran
  assert clone_command[:4] == ["git", "clone", "--depth=1", namespace["REPO_URL"]]
  assert os.path.join(tmp_path, clone_command[4]) == clone_dir and install_command == install
  assert namespace["REPO"] == clone_dir and os.getcwd() == clone_dir
  # A runtime restart: a fresh kernel back in /content, the clone still there. It is
  # reused as it is (no clone, no pull), and the install runs again.
  os.chdir(tmp_path)
  ran, namespace = _run_setup_cell_on_colab(tmp_path, monkeypatch)
  assert ran == [install]
  assert namespace["REPO"] == clone_dir and os.getcwd() == clone_dir


def test_a_folder_in_the_clones_place_that_is_no_checkout_is_one_clear_error(
    tmp_path, monkeypatch):
  (tmp_path / "adapter-bert-tf2").mkdir()  # E.g. a clone cut short.
  with pytest.raises(FileExistsError, match="adapter-bert-tf2 exists but holds no "
                     "run_classifier.py: remove it"):
    _run_setup_cell_on_colab(tmp_path, monkeypatch)



# What convert_checkpoint.py writes (a Google BERT release's files): the model directory
# of the stand-in checkout below.
_CONVERTED_FILES = ("vocab.txt", "bert_config.json", "bert_model.ckpt.index",
                    "bert_model.ckpt.data-00000-of-00001")
_READ_FLAGS = ("--data_dir", "--vocab_file", "--bert_config_file", "--init_checkpoint")


def _stand_in_checkout(root):
  """A checkout at `root` after the conversion: models/minilm/ and the task's data
  (empty files, named as the real ones)."""
  model = root / "models" / "minilm"
  model.mkdir(parents=True)
  for name in _CONVERTED_FILES:
    (model / name).write_text("")
  data = root / "data" / "wordnet" / "wordnet_lexname"
  data.mkdir(parents=True)
  for name in os.listdir(os.path.join(ROOT, "data", "wordnet", "wordnet_lexname")):
    (data / name).write_text("")
  return str(root)


def _notebook_command(checkout, bucket, fresh_run=None, removed=None):
  """The notebook's run command, and the copies (local file, bucket file) its paths
  cell makes, run in `checkout` (REPO and WORK, as on Colab) with `bucket` as BUCKET
  (None: on CPU). Only the paths are computed: tf.io.gfile's copy is recorded. With a
  list as `removed`, OUTPUT_DIR exists and what the cells remove is appended to it;
  `fresh_run`: FRESH_RUN set to that in the run cell."""
  cells = _code_cells()
  settings = cells[0]
  if bucket:
    settings = settings.replace("USE_TPU = False", "USE_TPU = True", 1).replace(
        "BUCKET = None", "BUCKET = %r" % bucket, 1)
  [run_settings] = [c for c in cells if "TRAIN_BATCH_SIZE =" in c]
  [paths] = [c for c in cells if "def copy_dir" in c]
  [run_cell] = [c for c in cells if "run_classifier.py" in c and "Popen(" in c]
  # LOCAL_MODEL_DIR and LOCAL_DATA_DIR as the conversion and data cells define them.
  local_dirs = [ast.unparse(statement) for c in cells for statement in ast.parse(c).body
                if isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0])
                in ("LOCAL_MODEL_DIR", "LOCAL_DATA_DIR")][:2]
  copies, started = [], []

  class Popen:  # The child exits at once, printing nothing.
    def __init__(self, command, **kwargs):
      started.append(command)
      self.stdout, self.returncode = iter(()), 0

    def __enter__(self):
      return self

    def __exit__(self, *unused):
      return False

  if fresh_run is not None:
    edited = run_cell.replace("FRESH_RUN = False", "FRESH_RUN = %s" % fresh_run, 1)
    assert edited != run_cell or not fresh_run
    run_cell = edited
  gfile = types.SimpleNamespace(exists=lambda path: removed is not None, walk=os.walk,
                                makedirs=lambda path: None,
                                copy=lambda src, dst, overwrite: copies.append((src, dst)),
                                rmtree=lambda path: removed.append(path))
  namespace = dict(os=os, sys=sys, tf=types.SimpleNamespace(io=types.SimpleNamespace(gfile=gfile)),
                   REPO=checkout, WORK=checkout, IN_COLAB=False,
                   subprocess=types.SimpleNamespace(Popen=Popen, PIPE=-1, STDOUT=-2))
  for cell in [settings, run_settings] + local_dirs + [paths, run_cell]:
    exec(cell, namespace)
  [command] = started
  return command, copies


def _flag_values(words):
  return {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words
          if w.split("=", 1)[0] in _READ_FLAGS}


def _shell_commands(markdown):
  """The commands in `markdown`'s code: each line of a fenced block (continuation
  lines joined) and each code span (which may wrap), split at &&."""
  commands = []
  def fenced(match):
    commands.extend(match.group(1).replace("\\\n", " ").splitlines())
    return ""
  prose = re.sub(r"```[^\n]*\n(.*?)```", fenced, markdown, flags=re.S)
  commands += re.findall(r"`([^`]+)`", prose)
  return [part.strip() for c in commands for part in " ".join(c.split()).split("&&")]


def _copy_commands(markdown):
  """(sources, destination) of each recursive copy to a bucket that `markdown` gives
  (gcloud storage cp -r, gsutil [-m] cp -r)."""
  found = []
  for command in _shell_commands(markdown):
    if not command.startswith(("gcloud", "gsutil")):
      continue
    words = shlex.split(command)
    if words[:3] == ["gcloud", "storage", "cp"]:
      rest = words[3:]
    elif words[:1] == ["gsutil"] and "cp" in words:
      rest = words[words.index("cp") + 1:]
    else:
      continue
    options = [w for w in rest if w.startswith("-")]
    paths = [w for w in rest if not w.startswith("-")]
    if len(paths) < 2:  # The command named, not given (`gcloud storage cp -r` puts ...).
      continue
    assert {"-r", "-R", "--recursive"} & set(options), command
    found.append((paths[:-1], paths[-1]))
  return found


def _copied_files(copy_commands, checkout):
  """(local file, bucket file) for each file the commands copy, run in `checkout`:
  `cp -r DIR DEST/` puts DIR's files under DEST/basename(DIR)/."""
  copies = []
  for sources, destination in copy_commands:
    # Without the /, where the directory lands depends on what the bucket holds already
    # (DEST/DIR if DEST exists, else DEST itself): the docs give the unambiguous form.
    assert destination.endswith("/"), destination
    for source in sources:
      local = os.path.join(checkout, source.rstrip("/"))
      for parent, _, names in os.walk(local):
        for name in names:
          path = os.path.join(parent, name)
          copies.append((path, destination + os.path.basename(local) + "/"
                         + os.path.relpath(path, local).replace(os.sep, "/")))
  return copies


def _check_the_run_reads_the_copies(copies, local_reads, bucket_reads):
  """Each file a flag reads on CPU (the flag's path itself, a file in that directory, or
  a checkpoint's files: PATH.index, PATH.data-...) is copied to the same path under the
  flag's value in the bucket run."""
  copied = dict(copies)
  assert sorted(local_reads) == sorted(bucket_reads) == sorted(_READ_FLAGS)
  for flag in _READ_FLAGS:
    local, remote = local_reads[flag], bucket_reads[flag]
    read = [path for path in copied if path == local or path.startswith(local + "/")
            or path.startswith(local + ".")]
    assert read, "%s: none of its files is copied (%s)" % (flag, local)
    for path in read:
      assert copied[path] == remote + path[len(local):], (flag, path, copied[path], remote)


def _docs():
  with open(os.path.join(ROOT, "docs", "tpu.md"), encoding="utf-8") as f:
    return f.read()


def _run_block_words(docs):
  block = docs.split("```\npython run_classifier.py", 1)[1].split("```", 1)[0]
  return block.replace("\\\n", " ").split()


def _notebook_markdown():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  return "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("where", ["docs/tpu.md", "the notebook's markdown"])
def test_the_documented_copies_land_where_the_documented_run_reads(tmp_path, where):
  checkout = _stand_in_checkout(tmp_path)
  command, _ = _notebook_command(checkout, None)  # The same run on CPU reads these files.
  local_reads = _flag_values(command)
  text = _docs() if where == "docs/tpu.md" else _notebook_markdown()
  copy_commands = _copy_commands(text)
  assert copy_commands, "no copy to the bucket in " + where
  copies = _copied_files(copy_commands, checkout)
  # docs/tpu.md's run command (test_the_run_cell_... holds it to the notebook's).
  bucket_reads = _flag_values(_run_block_words(_docs()))
  assert bucket_reads["--data_dir"].startswith("gs://YOUR_BUCKET/adapter_bert/")
  _check_the_run_reads_the_copies(copies, local_reads, bucket_reads)


def test_the_notebooks_copies_land_where_its_run_command_reads(tmp_path):
  checkout = _stand_in_checkout(tmp_path)
  local_reads = _flag_values(_notebook_command(checkout, None)[0])
  command, copies = _notebook_command(checkout, "gs://YOUR_BUCKET/adapter_bert")
  assert "--use_tpu" in command
  _check_the_run_reads_the_copies(copies, local_reads, _flag_values(command))


# Stands in for run_classifier.py in the stop tests: progress lines until SIGTERM, then
# (as run_classifier.py does) a checkpoint saved, a last line, and status 143; a closed
# pipe does not stop it (absl's logging reports a failed write and goes on). argv[1]:
# how long the save takes.
_FAKE_RUN = """
import os, signal, sys, time
def say(line):
    try:
        print(line, flush=True)
    except OSError:
        pass
def note(what):
    with open("child_signals", "a") as f:
        f.write(what + "\\n")
def on_sigterm(signum, frame):
    note(signal.Signals(signum).name)
    time.sleep(float(os.environ["FAKE_SAVE_SECONDS"]))
    say("I1201 loop.py:300] Saved checkpoint for step 7")
    note("saved")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
with open("child.pid", "w") as f:
    f.write(str(os.getpid()))
while True:
    say("I1201 progress.py:80] global_step = 7, loss = 1.0")
    time.sleep(0.05)
"""

# Runs the given cells in one namespace as the kernel does, with stand-ins for the earlier
# cells' names (CPU, nothing in OUTPUT_DIR); after a KeyboardInterrupt, prints whether the
# child (its pid in child.pid) is still a process, reaped or not.
_STOP_DRIVER = """
import json, os, subprocess, sys, types
no_files = types.SimpleNamespace(exists=lambda path: False)
namespace = dict(__name__="__main__", os=os, sys=sys, subprocess=subprocess, WORK=os.getcwd(),
                 IN_COLAB=False, LOCAL_MODEL_DIR="models/minilm", LOCAL_DATA_DIR="data",
                 tf=types.SimpleNamespace(io=types.SimpleNamespace(gfile=no_files)))
try:
    for source in json.load(open(sys.argv[1])):
        exec(compile(source, "<cell>", "exec"), namespace)
except KeyboardInterrupt:
    pid = int(open("child.pid").read())
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    print("=== stopped " + json.dumps({"child_alive": alive}), flush=True)
"""


@pytest.mark.parametrize("fresh_run", [None, True])
def test_a_rerun_resumes_from_the_output_directory_unless_fresh_run(tmp_path, fresh_run):
  # run_classifier.py resumes from the newest checkpoint in --output_dir (after a stop)
  # and refuses other settings there; FRESH_RUN = True starts over.
  removed = []
  command, _ = _notebook_command(_stand_in_checkout(tmp_path), None, fresh_run, removed)
  [output_dir] = [w.split("=", 1)[1] for w in command if w.startswith("--output_dir=")]
  assert output_dir == os.path.join(str(tmp_path), "output", "notebook_demo")
  assert removed == ([output_dir] if fresh_run else [])


@pytest.mark.parametrize("stops", [1, 2])
def test_stopping_the_run_cell_ends_the_run_before_the_cell_ends(tmp_path, stops):
  """The stop button (SIGINT to the kernel alone, as Colab sends it) sends the run
  SIGTERM; the cell reads its output to the end and waits for it, so a rerun finds
  the TPU free. A second stop while the run saves kills it."""
  cells = _code_cells()
  [run_settings] = [c for c in cells if "TRAIN_BATCH_SIZE =" in c]
  [paths] = [c for c in cells if "def copy_dir" in c]
  [run_cell] = [c for c in cells if "run_classifier.py" in c and "Popen(" in c]
  (tmp_path / "run_classifier.py").write_text(_FAKE_RUN)
  cells_file = tmp_path / "cells.json"
  cells_file.write_text(json.dumps([cells[0], run_settings, paths, run_cell]))
  env = dict(os.environ, FAKE_SAVE_SECONDS="1" if stops == 1 else "600")
  env.pop("NOTEBOOK_SMOKE_TEST", None)
  # SIGINT as a kernel has it: a suite started in the background (`nohup ... &` from a
  # script) hands its processes SIGINT ignored, and a Python started so ignores it too.
  kernel = subprocess.Popen([sys.executable, "-c", _STOP_DRIVER, str(cells_file)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  try:
    for line in kernel.stdout:  # Until the cell prints the run's progress.
      if line.startswith("global_step = 7"):
        break
    kernel.send_signal(signal.SIGINT)
    if stops == 2:
      deadline = time.time() + 30
      while ("SIGTERM" not in _read_if_there(tmp_path / "child_signals")
             and time.time() < deadline):
        time.sleep(0.05)
      kernel.send_signal(signal.SIGINT)
    output = kernel.communicate(timeout=60)[0]
  finally:
    kernel.kill()
    if (tmp_path / "child.pid").exists():  # The stand-in, if the cell left it running.
      try:
        os.kill(int((tmp_path / "child.pid").read_text()), signal.SIGKILL)
      except ProcessLookupError:
        pass
  # The cell re-raised the KeyboardInterrupt once the run had ended and been reaped.
  assert "=== stopped " + json.dumps({"child_alive": False}) in output, output[-2000:]
  log = (tmp_path / "run_classifier.log").read_text()
  if stops == 1:  # The run saved its checkpoint; its last line reached the log.
    assert _read_if_there(tmp_path / "child_signals") == "SIGTERM\nsaved\n"
    assert log.endswith("] Saved checkpoint for step 7\n")
    assert "run_classifier.py ended (exit 143): run this cell again to resume" in output
  else:  # Killed in the middle of its save.
    assert _read_if_there(tmp_path / "child_signals") == "SIGTERM\n"
    assert "run_classifier.py killed: run this cell again to resume" in output


def _read_if_there(path):
  return path.read_text() if path.exists() else ""


def test_the_tpu_docs_name_the_pinned_tensorflow_tpu_and_libtpu():
  # Every version docs/tpu.md gives for them is the one requirements-tpu.txt installs.
  with open(os.path.join(ROOT, "requirements-tpu.txt"), encoding="utf-8") as f:
    pins = dict(re.findall(r"^(tensorflow-tpu|libtpu)==(\S+)", f.read(), re.M))
  docs = _docs()
  for package in ("tensorflow-tpu", "libtpu"):
    named = re.findall(r"`%s`\s+(\d+\.\d+\.\d+)|%s==(\S+?)`" % (package, package), docs)
    named = [a or b for a, b in named]
    assert named and set(named) == {pins[package]}, (package, named, pins)
