"""The evidence study's results page (docs/study.md), written from a study directory."""

import datetime
import os
import platform
from typing import List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from adapter_bert import errors
from experiments.study import claims
from experiments.study import cost
from experiments import plots
from experiments import sweep as sweep_lib
from experiments.points import tables
from experiments.study.disagreements import disagreements_section, optimizer_section
from experiments.study.grids import (BRACKET_STEPS, CONVERGENCE_EPOCHS, EPOCHS, LONG_EPOCHS,
                                     PARTS, SEEDS, TASKS, TRADEOFF_TASKS)
from experiments.study.multitask import multitask_claims, multitask_section
from experiments.study.reruns import reruns_section
from experiments.study.results import (full_by_epochs, full_by_epochs_pending, machine_of_run,
                                       multitask_cost, newest_cpu, pending_methods, read_results,
                                       read_sittings, runs_correct, selected_methods, sweep_dir,
                                       table_selection, whole_study)
from adapter_bert.runtime import machine
from adapter_bert.storage import file_io


# Table 1's methods (grids.TABLE_METHODS), as experiments.select names them.
TABLE_ROWS = ("adapters_8", "adapters_64", "full", "top_layers_3", "layer_norm", "head")


def _cell(row: Optional[Mapping[str, object]]) -> str:
  if row is None:
    return "pending"
  mean, std = row.get("eval_accuracy_mean"), row.get("eval_accuracy_std")
  if mean is None:
    return "failed"
  return f"{mean:.3f}" + (f" ± {std:.3f}" if std is not None else "") + f" ({row['n_seeds']})"


def _setting(row: Mapping[str, object]) -> str:
  return f"lr {row.get('learning_rate'):g}"


def report(output_dir: str, page: str, command: str, bootstrap_samples: int = 2000,
           model_dir: str = "models/minilm", data_root: str = "data/wordnet",
           record_dir: str = "", earlier_dir: str = "") -> str:
  """Writes the results page (and its plots under PAGE's stem/); returns its text."""
  figures = os.path.splitext(page)[0]
  sittings = read_sittings(output_dir)
  status = []
  for part in PARTS:
    for task in TASKS:
      results = read_results(output_dir, part, task)
      if results is None:
        continue
      rows = results["rows"]
      seconds = sum(r.get("wall_seconds") or 0 for r in rows)
      ok = sum(r["status"] == "ok" for r in rows)
      # The results table beside the page: every number traces to a point (its
      # settings, metrics and output_dir under OUTPUT_DIR/PART/TASK).
      table = os.path.join(figures, f"{part}_{task}_results.csv")
      file_io.make_parent_dirs(table)
      tf.io.gfile.copy(os.path.join(sweep_dir(output_dir, part, task),
                                    sweep_lib.RESULTS_CSV), table, overwrite=True)
      status.append(f"| {part} | {task} | {ok} | {len(rows) - ok} | "
                    f"{len(results.get('pending', []))} | {seconds / 3600:.2f} | "
                    f"[{os.path.basename(table)}]"
                    f"({os.path.relpath(table, os.path.dirname(page))}) |")
  machine_of = machine_of_run(sittings)
  multitask = multitask_cost(output_dir, data_root)
  predictions = claims.Predictions()
  # Table 1's row per method and task, read once for the two sections.
  selections = {task: table_selection(output_dir, task) for task in TASKS}
  table_1, paper_claims = _methods_section(output_dir, figures, bootstrap_samples,
                                           predictions, selections)
  # The claims and their verdicts first, then the tables they come from, then
  # what ran where (the sittings last, in an appendix).
  lines = ["# The evidence study: the paper's claims with seeds", "",
           "[Back to the README](../README.md#results)", ""]
  opening = paper_claims + multitask_claims(output_dir, bootstrap_samples, data_root)
  lines += ["## The claims", ""] + opening if opening and not paper_claims else opening
  lines += table_1
  lines += _epochs_section(output_dir, bootstrap_samples, predictions, selections)
  for part, kind in (("data_size", "data_size"), ("init_scale", "init_scale")):
    lines += _figure_section(output_dir, part, kind, figures)
  lines += multitask_section(output_dir, figures, multitask, bootstrap_samples, data_root)
  lines += disagreements_section(output_dir, bootstrap_samples, predictions)
  lines += optimizer_section(output_dir)
  lines += ["## What ran", "",
            "| part | task | points ok | failed | pending | run hours (sum of points) | "
            "results |", "|---|---|---|---|---|---|---|"] + status + [""]
  if earlier_dir:
    lines += reruns_section(output_dir, earlier_dir, machine_of)
  lines += cost.section(
      whole_study(output_dir, model_dir, data_root)
      + [("multitask", name, runs) for name, runs in multitask.items()],
      f"Every part on its default tasks with {len(SEEDS)} seeds; the multitask part "
      "(experiments.multitask_comparison's runs, not a sweep's points) per setting.",
      cpu=newest_cpu(sittings), machine_of=machine_of)
  lines += _sittings_appendix(output_dir, command, record_dir, sittings)
  text = "\n".join(lines) + "\n"
  file_io.atomic_write(page, text)
  return text


