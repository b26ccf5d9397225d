"""Tests for convert_checkpoint.py: HF safetensors and TF2 BertEncoder -> Google format."""

import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import load_file
import tensorflow as tf

from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import huggingface
from adapter_bert.checkpoints import tf2_encoder
import convert_checkpoint
from adapter_bert import errors
from adapter_bert.model import modeling
import file_trees
from hf_checkpoints import TINY, hf_state, write_hf_dir
import numpy_bert

# What the original BertConfig.to_json_string writes for TINY.
TINY_JSON = """{
  "attention_probs_dropout_prob": 0.1,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 32,
  "initializer_range": 0.02,
  "intermediate_size": 37,
  "max_position_embeddings": 40,
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "type_vocab_size": 2,
  "vocab_size": 99
}
"""

# HF module -> Google scope for layer 0, written out by hand as the reference.
LAYER0 = {
    "encoder.layer.0.attention.self.query": "bert/encoder/layer_0/attention/self/query",
    "encoder.layer.0.attention.self.key": "bert/encoder/layer_0/attention/self/key",
    "encoder.layer.0.attention.self.value": "bert/encoder/layer_0/attention/self/value",
    "encoder.layer.0.attention.output.dense": "bert/encoder/layer_0/attention/output/dense",
    "encoder.layer.0.intermediate.dense": "bert/encoder/layer_0/intermediate/dense",
    "encoder.layer.0.output.dense": "bert/encoder/layer_0/output/dense",
    "pooler.dense": "bert/pooler/dense",
}
LAYER0_NORMS = {
    "embeddings.LayerNorm": "bert/embeddings/LayerNorm",
    "encoder.layer.0.attention.output.LayerNorm":
        "bert/encoder/layer_0/attention/output/LayerNorm",
    "encoder.layer.0.output.LayerNorm": "bert/encoder/layer_0/output/LayerNorm",
}


def _read_google(out_dir):
  reader = tf.train.load_checkpoint(os.path.join(out_dir, "bert_model.ckpt"))
  return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_hf_converts_with_transposed_kernels(tmp_path, prefix):
  state = hf_state(prefix)
  state[prefix.replace("bert.", "") + "cls.predictions.bias"] = np.zeros(99, np.float32)
  hf_dir = write_hf_dir(tmp_path / "hf", state)
  out = str(tmp_path / "google")
  convert_checkpoint.hf_bert_to_google(hf_dir, out)

  assert sorted(os.listdir(out)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
      "bert_model.ckpt.index", "vocab.txt"]
  with open(os.path.join(out, "bert_config.json")) as f:
    # HF's "gelu" is the erf GELU: this project's gelu_erf.
    assert f.read() == TINY_JSON.replace('"gelu"', '"gelu_erf"')
  google = _read_google(out)
  # 5 embedding tensors + 16 per layer + 2 pooler.
  assert len(google) == 5 + 16 * 2 + 2
  assert all(v.dtype == np.float32 for v in google.values())
  for kind in ("word", "position", "token_type"):
    np.testing.assert_array_equal(google["bert/embeddings/%s_embeddings" % kind],
                                  state[prefix + "embeddings.%s_embeddings.weight" % kind])
  for hf, g in LAYER0.items():
    np.testing.assert_array_equal(google[g + "/kernel"], state[prefix + hf + ".weight"].T)
    np.testing.assert_array_equal(google[g + "/bias"], state[prefix + hf + ".bias"])
  for hf, g in LAYER0_NORMS.items():
    np.testing.assert_array_equal(google[g + "/gamma"], state[prefix + hf + ".weight"])
    np.testing.assert_array_equal(google[g + "/beta"], state[prefix + hf + ".bias"])
  assert google["bert/encoder/layer_1/intermediate/dense/kernel"].shape == (32, 37)
  assert google["bert/encoder/layer_1/output/dense/kernel"].shape == (37, 32)
  np.testing.assert_array_equal(
      google["bert/encoder/layer_1/output/dense/kernel"],
      state[prefix + "encoder.layer.1.output.dense.weight"].T)


