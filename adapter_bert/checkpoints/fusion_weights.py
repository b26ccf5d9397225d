"""What a fusion task's adapter-only file holds beyond any task's.

A fusion task (fusion/model.py) trains one layers.fusion.AdapterFusion at each
place where the fused tasks' adapters sit; its file stores them by TF1 name,
`bert/encoder/layer_N/{attention/output,output}/adapters/fusion/{query,key,value}/...`,
and its metadata names the fused tasks and fingerprints their adapters. The
adapter bank checks a fusion task's file against these names and shapes, and
the fusion model writes them: both read them here, so that the bank needs no
fusion code.
"""

from typing import Dict

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.model.layers.fusion import AdapterFusion
from adapter_bert.model import modeling

# The scope of a place's fusion layer under the place's adapter scope.
FUSION_SCOPE = "fusion"
# Where a Transformer layer's adapters sit (modeling.ADAPTER_PLACES' keys), in call order.
_SUBLAYERS = ("attention", "feed_forward")

# The metadata keys of a fusion task's adapter file (fusion/fused_tasks.py): the
# fused tasks' names, and their adapters' fingerprints.
TASKS_KEY = "fusion_tasks"
FINGERPRINTS_KEY = "fusion_fingerprints"


def places(config: modeling.BertConfig, adapter_config: AdapterConfig) -> Dict[tuple, str]:
  """(layer, sub-layer) -> the TF1 scope of the adapters there, in call order."""
  return {(i, s): f"bert/encoder/layer_{i}/{modeling.ADAPTER_PLACES[s].scope}"
          for i in range(config.num_hidden_layers) for s in _SUBLAYERS
          if s in adapter_config.sublayers}


def fusion_variable_shapes(config: modeling.BertConfig,
                           adapter_config: AdapterConfig) -> Dict[str, tuple]:
  """The shape of each fusion variable of a model, by TF1 name: one AdapterFusion
  at each place of every layer where adapters of `adapter_config` sit."""
  fusion = AdapterFusion(config.initializer_range)
  fusion.build((None, config.hidden_size))
  return {f"{scope}/{FUSION_SCOPE}/{name}": tuple(v.shape)
          for scope in places(config, adapter_config).values()
          for name, v in fusion.tf1_variable_names().items()}
