"""Bad flags end run_classifier.py / run_squad.py with one line and status 2.

Every case checks the exit status, the whole message (flag, value, what is
allowed), that no traceback is printed and that output_dir is left alone.
Most run in-process on a fresh FlagValues; two run the real command line. A
renamed flag's old spelling still works, with one deprecation line.
"""

import functools
import logging as py_logging
import os
import socket
import subprocess
import sys

import pytest
import tensorflow as tf
from absl import flags

from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.cli import flag_checks
from adapter_bert.cli import options as cli_options
from adapter_bert import errors
from adapter_bert.model import modeling
import export_savedmodel
import manage_bank
import run_classifier
import run_multitask
import run_squad
from adapter_bert.cli import squad_flags
from adapter_bert.runtime import distribution
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import trainable
from run_harness import Records
import tiny_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC = os.path.join(REPO, "data", "glue", "MRPC")
SQUAD_DEV = os.path.join(REPO, "data", "squad", "dev-v1.1.json")


def _classifier_args(out):
  return ["--task_name=mrpc", "--data_dir=" + MRPC, "--output_dir=" + out, "--do_train"]


def _squad_args(out):
  return ["--bert_config_file=c.json", "--vocab_file=v.txt", "--output_dir=" + out,
          "--do_predict", "--predict_file=" + SQUAD_DEV]


SCRIPTS = {"classifier": (run_classifier, _classifier_args),
           "squad": (run_squad, _squad_args)}

