"""Reading GLUE-format TSV files into `InputExample`s (run_classifier.py's processors).

Reproduces google-research/bert `run_classifier.py` (CoLA, MNLI, MRPC, XNLI) and
adds GLUE's other tasks and a header-named user TSV task. Task names for
`get_processor` (case-insensitive; aliases in brackets):

  cola, mnli (dev_matched / test_matched), mnli-mm [mnli_mm] (dev_mismatched /
  test_mismatched), mrpc, xnli, sst-2 [sst2], sts-b [stsb] (regression),
  qqp, qnli, rte, wnli, ax (GLUE diagnostic, test only), tsv (user data).

Conventions shared by every processor, as in the original:
  * TSV: tab delimiter, no quote character, so quotes stay in the text.
  * guid = "<set_type>-<row index>" (row 0 is the header where there is one),
    except MNLI, whose guid uses the file's `index` column as the original.
  * Test examples get a dummy label (the first of `get_labels()`, 0.0 for
    STS-B): predictions never look at it, and feature conversion needs one.
  * Blank lines are skipped (the original crashed on them), except in a tsv
    task's file of one column, where a blank line is an empty text. A missing or
    undecodable file, a row with more or fewer columns than the file's header
    (or, without one, than the task reads), a train/dev label outside
    `get_labels()` and a file without examples are `errors.UserError`s that
    name the file and its 1-based line, as an editor shows it.
"""

import dataclasses
import inspect
import math
import os
from typing import List, Optional, Sequence, Union

from absl import logging
import tensorflow as tf

from adapter_bert import errors
from adapter_bert import label_lists
from adapter_bert.classification.tsv_files import (TsvFormatError, TsvLine, check_width,
                                                   fields, find_columns, no_examples,
                                                   read_tsv)

Label = Union[str, float, None]


@dataclasses.dataclass
class InputExample:
  """A single training/test example for simple sequence classification.

  Attributes:
    guid: unique id for bookkeeping, e.g. "train-3".
    text_a: untokenized text of the first sequence.
    text_b: untokenized text of the second sequence, None for single-sequence tasks.
    label: label string (a float for regression tasks); a dummy for test examples.
    source: "path:line" of the row it came from, for error messages (not in the
      original, which had no way to say where a bad label was).
  """
  guid: str
  text_a: str
  text_b: Optional[str] = None
  label: Label = None
  source: Optional[str] = dataclasses.field(default=None, compare=False)


class PaddingInputExample:
  """Fake example so the number of examples is a multiple of the batch size.

  TPUs need a fixed batch size; padding with these (features all zero,
  is_real_example 0) instead of dropping the last batch keeps every real
  example in eval and predict. A class rather than None so that padding is
  never mistaken for missing data.
  """

  def __eq__(self, other):
    return isinstance(other, PaddingInputExample)

  def __repr__(self):
    return "PaddingInputExample()"


class DataProcessor:
  """Base class for data converters for sequence classification data sets."""

  # True for tasks whose label is a float score (one model output, MSE loss).
  is_regression = False

  def get_train_examples(self, data_dir: str) -> List[InputExample]:
    """Gets a collection of `InputExample`s for the train set."""
    raise NotImplementedError()

  def get_dev_examples(self, data_dir: str) -> List[InputExample]:
    """Gets a collection of `InputExample`s for the dev set."""
    raise NotImplementedError()

  def get_test_examples(self, data_dir: str) -> List[InputExample]:
    """Gets a collection of `InputExample`s for prediction."""
    raise NotImplementedError()

  def get_labels(self) -> Optional[List[str]]:
    """Gets the list of labels (index = label id); None for regression."""
    raise NotImplementedError()

  def num_labels(self) -> int:
    """Width of the classifier output: 1 for regression, else len(labels)."""
    return 1 if self.is_regression else len(self.get_labels())

  @classmethod
  def _read_tsv(cls, input_file, quotechar=None):
    """Reads a tab separated value file (the original's name and signature)."""
    return read_tsv(input_file, quotechar)

  def _check_label(self, label, line: TsvLine):
    labels = self.get_labels()
    if label not in labels:
      raise TsvFormatError(f"label {label!r} is not one of {labels}", line)
    return label