def test_hf_unknown_tensor_is_an_error_and_leaves_nothing(tmp_path):
  state = hf_state()
  state["classifier.weight"] = np.zeros((2, 32), np.float32)
  hf_dir = write_hf_dir(tmp_path / "hf", state)
  with pytest.raises(errors.UserError, match=r"not part of a BERT encoder.*classifier\.weight"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "google"))
  assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_hf_extra_layer_is_an_error(tmp_path):
  state = hf_state()
  state["encoder.layer.2.output.dense.bias"] = np.zeros(32, np.float32)
  hf_dir = write_hf_dir(tmp_path / "hf", state)
  with pytest.raises(errors.UserError, match=r"beyond its config.*layer_2/output/dense/bias"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "google"))


def test_hf_wrong_shape_is_an_error(tmp_path):
  state = hf_state()
  state["encoder.layer.0.intermediate.dense.weight"] = np.zeros((36, 32), np.float32)
  hf_dir = write_hf_dir(tmp_path / "hf", state)
  with pytest.raises(errors.UserError, match=r"shapes .* differ .*layer_0/intermediate/dense/kernel"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "google"))


def test_hf_converts_on_ram_filesystem(tmp_path):
  """All I/O goes through tf.io.gfile (ram:// here, gs:// in use)."""
  hf_dir = write_hf_dir(tmp_path / "hf", hf_state())
  for name in os.listdir(hf_dir):
    tf.io.gfile.makedirs("ram://convert_test/hf")
    tf.io.gfile.copy(os.path.join(hf_dir, name), "ram://convert_test/hf/" + name)
  convert_checkpoint.hf_bert_to_google("ram://convert_test/hf", "ram://convert_test/out/g")
  assert tf.io.gfile.listdir("ram://convert_test/out") == ["g"]
  assert sorted(tf.io.gfile.listdir("ram://convert_test/out/g")) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
      "vocab.txt"]
  # tf.train.load_checkpoint cannot open ram:// paths; the restore op can.
  kernel, = tf.raw_ops.RestoreV2(
      prefix="ram://convert_test/out/g/bert_model.ckpt",
      tensor_names=["bert/encoder/layer_1/attention/self/query/kernel"],
      shape_and_slices=[""], dtypes=[tf.float32])
  np.testing.assert_array_equal(kernel,
                                hf_state()["encoder.layer.1.attention.self.query.weight"].T)
  tf.io.gfile.rmtree("ram://convert_test")


def test_hf_non_bert_config_and_missing_tensors(tmp_path):
  hf_dir = write_hf_dir(tmp_path / "roberta", hf_state(), model_type="roberta")
  with pytest.raises(errors.UserError, match="not a BERT checkpoint: .*roberta"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "out"))

  state = hf_state()
  del state["encoder.layer.1.attention.self.key.weight"]
  hf_dir = write_hf_dir(tmp_path / "partial", state)
  with pytest.raises(errors.UserError, match=r"not a BERT checkpoint: .*lacks 1 .*"
                     r"layer_1/attention/self/key/kernel"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "out"))

  hf_dir = write_hf_dir(tmp_path / "other", {"foo.bar": np.zeros(3, np.float32)})
  with pytest.raises(errors.UserError, match=r"not part of a BERT encoder.*foo\.bar"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "out"))
  assert not os.path.exists(tmp_path / "out")


def test_hf_missing_pooler_choices(tmp_path):
  hf_dir = write_hf_dir(tmp_path / "hf", hf_state(pooler=False))
  with pytest.raises(errors.UserError, match="no pooler"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "e"), missing_pooler="error")

  convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "i"), missing_pooler="identity")
  google = _read_google(str(tmp_path / "i"))
  np.testing.assert_array_equal(google["bert/pooler/dense/kernel"], np.eye(32))
  np.testing.assert_array_equal(google["bert/pooler/dense/bias"], np.zeros(32))

  convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "r1"))
  convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "r2"))
  k1 = _read_google(str(tmp_path / "r1"))["bert/pooler/dense/kernel"]
  k2 = _read_google(str(tmp_path / "r2"))["bert/pooler/dense/kernel"]
  np.testing.assert_array_equal(k1, k2)  # Fixed seed: reproducible.
  assert np.abs(k1).max() <= 2 * 0.02  # Truncated at 2 stddev.
  assert 0.012 < k1.std() < 0.02  # Truncated normal(0.02) has std 0.0176.