def _shown(path: str, placeholder: str) -> str:
  """A path as the page shows it: an absolute one is the machine's that wrote the
  page, so a placeholder stands for it."""
  return placeholder if os.path.isabs(path) else path


def _sittings_appendix(output_dir: str, command: str, record_dir: str,
                       sittings: List[dict]) -> List[str]:
  """How the page was written, and the sittings that ran the points (their
  commands as study/command.py records them: a machine's paths as placeholders)."""
  kept = (f" (every finished run's small files are kept in "
          f"`{_shown(record_dir, 'RECORD_DIR')}`, from which `--report_only` writes this "
          "page on any machine)" if record_dir else "")
  lines = ["## Appendix: the sittings", "",
           f"Written by `{command}` (experiments/study/) from the runs under "
           f"`{_shown(output_dir, 'OUTPUT_DIR')}`{kept}; `--report_only` rewrites it. "
           f"{datetime.date.today().isoformat()}, {machine.cpu_line()} "
           f"({platform.platform()}).", ""]
  if sittings:
    lines += ["The sittings that ran the points (a sweep's last point finished at "
              "`last_finished`), with the CPU each ran on where it recorded one:", ""] + [
                  f"- `{s['command']}`: {s['started']} to {s['last_finished']}"
                  + (f", {s['machine']}" if s.get("machine") else "")
                  for s in sittings] + [""]
  return lines


def _at_the_edge(rows: Mapping[str, dict], methods: Mapping) -> List[str]:
  """Table 1's methods whose selected rate is the smallest or the largest of the
  rates their finished points in the methods part tried (two or more), once
  none of their points there is pending (till then the selection may move)."""
  found, waiting = [], pending_methods(methods)
  for method, row in rows.items():
    if method in waiting:
      continue
    tried = sorted({r["learning_rate"] for r in methods["rows"]
                    if r.get("method") == method})
    rate = row["learning_rate"]
    if method in TABLE_ROWS and len(tried) > 1 and rate in (tried[0], tried[-1]):
      found.append(f"{method} lr {rate:g} (the {'smallest' if rate == tried[0] else 'largest'}"
                   f" of {', '.join(f'{r:g}' for r in tried)})")
  return found