# (script, extra flags, message after "ERROR: ").
BAD_FLAGS = {
    "iterations_per_loop 0 (looped forever)": (
        "classifier", ["--iterations_per_loop=0"],
        "flag --iterations_per_loop=0: must be a positive integer"),
    "save_checkpoints_steps 0 (divided by zero)": (
        "classifier", ["--save_checkpoints_steps=0"],
        "flag --save_checkpoints_steps=0: must be a positive integer"),
    "train_batch_size 0": (
        "classifier", ["--train_batch_size=0"],
        "flag --train_batch_size=0: must be a positive integer"),
    "eval_batch_size negative": (
        "classifier", ["--eval_batch_size=-8"],
        "flag --eval_batch_size=-8: must be a positive integer"),
    "predict_batch_size 0": (
        "classifier", ["--predict_batch_size=0"],
        "flag --predict_batch_size=0: must be a positive integer"),
    "num_tpu_cores 0": (
        "classifier", ["--num_tpu_cores=0"],
        "flag --num_tpu_cores=0: must be a positive integer"),
    "max_seq_length 2": (
        "classifier", ["--max_seq_length=2"], "flag --max_seq_length=2: must be at least 3"),
    "learning_rate 0": (
        "classifier", ["--learning_rate=0"], "flag --learning_rate=0.0: must be a positive number"),
    "learning_rate nan": (
        "classifier", ["--learning_rate=nan"],
        "flag --learning_rate=nan: must be a positive number"),
    "num_train_epochs negative": (
        "classifier", ["--num_train_epochs=-1"],
        "flag --num_train_epochs=-1.0: must be a positive number"),
    "warmup_proportion over 1": (
        "classifier", ["--warmup_proportion=1.5"],
        "flag --warmup_proportion=1.5: must be in [0, 1]"),
    "warmup_proportion negative": (
        "classifier", ["--warmup_proportion=-0.1"],
        "flag --warmup_proportion=-0.1: must be in [0, 1]"),
    **{f"{script} group_by_length with padding to the maximum": (
        script, ["--group_by_length", "--pad_to_max_seq_length"],
        "flags group_by_length=True, pad_to_max_seq_length=True: --group_by_length needs "
        "batches padded to their own length: drop --pad_to_max_seq_length")
       for script in ("classifier", "squad")},
    "adapter_size negative": (
        "classifier", ["--adapter_size=-1"],
        "flag --adapter_size=-1: must be an integer >= 0 (0: no adapters)"),
    "adapter_init_scale 0": (
        "classifier", ["--adapter_init_scale=0"],
        "flag --adapter_init_scale=0.0: must be a positive number"),
    "adapter_weight_decay_rate negative": (
        "classifier", ["--adapter_weight_decay_rate=-0.01"],
        "flag --adapter_weight_decay_rate=-0.01: must be a number >= 0"),
    "unknown train_mode": (
        "classifier", ["--train_mode=everything"],
        "flag --train_mode=everything: must be one of adapters, adapters_only, full, "
        "layer_norm, head, top_layers:K (K >= 0)"),
    "top_layers without a number": (
        "classifier", ["--train_mode=top_layers:x"],
        "flag --train_mode=top_layers:x: must be one of adapters, adapters_only, full, "
        "layer_norm, head, top_layers:K (K >= 0)"),
    "seed out of range": (
        "classifier", ["--seed=-1"], "flag --seed=-1: must be in [0, 2**32 - 1]"),
    "unknown task": (
        "classifier", ["--task_name=Nope"],
        "flag --task_name=Nope: must be one of ax, cola, mnli, mnli-mm, mrpc, qnli, qqp, rte, "
        "sst-2, sts-b, tsv, wnli, xnli (any case)"),
    "repeated label": (
        "classifier", ["--labels=a,b,a"],
        "flag --labels=['a', 'b', 'a']: must be a comma list of distinct, non-empty labels"),
    "empty label": (
        "classifier", ["--labels=a,,b"],
        "flag --labels=['a', '', 'b']: must be a comma list of distinct, non-empty labels"),
    "empty output_dir": (
        "classifier", ["--output_dir="], "flag --output_dir=: must be given, not empty"),
    "unknown mixed_precision": (
        "classifier", ["--mixed_precision=float8"],
        "flag --mixed_precision=float8: value should be one of <none|bfloat16|float16>"),
    "nothing to do": (
        "classifier", ["--nodo_train"],
        "flags do_train=False, do_eval=False, do_predict=False: at least one of --do_train, "
        "--do_eval or --do_predict must be given"),
    "two bases": (
        "classifier", ["--init_checkpoint=a/bert_model.ckpt", "--bert_hub_module_handle=b"],
        "flags init_checkpoint=a/bert_model.ckpt, bert_hub_module_handle=b: give at most one "
        "of --init_checkpoint and --bert_hub_module_handle"),
    "head with explicit adapters": (
        "classifier", ["--train_mode=head", "--adapter_size=64"],
        "flags train_mode=head, adapter_size=64: --train_mode=head trains no adapters: leave "
        "--adapter_size out or give --adapter_size=0 (adapters that never train stay random)"),
    "layer_norm with explicit adapters": (
        "classifier", ["--adapter_size=8", "--train_mode=layer_norm"],
        "flags train_mode=layer_norm, adapter_size=8: --train_mode=layer_norm trains no "
        "adapters: leave --adapter_size out or give --adapter_size=0 (adapters that never "
        "train stay random)"),
    "top_layers with explicit adapters": (
        "classifier", ["--train_mode=top_layers:1", "--adapter_size=8"],
        "flags train_mode=top_layers:1, adapter_size=8: --train_mode=top_layers:1 trains no "
        "adapters: leave --adapter_size out or give --adapter_size=0 (adapters that never "
        "train stay random)"),
    "adapters without adapters": (
        "classifier", ["--train_mode=adapters", "--adapter_size=0"],
        "flags train_mode=adapters, adapter_size=0: --train_mode=adapters needs adapters: "
        "give --adapter_size > 0 or leave it out (64)"),
    "squad doc_stride 0": (
        "squad", ["--doc_stride=0"], "flag --doc_stride=0: must be a positive integer"),
    "squad max_query_length 0": (
        "squad", ["--max_query_length=0"],
        "flag --max_query_length=0: must be a positive integer"),
    "squad n_best_size 0": (
        "squad", ["--n_best_size=0"], "flag --n_best_size=0: must be a positive integer"),
    "squad max_answer_length 0": (
        "squad", ["--max_answer_length=0"],
        "flag --max_answer_length=0: must be a positive integer"),
    "squad iterations_per_loop 0": (
        "squad", ["--iterations_per_loop=0"],
        "flag --iterations_per_loop=0: must be a positive integer"),
    "squad null_score_diff_threshold nan": (
        "squad", ["--null_score_diff_threshold=nan"],
        "flag --null_score_diff_threshold=nan: must be a number (not nan)"),
    "squad query longer than the sequence": (
        "squad", ["--max_seq_length=18", "--max_query_length=16"],
        "flags max_seq_length=18, max_query_length=16: --max_seq_length must be greater than "
        "--max_query_length + 3 (16 + 3)"),
    "squad train without train_file": (
        "squad", ["--do_train"], "flags do_train=True, train_file=None: --do_train needs "
        "--train_file"),
    "squad predict without predict_file": (
        "squad", ["--predict_file="], "flags do_predict=True, predict_file=: --do_predict "
        "needs --predict_file"),
    "squad nothing to do": (
        "squad", ["--nodo_predict"], "flags do_train=False, do_predict=False: at least one of "
        "--do_train or --do_predict must be given"),
    "squad head with explicit adapters": (
        "squad", ["--train_mode=head", "--adapter_size=64"],
        "flags train_mode=head, adapter_size=64: --train_mode=head trains no adapters: leave "
        "--adapter_size out or give --adapter_size=0 (adapters that never train stay random)"),
}


