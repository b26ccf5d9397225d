"""The model's Keras layers (as Model Garden's official/nlp/modeling/layers): the
adapters (adapters.py), BERT's embeddings (embeddings.py) and Transformer block
(transformer.py), and what they share (common.py). The fast ops (../ops.py), the
classifier head (../head.py) and AdapterFusion (../fusion.py) are layers too,
kept at their older paths.
"""
