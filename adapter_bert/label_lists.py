"""Label lists: the one check of a list of labels and the one comparison of two.

Label ids are list positions, so a label given twice would make two ids one
prediction, an empty one could not be named, and the same labels in another order
swap predictions. Every path that takes labels goes through these: --labels, a
TSV task's train.tsv, a multi-task run's tasks, an imported or exported adapter's
head, a bank's task, a SavedModel's task table, an adapter file or run resumed.
Here, below the tasks, the checkpoint readers and the run record, so that each of
them can use it.
"""

import unicodedata
from typing import List, Optional, Sequence, Tuple

from adapter_bert import errors


def as_read(label: str) -> str:
  """A label as a reader sees it: Unicode-normalized (NFKC), without the characters
  nobody sees (format characters: zero-width spaces, joiners, BOMs), spaces
  collapsed, case folded. Two labels that read alike are one class to a user."""
  visible = "".join(c for c in unicodedata.normalize("NFKC", label)
                    if unicodedata.category(c) != "Cf")
  return " ".join(visible.split()).casefold()


def near_duplicate(labels: Sequence[str]) -> Optional[Tuple[int, int]]:
  """The positions of the first two labels that differ as written but read alike
  (as_read), the earlier first; None if there are none. The same label written
  alike again is no near-duplicate (a file's rows repeat their labels)."""
  first = {}  # as_read(label) -> the position of its first spelling
  for i, label in enumerate(labels):
    j = first.setdefault(as_read(label), i)
    if labels[j] != label:
      return j, i
  return None


NEAR_DUPLICATE = ("differ only in case, spacing or characters a reader cannot see: one "
                  "class under two spellings; give it one")


def labels_problem(labels: Sequence[object]) -> Optional[str]:
  """What is wrong with a label list (None: nothing). The one check of labels,
  wherever they come from: --labels, a TSV task's train.tsv, a multi-task run's
  tasks, an imported adapter's head, a bank's task, a SavedModel's task table.
  Label ids are list positions, so a label given twice would make two ids one
  prediction, and an empty one could not be named."""
  labels = list(labels)
  if not all(isinstance(label, str) for label in labels):
    return f"labels must be strings, got {labels!r}"
  if not all(label.strip() for label in labels):
    return f"a label is empty or blank in {labels!r}"
  twice = [label for i, label in enumerate(labels) if label in labels[:i]]
  if twice:
    return f"label {twice[0]!r} is given twice in {labels!r}: each label names one class"
  near = near_duplicate(labels)
  if near:
    return f"labels {labels[near[0]]!r} and {labels[near[1]]!r} {NEAR_DUPLICATE}"
  return None


def check_labels(labels: Sequence[object], source: str, path: Optional[str] = None
                 ) -> List[str]:
  """labels_problem as errors.UserError, one line naming `source` (where the list
  was given: "--labels", "task 'sst2'") and `path`, the file it was read from."""
  problem = labels_problem(labels)
  if problem:
    raise errors.UserError(f"{source}: {problem}", path)
  return list(labels)


def check_label_count(labels: Sequence[str], num_outputs: int, source: str,
                      path: Optional[str] = None) -> None:
  """A classifier of `num_outputs` outputs has one label each (a regression, one
  output, has none): errors.UserError naming `source` and `path` otherwise."""
  if len(labels) != (num_outputs if num_outputs > 1 else 0):
    raise errors.UserError(f"{source} gives {len(labels)} labels, the classifier has "
                           f"{num_outputs} outputs (one output: a regression, no labels)",
                           path)


def check_labels_agree(given: Sequence[str], given_source: str, recorded: Sequence[str],
                       recorded_source: str, path: Optional[str] = None,
                       fix: Optional[str] = None) -> None:
  """Two sources of one task's labels must give the same list in the same order (the
  order is the label ids: the same labels in another order swap predictions). The
  one comparison of two label lists, whichever flag or file gave them.

  Args:
    fix: what to do, for the message, where "leave `given_source` out to take
      them from it" does not fit (an adapter file, a bank task, a run resumed).
  """
  if list(given) != list(recorded):
    fix = fix or f"give the same list in the same order, or leave {given_source} out " \
                 f"to take them from it"
    raise errors.UserError(f"{given_source} gives the labels {list(given)!r}, but "
                           f"{recorded_source} has {list(recorded)!r} (label ids are "
                           f"positions): {fix}", path)


# The keys under which a run's files record labels: a list of them, or a
# multi-task run's task list ({"name", "labels", "is_regression"} each).
LABEL_LIST_KEYS = ("labels", "label_list")
TASK_LIST_KEY = "tasks"


def _task_list(value) -> Optional[list]:
  if isinstance(value, list) and all(isinstance(t, dict) and "labels" in t for t in value):
    return value
  return None


def check_recorded_labels(key: str, given, given_source: str, recorded,
                          recorded_source: str, path: Optional[str] = None,
                          fix: Optional[str] = None) -> Tuple[object, object]:
  """Labels recorded under a file's `key` (a run_config.json's, an adapter file's
  metadata) against this run's, by check_labels and check_labels_agree: the
  recorded list must be well formed and the same, in the same order.

  Returns:
    (given, recorded) with the labels taken out, for the caller's comparison of
    the rest (a task list's names and kinds): (None, None) for a list of labels;
    both unchanged for another key, or values of another shape (a regression's
    None), which the caller compares as any other setting.
  """
  if key in LABEL_LIST_KEYS:
    if isinstance(given, (list, tuple)) and isinstance(recorded, list):
      check_labels(recorded, recorded_source, path)
      check_labels_agree(given, given_source, recorded, recorded_source, path, fix)
      return None, None
  elif key == TASK_LIST_KEY:
    now, was = _task_list(given), _task_list(recorded)
    if now is not None and was is not None and len(now) == len(was) and \
        [t.get("name") for t in now] == [t.get("name") for t in was]:
      for n, w in zip(now, was):
        if n.get("is_regression") or w.get("is_regression"):
          continue  # Which is a regression: compared by the caller.
        task = f"task {w.get('name')!r}"
        check_labels(w["labels"], f"{task} of {recorded_source}", path)
        check_labels_agree(n["labels"], f"{task} of {given_source}", w["labels"],
                           recorded_source, path, fix)
      strip = lambda tasks: [{k: v for k, v in t.items() if k != "labels"} for t in tasks]
      return strip(now), strip(was)
  return given, recorded
