"""The classification pipeline of run_classifier.py.

  processors  GLUE / XNLI / user TSV files -> `InputExample`s, label lists
  tsv_files   a TSV file's rows, each naming its file and line; width and header checks
  features    examples -> BERT features -> TFRecord files -> tf.data
  task        the pipeline pieces every classification task uses: processor, set-up,
              loss, eval results and probabilities from model outputs
  metrics     GLUE metrics and the result files (eval_results.txt, test_results.tsv)
"""
