"""The model's Keras layers (as Model Garden's official/nlp/modeling/layers): the
adapters (adapters.py), BERT's embeddings (embeddings.py) and Transformer block
(transformer.py), the classifier head (head.py), AdapterFusion's layer
(fusion.py), BERT's fast ops (ops.py: Dropout, TokenDense, LayerNorm,
attention), and what they share (common.py).
"""
