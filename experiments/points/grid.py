"""A sweep's grid: fixed settings, varied axes, and the points they make.

A setting is a run_classifier.py flag (`learning_rate`, `adapter_size`,
`train_mode`, `seed`, `adapter_init_scale`, any other) or one of the sweep's
own keys (SWEEP_KEYS), which shape the training data instead of being passed
on. An axis varies one key, or several keys together (a bundle: the paper's
methods are a train mode *with* its adapter size, since e.g.
`--train_mode=top_layers:3 --adapter_size=64` is refused).

On the command line (experiments/sweep.py):

  --vary=learning_rate=1e-4,3e-4,1e-3          one key, comma-separated values
  --vary=train_mode/adapter_size=adapters/8,adapters/64,full/0
                                               keys joined by "/", one value each
  -- --task_name=tsv --data_dir=... --do_lower_case   fixed flags, after "--"

In a JSON grid file (--grid=FILE), the same plus a union of grids, for
ranges that differ per method (the few weights of adapters and LayerNorms
want larger learning rates than full fine-tuning):

  {"fixed": {"task_name": "tsv", "data_dir": "data/wordnet/wordnet_lexname"},
   "vary": {"seed": [1, 2, 3]},
   "grids": [{"train_mode/adapter_size": [["adapters", 8], ["adapters", 64]],
              "learning_rate": [3e-4, 1e-3]},
             {"train_mode": ["full"], "learning_rate": [3e-5, 1e-4]}]}

The points are, for each grid (one empty grid if there are none), every
combination of the "vary" axes with that grid's axes, in the order given (the
first axis outermost); a point listed twice is run once. Values: JSON values,
or on the command line numbers, true / false, null (the flag is left out) and
text. true gives `--flag`, false `--noflag`.
"""

import dataclasses
import hashlib
import itertools
import json
import re
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

from adapter_bert import errors

# Keys the sweep itself interprets (see data.py); never passed to run_classifier.py.
SWEEP_KEYS = {
    "train_examples": "training-set size: N rows of train.tsv, or 'all'",
    "subset": "which N rows: 'random' (default; nested: a smaller N is a subset of a "
              "larger one with the same subset_seed) or 'first'",
    "subset_seed": "seed of the random subset (default 0)",
    "train_steps": "training steps, set through --num_train_epochs = steps * "
                   "train_batch_size / training examples (instead of num_train_epochs)",
}
# Set by the sweep for every point.
RESERVED_KEYS = ("output_dir",)
# Short names in point directory names; other keys appear whole.
_ALIASES = {"learning_rate": "lr", "num_train_epochs": "epochs", "adapter_size": "size",
            "train_mode": "mode", "adapter_init_scale": "init", "train_examples": "n",
            "train_steps": "steps", "subset_seed": "sseed", "train_batch_size": "batch"}
_SEED_KEYS = ("seed", "subset_seed")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"[-+]?\d+\Z")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z")
_MAX_NAME = 120


class GridError(errors.UserError):
  """A grid that cannot be run as written; the message says what to change."""


def parse_value(text: str):
  """A command-line value as the type it reads as: int, float, bool, None or str."""
  if _INT.match(text):
    return int(text)
  if _FLOAT.match(text):
    return float(text)
  lower = text.lower()
  if lower in ("true", "false"):
    return lower == "true"
  if lower == "null":
    return None
  return text


