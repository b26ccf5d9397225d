"""Where weights come from and go to: every checkpoint format the project reads or writes.

  checkpoint_io    Google / adapter-bert TF1 checkpoints (by the original
                   names) and this project's own, into any model of modeling.py
  run_checkpoints  the `model.ckpt-STEP` checkpoints of a run's output_dir:
                   saving, the latest one, resuming
  adapter_weights  adapter-only files: what one task trained, over a fingerprinted base
  fusion_weights   what a fusion task's adapter-only file adds: its fusion layers'
                   names and shapes, the metadata naming the fused tasks
  base_model       the pre-trained encoder a run starts from (config, vocab, Hub weights)
  google_release   the release directory Google published (bert_config.json,
                   vocab.txt, bert_model.ckpt): the converters' target
  huggingface      Hugging Face BERT safetensors -> Google's names
  tf2_encoder      TF2 Model Garden / TF Hub BERT encoders -> Google's names
"""
