"""The model's task models (as Model Garden's official/nlp/modeling/models): an
encoder with a head (task_model.py), the classifier (bert_classifier.py), the
SQuAD span labeler (bert_span_labeler.py), and LoRA merged into a model's kernels."""
