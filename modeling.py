"""The original's `modeling` module: BertConfig, the Keras BERT encoder with adapters and
the task models.

They live in adapter_bert/model/modeling.py (the model's one home is
adapter_bert/model/); this module keeps the original's import working (`import
modeling`), as a user of google-research/bert or adapter-bert writes it. The
project imports adapter_bert.model.modeling itself.
"""

from adapter_bert.model.modeling import *  # pylint: disable=wildcard-import,unused-wildcard-import