# What a task reads in the columns it names, for find_columns' message.
_ROLES = ("first text", "second text", "label", "example id")


class GlueTsvProcessor(DataProcessor):
  """A GLUE task described by its files and column indices (see subclasses).

  Class attributes:
    files: split -> file name inside data_dir.
    header: split -> whether row 0 is a header naming the columns.
    columns: (text_a, text_b or None, label) for train and dev, by position.
    test_columns: (text_a, text_b or None) for test, by position.
    column_names, test_column_names: the same columns by their names in GLUE's
      headers. Where a split has a header, its columns are found by these names
      (on GLUE's files at the positions above, so the original's results), and
      a header without one of them is refused naming the file and the column:
      reading it by position would take one column for another in silence.
    guid_column: None -> guid uses the row index; else that column's value
      (guid_column_name in a header).
    dev_set_type: the set type in dev guids ("dev", MNLI "dev_matched").
  """
  labels: Sequence[str] = ("0", "1")
  files = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
  header = {"train": True, "dev": True, "test": True}
  columns = (0, None, 1)
  test_columns = (1, None)
  column_names = ("sentence", None, "label")
  test_column_names = ("sentence", None)
  guid_column = None
  guid_column_name = None
  dev_set_type = "dev"

  def get_labels(self):
    return list(self.labels)

  def get_train_examples(self, data_dir):
    return self._create_examples(data_dir, "train", "train")

  def get_dev_examples(self, data_dir):
    return self._create_examples(data_dir, "dev", self.dev_set_type)

  def get_test_examples(self, data_dir):
    return self._create_examples(data_dir, "test", "test")

  def _parse_label(self, label, line):
    return self._check_label(label, line)

  def _dummy_label(self):
    return self.get_labels()[0]

  def _path(self, data_dir, split):
    return os.path.join(data_dir, self.files[split])

  def _usable(self, line, width, header):  # pylint: disable=unused-argument
    """Whether to read a non-blank data row (QQP may skip malformed ones)."""
    return True

  def _width(self, split):
    """Columns of a file without a header: those the task reads."""
    a, b, label = self.columns if split != "test" else self.test_columns + (None,)
    return 1 + max(c for c in (a, b, label, self.guid_column) if c is not None)

  def _column_indices(self, split, header: Optional[TsvLine]):
    """(text_a, text_b, label, guid) positions: found by name in `header` where the
    file has one, else the positions the task reads."""
    test = split == "test"
    positions = (self.test_columns + (None,) if test else self.columns) + (self.guid_column,)
    if header is None:
      return positions
    names = (self.test_column_names + (None,) if test else self.column_names) + (
        self.guid_column_name,)
    return tuple(find_columns(header, zip(names, _ROLES)))

  def _create_examples(self, data_dir, split, set_type):
    path = self._path(data_dir, split)
    lines = self._read_tsv(path)
    header = lines[0] if self.header[split] and lines else None
    width = len(header) if header is not None else self._width(split)
    a, b, label_column, guid_column = self._column_indices(split, header)
    examples = []
    for (i, line) in enumerate(lines):
      if (i == 0 and header is not None) or not line or not self._usable(line, width, header):
        continue
      check_width(line, width, header)
      guid_id = i if guid_column is None else fields(line, guid_column)[0]
      if split == "test":
        label = self._dummy_label()
      else:
        label = self._parse_label(fields(line, label_column)[0], line)
      text_a = fields(line, a)[0]
      text_b = None if b is None else fields(line, b)[0]
      examples.append(InputExample(guid=f"{set_type}-{guid_id}", text_a=text_a,
                                   text_b=text_b, label=label, source=line.where))
    if not examples:
      raise no_examples(path)
    return examples


class ColaProcessor(GlueTsvProcessor):
  """CoLA: train/dev have no header (source, label, mark, sentence); test.tsv has one."""
  header = {"train": False, "dev": False, "test": True}
  columns = (3, None, 1)
  test_columns = (1, None)
  column_names = None  # train.tsv and dev.tsv have no header.


class MrpcProcessor(GlueTsvProcessor):
  """MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String; test's first column is index."""
  columns = (3, 4, 0)
  test_columns = (3, 4)
  column_names = ("#1 String", "#2 String", "Quality")
  test_column_names = ("#1 String", "#2 String")