def test_failed_write_leaves_no_directory(tmp_path, monkeypatch):
  hf_dir = write_hf_dir(tmp_path / "hf", hf_state())

  def broken(prefix, tensors):
    with open(prefix + ".index", "w") as f:
      f.write("half")
    raise OSError("disk full")

  monkeypatch.setattr(checkpoint_io, "write_tf1_checkpoint", broken)
  with pytest.raises(errors.UserError, match="google: cannot write the converted model: disk full"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "google"))
  assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_a_non_empty_output_dir_needs_overwrite_which_keeps_the_users_files(tmp_path,
                                                                           caplog):
  hf_dir = write_hf_dir(tmp_path / "hf", hf_state())
  out = tmp_path / "google"
  out.mkdir()  # Empty: taken as it is.
  convert_checkpoint.hf_bert_to_google(hf_dir, str(out))
  (out / "NOTES.md").write_text("the user's")
  (out / "bert_model.ckpt.data-00001-of-00002").write_bytes(b"a stale shard of its own")
  before = {p.name: p.read_bytes() for p in out.iterdir()}
  with pytest.raises(errors.UserError, match=r"google: not empty; pass --overwrite to replace "
                     r"what this command writes there \(its other files are kept\)$"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(out))
  assert {p.name: p.read_bytes() for p in out.iterdir()} == before
  leftover = tmp_path / ".google.tmp-0123456789ab"  # As a kill mid-conversion leaves it.
  leftover.mkdir()
  (leftover / "bert_config.json").write_text("{")
  with caplog.at_level("INFO", logger="absl"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(out), overwrite=True)
  assert sorted(os.listdir(out)) == ["NOTES.md", "bert_config.json",
                                     "bert_model.ckpt.data-00000-of-00001",
                                     "bert_model.ckpt.index", "vocab.txt"]
  assert (out / "NOTES.md").read_text() == "the user's"
  assert len(_read_google(str(out))) == 39
  assert sorted(os.listdir(tmp_path)) == ["google", "hf"]
  assert [r.getMessage() for r in caplog.records if "interrupted" in r.getMessage()] == [
      f"Removed {leftover}, left by an interrupted write of {out}"]


def test_minilm_package_converts(minilm):
  """The real sentence-transformers/all-MiniLM-L6-v2 encoder (22.7M parameters),
  converted by convert_checkpoint.hf_bert_to_google (conftest.minilm)."""
  hf_dir = huggingface.minilm_package_dir()
  out, config = minilm["dir"], minilm["config"]
  assert (config["hidden_size"], config["num_hidden_layers"],
          config["num_attention_heads"], config["intermediate_size"],
          config["vocab_size"]) == (384, 6, 12, 1536, 30522)
  hf = load_file(os.path.join(hf_dir, "model.safetensors"))
  google = _read_google(out)
  # Every HF tensor but the position_ids buffer maps to exactly one Google tensor.
  assert len(google) == len(hf) - 1 == 5 + 16 * 6 + 2
  assert sum(v.size for v in google.values()) == 22_713_216
  np.testing.assert_array_equal(google["bert/embeddings/word_embeddings"],
                                hf["embeddings.word_embeddings.weight"])
  np.testing.assert_array_equal(google["bert/encoder/layer_5/attention/self/value/kernel"],
                                hf["encoder.layer.5.attention.self.value.weight"].T)
  np.testing.assert_array_equal(google["bert/pooler/dense/kernel"],
                                hf["pooler.dense.weight"].T)
  with open(os.path.join(out, "vocab.txt")) as f:
    vocab = f.read().split("\n")
  assert vocab[:1] == ["[PAD]"] and "[CLS]" in vocab and "hello" in vocab


