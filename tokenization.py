"""The original's `tokenization` module: BERT's WordPiece tokenizer (FullTokenizer) and its
in-graph twin.

They live in adapter_bert/tokenization.py; this module keeps the original's import working (`import
tokenization`), as a user of google-research/bert or adapter-bert writes it. The
project imports adapter_bert.tokenization itself.
"""

from adapter_bert.tokenization import *  # pylint: disable=wildcard-import,unused-wildcard-import