class MnliProcessor(GlueTsvProcessor):
  """MultiNLI, matched dev/test: sentence1/2 in columns 8/9, gold label last."""
  labels = ("contradiction", "entailment", "neutral")
  files = {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}
  columns = (8, 9, -1)
  test_columns = (8, 9)
  column_names = ("sentence1", "sentence2", "gold_label")
  test_column_names = ("sentence1", "sentence2")
  guid_column = 0
  guid_column_name = "index"
  dev_set_type = "dev_matched"

  def _parse_label(self, label, line):
    # The label is the last column; a row cut short after sentence2 would
    # otherwise read sentence2 as its label.
    fields(line, 10)
    return self._check_label(label, line)


class MnliMismatchedProcessor(MnliProcessor):
  """MultiNLI with the mismatched dev/test sets (same train.tsv)."""
  files = {"train": "train.tsv", "dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"}
  dev_set_type = "dev_mismatched"


class Sst2Processor(GlueTsvProcessor):
  """SST-2: header "sentence\\tlabel"; test header "index\\tsentence"."""
  columns = (0, None, 1)
  test_columns = (1, None)


class StsbProcessor(GlueTsvProcessor):
  """STS-B regression: sentence1/2 in columns 7/8, float score in column 9."""
  is_regression = True
  columns = (7, 8, 9)
  test_columns = (7, 8)
  column_names = ("sentence1", "sentence2", "score")
  test_column_names = ("sentence1", "sentence2")

  def get_labels(self):
    return None

  def _parse_label(self, label, line):
    try:
      score = float(label)
    except ValueError:
      raise TsvFormatError(f"score {label!r} is not a number", line) from None
    if not math.isfinite(score):  # float() reads "nan" and "inf": no target to learn.
      raise TsvFormatError(f"score {label!r} is not a finite number", line)
    return score

  def _dummy_label(self):
    return 0.0


class QqpProcessor(GlueTsvProcessor):
  """QQP: id, qid1, qid2, question1, question2, is_duplicate; test: id, question1, question2.

  Args:
    skip_malformed_rows: QQP's train.tsv is known to hold a few rows with
      missing columns (questions with stray newlines). By default they are an
      error naming file and line; True skips them (and rows with extra
      columns) with a warning instead, as common GLUE implementations do
      silently.
  """
  columns = (3, 4, 5)
  test_columns = (1, 2)
  column_names = ("question1", "question2", "is_duplicate")
  test_column_names = ("question1", "question2")

  def __init__(self, skip_malformed_rows: bool = False):
    self.skip_malformed_rows = skip_malformed_rows

  def _usable(self, line, width, header):
    if not self.skip_malformed_rows or len(line) == width:
      return True
    logging.warning("%s: skipping malformed row with %d column(s), need %d",
                    line.where, len(line), width)
    return False


class QnliProcessor(GlueTsvProcessor):
  """QNLI: index, question, sentence, label (entailment / not_entailment)."""
  labels = ("entailment", "not_entailment")
  columns = (1, 2, 3)
  test_columns = (1, 2)
  column_names = ("question", "sentence", "label")
  test_column_names = ("question", "sentence")


class RteProcessor(QnliProcessor):
  """RTE: index, sentence1, sentence2, label (entailment / not_entailment)."""
  column_names = ("sentence1", "sentence2", "label")
  test_column_names = ("sentence1", "sentence2")


class WnliProcessor(GlueTsvProcessor):
  """WNLI: index, sentence1, sentence2, label (0 / 1)."""
  columns = (1, 2, 3)
  test_columns = (1, 2)
  column_names = ("sentence1", "sentence2", "label")
  test_column_names = ("sentence1", "sentence2")


