"""Every path flag of every command, given a path that cannot be what it must be,
ends the command with one line naming the flag and the path, exit status 2, no
traceback, and nothing written.

The faults (storage/path_checks.py): a file where a directory is expected and
the reverse, a path that does not exist, a directory that cannot be written
(under a file; permission bits, where the tests do not run as root), and a
gs:// path whose file system does not answer. Each command's main runs
in-process on a fresh FlagValues (as tests/test_bad_files.py's do); one case
runs a real command to show the bound on an unreachable gs://.
"""

import functools
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf
from absl import flags

import convert_checkpoint
import export_savedmodel
import manage_bank
from adapter_bert import errors
import run_classifier
import run_multitask
import run_squad
from experiments import ablation
from experiments import embedding_baseline
from experiments import multitask_comparison
from experiments import paper_table
from experiments import plots
from experiments import select
from experiments.study import command as study
from experiments import sweep
from adapter_bert.squad import evaluate as squad_evaluate
from adapter_bert.storage import path_checks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC = os.path.join(REPO, "data", "glue", "MRPC")
SQUAD_DEV = os.path.join(REPO, "data", "squad", "dev-v1.1.json")
INTEROP = os.path.join(REPO, "tests", "fixtures", "interop")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

IN_FILE, IN_DIR, IN_ANY, CKPT, OUT_DIR, OUT_FILE = (
    path_checks.INPUT_FILE, path_checks.INPUT_DIR, path_checks.INPUT_FILE_OR_DIR,
    path_checks.CHECKPOINT, path_checks.OUTPUT_DIR, path_checks.OUTPUT_FILE)

# The faults tried on each kind of path.
FAULTS = {IN_FILE: ("missing", "directory", "gs"), IN_DIR: ("missing", "file", "gs"),
          IN_ANY: ("missing", "gs"), CKPT: ("missing", "gs"),
          OUT_DIR: ("file", "under_file", "read_only", "gs"),
          OUT_FILE: ("directory", "under_file", "read_only", "gs")}


@pytest.fixture(scope="module")
def good(base, interop_base, tmp_path_factory):
  """Valid paths for the flags not under test."""
  d = tmp_path_factory.mktemp("good")
  results = d / "results.json"
  results.write_text("[]")
  (d / "grid.json").write_text("{}")
  (d / "pred.json").write_text("{}")
  (d / "adapter_model").mkdir()
  for name in ("bank", "run", "hf", "model", "data_root"):
    (d / name).mkdir()
  return dict(base, interop=interop_base, results=str(results), grid=str(d / "grid.json"), pred=str(d / "pred.json"),
              adapter_model=str(d / "adapter_model"), **{
                  n: str(d / n) for n in ("bank", "run", "hf", "model", "data_root")})


def _flags(**values):
  return [f"--{k}" if v is True else f"--{k}={v}" for k, v in values.items()]


def _classifier(g, out, **more):
  return _flags(task_name="mrpc", data_dir=MRPC, output_dir=out,
                bert_config_file=g["bert_config_file"], vocab_file=g["vocab_file"],
                init_checkpoint=g["init_checkpoint"], adapter_size=4, do_eval=True, **more)


def _encoder(g, out):
  return dict(bert_config_file=g["bert_config_file"], vocab_file=g["vocab_file"],
              init_checkpoint=g["init_checkpoint"], output_dir=out)


def _adapter_import(g, out):
  """convert_checkpoint.py's flags besides the AdapterHub / PEFT directory: the
  fixtures' tiny base (tests/fixtures/interop/)."""
  base = g["interop"]
  return dict(init_checkpoint=base["init_checkpoint"],
              bert_config_file=base["bert_config_file"], output_dir=out, task_name="t",
              labels="positive,negative,neutral", max_seq_length=12)