def _methods_section(output_dir: str, figures: str, samples: int,
                     predictions: claims.Predictions,
                     selections: Mapping[str, Optional[dict]]) -> Tuple[List[str], List[str]]:
  """Table 1 and what follows from it (the budgets, the trade-off figure), and
  the claims it decides."""
  selected, results = {}, {}
  for task, rows in selections.items():
    if rows is not None:
      selected[task] = rows
      results[task] = {part: read_results(output_dir, part, task)
                       for part in ("methods", "methods_long")}
  if not selected:
    return ["## Table 1: not run yet", ""], []
  lines = ["## Table 1: dev accuracy at each method's selected setting", "",
           "Mean ± std over seeds (number of seeds). Each method's learning rate is the "
           f"one with the best mean dev accuracy at {EPOCHS} epochs (experiments.select; "
           "where the best was the smallest or the largest rate tried, the next rate past "
           f"it ran too, until bracketed, at most {BRACKET_STEPS} past the method's grid); "
           f"its epochs, {EPOCHS} or {LONG_EPOCHS} at that rate (the methods_long part), "
           f"are selected the same way where both have run; a cell at {LONG_EPOCHS} "
           "epochs says so. The rate is not selected again at "
           f"{LONG_EPOCHS} epochs, where the paper tuned both together."
           + _batches_note(selected), "",
           "| method | " + " | ".join(_task_heading(t, results[t], selected[t])
                                       for t in selected)
           + " |", "|---|" + "---|" * len(selected)]
  for method in TABLE_ROWS:
    cells = [_cell(rows.get(method)) + _epochs_note(rows.get(method))
             for rows in selected.values()]
    lines.append(f"| {method} | " + " | ".join(cells) + " |")
  lines += ["", "Selected settings: " + "; ".join(
      f"{task}: " + ", ".join(f"{m} {_setting(r)}, {r['num_train_epochs']:g} epochs"
                              for m, r in rows.items() if m in TABLE_ROWS)
      for task, rows in selected.items()) + ".", ""]
  edges = [f"{task}: " + ", ".join(found) for task, rows in selected.items()
           if (found := _at_the_edge(rows, results[task]["methods"]))]
  if edges:
    lines += ["At the edge of the learning rates tried, so the best rate may lie beyond "
              "it: " + "; ".join(edges) + ".", ""]
  claim_lines = ["## The claims", "",
            "Difference of dev accuracy from full fine-tuning, mean over the tasks that "
            "have both methods, with a 95% interval from a paired bootstrap over dev "
            f"examples and seeds ({samples} samples): at Table 1's settings, and at "
            f"{EPOCHS} epochs on every task (each method's rate as selected there), the "
            "budget the rates are selected at.", "",
            "| claim | paper | tasks | difference | 95% interval | verdict "
            f"| at {EPOCHS} epochs |", "|---|---|---|---|---|---|---|"]
  for claim in claims.CLAIMS:
    what = claim.describe()
    pairs = {short: _claim_pairs(claim, selected, results, predictions, output_dir, short)
             for short in (False, True)}
    if not pairs[False]:
      claim_lines.append(f"| {what} | {claim.paper} | 0 | | | pending | |")
      continue
    estimate, low, high = claims.bootstrap_difference(pairs[False], samples)
    seeds = min(p[k].shape[0] for p in pairs[False] for k in p)
    # With one seed the interval covers the draw of dev examples only.
    caveat = " (1 seed: the interval leaves out seed variation)" if seeds < 2 else ""
    at_short = claims.bootstrap_difference(pairs[True], samples)
    claim_lines.append(f"| {what} | {claim.paper} | {len(pairs[False])} | {100 * estimate:+.2f} | "
                 f"[{100 * low:+.2f}, {100 * high:+.2f}] | "
                 f"{claims.verdict(claim, low, high)}{caveat} | "
                 f"{claims.in_points(*at_short)}, {claims.verdict(claim, *at_short[1:])} |")
  claim_lines.append("")
  short = [task for task, rows in selected.items() if not _long_done(rows)]
  if short:
    claim_lines += [f"On {', '.join(short)} Table 1's epochs are not selected yet (the "
              f"methods_long part has not finished there): its cells that do not say "
              f"\"{_epochs_mark(LONG_EPOCHS)}\" are at {EPOCHS} epochs, and a claim whose "
              f"two methods have not both finished {LONG_EPOCHS} epochs there compares "
              f"both at {EPOCHS}.", ""]
  lines += _budgets_section(selected, results, predictions, output_dir, samples)
  for task in TRADEOFF_TASKS:
    if task in selected:
      lines += _plot(sweep_dir(output_dir, "methods", task), "tradeoff", figures, task,
                     "Figures 3-5: dev accuracy vs trained parameters")
  return lines, claim_lines


