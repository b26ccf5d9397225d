"""notebooks/adapter_bert_colab.ipynb: its settings, its setup on Colab, and a real run.

The code cells run in order in one fresh Python process, in one namespace, as a Jupyter
kernel would run them (the notebook uses no IPython magics, so no kernel is needed).
NOTEBOOK_SMOKE_TEST=1 shrinks the run to a few steps on a few examples;
ADAPTER_BERT_WORK_DIR keeps the generated model and outputs in tmp_path.

The kernel (on Colab a Python 3.13 without TensorFlow) never imports TensorFlow or this
project: each step that needs them runs as a child process of the run's Python, PY, and
ends before the next starts, so on a TPU VM the run finds the TPU free. The real run
watches the kernel's imports and the children's commands and environments. What a Colab
user goes through is checked from the cells' code, with stand-ins for the child
processes (tests/notebook_cells.py): which Python the run uses and what is installed,
the repository from REPO_SOURCE and its reuse after a runtime restart, the settings a
TPU Node needs, FRESH_RUN, and stopping the run cell. tests/test_notebook_docs.py holds
docs/tpu.md's commands to the notebook's.
"""

import ast
import json
import os
import signal
import subprocess
import sys
import time
import types
import zipfile

import pytest

import notebook_cells
from notebook_cells import NOTEBOOK, ROOT, make_checkout, setup_as_on_colab

# Modules whose import loads TensorFlow: TensorFlow's own packages and every module of
# this repository (conversion, modeling, adapter_bert, ...).
_TENSORFLOW_PACKAGES = ("tensorflow", "keras", "tf_keras", "tensorflow_hub", "tensorflow_text",
                        "official")


def _loads_tensorflow(module):
  top = module.split(".")[0]
  return (top in _TENSORFLOW_PACKAGES or os.path.exists(os.path.join(ROOT, top + ".py"))
          or os.path.isdir(os.path.join(ROOT, top)))


def test_notebook_is_plain_python_committed_without_outputs():
  for source in notebook_cells.code_cells():
    compile(source, "<cell>", "exec")  # IPython magics (!cmd, %cd) are syntax errors here.
  with open(NOTEBOOK, encoding="utf-8") as f:
    raw = json.load(f)
  # Committed without outputs, so the diff shows code only.
  assert all(not c.get("outputs") and c.get("execution_count") is None
             for c in raw["cells"] if c["cell_type"] == "code")