# command -> (module, how it runs, argv of valid flags, {path flag: kind}). The flag
# under test is appended last (absl keeps the last value given).
COMMANDS = {
    "run_classifier.py": (run_classifier, "absl", lambda g, out: _classifier(g, out), dict(
        data_dir=IN_DIR, output_dir=OUT_DIR, bert_config_file=IN_FILE, vocab_file=IN_FILE,
        init_checkpoint=CKPT, adapter_checkpoint=IN_ANY, bert_hub_module_handle=IN_DIR,
        adapter_bank=IN_DIR)),
    "run_classifier.py --do_train": (
        run_classifier, "absl", lambda g, out: _classifier(g, out, do_train=True),
        dict(adapter_bank=OUT_DIR)),
    "run_squad.py": (run_squad, "absl", lambda g, out: _flags(
        **_encoder(g, out), do_predict=True, predict_file=SQUAD_DEV), dict(
            output_dir=OUT_DIR, bert_config_file=IN_FILE, vocab_file=IN_FILE,
            init_checkpoint=CKPT, adapter_checkpoint=IN_ANY, predict_file=IN_FILE,
            bert_hub_module_handle=IN_DIR)),
    "run_squad.py --do_train": (run_squad, "absl", lambda g, out: _flags(
        **_encoder(g, out), do_train=True, train_file=SQUAD_DEV), dict(train_file=IN_FILE)),
    "run_multitask.py": (run_multitask, "absl", lambda g, out: _flags(
        **_encoder(g, out), task_name="mrpc", data_dir=MRPC, do_eval=True), dict(
            data_dir=IN_DIR, output_dir=OUT_DIR, bert_config_file=IN_FILE, vocab_file=IN_FILE,
            init_checkpoint=CKPT, adapter_checkpoint=IN_ANY, bert_hub_module_handle=IN_DIR)),
    "export_savedmodel.py": (export_savedmodel, "absl", lambda g, out: _flags(
        adapter_bank=g["bank"], export_dir=out), dict(adapter_bank=IN_DIR, export_dir=OUT_DIR, init_checkpoint=CKPT,
                            bert_hub_module_handle=IN_DIR, vocab_file=IN_FILE,
                            bert_config_file=IN_FILE)),
    "export_savedmodel.py --multitask_run": (export_savedmodel, "absl", lambda g, out: _flags(
        multitask_run=g["run"], export_dir=out), dict(multitask_run=IN_DIR)),
    "convert_checkpoint.py": (convert_checkpoint, "global", lambda g, out: _flags(
        hf_dir=g["hf"], output_dir=out), dict(hf_dir=IN_DIR, output_dir=OUT_DIR)),
    "convert_checkpoint.py --tf2_checkpoint": (convert_checkpoint, "global", lambda g, out: _flags(
        tf2_checkpoint=g["init_checkpoint"], bert_config_file=g["bert_config_file"],
        vocab_file=g["vocab_file"], output_dir=out), dict(
            tf2_checkpoint=CKPT, bert_config_file=IN_FILE, vocab_file=IN_FILE)),
    "convert_checkpoint.py --hub_dir": (convert_checkpoint, "global", lambda g, out: _flags(
        hub_dir=g["model"], output_dir=out), dict(hub_dir=IN_DIR)),
    "convert_checkpoint.py --peft_dir": (convert_checkpoint, "global", lambda g, out: _flags(
        peft_dir=os.path.join(INTEROP, "peft", "seq_cls_qv"), **_adapter_import(g, out)), dict(
            peft_dir=IN_DIR, init_checkpoint=CKPT)),
    "convert_checkpoint.py --adapterhub_dir": (convert_checkpoint, "global", lambda g, out: _flags(
        adapterhub_dir=os.path.join(INTEROP, "adapterhub", "seq_bn"), **_adapter_import(g, out)), dict(
            adapterhub_dir=IN_DIR)),
    "experiments.ablation": (ablation, "absl", lambda g, out: _classifier(
        g, g["run"], ablation_dir=out), dict(ablation_dir=OUT_DIR, data_dir=IN_DIR)),
    "experiments.multitask_comparison": (multitask_comparison, "absl", lambda g, out: _flags(
        output_dir=out, model_dir=g["model"], data_root=g["data_root"]), dict(
            output_dir=OUT_DIR, model_dir=IN_DIR, data_root=IN_DIR)),
    "experiments.plots": (plots, "absl", lambda g, out: _flags(
        results=g["results"], output_dir=out), dict(results=IN_FILE, output_dir=OUT_DIR)),
    "experiments.select": (select, "absl", lambda g, out: _flags(
        results=g["results"], output_prefix=out + "/selected"), dict(
            results=IN_FILE, output_prefix=OUT_FILE)),
    "experiments.sweep": (sweep, "absl", lambda g, out: _flags(
        output_dir=out, grid=g["grid"]), dict(output_dir=OUT_DIR, grid=IN_FILE)),
    "experiments.study": (study, "absl", lambda g, out: _flags(
        output_dir=out, model_dir=g["model"], data_root=g["data_root"],
        page=out + "/study.md", record_dir=out + "/record", dry_run=True), dict(
            output_dir=OUT_DIR, model_dir=IN_DIR, data_root=IN_DIR, page=OUT_FILE,
            record_dir=OUT_DIR)),
    "experiments.paper_table": (paper_table, "global", lambda g, out: _flags(
        model_dir=g["model"], data_root=g["data_root"], output_root=out,
        results_json=out + ".json", results_md=out + ".md"), dict(
            model_dir=IN_DIR, data_root=IN_DIR, output_root=OUT_DIR, results_json=OUT_FILE,
            results_md=OUT_FILE)),
    "experiments.embedding_baseline": (embedding_baseline, "global", lambda g, out: _flags(
        model_dir=g["model"], data_dir=g["data_root"]), dict(
            model_dir=IN_DIR, data_dir=IN_DIR)),
    "manage_bank.py add": (manage_bank, "argparse", lambda g, out: [
        f"--adapter_bank={out}", "add", "task", g["adapter_model"]], {"--adapter_bank": OUT_DIR}),
    "manage_bank.py list": (manage_bank, "argparse", lambda g, out: [
        f"--adapter_bank={g['bank']}", "list"], {"--adapter_bank": IN_DIR}),
    "adapter_bert.squad.evaluate": (squad_evaluate, "argparse", lambda g, out: [
        "--version=1.1", SQUAD_DEV, g["pred"], f"--out-file={out}/eval.json"], {
            "--out-file": OUT_FILE, "data.json": IN_FILE, "pred.json": IN_FILE}),
}