# --- TF2 Model Garden BertEncoder (tf_keras, allowed in tests as the reference).


def _model_garden_encoder(seed=0):
  """A tiny Model Garden BertEncoder with every weight set to seeded random values."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.modeling import tf_utils  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks  # pylint: disable=g-import-not-at-top

  encoder = networks.BertEncoder(
      vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4,
      intermediate_size=37, max_sequence_length=40, type_vocab_size=2,
      activation=tf_utils.get_activation("gelu"), dict_outputs=True,
      initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02, seed=seed))
  rng = np.random.default_rng(seed)
  # Random values everywhere (incl. LayerNorm and biases) so that a swapped or
  # mis-reshaped tensor changes the output.
  encoder.set_weights([
      (1.0 if w.name.endswith("gamma:0") else 0.0) +
      0.2 * rng.standard_normal(w.shape).astype(np.float32) for w in encoder.weights])
  return encoder


def _layer_norm(x, gamma, beta):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def _numpy_bert(g, ids, mask, types, heads):
  """Google BERT's forward pass on Google-named weights (eval mode, tanh GELU)."""
  gelu = lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
  b, s = ids.shape
  x = (g["bert/embeddings/word_embeddings"][ids] + g["bert/embeddings/position_embeddings"][:s]
       + g["bert/embeddings/token_type_embeddings"][types])
  x = _layer_norm(x, g["bert/embeddings/LayerNorm/gamma"], g["bert/embeddings/LayerNorm/beta"])
  h = x.shape[-1]
  for n in range(2):
    p = "bert/encoder/layer_%d/" % n
    dense = lambda t, name: t @ g[p + name + "/kernel"] + g[p + name + "/bias"]
    split = lambda t: t.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)
    q, k, v = (split(dense(x, "attention/self/" + m)) for m in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(h // heads)
    scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    x = _layer_norm(dense(context, "attention/output/dense") + x,
                    g[p + "attention/output/LayerNorm/gamma"],
                    g[p + "attention/output/LayerNorm/beta"])
    y = dense(gelu(dense(x, "intermediate/dense")), "output/dense")
    x = _layer_norm(y + x, g[p + "output/LayerNorm/gamma"], g[p + "output/LayerNorm/beta"])
  pooled = np.tanh(x[:, 0] @ g["bert/pooler/dense/kernel"] + g["bert/pooler/dense/bias"])
  return x, pooled


def _assert_matches_model_garden(encoder, google):
  ids = np.array([[2, 5, 98, 7, 0, 0], [3, 4, 5, 6, 7, 8]], np.int32)
  mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32)
  types = np.array([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], np.int32)
  outputs = encoder(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types),
                    training=False)
  sequence, pooled = _numpy_bert(google, ids, mask.astype(np.float32), types, heads=4)
  real = mask.astype(bool)
  np.testing.assert_allclose(outputs["sequence_output"].numpy()[real], sequence[real],
                             atol=1e-4)
  np.testing.assert_allclose(outputs["pooled_output"].numpy(), pooled, atol=1e-4)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_erf"])
