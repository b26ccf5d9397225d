"""A sweep's points, shared by the commands of experiments/:

  grid         the grid: axes given on the command line or in a JSON file, the
               points they make, each point's name and identity
  data         a point's training set: the first or a random N rows of train.tsv
  runs         running one point: its command, its log, its record
               (sweep_point.json) and what its files say
  runner       the one runner of the sweep, the paper table and the multi-task
               comparison: they describe their points, it runs them (resume,
               parallel, records, failures)
  run_summary  what a finished run leaves for the study's page, small enough to
               keep (run_summary.json: its dev predictions' labels and spread,
               its logged curves)
  tables       JSON and CSV tables written whole or not at all
"""