def _fresh_flags(module):
  fv = flags.FlagValues()
  module.define_flags(fv)
  return fv


def _exits_with(capsys, fn, message):
  """fn() must end as a user error: status 2, exactly "ERROR: message", no traceback."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    fn()
  assert exit_info.value.code == errors.USER_ERROR_EXIT_STATUS
  captured = capsys.readouterr()
  assert captured.err == f"ERROR: {message}\n"
  assert "Traceback" not in captured.out + captured.err


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flag_is_one_line_before_any_work(case, tmp_path, capsys):
  script, extra, message = BAD_FLAGS[case]
  module, args = SCRIPTS[script]
  out = tmp_path / "out"
  argv = [f"{script}.py"] + args(str(out)) + extra
  if message.startswith("flag --"):
    # A flag alone: absl's own error (what a caller parsing the flags itself gets) ...
    with pytest.raises(flags.IllegalFlagValueError) as error:
      _fresh_flags(module)(argv)
    assert str(error.value) == message
  else:
    # Flags together: checked in one pass, main's first step (flag_checks.validate).
    _fresh_flags(module)(argv)
  # ... and the command line's (parse_flags is the scripts' app.run flags parser).
  def command():
    fv = _fresh_flags(module)
    flag_checks.parse_flags(argv, fv)
    errors.exit_on_user_error(lambda a: module.main(a, fv))([])
  _exits_with(capsys, command, message)
  assert not out.exists()


GOOD_FLAGS = {
    # (extra flags, adapter size, train mode)
    "defaults: adapters of 64": ([], 64, "adapters"),
    "no adapters: full fine-tuning": (["--adapter_size=0"], 0, "full"),
    "full alone: original BERT fine-tuning": (["--train_mode=full"], 0, "full"),
    "full with explicit adapters: all of it trains": (
        ["--train_mode=full", "--adapter_size=8"], 8, "full"),
    "head alone: no adapters": (["--train_mode=head"], 0, "head"),
    "layer_norm alone": (["--train_mode=layer_norm"], 0, "layer_norm"),
    "top_layers alone": (["--train_mode=top_layers:1"], 0, "top_layers:1"),
    "head with explicit 0": (["--train_mode=head", "--adapter_size=0"], 0, "head"),
    "adapters with a size": (["--train_mode=adapters", "--adapter_size=8"], 8, "adapters"),
    "bounds": (["--warmup_proportion=0", "--seed=0", "--max_seq_length=3"], 64, "adapters"),
}


@pytest.mark.parametrize("case", sorted(GOOD_FLAGS))
def test_allowed_flags_and_the_adapters_they_build(case, tmp_path):
  extra, adapter_size, mode = GOOD_FLAGS[case]
  fv = _fresh_flags(run_classifier)
  fv(["run_classifier.py"] + _classifier_args(str(tmp_path)) + extra)
  options = cli_options.model_options(fv)
  options.validate(do_lower_case=True)
  assert (options.adapter_size, str(options.mode())) == (adapter_size, mode)


def _run_main(module, argv, fv=None):
  """Parses argv and runs the script's main as its command line does."""
  fv = fv or _fresh_flags(module)
  fv([f"{module.__name__}.py"] + argv)
  errors.exit_on_user_error(functools.partial(module.main, flag_values=fv))([])


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
  """bert_config_file, vocab_file, init_checkpoint and weights of the tiny BERT."""
  return tiny_bert.write_google_dir(str(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def tiny(tiny_files):
  config, vocab, _, _ = tiny_files
  return ["--bert_config_file=" + config, "--vocab_file=" + vocab, "--max_seq_length=32",
          "--eval_batch_size=4", "--predict_batch_size=4", "--train_batch_size=4"]


def test_main_level_mistakes_are_one_line(tmp_path, capsys, tiny):
  out = tmp_path / "out"
  common = tiny + ["--task_name=mrpc", "--output_dir=" + str(out), "--do_eval"]
  nowhere = str(tmp_path / "nowhere")
  for argv, message in (
      (["--data_dir=" + nowhere], f"flag --data_dir={nowhere}: directory not found"),
      (["--data_dir=" + MRPC, "--labels=0,1", "--text_b_column=b"],
       "--labels, --text_b_column apply to --task_name=tsv only, not --task_name=mrpc"),
      (["--data_dir=" + MRPC, "--train_mode=top_layers:5"],
       "flag --train_mode=top_layers:5: the base model has 2 layers; K must be at most 2")):
    _exits_with(capsys, lambda: _run_main(run_classifier, common + argv), message)
    assert not out.exists()


def test_adapters_set_after_parsing_are_still_refused(tmp_path, capsys, tiny):
  # Past the flag validators (they cannot tell a set default from the default):
  # ModelOptions.validate refuses it.
  out = tmp_path / "out"
  fv = _fresh_flags(run_classifier)
  fv(["run_classifier.py", "--task_name=mrpc", "--data_dir=" + MRPC, "--do_eval",
      "--output_dir=" + str(out), "--train_mode=head"] + tiny)
  fv.adapter_size = 64

  def run():
    errors.exit_on_user_error(functools.partial(run_classifier.main, flag_values=fv))([])
  _exits_with(capsys, run, "flags train_mode=head, adapter_size=64: --train_mode=head trains "
              "no adapters: leave --adapter_size out or give --adapter_size=0 (adapters "
              "that never train stay random)")
  assert not out.exists()


def test_squad_validate_is_a_user_error():
  with pytest.raises(errors.UserError, match=r"^flags do_train=True, train_file=None: "
                                             r"--do_train needs --train_file$"):
    squad_flags.validate(True, False, None, None, 384, 64, 128)
  with pytest.raises(errors.UserError, match=r"^flag --doc_stride=0: must be a positive "):
    squad_flags.validate(False, True, None, "dev.json", 384, 64, 0)
  # [CLS] query [SEP] [SEP] leaves 10 - 7 - 3 = 0 tokens for the document.
  with pytest.raises(errors.UserError, match=(
      r"^flags max_seq_length=10, max_query_length=7: --max_seq_length must be greater "
      r"than --max_query_length \+ 3 \(7 \+ 3\)$")):
    squad_flags.validate(False, True, None, "dev.json", 10, 7, 128)
  squad_flags.validate(False, True, None, "dev.json", 11, 7, 128)
  squad_flags.validate(False, True, None, "dev.json", 384, 64, 128)


def test_head_mode_without_adapter_size_builds_no_adapters(tmp_path, tiny):
  fv = _fresh_flags(run_classifier)
  fv(["run_classifier.py"] + _classifier_args(str(tmp_path / "out")) + tiny +
     ["--train_mode=head"])
  options = cli_options.model_options(fv)
  base = options.read_checked_base(fv.bert_config_file, fv.vocab_file, True, fv.max_seq_length)
  model, _ = model_setup.create_model(
      tf.distribute.get_strategy(),
      lambda bert, adapters: modeling.BertClassifier(bert, 2, adapters), options, base,
      str(tmp_path / "out"))
  counts = trainable.parameter_counts(model)
  assert counts["adapter"] == 0
  assert not [n for n in model.tf1_variable_map() if "adapters" in n]
  assert counts["trainable"] == 2 * 32 + 2  # output_weights [2, H] and output_bias.
  assert not (tmp_path / "out").exists()


def test_prediction_count_mismatch_is_a_bug_not_an_assert(tmp_path, tiny, tiny_files,
                                                          monkeypatch):
  # `assert` vanishes under python -O; this check must not.
  written = classifier_metrics.write_test_results
  monkeypatch.setattr(classifier_metrics, "write_test_results",
                      lambda *a, **k: written(*a, **k) - 1)
  fv = _fresh_flags(run_classifier)
  fv(["run_classifier.py", "--task_name=mrpc", "--data_dir=" + MRPC, "--do_predict",
      "--output_dir=" + str(tmp_path / "out"), "--init_checkpoint=" + tiny_files[2]] + tiny)
  with pytest.raises(RuntimeError, match=r"^wrote 5 predictions for 6 test examples$"):
    run_classifier.main([], fv)


def _closed_address():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return f"127.0.0.1:{s.getsockname()[1]}"


def test_wrong_tpu_name_fails_fast_naming_the_flag(tmp_path, capsys, tiny, tiny_files,
                                                   monkeypatch):
  # A TPU name is looked up through the GCE metadata server: here one that
  # does not answer, the same on and off Google Cloud. Failing fast means the
  # resolver, which would wait on that server without a limit, is never made.
  closed = _closed_address()
  monkeypatch.setenv("GCE_METADATA_HOST", closed)
  monkeypatch.delenv("TPU_NAME", raising=False)
  resolvers = []
  monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver",
                      lambda *args, **kwargs: resolvers.append(kwargs))
  probed = []
  answers = distribution._answers  # pylint: disable=protected-access
  monkeypatch.setattr(distribution, "_answers",
                      lambda address: probed.append(address) or answers(address))
  out = tmp_path / "out"
  _exits_with(capsys, lambda: _run_main(run_classifier, tiny + [
      "--task_name=mrpc", "--data_dir=" + MRPC, "--output_dir=" + str(out), "--do_eval",
      "--use_tpu", "--tpu_name=no-such-tpu", "--init_checkpoint=" + tiny_files[2]]),
      "--tpu_name=no-such-tpu: could not reach the TPU (--tpu_zone=None, "
      "--gcp_project=None): TPU name 'no-such-tpu' is looked up through the GCE metadata "
      f"server {closed}, which does not answer (not on Google Cloud?); give the TPU's "
      "address instead, --tpu_name=grpc://HOST:8470")
  assert probed == [closed]  # One connection attempt, refused ...
  assert resolvers == []  # ... and no lookup that could hang.
  assert not out.exists()


@pytest.mark.parametrize("extra, message", [
    (["--iterations_per_loop=0"], "flag --iterations_per_loop=0: must be a positive integer"),
    (["--train_mode=head", "--adapter_size=64"],
     "flags train_mode=head, adapter_size=64: --train_mode=head trains no adapters: leave "
     "--adapter_size out or give --adapter_size=0 (adapters that never train stay random)"),
], ids=["iterations_per_loop=0", "train_mode vs adapter_size"])
def test_command_line_prints_one_line_and_exits_2(tmp_path, extra, message):
  out = tmp_path / "out"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, "run_classifier.py")] + _classifier_args(str(out)) +
      extra, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stdout + result.stderr
  errors_printed = [l for l in result.stderr.splitlines() if "ERROR" in l or "FATAL" in l]
  assert errors_printed == [f"ERROR: {message}"], result.stderr
  assert not out.exists()


