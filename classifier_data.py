"""The data side of run_classifier.py in one import: processors and features.

The code lives in two modules, one concept each:
  glue_processors.py      TSV files -> `InputExample`s (GLUE tasks, user TSV).
  classifier_features.py  examples -> features -> TFRecord -> tf.data.
This module re-exports their public API so that a script reads
`classifier_data.get_processor(...)`, `classifier_data.make_dataset(...)`.
"""

# pylint: disable=unused-import
from classifier_features import (
    MODEL_INPUT_KEYS,
    InputFeatures,
    convert_examples_to_features,
    convert_single_example,
    ensure_feature_record,
    features_fingerprint,
    file_based_convert_examples_to_features,
    make_dataset,
    pad_examples_for_tpu,
    truncate_seq_pair,
)
from glue_processors import (
    PROCESSORS,
    DataProcessor,
    InputExample,
    PaddingInputExample,
    TsvFormatError,
    canonical_task_name,
    get_processor,
    read_tsv,
)
