"""What a study costs: hours measured, and hours still to run on a given CPU.

A sweep's finished points carry their own wall time. A pending point's time is
estimated from its training steps (its `train_steps`, or int(examples / batch
* epochs) as run_classifier.py counts them) at the seconds per step measured
over the finished points of its own sweep; where none has finished, those of
the same task (its examples' length sets the rate more than the part does),
then of the same part with the same batches (random, or grouped by length:
about half the time a step), then of the same batches, then every sweep. A
point's start-up and evaluation are in
that rate, so it is a rough figure, printed as one. Runs that are not a sweep's
points (the study's multitask part) are counted the same way, as `Runs`.

A study runs over sittings on whatever machine each gets, and a step's time
depends on the CPU: so the rates are taken over the points that ran on one CPU,
the one the estimate is for, and over every point only where none of the
chain's points ran on it; the hours measured are summed per CPU too.
"""

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from experiments.points import data as data_lib
from experiments import sweep as sweep_lib
from adapter_bert.runtime import loop


def point_steps(settings: Mapping[str, object], cache: Dict[tuple, int]) -> int:
  """The training steps a point takes, as run_classifier.py computes them."""
  if settings.get("train_steps") is not None:
    return int(settings["train_steps"])
  examples = settings.get("train_examples", "all")
  if examples in (None, "all"):
    key = (str(settings["data_dir"]), str(settings["task_name"]))
    if key not in cache:
      cache[key] = data_lib.count_rows(*key)
    examples = cache[key]
  batch = int(settings.get("train_batch_size", 32))
  return loop.steps_for_epochs(int(examples), batch,
                               float(settings.get("num_train_epochs", 3.0)))


def seconds_per_step(records: Sequence[Mapping[str, object]]) -> Optional[float]:
  """Wall seconds over training steps of the finished points (None if none)."""
  done = [r for r in records if r.get("status") == "ok" and r.get("wall_seconds")
          and (r.get("num_train_steps") or r.get("global_step"))]
  steps = sum(r.get("num_train_steps") or r["global_step"] for r in done)
  return sum(r["wall_seconds"] for r in done) / steps if steps else None


@dataclasses.dataclass(frozen=True)
class Runs:
  """Runs that are not one sweep's points (the multitask part's): each finished
  one's record (its status, wall_seconds and global_step or num_train_steps),
  how many are pending, and a function giving their training steps summed
  (called only where a rate prices them: it may read the training data)."""
  records: Sequence[Mapping[str, object]]
  pending: int
  pending_steps: Callable[[], int]


Sweep = Tuple[str, str, Union[sweep_lib.Sweep, Runs]]  # (part, task, its sweep or runs)


def _runs(sweep: Union[sweep_lib.Sweep, Runs], cache: Dict[tuple, int]) -> Runs:
  if isinstance(sweep, Runs):
    return sweep
  pending = sweep.pending()
  return Runs(list(sweep.records.values()), len(pending),
              lambda: sum(point_steps(p.settings, cache) for p in pending))


def _grouped(sweep: Union[sweep_lib.Sweep, Runs]) -> bool:
  """Whether the sweep trains on length-grouped batches (Runs: random ones)."""
  return isinstance(sweep, sweep_lib.Sweep) and any(
      p.settings.get("group_by_length") for p in sweep.points)


def _record_machine(record: Mapping[str, object]) -> Optional[str]:
  return record.get("machine")


def section(sweeps: Sequence[Sweep], scope: str, cpu: Optional[str] = None,
            machine_of: Callable[[Mapping[str, object]], Optional[str]] = _record_machine
            ) -> List[str]:
  """The page's table of measured and estimated hours per (part, task), with totals;
  `scope` says what the sweeps are (the first sentence). The pending are priced
  at the rates measured on `cpu` (a runtime/machine.cpu_line()) where the chain
  finds any, `machine_of` giving each finished record's CPU (None: unknown)."""
  cache: Dict[tuple, int] = {}
  tallies = [(part, task, _grouped(sweep), _runs(sweep, cache))
             for part, task, sweep in sweeps]
  # Finished records by sweep, task, (part, batches), batches, all: each on `cpu`
  # (True) and on any CPU (False).
  pools: Dict[tuple, list] = {}
  for i, (part, task, grouped, runs) in enumerate(tallies):
    for record in runs.records:
      sides = (True, False) if cpu is not None and machine_of(record) == cpu else (False,)
      for on_cpu in sides:
        for key in (("sweep", i), ("task", task), ("part", part, grouped),
                    ("batches", grouped), ("all",)):
          pools.setdefault((on_cpu,) + key, []).append(record)
  rows, measured_total, estimated_total, pending_total, points_total = [], 0.0, 0.0, 0, 0
  measured_by_cpu: Dict[Optional[str], List[float]] = {}
  for i, (part, task, grouped, runs) in enumerate(tallies):
    for record in runs.records:
      measured_by_cpu.setdefault(machine_of(record), []).append(
          record.get("wall_seconds") or 0)
    rate, elsewhere = None, False
    for on_cpu in (True, False):
      rate = next((r for r in (seconds_per_step(pools.get((on_cpu,) + key, ())) for key in (
          ("sweep", i), ("task", task), ("part", part, grouped), ("batches", grouped),
          ("all",))) if r), None)
      if rate is not None:
        elsewhere = cpu is not None and not on_cpu
        break
    pending = runs.pending
    points = len(runs.records) + pending
    pending_total += pending
    points_total += points
    measured = sum(r.get("wall_seconds") or 0 for r in runs.records)
    estimated = None if rate is None else rate * runs.pending_steps()
    measured_total += measured
    estimated_total += estimated or 0
    rows.append(f"| {part} | {task} | {points} | {len(runs.records)} "
                f"| {measured / 3600:.2f} | {pending} | "
                + ("no point has finished" if estimated is None else f"{estimated / 3600:.1f}")
                + (f" ({rate:.2f} s/step{'*' if elsewhere else ''})"
                   if pending and rate else "") + " |")
  on = f" on {cpu}" if cpu else ""
  by_cpu = [f"{m or 'a CPU not recorded'}: {sum(s) / 3600:.2f} h ({len(s)} "
            f"run{'s' if len(s) != 1 else ''})"
            for m, s in sorted(measured_by_cpu.items(),
                               key=lambda kv: (kv[0] is None, kv[0] or ""))]
  lines = [
      "## What the whole study costs here", "",
      f"{scope} Hours measured are the finished "
      "points' own wall times; the pending points' hours are estimated from their "
      f"training steps at the seconds per step that the sweep's finished points took{on} "
      "(start-up and evaluation included; where none has finished, the rate of the "
      "task's other sweeps, else of the part's with the same batches, random or "
      "grouped by length, else of any with the same batches, else of every sweep), one "
      "point at a time"
      + (f"; a rate marked * is of points on other CPUs, where none of those ran{on}"
         if cpu else " on this machine") + ".", ""]
  if cpu and by_cpu:
    lines += [f"Hours measured, by the CPU that ran them: {'; '.join(by_cpu)}.", ""]
  return lines + [
      "| part | task | points | finished | hours measured | pending | hours estimated "
      "for the pending |", "|---|---|---|---|---|---|---|"] + rows + [
      f"| all | | {points_total} | | {measured_total / 3600:.2f} "
      f"| {pending_total} | {estimated_total / 3600:.1f} |", ""]
