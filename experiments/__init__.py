"""The paper's experiments as commands: sweeps, selection on dev, seeds, plots.

Houlsby et al. (2019) sweep each method's learning rate and epochs, pick the
setting with the best dev metric per task, repeat runs over seeds, and plot
accuracy against training-set size, trained parameters and the adapters'
initial scale. This package does the same with `run_classifier.py`:

  python -m experiments.sweep   runs a grid of run_classifier.py settings, one
                                subprocess and output_dir per point, resumable,
                                in parallel if asked; writes results.{json,csv}
  python -m experiments.select  the best setting on dev per method and
                                training-set size, mean ± std over seeds
  python -m experiments.plots   metric vs training examples, vs trained
                                parameters, vs adapter init scale (PNG + data)
  python -m experiments.ablation  a trained adapter model evaluated without the
                                adapters of spans of layers (heatmap)
  python -m experiments.paper_table  the paper's comparison of six methods on
                                the WordNet tasks, as docs/paper_table.{md,json}
  python -m experiments.study   the evidence study: the paper's claims on the
                                four WordNet tasks with seeds, tuned on dev, with
                                bootstrap intervals, as docs/study.md (resumable,
                                over several sittings)
  python -m experiments.multitask_comparison  HyperFormer++ against per-task
                                and shared adapters on the four WordNet tasks,
                                with seeds (docs/multitask.md)
  python -m experiments.embedding_baseline  the frozen MiniLM as a sentence
                                embedder on wordnet_example (no training)

Modules:
  grid      the grid: axes given on the command line or in a JSON file, the
            points they make, each point's name and identity
  data      training-set subsets: the first or a random N rows of train.tsv
  runs      one point: its command, running it, what its files and log say
  sweep     the sweep command: plan, resume, parallel runs, the results table
  select    selection on dev and means over seeds
  plots     the figures and the data files beside them
  tables    JSON and CSV tables written whole or not at all
  ablation  the layer ablation (its own command; see its docstring)
  study     the study's command: runs its sweeps in sittings, then the page
  study_grids  the study's design: tasks, parts, grids, the multi-task runs
  study_results  reading a study directory: results, selections, predictions
  study_page  the results page; study_disagreements its collapse and
            stability section; study_multitask its multi-task part
  study_record  the finished runs' small files kept in the repository
            (docs/study/record/), restored on another machine
  run_summary  a finished run's summary: its dev predictions' labels and
            spread, its logged curves (what the page reads, ~3 KB)
  multitask_comparison  the multi-task runs and their tables (the study's
            multitask part runs it)
  cost      what a study costs: hours measured, hours estimated for the pending
  claims    the paper's claims against full fine-tuning (and HyperFormer++'s against
            per-task adapters): bootstrap intervals, verdicts
  collapse  runs that collapsed to chance: how to tell, and when their loss turned
  paper_table, embedding_baseline  their own commands (see their docstrings)

grids/ holds example grid files for the pretrained MiniLM and WordNet tasks
(models/minilm from demo.sh): the trade-off, training-set size and init-scale
sweeps.
"""
