"""run_squad.py end to end on a tiny BERT: files and formats, eval-only, bad input.

main() runs in-process on a fresh absl FlagValues per call (the script defines
its flags on demand, so it never clashes with run_classifier.py's).
"""

import collections
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from adapter_bert import errors
import numpy_bert
import run_squad
from adapter_bert.tasks import question_answering
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import features as squad_features
from adapter_bert.squad import evaluate as squad_evaluate
from adapter_bert.squad import postprocess
from adapter_bert.checkpoints import base_model
from adapter_bert.checkpoints import tf2_encoder
import tiny_bert
from adapter_bert import tokenization

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "squad")
# Gull Point's context is ~120 word pieces: several doc spans per question.
SMALL = ["--max_seq_length=64", "--doc_stride=24", "--max_query_length=16",
         "--train_batch_size=4", "--predict_batch_size=4"]
NBEST_KEYS = ["text", "probability", "start_logit", "end_logit"]


def run(args):
  fv = flags.FlagValues()
  run_squad.define_flags(fv)
  fv(["run_squad.py"] + args)
  return run_squad.main([], fv)


def read(path):
  with open(path) as f:
    return f.read()


def question_ids(path):
  data = json.loads(read(path))["data"]
  return [qa["id"] for a in data for p in a["paragraphs"] for qa in p["qas"]]


@pytest.fixture(scope="module")
def squad_base(base):
  """The tiny base (conftest.base) as run_squad.py's arguments, with SMALL."""
  return {"args": ["--bert_config_file=" + base["bert_config_file"],
                   "--vocab_file=" + base["vocab_file"]] + SMALL,
          "ckpt": base["init_checkpoint"], "weights": base["weights"],
          "vocab": base["vocab_file"], "config": base["bert_config_file"]}


@pytest.fixture(scope="module")
def trained_v1(squad_base, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("v1"))
  run(squad_base["args"] + [
      "--output_dir=" + out, "--init_checkpoint=" + squad_base["ckpt"], "--adapter_size=8",
      "--do_train", "--train_file=" + os.path.join(DATA, "train-v1.1.json"),
      "--do_predict", "--predict_file=" + os.path.join(DATA, "dev-v1.1.json"),
      "--num_train_epochs=1", "--learning_rate=1e-3", "--seed=1"])
  return out, json.loads(read(os.path.join(out, "eval_results.json")))


def test_flags_keep_original_names_and_defaults():
  fv = flags.FlagValues()
  run_squad.define_flags(fv)
  original = {
      "bert_config_file": None, "vocab_file": None, "output_dir": None,
      "train_file": None, "predict_file": None, "init_checkpoint": None,
      "do_lower_case": True, "max_seq_length": 384, "doc_stride": 128,
      "max_query_length": 64, "do_train": False, "do_predict": False,
      "train_batch_size": 32, "predict_batch_size": 8, "learning_rate": 5e-5,
      "num_train_epochs": 3.0, "warmup_proportion": 0.1, "save_checkpoints_steps": 1000,
      "iterations_per_loop": 1000, "n_best_size": 20, "max_answer_length": 30,
      "use_tpu": False, "tpu_name": None, "tpu_zone": None, "gcp_project": None,
      "master": None, "verbose_logging": False,
      "version_2_with_negative": False, "null_score_diff_threshold": 0.0,
      # run_classifier.py's adapter flags.
      "adapter_size": 64, "adapter_init_scale": 1e-3, "adapter_weight_decay_rate": 0.01,
      "seed": None, "bert_hub_module_handle": None, "train_mode": None,
      "adapter_checkpoint": None, "use_xla": False}
  assert {k: fv[k].default for k in original} == original
  # The original's 8 (a v2-8) made every run on a one-core v5e-1 warn: unset, the run
  # takes the TPU's own count (tests/test_tpu_setup.py).
  assert fv["num_tpu_cores"].default is None


def test_span_loss_is_mean_of_start_and_end_cross_entropy():
  start = np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]], np.float32)
  end = np.array([[0.3, -1.0, 2.0], [1.0, 2.0, 3.0]], np.float32)
  labels = {"start_positions": np.array([1, 0]), "end_positions": np.array([2, 2])}
  loss = question_answering.span_loss(labels, {"start_logits": start, "end_logits": end}).numpy()

  def ce(logits, pos):
    return np.log(np.exp(logits).sum(-1)) - logits[np.arange(2), pos]
  np.testing.assert_allclose(loss, (ce(start, [1, 0]) + ce(end, [2, 2])) / 2, rtol=1e-6)


