"""The SQuAD pipeline of run_squad.py.

  data         SQuAD JSON -> examples -> doc-span features -> TFRecord -> tf.data
  postprocess  start/end logits -> answers, predictions.json and friends
  metrics      the official v1.1 / v2.0 exact match and F1
  evaluate     the official evaluate-v1.1.py / v2.0.py command
               (python -m adapter_bert.squad.evaluate)
"""
