"""The flags the entry points share: defined once here, each with its checks.

The original scripts' flags keep their names, defaults and help; adapter-bert's
and this project's are added beside them. An entry point composes what it
takes, then adds its own:

  run_classifier.py, experiments/ablation.py  define_classifier_flags
  run_multitask.py     define_model_and_run_flags (+ its list-valued task flags)
  run_squad.py         define_encoder_flags, define_action_flags,
                       define_training_flags, define_tpu_flags, define_adapter_flags
  export_savedmodel.py define_base_source_flags

Every definition takes the FlagValues to define them on (tests use fresh
ones), so that no two scripts' same-named flags ever meet in one FlagValues.
"""

from absl import flags

from adapter_bert.model import adapter_layers
from adapter_bert.model import optimization
from adapter_bert import label_lists
from adapter_bert.bank import adapter_bank
from adapter_bert.classification import processors
from adapter_bert.cli import flag_checks
from adapter_bert.cli import path_flags
# Parsed before TensorFlow loads too (cli/launch.py): a module without it.
from adapter_bert.cli.tpu_flags import define_tpu_flags  # pylint: disable=unused-import
from adapter_bert.fusion import model as fusion_model
from adapter_bert.runtime import model_setup
from adapter_bert.storage import path_checks

_FLAGS = flags.FLAGS


def _on(flag_values):
  return dict(flag_values=flag_values)


def define_encoder_flags(flag_values=_FLAGS, max_seq_length=128, optional_with_hub=True):
  """The pre-trained model, the output directory and the input length.

  Args:
    max_seq_length: the default (the original's: 128 classification, 384 SQuAD).
    optional_with_hub: whether the help says that --bert_hub_module_handle
      makes --bert_config_file and --vocab_file optional (run_squad.py
      requires them, as the original).
  """
  fv = _on(flag_values)
  with_hub = " Optional with --bert_hub_module_handle." if optional_with_hub else ""
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture."
                      + with_hub, **fv)
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was "
                      "trained on." + with_hub, **fv)
  flags.DEFINE_string("output_dir", None, "The output directory where the model "
                      "checkpoints will be written.", **fv)
  flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a "
                      "pre-trained BERT model).", **fv)
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be "
                    "True for uncased models and False for cased models.", **fv)
  flags.DEFINE_integer("max_seq_length", max_seq_length, "The maximum total input sequence "
                       "length after WordPiece tokenization. Sequences longer than this will "
                       "be truncated, and sequences shorter than this will be padded.", **fv)


# What the shared path flags must be (storage.path_checks' kinds), for
# cli.path_flags.check_path_flags at the start of each command's main.
ENCODER_PATH_FLAGS = {"bert_config_file": path_checks.INPUT_FILE,
                      "vocab_file": path_checks.INPUT_FILE,
                      "output_dir": path_checks.OUTPUT_DIR,
                      "init_checkpoint": path_checks.CHECKPOINT}
ADAPTER_PATH_FLAGS = {"adapter_checkpoint": path_checks.INPUT_FILE_OR_DIR,
                      "bert_hub_module_handle": path_flags.HUB_HANDLE}


def classifier_path_flags(do_train: bool):
  """define_classifier_flags' path flags: --adapter_bank is written when training."""
  return dict(ENCODER_PATH_FLAGS, **ADAPTER_PATH_FLAGS, data_dir=path_checks.INPUT_DIR,
              adapter_bank=path_checks.OUTPUT_DIR if do_train else path_checks.INPUT_DIR)


def define_action_flags(flag_values=_FLAGS, eval_split=True,
                        predict_help="Whether to run the model in inference mode on the "
                        "test set."):
  """--do_train, --do_eval (with `eval_split`) and --do_predict."""
  fv = _on(flag_values)
  flags.DEFINE_bool("do_train", False, "Whether to run training.", **fv)
  if eval_split:
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", **fv)
  flags.DEFINE_bool("do_predict", False, predict_help, **fv)


_BATCH_SIZES = {"train": ("train_batch_size", 32, "Total batch size for training."),
                "eval": ("eval_batch_size", 8, "Total batch size for eval."),
                "predict": ("predict_batch_size", 8, "Total batch size for predict.")}