def test_v1_trains_predicts_and_writes_files_in_original_format(trained_v1):
  out, results = trained_v1
  dev = os.path.join(DATA, "dev-v1.1.json")
  text = read(os.path.join(out, "predictions.json"))
  predictions = json.loads(text)
  assert text == json.dumps(predictions, indent=4) + "\n"
  assert list(predictions) == question_ids(dev)
  assert all(isinstance(v, str) for v in predictions.values())
  nbest = json.loads(read(os.path.join(out, "nbest_predictions.json")))
  assert list(nbest) == question_ids(dev)
  for qid, entries in nbest.items():
    assert 1 <= len(entries) <= 20
    assert all(list(e) == NBEST_KEYS for e in entries)
    assert entries[0]["text"] == predictions[qid]
    assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)
    scores = [e["start_logit"] + e["end_logit"] for e in entries]
    assert scores == sorted(scores, reverse=True)
  assert not os.path.exists(os.path.join(out, "null_odds.json"))
  # Scored with the official v1.1 metrics and written beside the predictions.
  expected = squad_evaluate.evaluate_predictions(dev, predictions, False)
  # Then the weights that predicted: the last checkpoint, named in its directory.
  assert results == dict(expected, global_step=2, checkpoint_path="model.ckpt-2")
  assert list(results) == ["exact_match", "f1", "global_step", "checkpoint_path"]
  # 8 training questions / batch 4 * 1 epoch = 2 steps.
  assert tf.train.latest_checkpoint(out).endswith("model.ckpt-2")
  names = set(os.listdir(out))
  assert {"train.tf_record", "eval.tf_record", "adapter_model"} <= names
  assert os.path.exists(os.path.join(out, "adapter_model", "adapter_weights.safetensors"))
  assert not [n for n in names if ".tmp" in n]


def test_eval_only_from_trained_checkpoint_reproduces_predictions(trained_v1, squad_base,
                                                                    tmp_path):
  out, _ = trained_v1
  want = {n: read(os.path.join(out, n))
          for n in ("predictions.json", "nbest_predictions.json", "eval_results.json")}
  predict = squad_base["args"] + ["--adapter_size=8", "--do_predict",
                            "--predict_file=" + os.path.join(DATA, "dev-v1.1.json")]
  # (a) --init_checkpoint = the trained run's latest checkpoint, new output_dir.
  fresh = str(tmp_path / "fresh")
  run(predict + ["--output_dir=" + fresh, "--init_checkpoint=" + out])
  # (b) the trained output_dir's latest checkpoint wins over --init_checkpoint.
  again = str(tmp_path / "again")
  shutil.copytree(out, again)
  for name in want:
    os.remove(os.path.join(again, name))
  run(predict + ["--output_dir=" + again, "--init_checkpoint=" + squad_base["ckpt"]])
  for d in (fresh, again):
    for name, text in want.items():
      if (d, name) != (fresh, "eval_results.json"):
        assert read(os.path.join(d, name)) == text, (d, name)
  # Each names the checkpoint it restored: --init_checkpoint's, at step 0 of this run.
  scored = dict(json.loads(want["eval_results.json"]),
                checkpoint_path=os.path.join(out, "model.ckpt-2"), global_step=0)
  assert json.loads(read(os.path.join(fresh, "eval_results.json"))) == scored
  assert tf.train.latest_checkpoint(fresh) is None  # Prediction saves nothing.


def test_rerun_resumes_from_the_latest_checkpoint(trained_v1, squad_base, tmp_path, caplog):
  """The same training command again resumes from the latest checkpoint (here the
  last one: nothing is left to train). With more epochs it would go on under
  another schedule than the checkpoints were trained on: refused, as any changed
  setting (tests/test_resume_settings.py), before anything is written."""
  out, _ = trained_v1
  resumed = str(tmp_path / "resumed")
  shutil.copytree(out, resumed)
  command = squad_base["args"] + [
      "--output_dir=" + resumed, "--init_checkpoint=" + squad_base["ckpt"], "--adapter_size=8",
      "--do_train", "--train_file=" + os.path.join(DATA, "train-v1.1.json"),
      "--learning_rate=1e-3", "--seed=1"]
  config = read(os.path.join(resumed, "run_config.json"))
  with pytest.raises(errors.UserError, match=r"^--num_train_epochs: .* trained with "
                     r"num_train_epochs=1\.0 \(see .*\), not 2\.0; "):
    run(command + ["--num_train_epochs=2"])
  assert read(os.path.join(resumed, "run_config.json")) == config
  with caplog.at_level("INFO"):
    run(command + ["--num_train_epochs=1"])
  assert "Resuming from %s" % os.path.join(resumed, "model.ckpt-2") in caplog.text
  assert "Running training from step 2 to 2" in caplog.text
  assert tf.train.latest_checkpoint(resumed).endswith("model.ckpt-2")


