"""Serving many tasks from one frozen BERT: an adapter bank, or a multi-task run, as one
SavedModel.

  multitask_run  reads a run_multitask.py output_dir as a bank's tasks
                 (bank/bank_tasks.py), HyperFormer++ adapters generated once per task
  multitask      the multi-task model: one encoder, each example with its task's
                 adapters, LayerNorms and head (gathered along a task axis)
  text           in-graph tokenization from a SavedModel asset, packing per task
  export         the SavedModel and its signatures, and writing it

The command that writes it is export_savedmodel.py, at the top level.
"""
