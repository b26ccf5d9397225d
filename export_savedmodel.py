r"""Exports an adapter bank, or a multi-task run, as one SavedModel that serves every task
from raw text.

  python export_savedmodel.py (--adapter_bank=BANK | --multitask_run=OUTPUT_DIR) \
      --export_dir=EXPORT_DIR [--init_checkpoint=... | --bert_hub_module_handle=...] \
      [--vocab_file=...] [--bert_config_file=...] \
      [--tasks=a,b] [--token_ids_only] [--overwrite]

--adapter_bank: the tasks of an adapter bank (manage_bank.py), each trained by
run_classifier.py. The base weights come from bank.json (or the flag given
instead) and must have the bank's fingerprint; every task's adapter file must
name that base. A bank that moved finds a base that moved with it; a base
elsewhere is given by --init_checkpoint (or --bert_hub_module_handle),
--vocab_file and --bert_config_file (its config checked against the bank's).
--multitask_run: the tasks of one run_multitask.py output_dir, HyperFormer++ or
shared adapters, in the run's task order. The base comes from its
run_config.json (or the flag given instead) and must be the one adapter_model/
was trained on; HyperFormer++ adapters are generated once, at export, and the
hypernetwork is not exported.

The SavedModel holds the encoder once, every task's adapters, LayerNorms and
head, the WordPiece vocabulary and the tokenizer as TensorFlow ops, so it needs
neither this repository nor Python to run. Its signatures: serving_default
(text_a, text_b, task), token_ids (input_ids, input_mask, segment_ids, task) and
tokenize; assets.extra/tasks.json lists the tasks (adapter_bert/serving/export.py
says what each signature takes and returns; docs/serving.md). --token_ids_only
writes one without the tokenizer, which loads in any TensorFlow runtime.
EXPORT_DIR must be new or empty, or given with --overwrite (only the export's own
files there are replaced); for TensorFlow Serving give a version directory, e.g.
models/glue/1.

Mistakes in the bank, the run or the flags end the command with one `ERROR:` line,
status 2.
"""

import sys

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import path_flags
from adapter_bert.cli import renamed_flags
from adapter_bert import errors
from adapter_bert.serving import export
from adapter_bert.storage import path_checks


def define_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("adapter_bank", None, "The adapter bank directory (bank.json, tasks/), "
                      "as run_classifier.py's --adapter_bank.", **fv)
  renamed_flags.define_renamed("bank", "adapter_bank", flag_values)
  flags.DEFINE_string("multitask_run", None, "Instead of --adapter_bank: a run_multitask.py "
                      "output_dir (run_config.json, adapter_model/).", **fv)
  flags.DEFINE_string("export_dir", None, "Where to write the SavedModel: a new or empty "
                      "directory (see --overwrite).", **fv)
  flags.DEFINE_bool("overwrite", False, "Write into a non-empty --export_dir: the export's "
                    "own files there are replaced, the others kept.", **fv)
  cli_flags.define_base_source_flags(
      flag_values, init_checkpoint_help="Base checkpoint to use instead of bank.json's or "
      "run_config.json's (e.g. the same one at another path).",
      hub_help="TF Hub / Model Garden BERT encoder to use instead of bank.json's or "
      "run_config.json's base.")
  flags.DEFINE_string("vocab_file", None, "With --adapter_bank: the base's vocabulary, "
                      "instead of bank.json's (a base that moved).", **fv)
  flags.DEFINE_string("bert_config_file", None, "With --adapter_bank: the base's "
                      "bert_config.json, checked against the bank's config (a base that "
                      "moved).", **fv)
  flags.DEFINE_list("tasks", None, "Export only these tasks of the bank or run (default: "
                    "all).", **fv)
  flags.DEFINE_bool("token_ids_only", False, "Export only the token_ids signature (also as "
                    "serving_default), with no tokenizer: the SavedModel holds no "
                    "tensorflow-text op and loads in any TensorFlow or TensorFlow Serving "
                    "build. The vocabulary is written to assets.extra/vocab.txt for the "
                    "clients that tokenize.", **fv)
  flags.mark_flag_as_required("export_dir", **fv)
  flag_checks.check_flags_together(
      flag_values, ("adapter_bank", "multitask_run"),
      lambda a, b: None if bool(a) != bool(b) else "give exactly one of them")
  for name in ("vocab_file", "bert_config_file"):
    flag_checks.check_flags_together(
        flag_values, ("multitask_run", name),
        lambda run, value: "--vocab_file and --bert_config_file give an adapter bank's "
        "base; a multi-task run's is its run_config.json's (or --init_checkpoint's)"
        if run and value else None)


def main(argv, flag_values=flags.FLAGS):
  if len(argv) > 1:
    raise app.UsageError("Too many command-line arguments.")
  f = flag_values
  flag_checks.validate(f)
  path_flags.check_path_flags(f, dict(
      adapter_bank=path_checks.INPUT_DIR, multitask_run=path_checks.INPUT_DIR,
      export_dir=path_checks.OUTPUT_DIR, init_checkpoint=path_checks.CHECKPOINT,
      bert_hub_module_handle=path_flags.HUB_HANDLE, vocab_file=path_checks.INPUT_FILE,
      bert_config_file=path_checks.INPUT_FILE))
  export.export(f.adapter_bank, f.export_dir, f.init_checkpoint, f.bert_hub_module_handle,
                f.tasks, f.multitask_run, f.token_ids_only, f.overwrite,
                vocab_file=f.vocab_file, bert_config_file=f.bert_config_file)
  print(f.export_dir)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