@pytest.mark.parametrize("padding", [["--use_xla"], ["--pad_to_max_seq_length"]])
def test_adapter_checkpoint_on_base_with_other_padding(trained_v1, squad_base, tmp_path,
                                                       padding):
  out, _ = trained_v1
  new = str(tmp_path / "adapters")
  # The trained run padded each batch to its longest feature. Under XLA, to a
  # multiple of 16, and 4 questions of dev-v1.1 give an odd number of features:
  # the last batch of 4 is filled (static shapes) and the filling must not show
  # up. Or every feature padded to --max_seq_length, as the original.
  run(squad_base["args"] + [
      "--output_dir=" + new, "--init_checkpoint=" + squad_base["ckpt"], "--adapter_size=8",
      "--adapter_checkpoint=" + os.path.join(out, "adapter_model"),
      "--do_predict", "--predict_file=" + os.path.join(DATA, "dev-v1.1.json")] + padding)
  for name in ("predictions.json", "nbest_predictions.json"):
    want, got = json.loads(read(os.path.join(out, name))), json.loads(
        read(os.path.join(new, name)))
    assert list(got) == list(want)
    if name == "predictions.json":
      assert got == want
    else:
      for qid in want:
        assert [e["text"] for e in got[qid]] == [e["text"] for e in want[qid]]
        np.testing.assert_allclose([e["start_logit"] for e in got[qid]],
                                   [e["start_logit"] for e in want[qid]], atol=1e-4)


def test_predict_dataset_pads_last_batch_with_foreign_ids(tmp_path):
  path = str(tmp_path / "eval.tf_record")
  with squad_features.FeatureWriter(path, is_training=False) as writer:
    for n in range(5):
      writer.process_feature(squad_features.InputFeatures(
          unique_id=squad_features.FIRST_UNIQUE_ID + n, example_index=n, doc_span_index=0,
          tokens=[], token_to_orig_map={}, token_is_max_context={},
          input_ids=[n + 1] * 8, input_mask=[1] * 8, segment_ids=[0] * 8))
  batches = list(question_answering.predict_dataset(path, 8, 4, 5, pad_last_batch=True))
  assert [b[0]["input_ids"].shape.as_list() for b in batches] == [[4, 8], [4, 8]]
  ids = np.concatenate([b[1].numpy() for b in batches])
  assert list(ids) == [squad_features.FIRST_UNIQUE_ID + n for n in range(5)] + [-1] * 3
  unpadded = list(question_answering.predict_dataset(path, 8, 4, 5, pad_last_batch=False))
  assert [int(b[1].shape[0]) for b in unpadded] == [4, 1]
  # The padding's results are dropped before post-processing.
  features = [squad_features.InputFeatures(unique_id=int(i), example_index=0, doc_span_index=0,
                                       tokens=["a"] * 3, token_to_orig_map={},
                                       token_is_max_context={}, input_ids=[],
                                       input_mask=[], segment_ids=[]) for i in ids[:5]]
  logits = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
  kept = question_answering.raw_results({"unique_ids": ids, "start_logits": logits,
                                "end_logits": -logits}, features)
  assert [r.unique_id for r in kept] == list(ids[:5])
  np.testing.assert_array_equal(kept[4].start_logits, logits[4])


def _hub_saved_model(path, google_weights):
  """A SavedModel holding BERT under Model Garden's variable names, as TF Hub's BERT
  encoders (exported from Model Garden's BertEncoder) do; the converter reads only
  `.variables`, so a bare trackable holding them is enough and quick to save."""
  root = tf.train.Checkpoint(variables=[
      tf.Variable(value, name=tf2_encoder.model_garden_name(name))
      for name, value in google_weights.items()])
  tf.saved_model.save(root, path)


