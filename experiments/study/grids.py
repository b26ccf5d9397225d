"""The evidence study's design: its tasks, parts and grids (experiments/study/command.py runs them)."""

import dataclasses
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from adapter_bert import errors


@dataclasses.dataclass(frozen=True)
class StudyTask:
  """A WordNet task's columns, and whether its runs train on batches of examples
  of similar length (run_classifier.py --group_by_length)."""
  name: str
  text_a_column: str
  text_b_column: Optional[str] = None
  group_by_length: bool = False


# Length-grouped batches train 2.1x the steps a second, and as well (README,
# Speed: both measured on wordnet_lexname; wordnet_pos's inputs are definitions
# too). wordnet_relation keeps the random batches of its first runs
# (docs/study_first_runs.md), so that its reruns can be checked against those
# runs and its stability part reruns the points that collapsed there. Every
# run on a task, of every method and part, trains on the same kind of batches,
# so each task's comparisons stay like with like.
TASKS = {t.name: t for t in (
    StudyTask("wordnet_lexname", "sentence", group_by_length=True),
    StudyTask("wordnet_pos", "sentence", group_by_length=True),
    StudyTask("wordnet_example", "gloss", "example", group_by_length=True),
    StudyTask("wordnet_relation", "word_a", "word_b"))}

SEEDS = (1, 2, 3)
# Learning rates per method: the paper's grid (3e-5 .. 3e-3, three values)
# centred per method where the model trains (paper_table.py's rates): few
# trained weights want larger rates than full fine-tuning.
ADAPTER_RATES = (3e-4, 1e-3, 3e-3)


def adapter_rates(size: int) -> tuple:
  """The learning rates adapters of this width try.

  Wider adapters collapse to chance at lower rates (the stability part: on
  wordnet_relation adapters 64 collapsed at 3e-3 on every seed and at 1e-3 on
  one of six, adapters 256 at 1e-3 on every seed, adapters 8 never): Adam moves
  each weight by about the rate, so an adapter's output moves by about its width
  times the rate. So wider adapters also try rates below their edge.
  """
  if size <= 16:
    return ADAPTER_RATES
  if size <= 64:
    return (3e-4, 6e-4) + ADAPTER_RATES[1:]
  return (1e-4, 3e-4, 6e-4)


FULL_RATES = (3e-5, 1e-4, 3e-4)
LAYER_NORM_RATES = (1e-3, 3e-3, 1e-2)
HEAD_RATES = (3e-3, 1e-2, 3e-2)
# Every method's learning rate is chosen at EPOCHS. The paper tuned
# epochs in {3, 20} together with the rate; here the "methods_long" part runs
# each Table 1 method LONG_EPOCHS at its selected 3-epoch rate, and Table 1
# keeps the better epochs on dev (crossing every rate with 20 epochs would cost
# about seven times the methods part).
EPOCHS = 3
LONG_EPOCHS = 20
# Between them, the epochs part runs full fine-tuning at its selected rate.
CONVERGENCE_EPOCHS = (6, 10)
# Table 1's methods (the paper table) and, where the trade-off is drawn,
# adapters of every size and top-K layers for K = 1..L (MiniLM has 6).
TABLE_METHODS = [
    {"train_mode/adapter_size": [["adapters", 8]], "learning_rate": list(adapter_rates(8))},
    {"train_mode/adapter_size": [["adapters", 64]], "learning_rate": list(adapter_rates(64))},
    {"train_mode/adapter_size": [["full", 0], ["top_layers:3", 0]],
     "learning_rate": list(FULL_RATES)},
    {"train_mode/adapter_size": [["layer_norm", 0]], "learning_rate": list(LAYER_NORM_RATES)},
    {"train_mode/adapter_size": [["head", 0]], "learning_rate": list(HEAD_RATES)},
]
# Each Table 1 method's learning rates, by (train_mode, adapter_size).
TABLE_METHOD_RATES = {tuple(m): tuple(g["learning_rate"]) for g in TABLE_METHODS
                      for m in g["train_mode/adapter_size"]}
