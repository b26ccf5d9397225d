"""Serving many tasks from one frozen BERT: an adapter bank, or a multi-task run, as one
SavedModel.

  multitask_run  reads a run_multitask.py output_dir as a bank's tasks
                 (bank/bank_tasks.py), HyperFormer++ adapters generated once per task
  stacked_tasks  the served model: one encoder, every task's adapters, LayerNorms
                 and head stacked along a task axis, each example gathering its own
  text           in-graph tokenization from a SavedModel asset, packing per task
  export         the SavedModel and its signatures, and writing it

The command that writes it is export_savedmodel.py, at the top level.
"""