def test_hub_module_is_read_and_used_as_the_base(squad_base, tmp_path):
  hub_dir = str(tmp_path / "hub")
  _hub_saved_model(hub_dir, squad_base["weights"])
  common = squad_base["args"] + ["--adapter_size=4", "--seed=7", "--do_predict",
                           "--predict_file=" + os.path.join(DATA, "dev-v1.1.json")]
  with pytest.raises(errors.UserError, match="at most one of --init_checkpoint "
                                             "and --bert_hub_module_handle"):
    run(common + ["--output_dir=" + str(tmp_path / "both"), "--bert_hub_module_handle=" +
                  hub_dir, "--init_checkpoint=" + squad_base["ckpt"]])
  assert not os.path.exists(tmp_path / "both")
  hub_out = str(tmp_path / "hub_run")
  run(common + ["--output_dir=" + hub_out, "--bert_hub_module_handle=" + hub_dir])
  # Read into memory under Google's names (base_model.read_hub_encoder, which
  # the run used): nothing is converted into output_dir.
  assert not os.path.exists(os.path.join(hub_out, "hub_bert"))
  encoder = base_model.read_hub_encoder(hub_dir, squad_base["config"], squad_base["vocab"])
  for name, value in squad_base["weights"].items():
    np.testing.assert_array_equal(encoder.tensors[name], value)
  # Same seed (adapters, head), same base as a Google checkpoint: same predictions.
  ref_out = str(tmp_path / "ref_run")
  run(common + ["--output_dir=" + ref_out, "--init_checkpoint=" + squad_base["ckpt"]])
  for name in ("predictions.json", "nbest_predictions.json"):
    assert read(os.path.join(hub_out, name)) == read(os.path.join(ref_out, name))


