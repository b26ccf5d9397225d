"""The original's `optimization` module: BERT's AdamWeightDecay with warmup and linear
decay.

They live in adapter_bert/model/optimization.py (the model's one home is
adapter_bert/model/); this module keeps the original's import working (`import
optimization`), as a user of google-research/bert or adapter-bert writes it. The
project imports adapter_bert.model.optimization itself.
"""

from adapter_bert.model.optimization import *  # pylint: disable=wildcard-import,unused-wildcard-import
