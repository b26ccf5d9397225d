"""The training runtime the entry points share.

  task_run      the one run of every entry point's task: set-up, train, evaluate, predict
  startup       the set-up every entry point shares: seed, base, strategy, model, weights
  model_setup   a run's task model: what trains, where its weights come from
  run_config    run_config.json, the settings saved with every model
  trainable     train modes (adapters, full, baselines) and parameter counts
  loop          the compiled train loop under any strategy
  prediction    evaluation and prediction batches through the model, in record order
  progress      steps per compiled host call, and when a progress line is printed
  stop_signals  Ctrl-C and SIGTERM (preemption) as a request to stop at the next host call
  records       TFRecord feature files -> batched tf.data pipelines
  packing       several examples to a row of max_seq_length tokens (--pack_sequences)
  distribution  the tf.distribute strategy (TPU, multi-worker, mirrored, one device)
  tpu_target    the TPU that --use_tpu means, found without TensorFlow
  machine       the CPU a run or a benchmark ran on, in one line
"""