def define_training_flags(flag_values=_FLAGS, splits=("train", "eval", "predict"),
                          predict_help=None):
  """The batch size of each of `splits`, and the original's training schedule.

  Args:
    predict_help: --predict_batch_size's help, if not run_classifier.py's.
  """
  fv = _on(flag_values)
  for split in splits:
    name, default, help_text = _BATCH_SIZES[split]
    help_text = predict_help if split == "predict" and predict_help else help_text
    flags.DEFINE_integer(name, default, help_text, **fv)
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.", **fv)
  flags.DEFINE_enum("optimizer", "bert", list(optimization.OPTIMIZERS),
                    "bert: the original's AdamWeightDecay, Adam without bias correction; "
                    "adamw: the same with Adam's bias correction (PyTorch's AdamW), whose "
                    "first updates are about 3x smaller (safer at adapter learning rates "
                    "around 1e-3).", **fv)
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.",
                     **fv)
  flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                     "learning rate warmup for. E.g., 0.1 = 10% of training.", **fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model "
                       "checkpoint.", **fv)
  flags.DEFINE_integer("iterations_per_loop", 1000, "How many steps to make in each "
                       "compiled loop call.", **fv)
  flags.DEFINE_bool("pad_to_max_seq_length", None, "Pad every example to --max_seq_length, "
                    "as the original did: one compiled program. The default with --use_tpu. "
                    "Elsewhere the default pads each batch to its longest example (rounded "
                    "up to a multiple of 16 with --use_xla, which compiles a program per "
                    "length): the same results with less computed. With --use_tpu, "
                    "--nopad_to_max_seq_length or --group_by_length asks for that per-batch "
                    "padding (untried on a TPU).", **fv)
  flags.DEFINE_bool("group_by_length", False, "Train on batches of examples of similar "
                    "length (shuffled within length buckets, then the batches shuffled; "
                    "seeded, resumable), which pads least; implies per-batch padding "
                    "(untried on a TPU). Evaluation and prediction batch by length whenever "
                    "batches are padded per batch, and write their results in input order.",
                    **fv)


def define_packing_flag(flag_values=_FLAGS):
  """--pack_sequences, for a script whose training, evaluation and prediction
  read packed batches (runtime/packing.py), and its checks against the padding flags."""
  flags.DEFINE_bool("pack_sequences", False, "Pack several examples into each row of "
                    "--max_seq_length tokens (each attends only to itself, with its own "
                    "positions and [CLS]): nearly no padding computed and one static "
                    "batch shape (XLA and TPUs compile once). --train_batch_size still "
                    "counts examples: a batch is the rows that hold that many on average, "
                    "and the epochs cover the same examples. Results equal the unpacked "
                    "ones to float rounding.", **_on(flag_values))
  flag_checks.check_flags_together(
      flag_values, ("pack_sequences", "group_by_length", "pad_to_max_seq_length"),
      lambda pack, group, pad_to_max: None if not pack else
      "--pack_sequences fills rows of --max_seq_length: drop --group_by_length" if group else
      "--pack_sequences fills rows of --max_seq_length: drop --nopad_to_max_seq_length"
      if pad_to_max is False else None)


def check_training_flags(flag_values, positive_ints):
  """The original's training and TPU flags, and `positive_ints` of the script's own."""
  check, fc = flag_checks.check_flag, flag_checks
  for name in tuple(positive_ints) + ("save_checkpoints_steps", "iterations_per_loop",
                                      "num_tpu_cores"):
    check(flag_values, name, *fc.POSITIVE_INT)
  check(flag_values, "learning_rate", *fc.POSITIVE)
  check(flag_values, "num_train_epochs", *fc.POSITIVE)
  check(flag_values, "warmup_proportion", *fc.PROPORTION)
  fc.check_flags_together(
      flag_values, ("group_by_length", "pad_to_max_seq_length"),
      lambda group, pad_to_max: "--group_by_length needs batches padded to their own "
      "length: drop --pad_to_max_seq_length" if group and pad_to_max else None)