class AxProcessor(GlueTsvProcessor):
  """GLUE diagnostic (AX): test only, index, sentence1, sentence2; MNLI's labels.

  It is scored with a model fine-tuned on MNLI, so it has no train or dev set.
  The GLUE download script saves it as diagnostic/diagnostic.tsv; the raw
  download's name AX.tsv is accepted too.
  """
  labels = MnliProcessor.labels
  test_columns = (1, 2)
  test_column_names = ("sentence1", "sentence2")

  def get_train_examples(self, data_dir):
    raise errors.UserError("Task ax (GLUE diagnostic) has no train set: fine-tune with "
                           "task mnli, then predict with task ax")

  def get_dev_examples(self, data_dir):
    raise errors.UserError("Task ax (GLUE diagnostic) has no dev set with labels: "
                           "evaluate with task mnli, predict with task ax")

  def _path(self, data_dir, split):
    path = os.path.join(data_dir, "diagnostic.tsv")
    raw = os.path.join(data_dir, "AX.tsv")
    if not tf.io.gfile.exists(path) and tf.io.gfile.exists(raw):
      return raw
    return path


class XnliProcessor(DataProcessor):
  """XNLI as google-research/bert: XNLI-MT train for one language, XNLI-1.0 dev.

  Files: multinli/multinli.train.<language>.tsv (premise, hypo, label with
  "contradictory" renamed to "contradiction") and xnli.dev.tsv filtered on the
  language column (guid "dev-<row index>" counts all languages' rows, as the
  original). The original has no test set; here xnli.test.tsv, laid out as the
  dev file, is read the same way.
  """

  def __init__(self, language: str = "zh"):
    self.language = language

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]

  def get_train_examples(self, data_dir):
    path = os.path.join(data_dir, "multinli", f"multinli.train.{self.language}.tsv")
    examples = []
    lines = self._read_tsv(path)
    columns = find_columns(lines[0], zip(("premise", "hypo", "label"), _ROLES)) if lines else ()
    for (i, line) in enumerate(lines):
      if i == 0 or not line:
        continue
      check_width(line, len(lines[0]), lines[0])
      text_a, text_b, label = fields(line, *columns)
      if label == "contradictory":
        label = "contradiction"
      examples.append(InputExample(f"train-{i}", text_a, text_b,
                                   self._check_label(label, line), source=line.where))
    if not examples:
      raise no_examples(path)
    return examples

  def get_dev_examples(self, data_dir):
    return self._xnli_1_0(os.path.join(data_dir, "xnli.dev.tsv"), "dev")

  def get_test_examples(self, data_dir):
    return self._xnli_1_0(os.path.join(data_dir, "xnli.test.tsv"), "test")

  def _xnli_1_0(self, path, set_type):
    examples = []
    lines = self._read_tsv(path)
    language, label_column, a, b = find_columns(lines[0], (
        ("language", "language"), ("gold_label", "label"), ("sentence1", "first text"),
        ("sentence2", "second text"))) if lines else (0, 1, 6, 7)
    for (i, line) in enumerate(lines):
      if i == 0 or not line:
        continue
      check_width(line, len(lines[0]), lines[0])
      if fields(line, language)[0] != self.language:
        continue
      label, text_a, text_b = fields(line, label_column, a, b)
      label = self.get_labels()[0] if set_type == "test" else self._check_label(label, line)
      examples.append(InputExample(f"{set_type}-{i}", text_a, text_b, label,
                                   source=line.where))
    if not examples:
      raise no_examples(path, f" for language {self.language!r} (column 1)")
    return examples