def _claim_pairs(claim: claims.Claim, selected: Mapping[str, dict], results: Mapping,
                 predictions: claims.Predictions, output_dir: str, short: bool) -> List[dict]:
  """A claim's {"method", "reference"} runs' correctness on each task that has
  both methods: Table 1's rows (_compared_rows), or with `short` the rows
  selected at EPOCHS (the methods part's)."""
  pairs = []
  for task, rows in selected.items():
    if claim.method not in rows or claim.reference not in rows:
      continue
    names = (claim.method, claim.reference)
    compared = (_short_rows(results[task]["methods"], names) if short
                else _compared_rows(rows, results[task]["methods"], *names))
    pairs.append({key: runs_correct(predictions, output_dir, row["part"], task,
                                    results[task][row["part"]], row["points"])
                  for key, row in zip(("method", "reference"), compared)})
  return pairs


def _compared_rows(rows: Mapping[str, dict], methods_results: Mapping, method: str,
                   reference: str) -> List[dict]:
  """The rows of a task that a claim compares: Table 1's, or, where methods_long
  has finished one of the two methods but not the other, both methods' EPOCHS
  rows (the methods part's), so that no claim sets one method's longer budget
  against the other's shorter one while a sitting is part-way through a task."""
  if rows[method]["epochs_tried"] == rows[reference]["epochs_tried"]:
    return [rows[method], rows[reference]]
  return _short_rows(methods_results, (method, reference))


def _short_rows(methods_results: Mapping, names: Sequence[str]) -> List[dict]:
  """The methods part's selected rows (at EPOCHS) of the named methods."""
  short = selected_methods(methods_results)
  return [dict(short[name], part="methods") for name in names]