def define_base_source_flags(
    flag_values=_FLAGS,
    hub_help="Start from this TF Hub BERT encoder (TF2 SavedModel: URL, local or gs:// dir) "
    "instead of --init_checkpoint.", init_checkpoint_help=None):
  """--bert_hub_module_handle, the other source of the base weights than
  --init_checkpoint (defined here too where `init_checkpoint_help` is given),
  and the check that at most one is given."""
  fv = _on(flag_values)
  if init_checkpoint_help is not None:
    flags.DEFINE_string("init_checkpoint", None, init_checkpoint_help, **fv)
  flags.DEFINE_string("bert_hub_module_handle", None, hub_help, **fv)
  flag_checks.check_flags_together(flag_values, ("init_checkpoint", "bert_hub_module_handle"),
                                   model_setup.sources_conflict)


def _listed(items) -> str:
  """"a", "a or b", "a, b or c"."""
  return " or ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


def _by_default(designs, attribute: str, show) -> str:
  """The designs grouped by their `attribute`'s value: "both for houlsby,
  feed_forward for pfeiffer and parallel"."""
  groups = {}
  for design in designs:
    groups.setdefault(getattr(design, attribute), []).append(design.name)
  return ", ".join(f"{show(value)} for {' and '.join(names)}"
                   for value, names in groups.items())


def _define_adapter_config_flags(flag_values):
  """The flags of the adapters' own settings (AdapterConfig's fields)."""
  fv = _on(flag_values)
  flags.DEFINE_integer("adapter_size", model_setup.DEFAULT_ADAPTER_SIZE, "Bottleneck size "
                       "of the adapters; 0 = no adapters. Left out with a --train_mode "
                       "other than adapters: 0.", **fv)
  flags.DEFINE_float("adapter_init_scale", 1e-3, "Stddev of the adapters' initial weights "
                     "(truncated normal).", **fv)
  designs = [adapter_layers.get_design(n) for n in adapter_layers.design_names()]
  flags.DEFINE_string("adapter_placement", None, "Where each layer's adapters go: both "
                      "(after the attention and after the feed-forward sub-layer, as the "
                      "paper), attention or feed_forward (after that sub-layer only). "
                      "Default: the design's (" + _by_default(
                          [d for d in designs if d.takes_placement], "default_placement",
                          str) + ").", **fv)
  flags.DEFINE_enum("adapter_design", adapter_layers.DEFAULT_DESIGN,
                    [d.name for d in designs], "How adapters are wired into a layer: "
                    + _listed([f"{d.name} ({d.summary})" for d in designs]) + ".", **fv)
  scaled = _by_default([d for d in designs if d.default_scaling != 1.0], "default_scaling",
                       "{:g}".format)
  flags.DEFINE_float("adapter_scaling", None, "Factor of the adapters' output (LoRA: "
                     "alpha / rank). Default: the design's ("
                     + (scaled + ", else " if scaled else "") + "1).", **fv)
  flags.DEFINE_enum("adapter_activation", "gelu", list(adapter_layers.ACTIVATION_NAMES),
                    "The adapters' non-linearity: gelu (BERT's tanh GELU, the original's), "
                    "or e.g. swish, gelu_erf, relu (AdapterHub's adapters: "
                    "docs/adapters_interop.md).", **fv)
  flags.DEFINE_bool("adapter_layer_norm", False, "Houlsby adapters with a LayerNorm of "
                    "their own on the up-projection (AdapterHub's ln_after).", **fv)


