"""The model's one home: BERT with adapters in Keras 3 and what it trains with.

modeling (BertConfig, the encoder, the task models), adapter_layers (the
adapters, AdapterConfig and the registry of designs), optimization (BERT's
AdamWeightDecay), and the Keras layers they are built of: ops (BERT's fast
Dropout and TokenDense), head (the classifier head) and fusion (AdapterFusion).
The model layer: it imports no command. The repository's top-level modeling.py,
adapter_layers.py and optimization.py keep the original's imports working.
"""