TABLE_METHOD_KEYS = list(TABLE_METHOD_RATES)
TRADEOFF_METHODS = [
    *({"train_mode/adapter_size": [["adapters", m]], "learning_rate": list(adapter_rates(m))}
      for m in (2, 4, 16, 32, 128, 256)),
    {"train_mode/adapter_size": [[f"top_layers:{k}", 0] for k in (1, 2, 4, 5, 6)],
     "learning_rate": list(FULL_RATES)},
]
# Training-set sizes (Figure 2) with steps that train the small sets to
# convergence (64 epochs of 100 examples) rather than to one step count.
DATA_SIZES = [[100, 200], [250, 250], [1000, 400], [4000, 750]]
INIT_SCALES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
# Table 1's disagreement: on wordnet_relation adapters 64 collapse to chance at
# lr 1e-3 (seed 2) and 3e-3 (every seed). The collapsed (learning rate, seed)
# points are run again with one factor changed at a time: BERT's warm-up
# (warmup_proportion 0.1) three times longer; the adapters' initial scale ten
# times smaller; the adapters four times wider (Adam moves every weight by
# about the rate, so an adapter's output moves with its width times the rate:
# 256 at 1e-3 should collapse as 64 at 3e-3 did, while 8 at 3e-3 in Table 1
# did not). Seed 2 at 1e-3 unchanged checks that the collapse replays; new
# seeds at 1e-3 count how often it happens, with either warm-up; a rate
# between the grid's 3e-4 and 1e-3 says what adapters 64 reach below it.
COLLAPSED = [[3e-3, 1], [3e-3, 2], [3e-3, 3], [1e-3, 2]]
WARMUP, LONG_WARMUP = 0.1, 0.3
INIT_SCALE, SMALL_INIT_SCALE = 1e-3, 1e-4
WIDE_ADAPTER, WIDE_RATE = 256, 1e-3
BETWEEN_RATE = 6e-4
STABILITY_SEEDS = (4, 5, 6)


def _stability_grid(size, rate_seeds, warmup, scale):
  return {"adapter_size": [size], "learning_rate/seed": rate_seeds,
          "warmup_proportion": [warmup], "adapter_init_scale": [scale]}


STABILITY_GRIDS = [
    _stability_grid(64, COLLAPSED, LONG_WARMUP, INIT_SCALE),
    _stability_grid(64, [[1e-3, 2]], WARMUP, INIT_SCALE),
    _stability_grid(64, COLLAPSED, WARMUP, SMALL_INIT_SCALE),
    _stability_grid(WIDE_ADAPTER, [[WIDE_RATE, s] for s in SEEDS], WARMUP, INIT_SCALE),
] + [_stability_grid(64, [[1e-3, s]], w, INIT_SCALE)
     for s in STABILITY_SEEDS for w in (WARMUP, LONG_WARMUP)] + [
    _stability_grid(64, [[BETWEEN_RATE, s] for s in SEEDS], WARMUP, INIT_SCALE)]

# The optimizer part: adapters 64 at every rate of theirs in Table 1, with the
# bias-corrected Adam (--optimizer=adamw) in place of the original's, whose first
# few hundred updates are several times larger at the same rate
# (adapter_bert/model/optimization.py). Its reference is Table 1's own adapters 64
# (the methods part, the original's optimizer), on a pair task and a
# single-sentence one. Its first sitting found no collapse up to 3e-3, where
# the original's collapsed on every seed: 1e-2 looks for its edge.
OPTIMIZER_TASKS = ("wordnet_relation", "wordnet_pos")
OPTIMIZER = "adamw"
OPTIMIZER_RATES = adapter_rates(64) + (1e-2,)

# part -> (tasks it runs on by default, what it decides).
PARTS = {
    "methods": (tuple(TASKS), "Table 1 on every task; Figures 3-5 (trade-off) on "
                "wordnet_lexname"),
    "methods_long": (tuple(TASKS), f"Table 1's epochs: each method {LONG_EPOCHS} epochs at "
                     f"its learning rate selected at {EPOCHS}"),
    "epochs": (tuple(TASKS), f"full fine-tuning between {EPOCHS} and {LONG_EPOCHS} epochs: "
               "when does it stop rising?"),
    "data_size": (("wordnet_lexname",), "Figure 2: adapters vs full fine-tuning as the "
                  "training set shrinks"),
    "init_scale": (("wordnet_lexname",), "Figure 6: the adapters' initial scale"),
    "stability": (("wordnet_relation",), "why adapters 64 collapse to chance at large "
                  "learning rates on wordnet_relation"),
    "optimizer": (OPTIMIZER_TASKS, "the collapse by learning rate, seed and optimizer: "
                  "adapters 64 with Adam bias-corrected (--optimizer=adamw)"),
    # Not a sweep: experiments.multitask_comparison, on the four tasks at once.
    "multitask": (("all",), "HyperFormer++ against per-task and shared adapters"),
}
# The multi-task comparison: every method at the rate of the earlier runs, for
# EPOCHS and for LONG_EPOCHS (Table 1's two budgets: single-task adapters on
# wordnet_relation still gain much from 3 to 20 epochs). And, to find out why
# HyperFormer++ (encoder frozen) varies so much between seeds, it again at
# EPOCHS with one factor changed: the learning rate a third and three times,
# the generators' initial scale (the authors' 0.01) ten times smaller and
# larger, the task embeddings' (the authors' 1) ten times smaller; and, to test
# whether its gap to per-task adapters is capacity, its generated adapters as
# wide as theirs (64, from 16).
MULTITASK_METHODS = ("houlsby", "shared", "hyperformer", "hyperformer_ln")


