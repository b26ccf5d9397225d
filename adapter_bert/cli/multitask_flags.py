"""run_multitask.py's flags, and the run's model settings read from them.

  define_multitask_flags  run_classifier.py's flags with the task flags as lists,
                          plus the multi-task ones (--multitask_adapters, HyperFormer++'s)
  checked_tasks           the tasks of the task flags, checked with the path flags
  settings                the flags' values, the model flags left unset taking what
                          --adapter_checkpoint records
  model_options           the run's ModelOptions (--multitask_adapters' train modes)
  hyperformer_config      HyperFormer++'s config, of its flags
"""

from typing import Dict, Mapping, Optional

from absl import flags

from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.classification import task as classifier_task
from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert.cli import renamed_flags
from adapter_bert import errors
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.runtime import model_setup
from adapter_bert.storage import path_checks

# What trains, per --multitask_adapters: the default first.
TRAIN_MODES = {"hyperformer": ("head", "layer_norm"), "shared": ("adapters",)}


def define_multitask_flags(flag_values=flags.FLAGS):
  """run_classifier.py's flags with the task flags as lists, and the multi-task ones."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_list("task_name", None, "The tasks, a comma list: cola, sst-2, mrpc, sts-b, "
                    "qqp, mnli, qnli, rte, wnli, xnli or tsv (any case).", **fv)
  flags.DEFINE_list("data_dir", None, "Each task's data directory, a comma list in "
                    "--task_name order.", **fv)
  # --adapter_size against --train_mode is checked in model_options: with
  # HyperFormer++ it is the size of the generated adapters.
  cli_flags.define_model_and_run_flags(flag_values, check_adapter_size=False)
  cli_flags.define_eval_predictions_flag(flag_values)  # TASK/eval_predictions.tsv
  cli_flags.define_packing_flag(flag_values)
  flags.DEFINE_list("text_a_column", ["sentence"], "tsv tasks: header name of the first "
                    "text, one for all tsv tasks or one each.", **fv)
  flags.DEFINE_list("text_b_column", None, "tsv tasks: header name of the second text, one "
                    "for all or one each (an empty entry: none).", **fv)
  flags.DEFINE_list("label_column", ["label"], "tsv tasks: header name of the label, one for "
                    "all or one each.", **fv)
  flags.DEFINE_enum("multitask_adapters", "hyperformer", list(multitask_model.ADAPTER_TYPES),
                    "How the tasks get their adapters: hyperformer, a hypernetwork generates "
                    "each task's (HyperFormer++); shared, one set for all tasks. Either way "
                    "they are Houlsby adapters (--adapter_design=houlsby).", **fv)
  renamed_flags.define_renamed("adapter_type", "multitask_adapters", flag_values)
  flags.DEFINE_float("sampling_temperature", 10.0, "A batch comes from task t with "
                     "probability proportional to n_t^(1/T) (1: in proportion to the data; "
                     "larger: closer to uniform; the paper: 10).", **fv)
  flags.DEFINE_integer("task_embedding_dim", 64, "HyperFormer++: width of the task, "
                       "layer and position embeddings.", **fv)
  flags.DEFINE_integer("projector_hidden_dim", 128, "HyperFormer++: hidden width of the "
                       "task projector.", **fv)
  flags.DEFINE_integer("projected_dim", 64, "HyperFormer++: width of the projected task "
                       "embedding that the generators read.", **fv)
  flags.DEFINE_float("generator_init_stddev", 1e-2, "HyperFormer++: std of the task "
                     "projector's and the generators' initial kernels (the authors': 0.01).",
                     **fv)
  flags.DEFINE_float("task_embedding_init_stddev", 1.0, "HyperFormer++: std of the initial "
                     "task embeddings (the authors': 1).", **fv)
  check = flag_checks.check_flag
  for name in ("task_name", "data_dir", "output_dir"):
    flags.mark_flag_as_required(name, flag_values=flag_values)
    check(flag_values, name, lambda v: bool(v) and all(v) if isinstance(v, list) else bool(v),
          "given, no empty entry")
  check(flag_values, "sampling_temperature", *flag_checks.POSITIVE)
  for name in ("task_embedding_dim", "projector_hidden_dim", "projected_dim"):
    check(flag_values, name, *flag_checks.POSITIVE_INT)
  for name in ("generator_init_stddev", "task_embedding_init_stddev"):
    check(flag_values, name, *flag_checks.POSITIVE)
  cli_flags.check_model_and_run_flags(flag_values)


def checked_tasks(F):
  """The tasks of the task flags (multitask/tasks.py), checked with the path flags.

  The task flags' agreement first: a wrong count or name explains a missing
  --data_dir.
  """
  tasks = multitask_tasks.tasks_from_flags(F.task_name, F.data_dir, F.text_a_column,
                                           F.text_b_column, F.label_column)
  path_flags.check_path_flags(F, dict(cli_flags.ENCODER_PATH_FLAGS,
                                      **cli_flags.ADAPTER_PATH_FLAGS,
                                      data_dir=path_checks.INPUT_DIR))
  for task in tasks:
    classifier_task.check_data_dir(task.data_dir)
  return tasks


def settings(F) -> Dict[str, object]:
  """The flags' values by name; with --adapter_checkpoint, the model flags left unset
  take the values its file records (--multitask_adapters, HyperFormer++'s widths,
  the shared adapters' config), by run_classifier.py's rule
  (cli_options.take_recorded): a flag given with another value is refused."""
  values = {name: F[name].value for name in F}
  if not F.adapter_checkpoint:
    return values
  header = adapter_weights.read_adapter_header(F.adapter_checkpoint)
  metadata = header.get("metadata", {})
  recorded = {k: metadata[k] for k in ("multitask_adapters",) if k in metadata}
  hyper = metadata.get("hyperformer_config")
  if hyper:
    recorded.update((name, hyper[name]) for name in HYPERFORMER_FLAGS if name in hyper)
  elif recorded.get("multitask_adapters") == "shared":
    config = AdapterConfig.from_dict(header["adapter_config"])
    recorded.update((flag, getattr(config, key))
                    for key, flag in model_setup.ADAPTER_CONFIG_FLAGS.items())
  given = {name for name in recorded if flag_checks.flag_given(F[name])}
  values.update(cli_options.take_recorded(F.adapter_checkpoint, recorded, values, given))
  return values


# HyperFormer++'s flags, named as its config's fields.
HYPERFORMER_FLAGS = ("adapter_size", "task_embedding_dim", "projector_hidden_dim",
                     "projected_dim", "generator_init_stddev", "task_embedding_init_stddev")


def model_options(values: Mapping[str, object]) -> model_setup.ModelOptions:
  """The run's ModelOptions of the flags' `settings`; errors.UserError for a train mode
  --multitask_adapters refuses."""
  adapters = values["multitask_adapters"]
  allowed = TRAIN_MODES[adapters]
  train_mode = values["train_mode"] or allowed[0]
  if train_mode not in allowed:
    named = errors.flags_named(train_mode=train_mode, multitask_adapters=adapters)
    raise errors.UserError(
        f"{named}: must be {' or '.join(allowed)}: "
        + ("the hypernetwork makes the adapters, and the encoder stays frozen"
           if adapters == "hyperformer" else "the shared adapters train"))
  placement, design = values["adapter_placement"], values["adapter_design"]
  if adapters == "hyperformer" and placement not in (None, "both"):
    raise errors.UserError(f"{errors.flags_named(adapter_placement=placement)}"
                           ": HyperFormer++ puts its adapters after both sub-layers")
  if not adapter_layers.get_design(design).fusable:
    raise errors.UserError(f"{errors.flags_named(adapter_design=design)}: "
                           "run_multitask.py trains adapters of design "
                           + " or ".join(adapter_layers.names_with("fusable")))
  # HyperFormer++'s --adapter_size is the generated adapters' (hyperformer_config).
  shared = adapters == "shared"
  adapter = dict(size=values["adapter_size"] if shared else 0,
                 init_scale=values["adapter_init_scale"], placement=placement,
                 design=design if shared else adapter_layers.DEFAULT_DESIGN)
  return model_setup.ModelOptions(
      adapter=adapter, train_mode=train_mode, init_checkpoint=values["init_checkpoint"],
      bert_hub_module_handle=values["bert_hub_module_handle"],
      adapter_checkpoint=values["adapter_checkpoint"],
      mixed_precision=values["mixed_precision"])


def hyperformer_config(values: Mapping[str, object]) -> Optional[HyperFormerConfig]:
  if values["multitask_adapters"] != "hyperformer":
    return None
  return HyperFormerConfig(**{name: values[name] for name in HYPERFORMER_FLAGS})
