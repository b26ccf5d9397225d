"""Each entry point's task, in the shape of Model Garden's official/nlp/tasks:
what it reads, its model, its training inputs and loss, its result files.
runtime/task_run.run runs any of them.

  configs              a run's typed settings (RunConfig), which cli/parse.py makes
  registry             task_for(config): the task of a RunConfig
  sentence_prediction  run_classifier.py: a classifier or regression, its adapter
                       bank and AdapterFusion
  question_answering   run_squad.py: SQuAD v1.1 / v2.0 spans
  multitask            run_multitask.py: several classification tasks at once
"""