@dataclasses.dataclass(frozen=True)
class MultitaskRun:
  """One experiments.multitask_comparison run: its rate, methods, epochs, initial
  scales and the generated adapters' size."""
  learning_rate: float
  methods: tuple
  epochs: float = EPOCHS
  generator_init_stddev: float = 1e-2
  task_embedding_init_stddev: float = 1.0
  hyperformer_adapter_size: int = 16

  def _changed(self) -> List[tuple]:
    """The settings besides the rate that differ from the defaults."""
    return [(f, getattr(self, f)) for f in ("epochs", "generator_init_stddev",
                                            "task_embedding_init_stddev",
                                            "hyperformer_adapter_size")
            if getattr(self, f) != getattr(MultitaskRun, f)]

  @property
  def name(self) -> str:
    """Its directory under OUTPUT_DIR/multitask: the rate, then what differs."""
    return "_".join([f"lr-{self.learning_rate:g}"] + [f"{f}-{v:g}" for f, v in self._changed()])

  def describe(self) -> str:
    return ", ".join([f"Learning rate {self.learning_rate:g}", f"{self.epochs:g} epochs"]
                     + [f"{f} {v:g}" for f, v in self._changed() if f != "epochs"])


MULTITASK_RUNS = (
    MultitaskRun(3e-4, MULTITASK_METHODS),
    MultitaskRun(1e-4, ("hyperformer",)), MultitaskRun(1e-3, ("hyperformer",)),
    MultitaskRun(3e-4, ("hyperformer",), generator_init_stddev=1e-3),
    MultitaskRun(3e-4, ("hyperformer",), generator_init_stddev=1e-1),
    MultitaskRun(3e-4, ("hyperformer",), task_embedding_init_stddev=0.1),
    MultitaskRun(3e-4, ("hyperformer",), hyperformer_adapter_size=64),
    MultitaskRun(3e-4, MULTITASK_METHODS, epochs=LONG_EPOCHS))


def multitask_runs(output_dir: str, model_dir: str, data_root: str, seeds: Sequence[int],
                   names: Optional[Sequence[str]] = None) -> List[Tuple[str, List[str]]]:
  """(name, experiments.multitask_comparison's flags) of each MULTITASK_RUNS entry
  (or of each entry named in `names`, in MULTITASK_RUNS' order)."""
  return [(run.name, [f"--output_dir={os.path.join(output_dir, 'multitask', run.name)}",
           f"--seeds={','.join(map(str, seeds))}", f"--methods={','.join(run.methods)}",
           f"--model_dir={model_dir}", f"--data_root={data_root}",
           f"--num_train_epochs={run.epochs:g}", f"--learning_rate={run.learning_rate:g}",
           f"--generator_init_stddev={run.generator_init_stddev:g}",
           f"--task_embedding_init_stddev={run.task_embedding_init_stddev:g}",
           f"--hyperformer_adapter_size={run.hyperformer_adapter_size}"])
          for run in MULTITASK_RUNS if names is None or run.name in names]


TRADEOFF_TASKS = ("wordnet_lexname",)


# Where a Table 1 method's selected rate is the smallest or the largest it
# tried, the best may lie beyond it: the methods part then runs the next rate
# of this ladder beyond it too, with every seed, until the selection is
# bracketed, at most BRACKET_STEPS beyond the method's grid. (On
# wordnet_example full fine-tuning collapsed to chance at 1e-4 and 3e-4 on
# every seed, adapters 64 at 6e-4 on two of three, and both were selected at
# their grids' smallest rate.)
# As decimal literals (3e-4, not 3 * 10 ** -4): a point's identity hashes its settings.
RATE_LADDER = tuple(float(f"{m}e{e}") for e in range(-7, 0) for m in (1, 3)) + (1.0,)
BRACKET_STEPS = 2


def bracketing_rate(selected: float, tried: Sequence[float],
                    grid: Sequence[float]) -> Optional[float]:
  """The rate to try next beyond `selected` where it is the smallest or the
  largest of the rates `tried` (those of `grid` and any tried beyond it): the
  next RATE_LADDER value past it; None where it is bracketed, or BRACKET_STEPS
  rates past the grid's edge have been tried."""
  low, high = min(grid), max(grid)
  if selected <= min(tried) and sum(r < low for r in tried) < BRACKET_STEPS:
    below = [r for r in RATE_LADDER if r < selected * (1 - 1e-9)]
    return below[-1] if below else None
  if selected >= max(tried) and sum(r > high for r in tried) < BRACKET_STEPS:
    above = [r for r in RATE_LADDER if r > selected * (1 + 1e-9)]
    return above[0] if above else None
  return None


