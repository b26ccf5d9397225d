"""AdapterFusion over an adapter bank's tasks (Pfeiffer et al., EACL 2021).

  model       FusionClassifier: the bank's frozen adapters of N tasks, fused by a
              trained attention at every place they sit, under a new task's head
  fused_tasks the fused tasks read from a bank and checked; what a fusion task
              records about them, and the check that they are unchanged
  attentions  each example's fusion attention per layer and task, and its plot
  serving     fusion tasks in the exported SavedModel, beside the other tasks
"""