def test_v2_writes_null_odds_and_v2_metrics(squad_base, tmp_path):
  out = str(tmp_path / "v2")
  dev = os.path.join(DATA, "dev-v2.0.json")
  assert run(squad_base["args"] + [
      "--output_dir=" + out, "--init_checkpoint=" + squad_base["ckpt"], "--adapter_size=0",
      "--version_2_with_negative", "--do_train",
      "--train_file=" + os.path.join(DATA, "train-v2.0.json"), "--do_predict",
      "--predict_file=" + dev, "--num_train_epochs=1", "--seed=2"]) is None
  results = json.loads(read(os.path.join(out, "eval_results.json")),
                       object_pairs_hook=collections.OrderedDict)
  predictions = json.loads(read(os.path.join(out, "predictions.json")))
  text = read(os.path.join(out, "null_odds.json"))
  null_odds = json.loads(text)
  assert text == json.dumps(null_odds, indent=4) + "\n"
  assert list(null_odds) == list(predictions) == question_ids(dev)
  assert all(isinstance(v, float) for v in null_odds.values())
  for qid, diff in null_odds.items():  # threshold 0.0: "" exactly when diff > 0.
    nbest = json.loads(read(os.path.join(out, "nbest_predictions.json")))[qid]
    if diff > 0.0:
      assert predictions[qid] == ""
    else:
      assert predictions[qid] == next(e["text"] for e in nbest if e["text"])
  assert list(results)[:9] == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1",
                               "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total"]
  assert {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(results)
  assert results == dict(squad_evaluate.evaluate_predictions(dev, predictions, True, null_odds),
                         global_step=3, checkpoint_path="model.ckpt-3")
  # Full fine-tuning (adapter_size 0): the checkpoint is the model.
  assert not os.path.exists(os.path.join(out, "adapter_model"))


def test_eval_only_on_original_fine_tuned_checkpoint_matches_numpy(tmp_path):
  rng = np.random.default_rng(5)
  head = {"cls/squad/output_weights": rng.normal(0, 0.5, (2, 32)).astype(np.float32),
          "cls/squad/output_bias": np.array([0.3, -0.2], np.float32)}
  shapes = tiny_bert.google_variable_shapes(tiny_bert.TINY_CONFIG)
  extra = dict(head, global_step=np.int64(1234))
  for name, shape in list(shapes.items()) + [(k, v.shape) for k, v in head.items()]:
    extra[name + "/adam_m"] = np.ones(shape, np.float32)  # What the original saved.
    extra[name + "/adam_v"] = np.ones(shape, np.float32)
  config, vocab, ckpt, weights = tiny_bert.write_google_dir(
      str(tmp_path / "squad_model"), seed=3, extra=extra)
  out = str(tmp_path / "out")
  dev = os.path.join(DATA, "dev-v1.1.json")
  run(["--bert_config_file=" + config, "--vocab_file=" + vocab, "--output_dir=" + out,
       "--init_checkpoint=" + ckpt, "--adapter_size=0", "--do_predict",
       "--predict_file=" + dev] + SMALL)

  # Independent logits: NumPy BERT forward, then sequence @ W.T + b.
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  examples = squad_examples.read_squad_examples(dev, is_training=False)
  features = []
  squad_features.convert_examples_to_features(examples, tokenizer, 64, 24, 16, False,
                                          features.append)
  ids, mask, seg = (np.array([getattr(f, k) for f in features])
                    for k in ("input_ids", "input_mask", "segment_ids"))
  sequence, _ = numpy_bert.bert_forward(weights, 4, ids, mask, seg)
  logits = sequence @ head["cls/squad/output_weights"].T + head["cls/squad/output_bias"]
  # The original ranks the n best starts and ends over all max_seq_length
  # positions, padding included, then drops those past the tokens; run_squad.py
  # ranks the feature's own tokens only (raw_results): the same answers here,
  # n-best lists without the gaps that padding positions leave.
  padded = [postprocess.RawResult(f.unique_id, logits[i, :, 0], logits[i, :, 1])
            for i, f in enumerate(features)]
  results = [postprocess.RawResult(f.unique_id, logits[i, :len(f.tokens), 0],
                                   logits[i, :len(f.tokens), 1])
             for i, f in enumerate(features)]
  original_pred, _, _ = postprocess.compute_predictions(examples, features, padded, 20, 30,
                                                        True)
  want_pred, want_nbest, _ = postprocess.compute_predictions(
      examples, features, results, 20, 30, True)
  got_pred = json.loads(read(os.path.join(out, "predictions.json")))
  got_nbest = json.loads(read(os.path.join(out, "nbest_predictions.json")))
  assert got_pred == dict(want_pred) == dict(original_pred)
  for qid, want in want_nbest.items():
    top, got_top = want[0], got_nbest[qid][0]
    assert got_top["text"] == top["text"]
    assert got_top["start_logit"] == pytest.approx(top["start_logit"], abs=1e-4)
    assert got_top["end_logit"] == pytest.approx(top["end_logit"], abs=1e-4)
    assert got_top["probability"] == pytest.approx(top["probability"], abs=1e-4)
  assert not os.path.exists(os.path.join(out, "adapter_model"))


def _bad_run(squad_base, tmp_path, extra):
  out = str(tmp_path / "out")
  args = squad_base["args"] + ["--output_dir=" + out, "--init_checkpoint=" + squad_base["ckpt"],
                         "--adapter_size=4"] + extra
  return out, args


def test_malformed_json_fails_before_training_or_writing(squad_base, tmp_path):
  bad = tmp_path / "dev.json"
  bad.write_text('{"data": [{"paragraphs": [}]}')
  out, args = _bad_run(squad_base, tmp_path, [
      "--do_train", "--train_file=" + os.path.join(DATA, "train-v1.1.json"),
      "--do_predict", "--predict_file=" + str(bad)])
  with pytest.raises(errors.UserError, match=r"dev\.json:1: malformed JSON at column 27"):
    run(args)
  assert not os.path.exists(out)  # No records, no checkpoint, no predictions.


def test_v1_training_question_without_answer_is_a_clear_error(squad_base, tmp_path):
  data = json.loads(read(os.path.join(DATA, "train-v1.1.json")))
  qa = data["data"][0]["paragraphs"][0]["qas"][1]
  qa["answers"] = []
  bad = tmp_path / "train.json"
  bad.write_text(json.dumps(data))
  out, args = _bad_run(squad_base, tmp_path, ["--do_train", "--train_file=" + str(bad)])
  with pytest.raises(errors.UserError, match="exactly 1 answer.*%s.* has 0" % qa["id"]):
    run(args)
  assert not os.path.exists(out)


def test_max_seq_length_too_small_for_the_query_is_a_clear_error(squad_base, tmp_path):
  out, args = _bad_run(squad_base, tmp_path, [
      "--do_predict", "--predict_file=" + os.path.join(DATA, "dev-v1.1.json"),
      "--max_seq_length=18", "--max_query_length=16"])
  with pytest.raises(errors.UserError, match=(
      r"flags max_seq_length=18, max_query_length=16: --max_seq_length must be greater "
      r"than --max_query_length \+ 3 \(16 \+ 3\)")):
    run(args)
  assert not os.path.exists(out)
  out, args = _bad_run(squad_base, tmp_path, [
      "--do_predict", "--predict_file=" + os.path.join(DATA, "dev-v1.1.json"),
      "--max_seq_length=128"])
  with pytest.raises(errors.UserError, match=r"^--max_seq_length=128 is larger than the "
                                             r"model's position table: .*only trained up to "
                                             r"sequence length 64"):
    run(args)
  assert not os.path.exists(out)