def _rates(part: str, rates: Optional[Mapping[tuple, float]]) -> Dict[tuple, float]:
  """The selected rates, in Table 1's method order."""
  if rates is None:
    raise ValueError(f"{part} runs at the methods part's selected rates: pass rates")
  return {key: rates[key] for key in TABLE_METHOD_KEYS if key in rates}


def fixed_settings(task: StudyTask, model_dir: str, data_root: str) -> Dict[str, object]:
  """What every point of a task shares: the tsv task, MiniLM, the run shape."""
  fixed = {"task_name": "tsv", "data_dir": os.path.join(data_root, task.name),
           "text_a_column": task.text_a_column, "label_column": "label",
           "vocab_file": os.path.join(model_dir, "vocab.txt"),
           "bert_config_file": os.path.join(model_dir, "bert_config.json"),
           "init_checkpoint": os.path.join(model_dir, "bert_model.ckpt"),
           # Above every WordNet example but lexname's few longest (p95 29 tokens);
           # batches are padded to their own longest example.
           "max_seq_length": 64, "train_batch_size": 32, "eval_batch_size": 64,
           "iterations_per_loop": 100, "save_checkpoints_steps": 1000,
           "eval_predictions": True}
  if task.text_b_column:
    fixed["text_b_column"] = task.text_b_column
  if task.group_by_length:  # Only where set: a point's identity is all its settings.
    fixed["group_by_length"] = True
  return fixed


def part_grid(part: str, task: StudyTask, model_dir: str, data_root: str,
              seeds: Sequence[int] = SEEDS,
              rates: Optional[Mapping[tuple, float]] = None,
              beyond: Optional[Mapping[tuple, Sequence[float]]] = None) -> dict:
  """The JSON grid (experiments/points/grid.py) of one part on one task.

  Args:
    rates: for "methods_long" and "epochs", the learning rate the methods part
      selected for each Table 1 method, by (train_mode, adapter_size).
    beyond: for "methods", the rates past its grid that a Table 1 method also
      tries (bracketing_rate), by (train_mode, adapter_size).
  """
  fixed = fixed_settings(task, model_dir, data_root)
  if part == "methods":
    # The rates that bracket Table 1's selections run before the trade-off's
    # points (a sweep runs its grid in order): they decide the claims.
    grids = TABLE_METHODS + [{"train_mode/adapter_size": [list(key)],
                              "learning_rate": list(extra)}
                             for key, extra in (beyond or {}).items()]
    grids += TRADEOFF_METHODS if task.name in TRADEOFF_TASKS else []
    return {"fixed": dict(fixed, num_train_epochs=EPOCHS), "vary": {"seed": list(seeds)},
            "grids": grids}
  if part == "methods_long":
    return {"fixed": dict(fixed, num_train_epochs=LONG_EPOCHS), "vary": {"seed": list(seeds)},
            "grids": [{"train_mode/adapter_size": [list(key)],
                       "learning_rate": [rate]}
                      for key, rate in _rates(part, rates).items()]}
  if part == "epochs":
    return {"fixed": dict(fixed, train_mode="full", adapter_size=0,
                          learning_rate=_rates(part, rates)[("full", 0)]),
            "vary": {"num_train_epochs": list(CONVERGENCE_EPOCHS), "seed": list(seeds)}}
  if part == "data_size":
    return {"fixed": fixed,
            "vary": {"train_examples/train_steps": DATA_SIZES,
                     "seed/subset_seed": [[s, s] for s in seeds]},
            "grids": [{"train_mode/adapter_size": [["adapters", 64]],
                       "learning_rate": list(adapter_rates(64)[1:3])},
                      {"train_mode/adapter_size": [["full", 0]],
                       "learning_rate": list(FULL_RATES[:2])}]}
  if part == "init_scale":
    # Below the collapse edge of adapters 64 (1e-3), so the scale is what varies.
    return {"fixed": dict(fixed, train_mode="adapters", adapter_size=64, learning_rate=6e-4,
                          num_train_epochs=EPOCHS),
            "vary": {"adapter_init_scale": list(INIT_SCALES), "seed": list(seeds)}}
  if part == "stability":
    return {"fixed": dict(fixed, train_mode="adapters", num_train_epochs=EPOCHS),
            "grids": STABILITY_GRIDS}
  if part == "optimizer":
    return {"fixed": dict(fixed, train_mode="adapters", adapter_size=64, optimizer=OPTIMIZER,
                          num_train_epochs=EPOCHS),
            "vary": {"learning_rate": list(OPTIMIZER_RATES), "seed": list(seeds)}}
  raise errors.UserError(f"--parts: unknown part {part!r}; expected {', '.join(PARTS)}")