def _parse_logging(parse):
  """Runs `parse`; returns the warnings logged meanwhile."""
  handler = Records(py_logging.WARNING)
  logger = py_logging.getLogger("absl")
  logger.addHandler(handler)
  try:
    parse()
  finally:
    logger.removeHandler(handler)
  return handler.messages


_BANK_ARGS = ["--export_dir=out"]
# The command's flags, its other arguments, the old spelling, the current one, a value.
RENAMED = {
    "run_multitask --adapter_type": (run_multitask.define_flags, [
        "--task_name=mrpc", "--data_dir=d", "--output_dir=o", "--do_train"],
        "adapter_type", "multitask_adapters", "shared"),
    "export --bank": (export_savedmodel.define_flags, _BANK_ARGS, "bank", "adapter_bank", "b"),
}


@pytest.mark.parametrize("case", list(RENAMED))
def test_renamed_flag_takes_the_old_spelling_with_one_deprecation_line(case):
  define, args, old, new, value = RENAMED[case]
  deprecated = f"--{old} is deprecated; use --{new}"
  for spelling, expected_lines in ((old, [deprecated]), (new, [])):
    fv = flags.FlagValues()
    define(fv)
    logged = _parse_logging(lambda: fv(["cmd", f"--{spelling}={value}"] + args))
    assert logged == expected_lines, spelling
    assert fv[new].value == value and flag_checks.flag_given(fv[new])
    # Checked again (as when a flag is set later): not logged again.
    assert _parse_logging(fv.validate_all_flags) == []
  assert fv[old].help == f"Deprecated spelling of --{new}."


def test_renamed_flag_is_checked_as_the_current_one():
  """--bank sets --adapter_bank, so the export's exactly-one-source check sees it."""
  fv = flags.FlagValues()
  export_savedmodel.define_flags(fv)
  fv(["export", "--bank=b", "--multitask_run=r"] + _BANK_ARGS)
  with pytest.raises(errors.UserError, match="give exactly one of them"):
    flag_checks.validate(fv)


def test_bank_manage_takes_the_old_spelling_with_one_deprecation_line(tmp_path):
  """argparse's alias: the value reaches the command, which names it by the current
  spelling (here: a bank that does not exist)."""
  bank = str(tmp_path / "bank")

  def list_bank(spelling):
    with pytest.raises(errors.UserError, match=f"flag --adapter_bank={bank}: directory "
                       "not found"):
      manage_bank.main([spelling, bank, "list"])
  assert _parse_logging(lambda: list_bank("--bank")) == [
      "--bank is deprecated; use --adapter_bank"]
  assert _parse_logging(lambda: list_bank("--adapter_bank")) == []
