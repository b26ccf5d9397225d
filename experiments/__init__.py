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

The commands are this directory's modules and study/ (a package; its
__main__.py runs it). Layout:

  points/   a sweep's points: grid, data (training subsets), runs (running a
            point, its record), runner (the one runner: the sweep, the paper
            table and the multi-task comparison describe their points, it runs
            them), run_summary (what a finished run leaves for the page), tables
  study/    the evidence study: its command, design (grids), results, page
            and sections, record, claims, collapse, cost
  sweep     the sweep command: its grid's points and the results table
  select    selection on dev and means over seeds
  plots     the figures and the data files beside them
  multitask_comparison  the multi-task runs and their tables (the study's
            multitask part runs it)
  ablation, paper_table, embedding_baseline  their own commands (see their
            docstrings)

grids/ holds example grid files for the pretrained MiniLM and WordNet tasks
(models/minilm from demo.sh): the trade-off, training-set size and init-scale
sweeps.
"""
