"""docs/tpu.md's "Colab TPU VM, step by step" gives the commands the notebook runs.

The install, the conversion and the run command (with USE_TPU = True, without a bucket
and with one) are compared word for word with the commands the notebook's cells start,
run with stand-ins for their child processes (tests/notebook_cells.py) in a checkout;
paths inside the checkout become relative, as in a shell there. The copies to a bucket
(docs/tpu.md's and the notebook markdown's `gcloud storage cp -r`, and the notebook's own
through tf.io.gfile in a child process) land where the run command reads; the results
come back from the bucket through a child process too. The first lines docs/tpu.md says
a healthy TPU run prints are lines the code logs.
"""

import ast
import os
import re
import shlex
import sys

import pytest

import notebook_cells
from notebook_cells import ROOT

_READ_FLAGS = ("--data_dir", "--vocab_file", "--bert_config_file", "--init_checkpoint")


def _fenced_blocks(markdown):
  """The text of each fenced code block, its lines' indentation removed."""
  return ["\n".join(line.strip() for line in block.splitlines())
          for block in re.findall(r"```[^\n]*\n(.*?)```", markdown, flags=re.S)]


def _documented(start):
  """Each command of docs/tpu.md's step-by-step section whose fenced block starts with
  `start`, as the words a shell gives it (continuation lines joined)."""
  section = notebook_cells.docs().split("## Colab TPU VM, step by step", 1)[1].split("\n## ", 1)[0]
  return [shlex.split(block.replace("\\\n", " ")) for block in _fenced_blocks(section)
          if block.startswith(start)]


def _in_the_checkout(command, checkout):
  """`command` as typed in a shell in `checkout`: its paths relative to it."""
  return [word.replace(checkout + os.sep, "") for word in command]


def test_the_documented_install_is_the_notebooks(tmp_path, monkeypatch):
  clone = tmp_path / "adapter-bert-tf2"
  notebook_cells.make_checkout(str(clone))
  ran, _, namespace, _ = notebook_cells.setup_as_on_colab(tmp_path, monkeypatch, use_tpu=True)
  [install] = ran
  # The runtime's Python: python3 in a shell, the kernel's own in the notebook.
  notebook = ["python3" if w == sys.executable else w
              for w in _in_the_checkout(install, str(clone))]
  assert _documented("bash scripts/install_tpu.sh") == [notebook]
  assert notebook == ["bash", "scripts/install_tpu.sh", "python3", ".venv-tpu"]
  # ... and every command after it runs with that environment's Python.
  assert _in_the_checkout([namespace["PY"]], str(clone)) == [".venv-tpu/bin/python"]


def test_the_documented_conversion_is_the_notebooks(tmp_path):
  checkout = str(tmp_path / "adapter-bert-tf2")
  os.makedirs(checkout)
  _, children, _ = notebook_cells.run_cells(checkout, use_tpu=True, through="conversion")
  query, convert = [_in_the_checkout(c, checkout) for c in children.commands]
  [documented] = _documented(".venv-tpu/bin/python convert_checkpoint.py")
  [hf_dir] = [w for w in documented if w.startswith("--hf_dir=")]
  # --hf_dir="$(PY -c '...')": the folder the query prints (the stand-in's HF_DIR).
  inner = re.fullmatch(r"--hf_dir=\$\((.*)\)", hf_dir)
  assert inner and shlex.split(inner.group(1)) == query
  assert query[:2] == [".venv-tpu/bin/python", "-c"]
  assert [w if w != hf_dir else "--hf_dir=HF_DIR" for w in documented] == convert
  assert convert[:3] == [".venv-tpu/bin/python", "convert_checkpoint.py",
                         "--output_dir=models/minilm"]


@pytest.mark.parametrize("bucket", [None, "gs://YOUR_BUCKET/adapter_bert"])
def test_the_documented_run_command_is_the_notebooks(tmp_path, monkeypatch, bucket):
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  checkout = notebook_cells.stand_in_checkout(tmp_path / "adapter-bert-tf2")
  _, children, _ = notebook_cells.run_cells(checkout, use_tpu=True, bucket=bucket)
  run = _in_the_checkout(children.commands[-1], checkout)
  documented = [c for c in _documented(".venv-tpu/bin/python run_classifier.py")
                if any(w.startswith("--output_dir=gs://") for w in c) == bool(bucket)]
  assert documented == [run]
  assert run[-2:] == ["--use_tpu", "--tpu_name=local"]
  assert ("--output_dir=gs://YOUR_BUCKET/adapter_bert/output/demo" if bucket
          else "--output_dir=output/notebook_demo") in run


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
  section = notebook_cells.docs().split("## Colab TPU VM, step by step", 1)[1]
  block = section.split("What a healthy run prints first", 1)[1].split("```\n", 2)[1]
  lines = [line for line in block.splitlines() if line != "..."]
  assert lines[0] == "TPU: local (--tpu_name)" and len(lines) > 10
  templates = _log_templates()
  # "..." in a line stands for what the run fills in.
  unknown = [line for line in lines
             if not any(t.fullmatch(line.replace("...", "0")) for t in templates)]
  assert not unknown


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