def test_no_cell_imports_tensorflow_or_this_project():
  imported = []
  for source in notebook_cells.code_cells():
    for node in ast.walk(ast.parse(source)):
      if isinstance(node, ast.Import):
        imported += [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        imported.append(node.module)
  assert "subprocess" in imported and "google.colab" in imported  # The scan sees imports.
  assert [m for m in imported if _loads_tensorflow(m)] == []
  # ... and no kernel-side TPU_LOAD_LIBRARY=0: the only mention drops it from the run's env.
  mentions = [line.strip() for source in notebook_cells.code_cells()
              for line in source.splitlines()
              if "TPU_LOAD_LIBRARY" in line and not line.strip().startswith("#")]
  assert mentions == ['env = {k: v for k, v in os.environ.items() if k != "TPU_LOAD_LIBRARY"}']


def _settings(**edits):
  namespace = {}
  exec(notebook_cells.settings(**edits), namespace)
  return namespace


def test_settings_run_on_cpu_and_on_a_tpu_vm_without_a_bucket():
  defaults = _settings()
  assert ((defaults["USE_TPU"], defaults["TPU_NAME"], defaults["BUCKET"],
           defaults["REPO_SOURCE"]) == (False, "local", None, ""))
  # Colab's TPU runtime is a TPU VM: local paths work there, a bucket is optional.
  assert _settings(use_tpu=True)["USE_TPU"]
  assert _settings(use_tpu=True, bucket="gs://b/adapter_bert")["BUCKET"] == "gs://b/adapter_bert"
  assert _settings(use_tpu=True, tpu_name="my-node", bucket="gs://b/a")["TPU_NAME"] == "my-node"


@pytest.mark.parametrize("edits, message", [
    (dict(use_tpu=True, tpu_name="my-node"),
     "a TPU Node (TPU_NAME = 'my-node') reads and writes only Cloud Storage: "
     "set BUCKET = 'gs://...'"),
    (dict(use_tpu=True, tpu_name="grpc://10.0.0.2:8470"),
     "a TPU Node (TPU_NAME = 'grpc://10.0.0.2:8470') reads and writes only Cloud Storage: "
     "set BUCKET = 'gs://...'"),
    (dict(bucket="/tmp/adapter_bert"),
     "BUCKET is a Cloud Storage path, gs://...; leave it None to keep every file on this "
     "machine"),
])
def test_settings_a_run_cannot_use_are_refused_in_one_line(edits, message):
  with pytest.raises(ValueError) as refused:
    _settings(**edits)
  assert str(refused.value) == message


@pytest.mark.parametrize("runtime", ["TPU", "CPU"])
def test_on_colab_the_run_uses_an_environment_of_its_own(tmp_path, monkeypatch, runtime):
  clone = str(tmp_path / "adapter-bert-tf2")
  make_checkout(clone)
  ran, envs, namespace, lines = setup_as_on_colab(tmp_path, monkeypatch,
                                                  use_tpu=runtime == "TPU")
  if runtime == "TPU":  # Made from the kernel's Python; nothing installed into it.
    venv = os.path.join(clone, ".venv-tpu")
    assert ran == [["bash", os.path.join(clone, "scripts", "install_tpu.sh"), sys.executable,
                    venv]]
    assert envs == [None]
  else:  # TensorFlow 2.20 (requirements.txt) in .venv, made from the kernel's Python.
    venv = os.path.join(clone, ".venv")
    assert ran == [["bash", os.path.join(clone, "scripts", "install.sh")]]
    assert envs[0]["PYTHON"] == sys.executable
  assert namespace["PY"] == os.path.join(venv, "bin", "python")
  # One line says which Python the run uses, and why.
  [line] = [l for l in lines if l.startswith("the run's Python:")]
  assert line.startswith("the run's Python: %s (" % namespace["PY"]) and "\n" not in line
  assert ("Python 3.12 environment of its own: tensorflow-tpu has no Python 3.13 wheels"
          in line) == (runtime == "TPU")


def test_inside_a_checkout_the_run_uses_this_python_and_installs_nothing(tmp_path, monkeypatch):
  make_checkout(str(tmp_path / "checkout"))
  (tmp_path / "checkout" / "notebooks").mkdir()  # Jupyter starts in the notebook's folder.
  for use_tpu in (False, True):
    ran, _, namespace, lines = setup_as_on_colab(tmp_path / "checkout" / "notebooks",
                                                 monkeypatch, use_tpu=use_tpu, colab=False)
    assert ran == [] and namespace["PY"] == sys.executable
    assert namespace["REPO"] == str(tmp_path / "checkout")
    [line] = [l for l in lines if l.startswith("the run's Python:")]
    assert line.startswith("the run's Python: %s (this notebook's own Python" % sys.executable)


def test_a_restarted_colab_runtime_reuses_the_clone_it_made(tmp_path, monkeypatch):
  url = "https://example.org/adapter-bert-tf2.git"
  ran, _, namespace, _ = setup_as_on_colab(tmp_path, monkeypatch, repo_source=url,
                                           on_clone=make_checkout)
  clone_dir = str(tmp_path / "adapter-bert-tf2")
  install = ["bash", os.path.join(clone_dir, "scripts", "install_tpu.sh"), sys.executable,
             os.path.join(clone_dir, ".venv-tpu")]
  [clone_command, install_command] = ran
  assert clone_command[:4] == ["git", "clone", "--depth=1", url]
  assert os.path.join(tmp_path, clone_command[4]) == clone_dir and install_command == install
  assert namespace["REPO"] == clone_dir and os.getcwd() == clone_dir
  # A runtime restart: a fresh kernel back in /content, the clone still there. It is
  # reused as it is (no clone, no pull), even without REPO_SOURCE; the install runs again.
  os.chdir(tmp_path)
  ran, _, namespace, _ = setup_as_on_colab(tmp_path, monkeypatch)
  assert ran == [install]
  assert namespace["REPO"] == clone_dir and os.getcwd() == clone_dir


def test_without_repo_source_colab_says_in_one_line_what_to_set(tmp_path, monkeypatch):
  with pytest.raises(ValueError) as stopped:
    setup_as_on_colab(tmp_path, monkeypatch)
  assert str(stopped.value) == ("set REPO_SOURCE in the first cell: this repository's git "
                                "URL, or the path of an uploaded copy (a folder or a .zip)")
  assert os.listdir(tmp_path) == []
  # Outside Colab and outside a checkout there is nothing to set: run it from a checkout.
  with pytest.raises(FileNotFoundError, match="run this notebook from the repository"):
    setup_as_on_colab(tmp_path, monkeypatch, colab=False)


def _uploaded(tmp_path, kind):
  """A copy of a checkout as a user uploads it: a folder, or a .zip of the folder (as
  GitHub's "Download ZIP" makes it) or of its files."""
  folder = tmp_path / "upload" / "adapter-bert-tf2-main"
  make_checkout(str(folder))
  (folder / "scripts").mkdir()
  (folder / "scripts" / "install_tpu.sh").write_text("# the script\n")
  (folder / ".venv" / "bin").mkdir(parents=True)  # A local environment: not copied.
  if kind == "folder":
    return str(folder)
  archive = tmp_path / "upload" / "adapter-bert-tf2.zip"
  with zipfile.ZipFile(archive, "w") as z:
    for name in ("run_classifier.py", "scripts/install_tpu.sh"):
      z.write(folder / name, ("adapter-bert-tf2-main/" if kind == "zip" else "") + name)
  return str(archive)


@pytest.mark.parametrize("kind", ["folder", "zip", "zip of the files"])
def test_an_uploaded_copy_becomes_the_checkout(tmp_path, monkeypatch, kind):
  (tmp_path / "content").mkdir()
  source = _uploaded(tmp_path, kind)
  ran, _, namespace, _ = setup_as_on_colab(tmp_path / "content", monkeypatch,
                                           repo_source=source)
  clone = tmp_path / "content" / "adapter-bert-tf2"
  assert namespace["REPO"] == str(clone)
  assert (clone / "scripts" / "install_tpu.sh").read_text() == "# the script\n"
  assert not (clone / ".venv").exists()
  assert sorted(os.listdir(tmp_path / "content")) == ["adapter-bert-tf2"]  # Nothing left over.
  assert ran == [["bash", str(clone / "scripts" / "install_tpu.sh"), sys.executable,
                  str(clone / ".venv-tpu")]]


def test_a_repo_source_that_is_not_there_is_one_clear_error(tmp_path, monkeypatch):
  with pytest.raises(FileNotFoundError) as stopped:
    setup_as_on_colab(tmp_path, monkeypatch, repo_source="/content/adapter-bert.zip")
  assert str(stopped.value) == ("REPO_SOURCE = '/content/adapter-bert.zip' is no folder, "
                                ".zip or git URL here")


def test_a_folder_in_the_clones_place_that_is_no_checkout_is_one_clear_error(
    tmp_path, monkeypatch):
  (tmp_path / "adapter-bert-tf2").mkdir()  # E.g. a clone cut short.
  with pytest.raises(FileExistsError, match="adapter-bert-tf2 exists but holds no "
                     "run_classifier.py: remove it"):
    setup_as_on_colab(tmp_path, monkeypatch, repo_source="https://example.org/r.git")


def test_the_run_cell_starts_the_run_with_py_and_without_tpu_load_library(tmp_path,
                                                                          monkeypatch):
  monkeypatch.setenv("TPU_LOAD_LIBRARY", "0")  # As an environment may have it.
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  checkout = notebook_cells.stand_in_checkout(tmp_path / "checkout")
  namespace, children, _ = notebook_cells.run_cells(checkout, use_tpu=True)
  [command] = children.commands  # No bucket: nothing copied, the run reads local files.
  assert command[:2] == [namespace["PY"], "run_classifier.py"]
  assert command[-2:] == ["--use_tpu", "--tpu_name=local"]
  assert "--output_dir=" + os.path.join(checkout, "output", "notebook_demo") in command
  [kwargs] = children.popen_kwargs
  assert kwargs["env"] == dict({k: v for k, v in os.environ.items() if k != "TPU_LOAD_LIBRARY"},
                               TF_CPP_MIN_LOG_LEVEL="2")
  assert os.environ["TPU_LOAD_LIBRARY"] == "0"


@pytest.mark.parametrize("fresh_run", [None, True])
@pytest.mark.parametrize("bucket", [None, "gs://bucket/adapter_bert"])
def test_a_rerun_resumes_from_the_output_directory_unless_fresh_run(tmp_path, monkeypatch,
                                                                   fresh_run, bucket):
  # run_classifier.py resumes from the newest checkpoint in --output_dir (after a stop)
  # and refuses other settings there; FRESH_RUN = True starts over.
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  checkout = notebook_cells.stand_in_checkout(tmp_path / "checkout")
  output_dir = (tmp_path / "buckets" / "bucket" / "adapter_bert" / "output" / "demo" if bucket
                else tmp_path / "checkout" / "output" / "notebook_demo")
  output_dir.mkdir(parents=True)
  (output_dir / "model.ckpt-3.index").write_text("")  # A run's checkpoint.
  namespace, children, fake_tensorflow = notebook_cells.run_cells(
      checkout, bucket=bucket, fresh_run=fresh_run, buckets=tmp_path / "buckets")
  assert "--output_dir=" + namespace["OUTPUT_DIR"] in children.commands[-1]
  assert (output_dir / "model.ckpt-3.index").exists() == (not fresh_run)
  if bucket:  # Removed by a child of PY, through tf.io.gfile.
    assert fake_tensorflow.removed == (["gs://bucket/adapter_bert/output/demo"] if fresh_run
                                       else [])


@pytest.mark.slow  # About 20 s on 2 CPU cores: MiniLM conversion and 3 training steps.
def test_notebook_runs_top_to_bottom_on_cpu_with_no_tensorflow_in_the_kernel(tmp_path):
  cells_file = tmp_path / "cells.json"
  cells_file.write_text(json.dumps(notebook_cells.code_cells()))
  # TPU_LOAD_LIBRARY=0 as an environment may have it: the run must not inherit it.
  env = dict(os.environ, NOTEBOOK_SMOKE_TEST="1", ADAPTER_BERT_WORK_DIR=str(tmp_path),
             TF_CPP_MIN_LOG_LEVEL="2", TPU_LOAD_LIBRARY="0")
  # Jupyter starts a notebook's kernel in the notebook's folder.
  result = subprocess.run([sys.executable, "-c", _DRIVER, str(cells_file),
                           ",".join(_TENSORFLOW_PACKAGES)],
                          cwd=os.path.dirname(NOTEBOOK), env=env, capture_output=True,
                          text=True, timeout=900)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  watched = json.loads(result.stdout.split("=== watched ", 1)[1])
  # The kernel imported no TensorFlow, and no module of this repository.
  assert watched["imports"] == []
  # Each step that needs TensorFlow was a child of PY (this Python, in a checkout).
  assert watched["children"] == [
      [sys.executable, "-c", "0"], [sys.executable, "convert_checkpoint.py", "0"],
      [sys.executable, "run_classifier.py", None]]
  assert "the run's Python: %s (this notebook's own Python" % sys.executable in result.stdout

  output_dir = tmp_path / "output" / "notebook_demo"
  results = dict(line.split(" = ") for line in
                 (output_dir / "eval_results.txt").read_text().splitlines())
  assert 0.0 <= float(results["eval_accuracy"]) <= 1.0
  assert int(results["global_step"]) == 3  # int(48 examples / 16 * 1 epoch).
  assert (output_dir / "adapter_model" / "adapter_weights.safetensors").exists()
  assert (tmp_path / "models" / "minilm" / "bert_model.ckpt.index").exists()
  # The conversion cell printed the converted model's config, read in the kernel.
  assert "'num_hidden_layers': 6, 'hidden_size': 384" in result.stdout
  # The last cell printed the counts that run_classifier.py logged.
  assert "parameters: 23312266 total, 595200 adapter, 609034 trained" in result.stdout
  # ... and the accuracy line reports the accuracy run_classifier.py wrote.
  assert ("dev accuracy: %s (10 classes, chance 0.10)\n" % results["eval_accuracy"]
          in result.stdout)


# Runs the cells given as a JSON list of sources; a failing cell is named. It records each
# import the kernel asks for of a module that loads TensorFlow (argv[2]: TensorFlow's
# packages; and any module of the repository), and each child process: its command's
# first two words and the TPU_LOAD_LIBRARY it gets; printed as one JSON line at the end.
_DRIVER = """
import json, os, subprocess, sys
watched = {"imports": [], "children": []}
root = os.path.dirname(os.getcwd())
packages = sys.argv[2].split(",")
class WatchTensorFlowImports:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if (top in packages or os.path.exists(os.path.join(root, top + ".py"))
                or os.path.isdir(os.path.join(root, top))):
            watched["imports"].append(name)
        return None
sys.meta_path.insert(0, WatchTensorFlowImports())
class WatchedPopen(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        env = kwargs.get("env")
        watched["children"].append([str(a) for a in args[:2]] + [
            (env if env is not None else os.environ).get("TPU_LOAD_LIBRARY")])
        super().__init__(args, *rest, **kwargs)
subprocess.Popen = WatchedPopen
namespace = {"__name__": "__main__"}
for index, source in enumerate(json.load(open(sys.argv[1]))):
    print("=== cell %d" % index, flush=True)
    exec(compile(source, "<cell %d>" % index, "exec"), namespace)
print("=== watched " + json.dumps(watched))
"""

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
# cells' names (CPU, nothing in OUTPUT_DIR, this Python as PY); after a KeyboardInterrupt,
# prints whether the child (its pid in child.pid) is still a process, reaped or not.
_STOP_DRIVER = """
import json, os, subprocess, sys
namespace = dict(__name__="__main__", os=os, sys=sys, subprocess=subprocess, WORK=os.getcwd(),
                 IN_COLAB=False, LOCAL_MODEL_DIR="models/minilm", LOCAL_DATA_DIR="data",
                 PY=sys.executable)
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


@pytest.mark.parametrize("stops", [1, 2])
def test_stopping_the_run_cell_ends_the_run_before_the_cell_ends(tmp_path, stops):
  """The stop button (SIGINT to the kernel alone, as Colab sends it) sends the run
  SIGTERM; the cell reads its output to the end and waits for it, so a rerun finds
  the TPU free. A second stop while the run saves kills it."""
  (tmp_path / "run_classifier.py").write_text(_FAKE_RUN)
  cells_file = tmp_path / "cells.json"
  cells_file.write_text(json.dumps([
      notebook_cells.settings(), notebook_cells.run_settings_cell(),
      notebook_cells.paths_cell(), notebook_cells.run_cell()]))
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
