"""The command line of the entry points: their shared flags and the checks on them.

  launch       each command's first call, before TensorFlow loads: a TPU VM's
               runtime (PJRT), TPU_LOAD_LIBRARY, the frameworks without unused packages
  tpu_flags    the Cloud TPU flags (read by launch too, so without TensorFlow)
  flags        the flag definitions the entry points share (run_classifier.py,
               run_squad.py, run_multitask.py, experiments/ablation.py,
               export_savedmodel.py), each with its checks
  flag_checks  checks that absl runs as the flags are parsed, reported as one
               `ERROR:` line (errors.UserError's format)
  options      parsed flags -> the plain options the library takes; the one rule
               for a setting an adapter file records against a given flag
  parse        parsed flags -> a run's one RunConfig (tasks/configs.py), per
               entry point
  path_flags   what each path flag must be (a readable file, a writable
               directory, ...), checked first thing in main (storage.path_checks)

Only the entry points and this package read flags; the library below them
takes one RunConfig of plain values (tasks.configs; runtime.startup.RunOptions,
runtime.model_setup.ModelOptions).
"""
