"""adapter-bert for TensorFlow 2 / Keras 3: the plumbing under the original's scripts.

The repository's top level is the original google-research/bert table of
contents (run_classifier.py, run_squad.py, modeling.py, adapter_layers.py,
optimization.py, tokenization.py); this package holds everything else, one
folder per concern: cli (flags), runtime (training loop and set-up),
checkpoints (every weight format), storage (files on any gfile path),
classification and squad (the tasks' pipelines), multitask, fusion, bank and
serving (the commands built on one frozen encoder).

Importing it (or any module of it) loads nothing else: the commands first call
adapter_bert.cli.launch.start, which chooses a TPU VM's runtime and imports the
frameworks (cli/launch.py).
"""