def define_adapter_flags(flag_values=_FLAGS, check_adapter_size=True):
  """The flags adapter-bert adds to the original scripts, plus this project's.

  Args:
    check_adapter_size: check --adapter_size against --train_mode and
      --adapter_placement (False: the caller does; in run_multitask.py it
      can also be the size of generated adapters).
  """
  _define_adapter_config_flags(flag_values)  # AdapterConfig's fields.
  fv = _on(flag_values)
  flags.DEFINE_float("adapter_weight_decay_rate", 0.01, "Weight decay of adapter "
                     "variables (other weights: 0.01, as the original).", **fv)
  flags.DEFINE_string("train_mode", None, "What trains: adapters | adapters_only (the "
                      "LayerNorms frozen, as AdapterHub trains) | full | layer_norm | head "
                      "| top_layers:K. Default: adapters, or full with --adapter_size=0.",
                      **fv)
  flags.DEFINE_string("adapter_checkpoint", None, "Adapter-only weights (a run's "
                      "output_dir/adapter_model) loaded on top of the base weights.", **fv)
  flags.DEFINE_integer("seed", None, "Random seed of initialization, dropout and shuffling "
                       "(None: not seeded, as the original).", **fv)
  flags.DEFINE_bool("use_xla", False, "Compile the train/eval/predict steps with XLA "
                    "(jit_compile). Ignored with --use_tpu, which compiles them anyway.",
                    **fv)
  flags.DEFINE_enum("mixed_precision", "none", ["none", "bfloat16", "float16"],
                    "Compute in 16 bits, keep weights in float32: bfloat16 (TPU, recent "
                    "CPUs) or float16 with dynamic loss scaling (GPU).", **fv)
  check, fc = flag_checks.check_flag, flag_checks
  # AdapterConfig's rules of its fields, at parse time (its --adapter_design and
  # --adapter_activation are enums of its values).
  for field in ("size", "init_scale", "placement", "scaling"):
    check(flag_values, model_setup.ADAPTER_CONFIG_FLAGS[field],
          *adapter_layers.field_rule(field))
  check(flag_values, "adapter_weight_decay_rate", *fc.NON_NEGATIVE)
  check(flag_values, "train_mode", model_setup.train_mode_ok,
        model_setup.TRAIN_MODES_ALLOWED)
  # keras.utils.set_random_seed's range.
  check(flag_values, "seed", lambda v: 0 <= v < 2**32, "in [0, 2**32 - 1]")
  define_base_source_flags(flag_values)
  if check_adapter_size:
    _check_adapter_size(flag_values)


def _given_size(flag_values, adapter_size):
  """--adapter_size as ModelOptions takes it: None where left at its default."""
  return adapter_size if flag_checks.flag_given(flag_values["adapter_size"]) else None


def _size_ok(adapter_size) -> bool:
  """Whether --adapter_size passes its own check (else that check reports it)."""
  return adapter_layers.field_rule("size")[0](adapter_size)


def _check_adapter_size(flag_values):
  def adapters_problem(train_mode, adapter_size):
    # Adapters of the default size where the train mode does not train them
    # are dropped (ModelOptions); given explicitly, they are a contradiction.
    if (not flag_checks.flag_given(flag_values["adapter_size"]) or not _size_ok(adapter_size)
        or not model_setup.train_mode_ok(train_mode)):
      return None
    mode = model_setup.ModelOptions(adapter={"size": adapter_size},
                                    train_mode=train_mode).mode()
    return model_setup.adapter_conflict(mode, adapter_size)
  flag_checks.check_flags_together(flag_values, ("train_mode", "adapter_size"),
                                   adapters_problem)

  def placement_problem(placement, train_mode, adapter_size):
    if (placement not in adapter_layers.PLACEMENTS or not _size_ok(adapter_size)
        or not model_setup.train_mode_ok(train_mode)):
      return None  # Reported by the flags' own checks.
    options = model_setup.ModelOptions(
        adapter={"size": _given_size(flag_values, adapter_size)}, train_mode=train_mode)
    return model_setup.placement_conflict(placement, options.adapter_size)
  flag_checks.check_flags_together(
      flag_values, ("adapter_placement", "train_mode", "adapter_size"), placement_problem)

  def design_problem(design, placement, train_mode, adapter_size):
    if not _size_ok(adapter_size) or not model_setup.train_mode_ok(train_mode):
      return None
    options = model_setup.ModelOptions(
        adapter={"size": _given_size(flag_values, adapter_size)}, train_mode=train_mode)
    return (model_setup.design_conflict(design, options.adapter_size)
            or model_setup.given_placement_conflict(design, placement))
  flag_checks.check_flags_together(
      flag_values, ("adapter_design", "adapter_placement", "train_mode", "adapter_size"),
      design_problem)


def define_model_and_run_flags(flag_values=_FLAGS, check_adapter_size=True):
  """run_classifier.py's flags other than the task's (--task_name, --data_dir,
  tsv columns), with the adapter flags: run_multitask.py shares them."""
  define_encoder_flags(flag_values)
  define_action_flags(flag_values)
  define_training_flags(flag_values)
  define_tpu_flags(flag_values)
  define_adapter_flags(flag_values, check_adapter_size)  # Adapters, what trains, hub, seed, XLA.