class TsvProcessor(DataProcessor):
  """User data: train.tsv, dev.tsv, test.tsv with a header row naming the columns.

  Args:
    data_dir: directory of train.tsv, needed to derive the label list when
      `labels` is not given.
    text_a_column: header name of the first text.
    text_b_column: header name of the second text, None for single sentences.
    label_column: header name of the label; test.tsv may lack it.
    labels: the label list (its order = label ids). Default: the sorted unique
      labels of train.tsv, sorted as Python strings ("10" before "2"), so the
      ids do not depend on row order; pass `labels` to choose the order, or
      when evaluating without train.tsv.
  """

  def __init__(self, data_dir: Optional[str] = None, text_a_column: str = "sentence",
               text_b_column: Optional[str] = None, label_column: str = "label",
               labels: Optional[Sequence[str]] = None):
    self.data_dir = data_dir
    self.text_a_column = text_a_column
    self.text_b_column = text_b_column
    self.label_column = label_column
    self._labels = label_lists.check_labels(labels, "--labels") if labels is not None else None

  def get_labels(self):
    if self._labels is None:
      if self.data_dir is None:
        raise ValueError("Task tsv needs data_dir (labels come from train.tsv) or labels")
      path = os.path.join(self.data_dir, "train.tsv")
      rows = self._rows(path, need_label=True)
      for row in rows:
        if not row[-1].strip():  # A class without a name: no --labels could list it.
          raise TsvFormatError(f"empty label in column {self.label_column!r}", row[1])
      # One class under two spellings: named by both rows, not only the labels.
      near = label_lists.near_duplicate([row[-1] for row in rows])
      if near:
        earlier, later = rows[near[0]], rows[near[1]]  # (index, line, ..., label)
        raise TsvFormatError(f"label {later[-1]!r} and label {earlier[-1]!r} (line "
                             f"{earlier[1].line_number}) {label_lists.NEAR_DUPLICATE}",
                             later[1])
      self._labels = label_lists.check_labels(sorted({row[-1] for row in rows}), "train.tsv's labels",
                                  path)
    return list(self._labels)

  def get_train_examples(self, data_dir):
    return self._create_examples(data_dir, "train")

  def get_dev_examples(self, data_dir):
    return self._create_examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    return self._create_examples(data_dir, "test")

  def _rows(self, path, need_label):
    """Returns (row index, line, text_a, text_b, label or None) per data row of `path`."""
    lines = self._read_tsv(path)
    if not lines:
      raise TsvFormatError("empty file, expected a header row", path=path)
    header = lines[0]
    index = find_columns(header, zip(
        (self.text_a_column, self.text_b_column, self.label_column if need_label else None),
        _ROLES))
    rows = []
    for i, line in enumerate(lines):
      if i == 0 or (not line and len(header) > 1):
        continue
      if not line:  # One column: a blank line is an empty text, kept so that the
        line = TsvLine([""], line.path, line.line_number)  # predictions keep its rows.
      check_width(line, len(header), lines[0])
      values = [None if k is None else line[k] for k in index]
      rows.append((i, line, *values))
    if not rows:
      raise no_examples(path, " (only a header row)")
    return rows

  def _create_examples(self, data_dir, split):
    path = os.path.join(data_dir, f"{split}.tsv")
    rows = self._rows(path, need_label=split != "test")
    # Test rows get the dummy label labels[0], so predicting also needs the
    # label list (the model's output width depends on it anyway).
    labels = self.get_labels()
    examples = []
    for i, line, text_a, text_b, label in rows:
      if split == "test":
        label = labels[0]
      else:
        label = self._check_label(label, line)
      examples.append(InputExample(f"{split}-{i}", text_a, text_b, label, source=line.where))
    return examples


PROCESSORS = {
    "cola": ColaProcessor,
    "mnli": MnliProcessor,
    "mnli-mm": MnliMismatchedProcessor,
    "mrpc": MrpcProcessor,
    "xnli": XnliProcessor,
    "sst-2": Sst2Processor,
    "sts-b": StsbProcessor,
    "qqp": QqpProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "ax": AxProcessor,
    "tsv": TsvProcessor,
}

_ALIASES = {"mnli_mm": "mnli-mm", "sst2": "sst-2", "stsb": "sts-b"}


def canonical_task_name(task_name: str) -> str:
  """Lower-cases and resolves aliases ("SST2" -> "sst-2"); unknown names pass through."""
  name = task_name.lower()
  return _ALIASES.get(name, name)


def get_processor(task_name: str, **options) -> DataProcessor:
  """Returns the processor for `task_name` (case-insensitive).

  Args:
    task_name: one of PROCESSORS' keys or an alias (mnli_mm, sst2, stsb).
    **options: constructor options of that processor: for "tsv" data_dir,
      text_a_column, text_b_column, label_column, labels; for "xnli" language;
      for "qqp" skip_malformed_rows. Other tasks take none.

  Raises:
    ValueError: "Task not found: <name>" as the original, or an option the
      task does not take.
  """
  name = canonical_task_name(task_name)
  if name not in PROCESSORS:
    raise ValueError("Task not found: %s" % (task_name.lower()))
  cls = PROCESSORS[name]
  accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "args", "kwargs"}
  unknown = sorted(set(options) - accepted)
  if unknown:
    raise ValueError(f"Task {name} does not take option(s) {unknown}; "
                     f"it takes {sorted(accepted) or 'none'}")
  return cls(**options)
