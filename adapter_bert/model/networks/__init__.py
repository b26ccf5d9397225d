"""The model's networks (as Model Garden's official/nlp/modeling/networks): the
BERT encoder (bert_encoder.py)."""