def test_tf2_checkpoint_converts(tmp_path, hidden_act):
  """With the activation its bert_config.json names, also one Model Garden lacks
  (gelu_erf had ended in its ValueError)."""
  encoder = _model_garden_encoder()
  prefix = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "tf2" / "ckpt"))
  config_file = tmp_path / "bert_config.json"
  config_file.write_text(TINY_JSON.replace('"gelu"', json.dumps(hidden_act)))
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join("tok%d\n" % n for n in range(99)))
  out = str(tmp_path / "google")
  convert_checkpoint.tf2_bert_encoder_to_google(
      out, checkpoint=prefix, bert_config_file=str(config_file), vocab_file=str(vocab))
  with open(os.path.join(out, "bert_config.json")) as f:
    assert json.load(f)["hidden_act"] == hidden_act
  google = _read_google(out)
  assert len(google) == 39
  mg = {w.name[:-2]: w.numpy() for w in encoder.weights}
  # Hand-written correspondences, including the einsum-kernel layouts.
  np.testing.assert_array_equal(google["bert/embeddings/position_embeddings"],
                                mg["position_embedding/embeddings"])
  np.testing.assert_array_equal(google["bert/embeddings/LayerNorm/gamma"],
                                mg["embeddings/layer_norm/gamma"])
  x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
  np.testing.assert_allclose(  # [H, heads, head_dim] einsum == [H, H] matmul.
      (x @ google["bert/encoder/layer_1/attention/self/key/kernel"]).reshape(3, 4, 8),
      np.einsum("bh,hnd->bnd", x, mg["transformer/layer_1/self_attention/key/kernel"]),
      rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(google["bert/encoder/layer_1/attention/self/key/bias"],
                                mg["transformer/layer_1/self_attention/key/bias"].reshape(32))
  np.testing.assert_allclose(  # [heads, head_dim, H] einsum == [H, H] matmul.
      x @ google["bert/encoder/layer_0/attention/output/dense/kernel"],
      np.einsum("bnd,ndh->bh", x.reshape(3, 4, 8),
                mg["transformer/layer_0/self_attention/attention_output/kernel"]),
      rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(google["bert/encoder/layer_0/output/dense/kernel"],
                                mg["transformer/layer_0/output/kernel"])
  np.testing.assert_array_equal(google["bert/encoder/layer_1/output/LayerNorm/beta"],
                                mg["transformer/layer_1/output_layer_norm/beta"])
  np.testing.assert_array_equal(google["bert/pooler/dense/kernel"], mg["pooler_transform/kernel"])
  # And every weight in its place: Google's forward pass reproduces Model Garden's.
  _assert_matches_model_garden(encoder, google)

  with pytest.raises(errors.UserError, match="no object 'model'.*top-level objects: .*encoder"):
    convert_checkpoint.tf2_bert_encoder_to_google(
        str(tmp_path / "g2"), checkpoint=prefix, bert_config_file=str(config_file),
        vocab_file=str(vocab), checkpoint_model_name="model")
  config_file.write_text(TINY_JSON.replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
  with pytest.raises(errors.UserError, match="not a BERT checkpoint matching bert_config_file"):
    convert_checkpoint.tf2_bert_encoder_to_google(
        str(tmp_path / "g3"), checkpoint=prefix, bert_config_file=str(config_file),
        vocab_file=str(vocab))
  assert not os.path.exists(tmp_path / "g2") and not os.path.exists(tmp_path / "g3")


def test_tf2_saved_model_converts_with_inferred_config(tmp_path):
  encoder = _model_garden_encoder(seed=3)
  saved = str(tmp_path / "saved_model")
  tf.saved_model.save(encoder, saved)
  tf.io.gfile.makedirs(os.path.join(saved, "assets"))
  with open(os.path.join(saved, "assets", "vocab.txt"), "w") as f:
    f.write("".join("tok%d\n" % n for n in range(99)))
  out = str(tmp_path / "google")
  config = convert_checkpoint.tf2_bert_encoder_to_google(out, saved_model_dir=saved)
  with open(os.path.join(out, "bert_config.json")) as f:
    assert f.read() == TINY_JSON  # TINY uses the defaults that are assumed.
  assert config["num_attention_heads"] == 4 and config["intermediate_size"] == 37
  _assert_matches_model_garden(encoder, _read_google(out))


def test_tf2_wrong_config_is_an_error(tmp_path):
  encoder = _model_garden_encoder()
  variables = {w.name: w.numpy() for w in encoder.weights}
  config = dict(TINY, num_hidden_layers=1)
  with pytest.raises(errors.UserError, match="not part of a BERT encoder.*transformer/layer_1/"):
    tf2_encoder.tf2_variables_to_google(variables, config)
  del variables["pooler_transform/bias:0"]
  with pytest.raises(errors.UserError, match="not a BERT checkpoint: .*lacks.*pooler/dense/bias"):
    tf2_encoder.tf2_variables_to_google(variables, TINY)


# --- The function the converted weights compute.


def _small_hf_state(seed=4):
  """hf_state with its projections scaled to stddev 0.2, so the feed-forward
  layers' pre-activations fall in (-3, 3), where the erf and tanh GELUs differ most."""
  return {k: v * 0.2 if re.search(r"(dense|query|key|value)\.weight$", k) else v
          for k, v in hf_state(seed=seed).items()}


@pytest.mark.parametrize("hf_act, reference, other", [
    ("gelu", numpy_bert.gelu_erf, numpy_bert.gelu),
    ("gelu_new", numpy_bert.gelu, numpy_bert.gelu_erf)])
def test_hf_conversion_keeps_the_activation(tmp_path, hf_act, reference, other):
  """A converted HF BERT computes what transformers computes: HF's "gelu" is the erf
  GELU (written as gelu_erf), "gelu_new" the tanh one (Google's gelu). The
  reference is numpy_bert's float64 forward pass with the activation by formula."""
  state = _small_hf_state()
  hf_dir = write_hf_dir(tmp_path / "hf", state, hidden_act=hf_act)
  out = str(tmp_path / "google")
  convert_checkpoint.hf_bert_to_google(hf_dir, out)
  encoder = modeling.BertEncoder(
      modeling.BertConfig.from_json_file(os.path.join(out, "bert_config.json")))
  checkpoint_io.load_checkpoint(encoder, os.path.join(out, "bert_model.ckpt"))
  ids = np.array([[2, 5, 98, 7, 0, 0], [3, 4, 5, 6, 7, 8]], np.int32)
  mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32)
  types = np.array([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], np.int32)
  ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": types},
                 training=False)
  google = _read_google(out)
  real = mask.astype(bool)
  for act, agrees in ((reference, True), (other, False)):
    seq, pooled = numpy_bert.bert_forward(google, 4, ids, mask, types, hidden_act=act)
    diff = max(np.abs(ours["sequence_output"].numpy()[real] - seq[real]).max(),
               np.abs(ours["pooled_output"].numpy() - pooled).max())
    # Float32 rounding (measured below 2e-6); the other GELU is off by 5.5e-4.
    assert (diff < 1e-5) if agrees else (diff > 1e-4), (act.__name__, diff)


def test_hf_activation_without_equivalent_is_one_line(tmp_path):
  hf_dir = write_hf_dir(tmp_path / "hf", hf_state(), hidden_act="quick_gelu")
  with pytest.raises(errors.UserError, match=r"config\.json: hidden_act 'quick_gelu': "
                     r"this project's BERT computes no exact equivalent \(convertible: "
                     r"\['gelu', .*'gelu_new'.*\]\)$"):
    convert_checkpoint.hf_bert_to_google(hf_dir, str(tmp_path / "google"))
  assert sorted(os.listdir(tmp_path)) == ["hf"]


# --- Every source of convert_checkpoint.py into a user's directory (issue 62, item 3).


def _interop_argv(source, base, out):
  """convert_checkpoint.py's flags for `source`, on the interop fixtures."""
  import interop_checks  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  peft = os.path.join(interop_checks.FIXTURES, "peft")
  hub_export = os.path.join(interop_checks.FIXTURES, "adapterhub_export", "houlsby_gelu")
  on_base = [f"--init_checkpoint={base['init_checkpoint']}"]
  return {
      "peft_dir": [f"--peft_dir={os.path.join(peft, 'seq_cls_qv')}", *on_base,
                   f"--bert_config_file={base['bert_config_file']}", "--labels=a,b,c",
                   "--task_name=t", "--max_seq_length=12"],
      "export_peft": [f"--export_peft={os.path.join(peft, 'exported', 'adapter_model')}",
                      "--base_model_name_or_path=tests/fixtures/interop/base"],
      "export_adapterhub": [
          f"--export_adapterhub={os.path.join(hub_export, 'adapter_model')}", *on_base,
          "--base_model_name_or_path=tests/fixtures/interop/base"],
  }[source] + [f"--output_dir={out}"]


@pytest.mark.parametrize("source", ["peft_dir", "export_peft", "export_adapterhub",
                                    "tf2_checkpoint"])
def test_every_source_refuses_a_users_directory_and_overwrite_keeps_their_files(
    source, interop_base, tmp_path, capsys, caplog):
  """As --hf_dir (above) and --adapterhub_dir (test_adapterhub_import): a non-empty
  --output_dir is one line and untouched; --overwrite writes the command's files
  beside the user's, and the temporary a killed conversion left is removed, in one line."""
  import interop_checks  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  out = tmp_path / "out"
  os.makedirs(out / "sub")
  (out / "NOTES.md").write_text("the user's")
  (out / "sub" / "data.bin").write_bytes(b"\x00the user's")
  users = file_trees.files_under(out)
  if source == "tf2_checkpoint":
    prefix = tf.train.Checkpoint(encoder=_model_garden_encoder()).write(
        str(tmp_path / "tf2" / "ckpt"))
    (tmp_path / "bert_config.json").write_text(TINY_JSON)
    (tmp_path / "vocab.txt").write_text("".join("tok%d\n" % n for n in range(99)))
    convert = lambda overwrite: convert_checkpoint.tf2_bert_encoder_to_google(
        str(out), checkpoint=prefix, bert_config_file=str(tmp_path / "bert_config.json"),
        vocab_file=str(tmp_path / "vocab.txt"), overwrite=overwrite)
    with pytest.raises(errors.UserError) as refused:
      convert(False)
    line = f"ERROR: {refused.value}"
  else:
    argv = _interop_argv(source, interop_base, out)
    convert = lambda overwrite: interop_checks.main_with(
        argv + (["--overwrite"] if overwrite else []))([])
    line = interop_checks.one_error_line(capsys, argv)
  assert line == (f"ERROR: {out}: not empty; pass --overwrite to replace what this command "
                  f"writes there (its other files are kept)")
  assert file_trees.files_under(out) == users
  leftover = tmp_path / ".out.tmp-0123456789ab"  # As a conversion killed mid-write leaves it.
  leftover.mkdir()
  (leftover / "half").write_bytes(b"half")
  with caplog.at_level("INFO", logger="absl"):
    convert(True)
  files = file_trees.files_under(out)
  assert {k: files[k] for k in users} == users
  assert set(files) - set(users)  # The command's own files, beside them.
  assert sorted(os.listdir(tmp_path)) == sorted(
      ["out"] + (["tf2", "bert_config.json", "vocab.txt"] if source == "tf2_checkpoint" else []))
  assert [r.getMessage() for r in caplog.records if "interrupted write" in r.getMessage()] == [
      f"Removed {leftover}, left by an interrupted write of {out}"]


def test_an_encoder_without_its_config_says_in_one_line_which_activation_is_assumed(caplog):
  """--hub_dir without --bert_config_file: a Model Garden encoder's weights do not
  record its activation, so the converted config assumes Google BERT's tanh gelu
  (Model Garden's 'gelu' is the tanh one too) and says so in one warning naming the
  flag that gives another (issue 62, item 7: 'says in one line where it cannot')."""
  encoder = _model_garden_encoder()
  with caplog.at_level("WARNING", logger="absl"):
    config = tf2_encoder.infer_bert_config({w.name: w.numpy() for w in encoder.weights})
  assert config["hidden_act"] == "gelu"
  assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (
      TINY["hidden_size"], TINY["num_hidden_layers"], TINY["intermediate_size"])
  lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert len(lines) == 1 and "\n" not in lines[0], lines
  assert "assumed hidden_act=gelu (the tanh GELU" in lines[0]
  assert lines[0].endswith("give --bert_config_file to name another (e.g. gelu_erf).")
  from official.modeling import tf_utils  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  x = np.linspace(-4, 4, 81).astype(np.float32)
  # What the docstring claims of Model Garden: its 'gelu' is the tanh approximation.
  np.testing.assert_allclose(tf_utils.get_activation("gelu")(x).numpy(),
                             tf.nn.gelu(x, approximate=True).numpy(), atol=1e-6)
