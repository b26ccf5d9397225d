"""Model Garden's BertEncoder (tf-models-official) on a Google-format checkpoint,
read through Model Garden's own TF1 converter: the reference the Keras BERT is held
to, on random tiny weights (test_modeling) and on the real MiniLM (test_real_weights)."""

import os

import tensorflow as tf


def _gelu_erf(x):  # A named function: Model Garden serializes the activation by name.
  return tf.nn.gelu(x, approximate=False)


def model_garden_outputs(config_path, ckpt, inputs, tmp_path):
  """Model Garden's BertEncoder loaded through its own TF1 converter."""
  from official.legacy.bert import configs
  from official.nlp.tools import tf2_bert_encoder_checkpoint_converter as converter
  import tf_keras

  mg_config = configs.BertConfig.from_json_file(config_path)
  if mg_config.hidden_act == "gelu_erf":  # Model Garden's "gelu" is the tanh one.
    mg_config.hidden_act = _gelu_erf
  out = os.path.join(str(tmp_path), "mg", "ckpt")
  converter.convert_checkpoint(mg_config, out, ckpt, checkpoint_model_name="encoder")
  encoder = converter._create_bert_model(mg_config)
  saved = tf.train.latest_checkpoint(os.path.dirname(out))  # save() appended "-1".
  tf.train.Checkpoint(encoder=encoder).read(saved).assert_existing_objects_matched()
  outputs = encoder({"input_word_ids": inputs["input_ids"],
                     "input_mask": inputs["input_mask"],
                     "input_type_ids": inputs["segment_ids"]}, training=False)
  if isinstance(outputs, dict):
    outputs = outputs["sequence_output"], outputs["pooled_output"]
  return outputs[0].numpy(), outputs[1].numpy()