def check_model_and_run_flags(flag_values):
  """The checks of define_model_and_run_flags' flags that need several of them."""
  # [CLS] text [SEP] (text [SEP]): room for the special tokens at least.
  flag_checks.check_flag(flag_values, "max_seq_length", lambda v: v >= 3, "at least 3")
  check_training_flags(flag_values, ("train_batch_size", "eval_batch_size",
                                     "predict_batch_size"))
  flag_checks.check_flags_together(
      flag_values, ("do_train", "do_eval", "do_predict"),
      lambda *actions: None if any(actions) else
      "at least one of --do_train, --do_eval or --do_predict must be given")


def define_eval_predictions_flag(flag_values=_FLAGS):
  """--eval_predictions (run_classifier.py, and run_multitask.py per task)."""
  flags.DEFINE_bool("eval_predictions", False, "With --do_eval, also write "
                    "eval_predictions.tsv: each dev example's class probabilities (or "
                    "score), in test_results.tsv's format and the dev set's order (for "
                    "per-example analysis: the study's bootstrap, experiments/study/claims.py).",
                    **_on(flag_values))


def define_classifier_flags(flag_values=_FLAGS):
  """run_classifier.py's flags: one task (a GLUE task or your own TSV data), the
  model and run flags, and an adapter bank's. experiments/ablation.py takes them too."""
  fv = _on(flag_values)
  # Required parameters.
  flags.DEFINE_string("data_dir", None, "The input data dir. Should contain the .tsv files "
                      "(or other data files) for the task.", **fv)
  flags.DEFINE_string("task_name", None, "The name of the task to train: cola, sst-2, mrpc, "
                      "sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli, xnli, ax, or tsv.", **fv)
  define_eval_predictions_flag(flag_values)
  define_model_and_run_flags(flag_values)
  define_packing_flag(flag_values)
  define_tsv_flags(flag_values)
  define_bank_flags(flag_values)
  define_fusion_flags(flag_values)
  check = flag_checks.check_flag
  for name in ("data_dir", "task_name", "output_dir"):
    flags.mark_flag_as_required(name, flag_values=flag_values)
    check(flag_values, name, bool, "given, not empty")
  check(flag_values, "labels", lambda v: v and label_lists.labels_problem(v) is None,
        "a comma list of distinct, non-empty labels")
  check(flag_values, "task_name",
        lambda v: processors.canonical_task_name(v) in processors.PROCESSORS,
        "one of " + ", ".join(sorted(processors.PROCESSORS)) + " (any case)")
  check_model_and_run_flags(flag_values)


# The flags of --task_name=tsv (your own data).
TSV_FLAGS = ("text_a_column", "text_b_column", "label_column", "labels")


def define_tsv_flags(flag_values=_FLAGS):
  fv = _on(flag_values)
  flags.DEFINE_string("text_a_column", "sentence", "tsv task: header name of the first text.",
                      **fv)
  flags.DEFINE_string("text_b_column", None, "tsv task: header name of the second text, if "
                      "any.", **fv)
  flags.DEFINE_string("label_column", "label", "tsv task: header name of the label.", **fv)
  flags.DEFINE_list("labels", None, "tsv task: the labels in id order (comma list); default: "
                    "the sorted labels of train.tsv.", **fv)


