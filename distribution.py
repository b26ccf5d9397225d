"""Picks the tf.distribute strategy: TPU, several machines, several devices, or one."""

import json
import os
from typing import Optional, Sequence

import tensorflow as tf
from absl import logging


def create_strategy(use_tpu: bool = False, tpu_name: Optional[str] = None,
                    tpu_zone: Optional[str] = None, gcp_project: Optional[str] = None,
                    master: Optional[str] = None,
                    devices: Optional[Sequence[str]] = None) -> tf.distribute.Strategy:
  """The strategy the original flags ask for.

  - `use_tpu`: TPUStrategy through TPUClusterResolver(tpu_name or master,
    zone=tpu_zone, project=gcp_project) (on Colab, tpu_name may be empty).
  - `TF_CONFIG` naming more than one worker: MultiWorkerMirroredStrategy.
  - `devices` given, or more than one GPU: MirroredStrategy.
  - otherwise the default strategy (one device).
  """
  if use_tpu:
    return _tpu_strategy(tpu_name or master, tpu_zone, gcp_project)
  cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1:
    logging.info("TF_CONFIG names several workers: MultiWorkerMirroredStrategy")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if devices:
    return tf.distribute.MirroredStrategy(list(devices))
  if len(tf.config.list_logical_devices("GPU")) > 1:
    return tf.distribute.MirroredStrategy()
  return tf.distribute.get_strategy()


def _tpu_strategy(tpu, zone, project) -> tf.distribute.TPUStrategy:
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu, zone=zone, project=project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, tf.errors.OpError, RuntimeError) as e:
    raise ValueError(
        f"--use_tpu: could not reach the TPU (tpu_name={tpu!r}, tpu_zone={zone!r}, "
        f"gcp_project={project!r}): {e}") from e
  logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
  return tf.distribute.TPUStrategy(resolver)