def _local_reads(checkout):
  """What the same run reads on CPU, without a bucket."""
  _, children, _ = notebook_cells.run_cells(checkout)
  return notebook_cells.flag_values(children.commands[-1], _READ_FLAGS)


@pytest.mark.parametrize("where", ["docs/tpu.md", "the notebook's markdown"])
def test_the_documented_copies_land_where_the_documented_run_reads(tmp_path, monkeypatch, where):
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  checkout = notebook_cells.stand_in_checkout(tmp_path / "checkout")
  text = notebook_cells.docs() if where == "docs/tpu.md" else notebook_cells.markdown()
  copy_commands = _copy_commands(text)
  assert copy_commands, "no copy to the bucket in " + where
  copies = _copied_files(copy_commands, checkout)
  # docs/tpu.md's run command with a bucket (held to the notebook's above).
  [run] = [c for c in _documented(".venv-tpu/bin/python run_classifier.py")
           if "--output_dir=gs://YOUR_BUCKET/adapter_bert/output/demo" in c]
  bucket_reads = notebook_cells.flag_values(run, _READ_FLAGS)
  assert bucket_reads["--data_dir"].startswith("gs://YOUR_BUCKET/adapter_bert/")
  _check_the_run_reads_the_copies(copies, _local_reads(checkout), bucket_reads)


def test_the_notebooks_copies_land_where_its_run_command_reads(tmp_path, monkeypatch):
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  checkout = notebook_cells.stand_in_checkout(tmp_path / "checkout")
  local_reads = _local_reads(checkout)
  namespace, children, fake_tensorflow = notebook_cells.run_cells(
      checkout, bucket="gs://YOUR_BUCKET/adapter_bert", buckets=tmp_path / "buckets")
  # One child of PY made the copies (with tf.io.gfile), then the run started.
  copy, run = children.commands
  assert copy[:4] == [namespace["PY"], "-c", namespace["GFILE"], "copy"]
  assert run[:2] == [namespace["PY"], "run_classifier.py"] and "--use_tpu" in run
  bucket_reads = notebook_cells.flag_values(run, _READ_FLAGS)
  _check_the_run_reads_the_copies(fake_tensorflow.copies, local_reads, bucket_reads)
  # The files are in the bucket, each where the run reads it.
  for flag, path in bucket_reads.items():
    in_bucket = fake_tensorflow.local(path)
    assert (os.path.isdir(in_bucket) if flag == "--data_dir" else
            os.path.exists(in_bucket) or os.path.exists(in_bucket + ".index")), (flag, path)


def test_the_results_come_back_from_the_bucket_through_a_child(tmp_path, monkeypatch, capsys):
  monkeypatch.delenv("NOTEBOOK_SMOKE_TEST", raising=False)
  checkout = notebook_cells.stand_in_checkout(tmp_path / "checkout")
  output = tmp_path / "buckets" / "YOUR_BUCKET" / "adapter_bert" / "output" / "demo"
  (output / "adapter_model" / "sub").mkdir(parents=True)  # What the run wrote there.
  (output / "eval_results.txt").write_text("eval_accuracy = 0.862\nglobal_step = 250\n")
  (output / "adapter_model" / "adapter_weights.safetensors").write_bytes(b"0" * 2_400_000)
  (output / "adapter_model" / "sub" / "file.txt").write_text("a tree is copied whole")
  run_log = ["I1201 run_classifier.py:1] ***** %s Parameters = %d *****\n" % count for count in
             (("Total", 23312266), ("Adapter", 595200), ("Total Trainable", 609034))]
  namespace, children, _ = notebook_cells.run_cells(
      checkout, bucket="gs://YOUR_BUCKET/adapter_bert", buckets=tmp_path / "buckets",
      through="results", run_output=run_log)
  fetch = children.commands[-1]
  assert fetch[:4] == [namespace["PY"], "-c", namespace["GFILE"], "copy"]
  fetched = os.path.join(checkout, "output", "notebook_demo_from_bucket")
  assert sorted(os.listdir(fetched)) == ["adapter_model", "eval_results.txt"]
  with open(os.path.join(fetched, "adapter_model", "sub", "file.txt"), encoding="utf-8") as f:
    assert f.read() == "a tree is copied whole"
  printed = capsys.readouterr().out
  assert "dev accuracy: 0.862 (10 classes, chance 0.10)\n" in printed
  assert ("adapter-only weights: 2.4 MB (gs://YOUR_BUCKET/adapter_bert/output/demo/"
          "adapter_model)\n") in printed
  assert "parameters: 23312266 total, 595200 adapter, 609034 trained (2.6%)\n" in printed


def test_the_tpu_docs_name_the_pinned_tensorflow_tpu_and_libtpu():
  # Every version docs/tpu.md gives for them is the one requirements-tpu.txt installs.
  with open(os.path.join(ROOT, "requirements-tpu.txt"), encoding="utf-8") as f:
    pins = dict(re.findall(r"^(tensorflow-tpu|libtpu)==(\S+)", f.read(), re.M))
  docs = notebook_cells.docs()
  for package in ("tensorflow-tpu", "libtpu"):
    named = re.findall(r"`%s`\s+(\d+\.\d+\.\d+)|%s==(\S+?)`" % (package, package), docs)
    named = [a or b for a, b in named]
    assert named and set(named) == {pins[package]}, (package, named, pins)
