r"""How much of wordnet_example the frozen MiniLM solves as a sentence embedder.

all-MiniLM-L6-v2 was trained as a bi-encoder: each text encoded alone, its
token vectors mean-pooled and compared by cosine. This script uses it that way,
with no training of the encoder, to show whether the pair task's signal is in
the pretrained weights at all (docs/paper_claim.md):

  - pairwise choice: for each gloss (it appears with one matching and one
    non-matching example), pick the example with the higher cosine;
  - cosine > median: label 1 where the pair's cosine is above the split's median;
  - logistic regression on [u, v, |u - v|, u * v, cos] fitted on train.

  .venv/bin/python -m experiments.embedding_baseline --model_dir=models/minilm
"""

import csv
import io
import os

from absl import app
from absl import flags
import numpy as np
from sklearn.linear_model import LogisticRegression

from adapter_bert.cli import flag_checks
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.cli import path_flags
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.storage import input_files
from adapter_bert.storage import path_checks
from adapter_bert import tokenization

FLAGS = flags.FLAGS


def embed(encoder, tokenizer, texts, max_seq_length, batch_size=128):
  """L2-normalized mean of the last layer's token vectors: float32 [len(texts), hidden]."""
  ids = np.zeros((len(texts), max_seq_length), np.int32)
  mask = np.zeros_like(ids)
  for row, text in enumerate(texts):
    tokens = ["[CLS]"] + tokenizer.tokenize(text)[:max_seq_length - 2] + ["[SEP]"]
    ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask[row, :len(tokens)] = 1
  vectors = []
  for start in range(0, len(texts), batch_size):
    batch = slice(start, start + batch_size)
    sequence = encoder({"input_ids": ids[batch], "input_mask": mask[batch],
                        "segment_ids": np.zeros_like(ids[batch])},
                       training=False)["sequence_output"].numpy()
    weights = mask[batch, :, None]
    mean = (sequence * weights).sum(1) / weights.sum(1)
    vectors.append(mean / np.linalg.norm(mean, axis=1, keepdims=True))
  return np.concatenate(vectors)


def main(argv, flag_values=None):
  del argv
  F = flag_values or FLAGS
  path_flags.check_path_flags(F, dict(model_dir=path_checks.INPUT_DIR,
                                      data_dir=path_checks.INPUT_DIR))
  tokenizer = tokenization.FullTokenizer(os.path.join(F.model_dir, "vocab.txt"))
  encoder = modeling.BertEncoder(modeling.BertConfig.from_json_file(
      os.path.join(F.model_dir, "bert_config.json")))
  checkpoint_io.load_checkpoint(encoder, os.path.join(F.model_dir, "bert_model.ckpt"))
  features = {}
  for split in ("train", "dev"):
    text = input_files.read_text(os.path.join(F.data_dir, split + ".tsv"), f"{split}.tsv")
    rows = list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
    u = embed(encoder, tokenizer, [r["gloss"] for r in rows], F.max_seq_length)
    v = embed(encoder, tokenizer, [r["example"] for r in rows], F.max_seq_length)
    labels = np.array([int(r["label"]) for r in rows])
    cosine = (u * v).sum(1)
    by_gloss = {}
    for row, cos, label in zip(rows, cosine, labels):
      by_gloss.setdefault(row["gloss_synset"], []).append((cos, label))
    pairs = [p for p in by_gloss.values() if len(p) == 2]
    choice = np.mean([max(p)[1] == 1 for p in pairs])
    median = np.mean((cosine > np.median(cosine)) == labels)
    print(f"{split}: pairwise choice {choice:.3f} ({len(pairs)} glosses), "
          f"cosine > median {median:.3f}")
    features[split] = (np.concatenate([u, v, np.abs(u - v), u * v, cosine[:, None]], 1),
                       labels)
  classifier = LogisticRegression(max_iter=2000).fit(*features["train"])
  print(f"logistic regression on frozen embeddings: train {classifier.score(*features['train']):.3f}"
        f", dev {classifier.score(*features['dev']):.3f}")


def define_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("model_dir", "models/minilm", "Google-format MiniLM.", **fv)
  flags.DEFINE_string("data_dir", "data/wordnet/wordnet_example", "The pair task.", **fv)
  flags.DEFINE_integer("max_seq_length", 32, "Word pieces per text, with [CLS] and [SEP].",
                       **fv)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
