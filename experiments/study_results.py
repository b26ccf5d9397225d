"""Reading a study directory (OUTPUT_DIR/PART/TASK/ sweeps): results, each
method's selected setting, the runs' dev predictions, the sittings."""

import os
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from experiments import claims
from experiments import cost
from experiments import grid as grid_lib
from experiments import select as select_lib
from experiments import sweep as sweep_lib
from experiments import tables
from experiments.study_grids import PARTS, TASKS, part_grid

SITTINGS_FILE = "sittings.json"


def sweep_dir(output_dir: str, part: str, task: str) -> str:
  return os.path.join(output_dir, part, task)


def whole_study(output_dir: str, model_dir: str, data_root: str) -> List[cost.Sweep]:
  """Every sweep of the study with its defaults (parts, tasks, seeds), as on disk."""
  return [(part, task, sweep_lib.Sweep(
      grid_lib.Grid.from_json(part_grid(part, TASKS[task], model_dir, data_root)),
      sweep_dir(output_dir, part, task)))
          for part, (tasks, _) in PARTS.items() if part != "multitask" for task in tasks]


def read_results(output_dir: str, part: str, task: str) -> Optional[dict]:
  """The (part, task) sweep's results.json; None where that sweep has not started."""
  path = os.path.join(sweep_dir(output_dir, part, task), sweep_lib.RESULTS_JSON)
  return tables.read_json(path) if tf.io.gfile.exists(path) else None


def ok_rows(output_dir: str, part: str, task: str) -> Optional[tuple]:
  results = read_results(output_dir, part, task)
  if results is None:
    return None
  return results, [r for r in results["rows"] if r["status"] == "ok"]


def selected_methods(results: Mapping) -> Dict[str, dict]:
  """Each method's selected setting (experiments.select), by method name."""
  rows, _ = select_lib.select(results["rows"], results.get("varied_keys", []))
  return {r["method"]: r for r in rows}


def runs_correct(predictions: claims.Predictions, output_dir: str, part: str, task: str,
                  results: Mapping, points: Sequence[str]) -> np.ndarray:
  return predictions.correct(os.path.join(sweep_dir(output_dir, part, task), "runs"), points,
                             results["grid"]["fixed"])