def format_value(value) -> str:
  """A value as it appears in a flag and a name: floats exactly (repr), lists comma-joined."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, float):
    return repr(value)
  if isinstance(value, (list, tuple)):
    return ",".join(format_value(v) for v in value)
  return str(value)


def _check_key(key: str, where: str) -> str:
  if not _KEY.match(key):
    raise GridError(f"{where}: {key!r} is not a flag name")
  if key in RESERVED_KEYS:
    raise GridError(f"{where}: --{key} is set by the sweep (one directory per point)")
  return key


@dataclasses.dataclass(frozen=True)
class Axis:
  """Keys varied together and their values: one tuple of len(keys) per point."""
  keys: Tuple[str, ...]
  values: Tuple[tuple, ...]

  def __post_init__(self):
    for key in self.keys:
      _check_key(key, "axis " + "/".join(self.keys))
    if not self.values:
      raise GridError(f"axis {'/'.join(self.keys)} has no values")
    for value in self.values:
      if len(value) != len(self.keys):
        raise GridError(f"axis {'/'.join(self.keys)}: value {list(value)} needs "
                        f"{len(self.keys)} parts, one per key")

  @classmethod
  def parse(cls, spec: str) -> "Axis":
    """`key=v1,v2` or `key1/key2=a1/b1,a2/b2` (see the module docstring)."""
    name, sep, values = spec.partition("=")
    if not sep or not values:
      raise GridError(f"--vary={spec}: expected KEY=V1,V2,... or KEY1/KEY2=A1/B1,A2/B2")
    keys = tuple(k.strip().lstrip("-") for k in name.split("/"))
    parts = [v for v in values.split(",")]
    if len(keys) == 1:
      return cls(keys, tuple((parse_value(v),) for v in parts))
    return cls(keys, tuple(tuple(parse_value(p) for p in v.split("/")) for v in parts))

  @classmethod
  def from_json(cls, name: str, values) -> "Axis":
    keys = tuple(k.strip() for k in name.split("/"))
    if not isinstance(values, list):
      raise GridError(f"grid axis {name!r}: expected a list of values")
    if len(keys) == 1:
      return cls(keys, tuple((v,) for v in values))
    if not all(isinstance(v, list) for v in values):
      raise GridError(f"grid axis {name!r}: each value is a list of {len(keys)} (one per key)")
    return cls(keys, tuple(tuple(v) for v in values))


def parse_flags(args: Iterable[str]) -> Dict[str, object]:
  """`--key=value`, `--flag`, `--noflag` (run_classifier.py's syntax) as a dict."""
  fixed = {}
  for arg in args:
    if not arg.startswith("-"):
      raise GridError(f"fixed flag {arg!r}: expected --name=value")
    name, sep, value = arg.lstrip("-").partition("=")
    if sep:
      fixed[_check_key(name, arg)] = parse_value(value)
    elif name.startswith("no") and len(name) > 2:
      fixed[_check_key(name[2:], arg)] = False
    else:
      fixed[_check_key(name, arg)] = True
  return fixed


def flag_args(settings: Mapping[str, object]) -> List[str]:
  """The run_classifier.py arguments of `settings` (sweep keys and None left out)."""
  args = []
  for key, value in settings.items():
    if key in SWEEP_KEYS or value is None:
      continue
    if isinstance(value, bool):
      args.append(f"--{key}" if value else f"--no{key}")
    else:
      args.append(f"--{key}={format_value(value)}")
  return args


@dataclasses.dataclass(frozen=True)
class Point:
  """One run: what varies (for its name and the table) and every setting."""
  vary: Dict[str, object]
  settings: Dict[str, object]

  @property
  def name(self) -> str:
    """A directory name: the varied settings, readable, then a hash of every setting.

    The hash makes a point's identity all of its settings, so a sweep rerun
    with other fixed flags in the same directory runs new points instead of
    taking old results for them.
    """
    digest = hashlib.sha256(json.dumps(self.settings, sort_keys=True).encode()).hexdigest()
    # Seeds last, so that a point's replicas sort next to each other.
    keys = sorted(self.vary, key=lambda k: k in _SEED_KEYS)
    parts = [f"{_ALIASES.get(k, k)}-{format_value(self.vary[k])}" for k in keys]
    readable = re.sub(r"[^A-Za-z0-9.+_=-]", "-", "_".join(parts))[:_MAX_NAME] or "point"
    return f"{readable}-{digest[:8]}"


@dataclasses.dataclass
class Grid:
  """Fixed settings, axes crossed with every point, and a union of grids of axes."""
  fixed: Dict[str, object] = dataclasses.field(default_factory=dict)
  vary: List[Axis] = dataclasses.field(default_factory=list)
  grids: List[List[Axis]] = dataclasses.field(default_factory=list)

  @classmethod
  def from_json(cls, data) -> "Grid":
    if not isinstance(data, dict) or set(data) - {"fixed", "vary", "grids"}:
      raise GridError('a grid file holds a JSON object with "fixed", "vary" and/or "grids"')
    fixed = data.get("fixed", {})
    if isinstance(fixed, list):
      fixed = parse_flags(fixed)
    elif isinstance(fixed, dict):
      fixed = {_check_key(k, "fixed"): v for k, v in fixed.items()}
    else:
      raise GridError('"fixed": expected an object {"flag": value} or a list of "--flag=value"')
    grids = data.get("grids", [])
    if not isinstance(grids, list) or not all(isinstance(g, dict) for g in grids):
      raise GridError('"grids": expected a list of objects {"key": [values]}')
    return cls(fixed=fixed,
               vary=[Axis.from_json(k, v) for k, v in data.get("vary", {}).items()],
               grids=[[Axis.from_json(k, v) for k, v in g.items()] for g in grids])

  def to_json(self) -> dict:
    def axes(axis_list):
      return {"/".join(a.keys): [list(v) if len(a.keys) > 1 else v[0] for v in a.values]
              for a in axis_list}
    return {"fixed": dict(self.fixed), "vary": axes(self.vary),
            "grids": [axes(g) for g in self.grids]}

  def merge(self, other: "Grid") -> "Grid":
    """This grid with `other`'s fixed settings (overriding) and axes added."""
    return Grid(fixed={**self.fixed, **other.fixed}, vary=self.vary + other.vary,
                grids=self.grids + other.grids)

  def varied_keys(self) -> List[str]:
    keys = []
    for axis in self.vary + [a for g in self.grids for a in g]:
      keys += [k for k in axis.keys if k not in keys]
    return keys

  def points(self, defaults: Mapping[str, object] = ()) -> List[Point]:
    """Every point, in grid order, without repeats.

    Args:
      defaults: settings every point has unless fixed or varied (the sweep's
        `do_train` / `do_eval`).
    Raises:
      GridError: if a key is both fixed and varied, or varied twice in one point.
    """
    points, seen = [], set()
    for grid in self.grids or [[]]:
      axes = self.vary + grid
      keys = [k for a in axes for k in a.keys]
      repeated = sorted({k for k in keys if keys.count(k) > 1})
      if repeated:
        raise GridError(f"{', '.join(repeated)} varied by two axes of one grid: give each "
                        "key one axis")
      both = sorted(set(keys) & set(self.fixed))
      if both:
        raise GridError(f"{', '.join(both)} both fixed and varied: give each key one place")
      for combination in itertools.product(*(a.values for a in axes)):
        vary = {k: v for a, values in zip(axes, combination) for k, v in zip(a.keys, values)}
        settings = {**{k: v for k, v in dict(defaults).items() if k not in self.fixed},
                    **self.fixed, **vary}
        point = Point(vary=vary, settings=settings)
        if point.name not in seen:
          seen.add(point.name)
          points.append(point)
    return points


def parse_axes(specs: Sequence[str]) -> List[Axis]:
  return [Axis.parse(s) for s in specs]
