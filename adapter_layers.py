"""The original's `adapter_layers` module: the adapters (Keras layers), AdapterConfig and
the registry of adapter designs.

They live in adapter_bert/model/adapter_layers.py (the model's one home is
adapter_bert/model/); this module keeps the original's import working (`import
adapter_layers`), as a user of google-research/bert or adapter-bert writes it.
The project imports adapter_bert.model.adapter_layers itself.
"""

from adapter_bert.model.adapter_layers import *  # pylint: disable=wildcard-import,unused-wildcard-import
