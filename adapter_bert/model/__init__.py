"""The model's one home: BERT with adapters in Keras 3 and what it trains with.

Split as Model Garden's official/nlp/modeling: layers/ (adapters, embeddings,
the Transformer block), networks/ (the BERT encoder), models/ (the classifier
and span labeler), beside configs (BertConfig, AdapterConfig), activations,
serialization (the Keras package name, get_config/from_config), designs/ (the
adapter designs, one module each, and their registry), optimization (BERT's
AdamWeightDecay), ops (BERT's fast Dropout, LayerNorm and TokenDense), head
(the classifier head) and fusion (AdapterFusion).

modeling and adapter_layers are the model's public modules: they re-export
those names as they always had them (modeling.BertConfig,
adapter_layers.AdapterConfig); no module of the model imports them. The model
layer: it imports no command. The repository's top-level modeling.py,
adapter_layers.py and optimization.py keep the original's imports working.
"""

# First: registers the adapter designs (designs/__init__.py), before any module
# of the model is used.
from adapter_bert.model import designs as _designs  # pylint: disable=unused-import