def _budgets_section(selected: Mapping[str, dict], results: Mapping,
                     predictions: claims.Predictions, output_dir: str,
                     samples: int) -> List[str]:
  """Each Table 1 method's LONG_EPOCHS minus EPOCHS at its selected rate, per
  task where methods_long has run it: which methods need the longer budget."""
  tasks = [t for t, rows in selected.items() if _epochs_tried(rows)[0]]
  if not tasks:
    return []
  lines = [f"## What {LONG_EPOCHS} epochs add to each method", "",
           f"Dev accuracy at {LONG_EPOCHS} epochs (methods_long) minus at {EPOCHS} (the "
           f"methods part), at the learning rate selected at {EPOCHS}, in points with its "
           f"95% bootstrap interval; \"(kept)\" marks where Table 1 takes {LONG_EPOCHS}.", "",
           "| method | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
  # Each budget's selected rows, per task: (part, results, rows by method).
  budgets = {task: {part: (part, results[task][part], selected_methods(results[task][part]))
                    for part in ("methods", "methods_long")} for task in tasks}
  for method in TABLE_ROWS:
    cells = []
    for task in tasks:
      row = selected[task].get(method)
      if row is None or row["epochs_tried"] != [EPOCHS, LONG_EPOCHS]:
        cells.append("pending")
        continue
      short, long = ((part, found, rows[method])
                     for part, found, rows in budgets[task].values())
      gain = _difference(predictions, output_dir, task, long, short, samples)
      cells.append(claims.in_points(*gain)
                   + (" (kept)" if row["num_train_epochs"] == LONG_EPOCHS else ""))
    lines.append(f"| {method} | " + " | ".join(cells) + " |")
  return lines + [""]


def _difference(predictions: claims.Predictions, output_dir: str, task: str, runs: tuple,
                reference: tuple, samples: int) -> tuple:
  """One task's dev accuracy of `runs` minus `reference`, each (part, results,
  selected row), with its 95% bootstrap interval."""
  pair = {key: runs_correct(predictions, output_dir, part, task, results, row["points"])
          for key, (part, results, row) in (("method", runs), ("reference", reference))}
  return claims.bootstrap_difference([pair], samples)


def _batches_note(tasks: Sequence[str]) -> str:
  """Which of the page's tasks trained on length-grouped batches (grids.StudyTask)."""
  grouped = [t for t in tasks if TASKS[t].group_by_length]
  if not grouped:
    return ""
  random = [t for t in tasks if not TASKS[t].group_by_length]
  return (f" Every run on {', '.join(grouped)}, of every method and part, trains on batches "
          "of examples of similar length (run_classifier.py --group_by_length: about twice "
          "the training steps a second)"
          + (f"; every run on {', '.join(random)} on random batches, as its first runs "
             "had them" if random else "") + ".")


def _task_heading(task: str, results: Mapping[str, Optional[Mapping]],
                  rows: Mapping[str, dict]) -> str:
  """A task's column, and how far its Table 1 is: the methods part's points
  pending (a rate selected from part of a grid may change), and the methods
  whose epochs are not selected yet (methods_long has not run them with as
  many seeds)."""
  progress = []
  pending, done = len(results["methods"].get("pending", [])), len(results["methods"]["rows"])
  if pending:
    progress.append(f"{done} of {done + pending} runs")
  tried, total = _epochs_tried(rows)
  if tried < total:
    progress.append(f"{LONG_EPOCHS} epochs tried by {tried} of {total} methods")
  return task + (f" ({'; '.join(progress)})" if progress else "")


def _epochs_mark(epochs: float) -> str:
  """How a Table 1 cell says its epochs, where they are not EPOCHS."""
  return f"{epochs:g} ep"


def _epochs_note(row: Optional[Mapping]) -> str:
  return "" if row is None or row["num_train_epochs"] == EPOCHS else (
      f", {_epochs_mark(row['num_train_epochs'])}")


def _epochs_section(output_dir: str, samples: int, predictions: claims.Predictions,
                    selections: Mapping[str, Optional[dict]]) -> List[str]:
  """Full fine-tuning at its selected rate from EPOCHS to LONG_EPOCHS: when does
  its dev metric stop rising?"""
  budgets = (EPOCHS,) + CONVERGENCE_EPOCHS + (LONG_EPOCHS,)
  lines, rising, still = [], [], []
  for task in TASKS:
    curve = full_by_epochs(output_dir, task)
    if len(curve) < 2:
      continue
    if not lines:
      lines = ["## Epochs: when does full fine-tuning stop rising?", "",
               "Full fine-tuning at the learning rate Table 1 selected at "
               f"{EPOCHS} epochs: {EPOCHS} epochs (the methods part), "
               f"{' and '.join(map(str, CONVERGENCE_EPOCHS))} (the epochs part), "
               f"{LONG_EPOCHS} (methods_long). \"After {EPOCHS}\" is the best longer "
               f"budget minus {EPOCHS} epochs, \"{CONVERGENCE_EPOCHS[-1]} to {LONG_EPOCHS}\" "
               f"is {LONG_EPOCHS} minus {CONVERGENCE_EPOCHS[-1]} epochs, in points of dev "
               "accuracy with their 95% bootstrap intervals.", "",
               "| task | lr | " + " | ".join(f"{e} epochs" for e in budgets)
               + f" | after {EPOCHS} | {CONVERGENCE_EPOCHS[-1]} to {LONG_EPOCHS} | reading |",
               "|---|---|" + "---|" * (len(budgets) + 3)]

    # A reading from part of a budget's seeds may yet turn, so it waits for them.
    waiting = full_by_epochs_pending(output_dir, task)
    cells = [_cell(curve[e][2]) if e in curve else "pending" for e in budgets]
    best = max((e for e in curve if e != EPOCHS),
               key=lambda e: curve[e][2].get("eval_accuracy_mean") or -1.0)
    after = _difference(predictions, output_dir, task, curve[best], curve[EPOCHS],
                        samples)
    cells.append(claims.in_points(*after) + f" ({best:g} ep)")
    last = CONVERGENCE_EPOCHS[-1]
    if last in curve and LONG_EPOCHS in curve:
      step = _difference(predictions, output_dir, task, curve[LONG_EPOCHS], curve[last],
                         samples)
      cells.append(claims.in_points(*step))
      reading = (f"still rising at {LONG_EPOCHS}" if step[1] > 0 else
                 f"stopped by {last}" if step[2] < 0.01 else f"undecided at {LONG_EPOCHS}")
      if step[1] > 0 and not waiting:
        still.append(task)
    else:
      cells.append("pending")
      reading = (f"still rising after {EPOCHS}" if after[1] > 0 else
                 f"stopped by {EPOCHS}" if after[2] < 0.01 else "undecided")
    if waiting:
      reading = "pending"
    elif after[1] > 0:
      rising.append(task)
    rate = curve[EPOCHS][2]["learning_rate"]
    lines.append(f"| {task} | {rate:g} | " + " | ".join(cells) + f" | {reading} |")
  early = [t for t in rising if not _long_done(selections[t])]
  if rising:
    lines += ["", f"On {', '.join(rising)} full fine-tuning has not converged by {EPOCHS} "
              f"epochs, which is why Table 1 also runs every method {LONG_EPOCHS} epochs "
              "(the methods_long part; the paper tuned 3 and 20)."]
  if early:
    lines[-1] += (f" On {', '.join(early)} that part has not finished, so Table 1 and the "
                  "claims above compare runs stopped early there: their verdicts hold for "
                  f"{EPOCHS} epochs only.")
  if still:
    lines += ["", f"On {', '.join(still)} full fine-tuning still gains from "
              f"{CONVERGENCE_EPOCHS[-1]} to {LONG_EPOCHS} epochs: Table 1 compares runs that "
              f"have not converged even at {LONG_EPOCHS} there."]
  return lines + [""] if lines else []


def _epochs_tried(rows: Mapping[str, dict]) -> tuple:
  """(Table 1 methods whose epochs are selected, Table 1 methods) of a task."""
  table = [rows[m] for m in TABLE_ROWS if m in rows]
  return sum(r["epochs_tried"] == [EPOCHS, LONG_EPOCHS] for r in table), len(table)


def _long_done(rows: Optional[Mapping[str, dict]]) -> bool:
  """Whether Table 1 has selected every method's epochs on a task (its rows)."""
  tried, total = _epochs_tried(rows or {})
  return total > 0 and tried == total


def _figure_section(output_dir: str, part: str, kind: str, figures: str) -> List[str]:
  lines = []
  for task in TASKS:
    directory = sweep_dir(output_dir, part, task)
    if tf.io.gfile.exists(os.path.join(directory, sweep_lib.RESULTS_JSON)):
      lines += _plot(directory, kind, figures, task, PARTS[part][1])
  return lines


def _plot(directory: str, kind: str, figures: str, task: str, title: str) -> List[str]:
  out = os.path.join(figures, f"{kind}_{task}")
  try:
    paths = plots.make_plot(os.path.join(directory, sweep_lib.RESULTS_JSON), kind, out)
  except errors.UserError as e:
    return [f"## {title} ({task})", "", f"Not drawn: {e}", ""]
  page_dir = os.path.dirname(figures)
  points = tables.read_json(paths["json"])["rows"]
  rows = [f"| {p['series']} | {p['label'] or ''} | {p['x']:g} | {p['y']:.3f} | "
          f"{'' if p['y_std'] is None else format(p['y_std'], '.3f')} | {p['n_seeds']} |"
          for p in points]
  return [f"## {title} ({task})", "",
          f"![{kind}]({os.path.relpath(paths['png'], page_dir)})", "",
          "| series | label | x | dev accuracy | std | seeds |", "|---|---|---|---|---|---|"]\
      + rows + ["", f"Points: `{os.path.relpath(paths['csv'], page_dir)}`.", ""]