def define_bank_flags(flag_values=_FLAGS):
  """--adapter_bank and --bank_task: many tasks' adapters over one base (bank/)."""
  fv = _on(flag_values)
  flags.DEFINE_string("adapter_bank", None, "An adapter bank directory. With --do_train the "
                      "task's adapter-only weights are added to it as --bank_task (the bank "
                      "is created for this run's base if there is none); without, "
                      "--bank_task's weights are loaded, as --adapter_checkpoint="
                      "BANK/tasks/NAME would.", **fv)
  flags.DEFINE_string("bank_task", None, "The task's name in --adapter_bank. Default: "
                      "--task_name in lower case (mrpc, sst-2, ...); needed with "
                      "--task_name=tsv.", **fv)
  fc = flag_checks
  fc.check_flag(flag_values, "bank_task", adapter_bank.is_valid_task_name,
                adapter_bank.TASK_NAMES_ALLOWED)

  def name_problem(bank, bank_task, task_name):
    if not bank:
      return "--bank_task needs --adapter_bank" if bank_task else None
    if not bank_task and task_name and processors.canonical_task_name(task_name) == "tsv":
      return "--task_name=tsv needs --bank_task=NAME with --adapter_bank"
    return None
  fc.check_flags_together(flag_values, ("adapter_bank", "bank_task", "task_name"),
                          name_problem)

  def train_mode_problem(bank, do_train, train_mode, adapter_size):
    # A bank's fingerprint covers what these modes leave frozen (bank/adapter_bank.py).
    if (not (bank and do_train) or not model_setup.train_mode_ok(train_mode)
        or not _size_ok(adapter_size)):
      return None
    mode = model_setup.ModelOptions(adapter={"size": _given_size(flag_values, adapter_size)},
                                    train_mode=train_mode).mode()
    if mode.name in adapter_bank.TRAIN_MODES:
      return None
    what = ("freezes the LayerNorms" if mode.name in ("head", "adapters_only")
            else "trains encoder weights")
    return (f"--train_mode={mode} {what} that the tasks of a bank share; a bank holds "
            f"--train_mode={' or '.join(adapter_bank.TRAIN_MODES)} tasks")
  fc.check_flags_together(flag_values, ("adapter_bank", "do_train", "train_mode",
                                        "adapter_size"), train_mode_problem)
  fc.check_flags_together(
      flag_values, ("adapter_bank", "do_train", "adapter_checkpoint"),
      lambda bank, do_train, checkpoint: "without --do_train, --adapter_bank gives the "
      "adapters: leave --adapter_checkpoint out" if bank and checkpoint and not do_train
      else None)


def define_fusion_flags(flag_values=_FLAGS):
  """AdapterFusion over a bank's tasks (fusion/): --fusion_tasks and its settings."""
  fv = _on(flag_values)
  flags.DEFINE_list("fusion_tasks", None, "With --adapter_bank and --do_train: train "
                    "--bank_task as an AdapterFusion (Pfeiffer et al. 2021) over these bank "
                    "tasks' frozen adapters (comma list, at least two, of one adapter "
                    "configuration): the fusion layers, the LayerNorms and the head train. "
                    "Without --do_train a fusion task of the bank is loaded with the tasks it "
                    "records.", **fv)
  flags.DEFINE_float("fusion_regularization", fusion_model.DEFAULT_REGULARIZATION,
                     "Weight of the paper's regularization, the sum over fusion layers of "
                     "||I - V||^2 (V: the value matrix, initialised to the identity), added "
                     "to the training loss; 0: none.", **fv)
  flags.DEFINE_bool("fusion_attentions", False, "For a fusion task, with --do_eval or "
                    "--do_predict: write each example's fusion attention (the mean over its "
                    "tokens, per layer, place and fused task) to "
                    "{eval,predict}_fusion_attentions.tsv in --output_dir, and the mean per "
                    "layer as {eval,predict}_fusion_attentions.png.", **fv)
  fc = flag_checks
  fc.check_flag(flag_values, "fusion_tasks",
                lambda v: len(v) >= 2 and len(set(v)) == len(v)
                and all(adapter_bank.is_valid_task_name(n) for n in v),
                "a comma list of at least two distinct bank task names")
  fc.check_flag(flag_values, "fusion_regularization", *fc.NON_NEGATIVE)

  def fusion_problem(fusion_tasks, bank, do_train, train_mode):
    if not fusion_tasks:
      return None
    if not (bank and do_train):
      return ("--fusion_tasks trains a fusion task into --adapter_bank: give --do_train and "
              "--adapter_bank (without --do_train, a fusion task of the bank is loaded with "
              "the tasks it records)")
    if train_mode not in (None, "adapters"):
      return ("--fusion_tasks trains fusion layers, LayerNorms and the head (as "
              "--train_mode=adapters): leave --train_mode out")
    return None
  fc.check_flags_together(flag_values, ("fusion_tasks", "adapter_bank", "do_train",
                                        "train_mode"), fusion_problem)