def _argparse_argv(argv, flag, path):
  """argv with the flag (or the positional argument of that metavar) set to `path`."""
  if not flag.startswith("--"):
    position = {"data.json": 1, "pred.json": 2}[flag]
    return argv[:position] + [path] + argv[position + 1:]
  return [f"{flag}={path}" if a.startswith(flag + "=") else a for a in argv]


def _run(module, how, argv, monkeypatch, capsys):
  """Runs the command's main as its __main__ does; returns (exit status, stderr)."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    if how == "argparse":
      errors.exit_on_user_error(module.main)(argv)
    else:
      fv = flags.FlagValues()
      module.define_flags(fv)
      fv(["prog"] + argv)
      if how == "global":
        monkeypatch.setattr(module, "FLAGS", fv)
        main = module.main
      else:
        main = functools.partial(module.main, flag_values=fv)
      # experiments.sweep reports its own errors and returns the status for app.run.
      sys.exit(errors.exit_on_user_error(main)(["prog"]))
  return exit_info.value.code, capsys.readouterr().err


@pytest.fixture
def unreachable_gcs(monkeypatch):
  """A gs:// file system that never answers; the probe waits 0.01 s, not
  path_checks.REMOTE_TIMEOUT_S (the answer never comes, so any wait shows the
  bound; at 1 s the ~60 gs:// cases slept a minute).

  The wait is a Python one, released after the test: TensorFlow's own GCS
  client stuck on a silent network (test_unreachable_gcs_is_one_line_within_the_bound
  runs it, in its own process) would leave threads inside curl that abort
  this process when it exits.
  """
  released = threading.Event()
  exists = tf.io.gfile.exists
  monkeypatch.setattr(tf.io.gfile, "exists",
                      lambda path: released.wait() if str(path).startswith("gs://")
                      else exists(path))
  monkeypatch.setattr(path_checks, "REMOTE_TIMEOUT_S", 0.01)
  monkeypatch.setattr(path_checks, "_reached", {})
  yield
  released.set()


def _fault_path(fault, tmp_path, request):
  """A path with the fault, and what must be left as it is."""
  if fault == "missing":
    return str(tmp_path / "nothing" / "here")
  if fault in ("file", "under_file"):
    f = tmp_path / "a_file"
    f.write_text("keep")
    return str(f) if fault == "file" else str(f / "out")
  if fault == "directory":
    d = tmp_path / "a_dir"
    d.mkdir()
    return str(d)
  if fault == "read_only":
    if IS_ROOT:
      pytest.skip("root writes into a read-only directory: the under_file case stands in")
    d = tmp_path / "read_only"
    d.mkdir()
    os.chmod(d, 0o555)
    request.addfinalizer(lambda: os.chmod(d, 0o755))
    return str(d / "out")
  assert fault == "gs"
  request.getfixturevalue("unreachable_gcs")
  return f"gs://no-such-bucket-{tmp_path.name.lower().replace('_', '-')}/out"


CASES = [pytest.param(command, flag, fault, id=f"{command}|{flag}|{fault}")
         for command, (_, _, _, paths) in COMMANDS.items()
         for flag, kind in paths.items() for fault in FAULTS[kind]]


@pytest.mark.parametrize("command,flag,fault", CASES)
def test_path_fault_is_one_line(command, flag, fault, good, tmp_path, monkeypatch, capsys,
                                request):
  module, how, make_argv, _ = COMMANDS[command]
  out = str(tmp_path / "out")
  path = _fault_path(fault, tmp_path, request)
  before = sorted(os.listdir(tmp_path))
  argv = make_argv(good, out)
  if how == "argparse":
    argv = _argparse_argv(argv, flag, path)
  else:
    if flag == "bert_hub_module_handle":  # The other source of the base: one at most.
      argv = [a for a in argv if not a.startswith("--init_checkpoint=")]
    argv = argv + [f"--{flag}={path}"]
  code, err = _run(module, how, argv, monkeypatch, capsys)
  assert code == 2, err
  assert "Traceback" not in err
  assert err.count("\n") == 1 and err.startswith("ERROR: "), err
  assert flag.lstrip("-") in err and path in err, err
  assert sorted(os.listdir(tmp_path)) == before  # Nothing written, not even --output_dir.
  if fault in ("file", "under_file"):
    assert (tmp_path / "a_file").read_text() == "keep"


PATH_FLAG_NAME = re.compile(r"(_dir|_file|_checkpoint|_root|_json|_md|_prefix|_handle)$"
                            r"|^(results|bank|grid|multitask_run|adapter_bank)$")


def test_every_path_flag_is_in_a_table():
  """Each command's flags named like paths are all tried above."""
  for command, (module, how, _, _) in COMMANDS.items():
    if how == "argparse":
      continue
    fv = flags.FlagValues()
    module.define_flags(fv)
    # A renamed flag's old spelling (cli/renamed_flags.py) sets the same flag.
    named = {n for n in fv if PATH_FLAG_NAME.search(n)
             and not fv[n].help.startswith("Deprecated spelling of")}
    # experiments.ablation checks run_classifier.py's flags as it does (cli.flags).
    same = (run_classifier, ablation) if module is ablation else (module,)
    tried = {f for m, _, _, paths in COMMANDS.values() if m in same for f in paths}
    assert named - tried == set(), command


# Runs manage_bank.py (arguments as given) with path_checks' bound set to BOUND_S
# seconds: the command and TensorFlow's GCS client are the real ones, and the test
# waits seconds, not the default bound of 20.
_BOUNDED = r'''
import os, runpy, sys
from adapter_bert.storage import path_checks
path_checks.REMOTE_TIMEOUT_S = float(os.environ["BOUND_S"])
sys.argv = [os.path.join({repo!r}, "manage_bank.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def test_unreachable_gcs_is_one_line_within_the_bound(tmp_path):
  """The real command against a proxy that never answers: one line within the bound,
  not minutes. The bound is 2 s here (path_checks.REMOTE_TIMEOUT_S, 20 by default):
  what is shown is that the command stops at it, whatever its value."""
  bound = 2.0
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(8)
  proxy = f"http://127.0.0.1:{server.getsockname()[1]}"
  wrapper = tmp_path / "bounded.py"
  wrapper.write_text(_BOUNDED.format(repo=REPO))
  env = dict(os.environ, https_proxy=proxy, HTTPS_PROXY=proxy, TF_CPP_MIN_LOG_LEVEL="3",
             BOUND_S=str(bound))
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, str(wrapper), "--adapter_bank=gs://no-such-bucket-xyz/bank", "list"],
      cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
  took = time.monotonic() - start
  server.close()
  assert result.returncode == 2, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.startswith("ERROR")]
  assert lines == [
      f"ERROR: flag --adapter_bank=gs://no-such-bucket-xyz/bank: cannot reach gs://no-such-bucket-xyz: "
      f"no answer within {bound:g} s (no network, or a firewall or "
      f"proxy that holds the connection?)"], result.stderr
  assert "Traceback" not in result.stderr
  assert took < bound + 60, took
