"""The evidence study: the paper's claims on the four WordNet tasks, with seeds,
tuned on dev, decided by bootstrap intervals (docs/study.md).

  python -m experiments.study --output_dir=output/study   # __main__.py: command.py

  command        the command: runs the parts' sweeps in sittings, then the page
  grids          the design: tasks, parts, grids, the multi-task runs
  results        reading a study directory: results, selections, predictions
  page           the results page; reruns, disagreements and multitask its
                 sections (earlier runs, collapse and stability, the multi-task part)
  record         the finished runs' record kept in the repository
                 (docs/study/record/, one file per part), restored on another machine
  claims         the paper's claims: bootstrap intervals, verdicts
  collapse       runs that collapsed to chance: how to tell, and when
  cost           hours measured, hours estimated for the pending
"""
