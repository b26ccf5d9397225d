"""Picks the tf.distribute strategy: TPU, several machines, several devices, or one."""

import json
import os
import socket
import threading
from typing import Optional, Sequence

import tensorflow as tf
from absl import logging

from adapter_bert import errors

# TPUClusterResolver and the TPU connection wait without a time limit on an
# address that does not answer (a grpc:// address, the GCE metadata server that
# resolves TPU names), and initialize_tpu_system on one that answers but is no
# TPU worker (wrong port, a busy or broken TPU), so --use_tpu looks the TPU up,
# connects and initializes it under these limits. A healthy TPU initializes in
# well under a minute; the last limit leaves room for large slices.
_CONNECT_TIMEOUT_S = 10.0
_RESOLVE_TIMEOUT_S = 60.0
_INITIALIZE_TIMEOUT_S = 300.0


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
    flag = ("--tpu_name" if tpu_name else "--master" if master else
            "--tpu_name (not given; TPU_NAME or Colab's TPU)")
    return _tpu_strategy(tpu_name or master, tpu_zone, gcp_project, flag)
  cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1:
    logging.info("TF_CONFIG names several workers: MultiWorkerMirroredStrategy")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if devices:
    return tf.distribute.MirroredStrategy(list(devices))
  if len(tf.config.list_logical_devices("GPU")) > 1:
    return tf.distribute.MirroredStrategy()
  return tf.distribute.get_strategy()


def _tpu_strategy(tpu, zone, project, flag="--tpu_name") -> tf.distribute.TPUStrategy:
  """TPUStrategy on the TPU the flags name; a UserError naming `flag` if it cannot be had."""
  where = f"{flag}={tpu}" if tpu else flag
  try:
    resolver = _with_timeout(lambda: _resolve_tpu(tpu, zone, project),
                             _RESOLVE_TIMEOUT_S, "looking it up")
    _with_timeout(lambda: _initialize(resolver), _INITIALIZE_TIMEOUT_S, "initializing it")
  # Broad on purpose: the resolver fails with ValueError, URLError, HttpError,
  # ImportError, OpError..., and each needs the flags in the message.
  except Exception as e:  # pylint: disable=broad-except
    raise errors.UserError(
        f"{where}: could not reach the TPU (--tpu_zone={zone}, --gcp_project={project}): "
        f"{e}") from e
  logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
  return tf.distribute.TPUStrategy(resolver)


def _initialize(resolver) -> None:
  tf.config.experimental_connect_to_cluster(resolver)
  tf.tpu.experimental.initialize_tpu_system(resolver)


def _resolve_tpu(tpu, zone, project):
  """TPUClusterResolver whose TPU address answers; fails fast where it can."""
  name = tpu or os.environ.get("TPU_NAME")
  if (name and name != "local" and not name.startswith("grpc://")
      and not (zone and project)):
    # A TPU name (not an address) needs zone and project from the metadata server.
    host = _metadata_host()
    if not _answers(host):
      raise ValueError(
          f"TPU name {name!r} is looked up through the GCE metadata server "
          f"{host}, which does not answer (not on Google Cloud?); give the "
          "TPU's address instead, --tpu_name=grpc://HOST:8470")
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu=tpu, zone=zone, project=project)
  master = resolver.master()  # A TPU name is looked up here.
  if master.startswith("grpc://") and not _answers(master[len("grpc://"):]):
    raise ValueError(f"nothing answers at {master}")
  return resolver


def _metadata_host() -> str:
  # As the Cloud TPU client finds it.
  return (os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_IP")
          or "metadata.google.internal")


def _answers(address: str, default_port: int = 80) -> bool:
  """Whether a TCP connection to "host[:port]" opens within _CONNECT_TIMEOUT_S."""
  host, _, port = address.rpartition(":") if ":" in address else (address, "", "")
  try:
    with socket.create_connection((host.strip("[]"), int(port or default_port)),
                                  timeout=_CONNECT_TIMEOUT_S):
      return True
  except (OSError, ValueError):
    return False


def _with_timeout(fn, timeout_s, what):
  """fn() in a daemon thread; TimeoutError if it has not returned after timeout_s.

  A daemon thread, because a network call without a timeout cannot be
  interrupted and must not keep the process alive.
  """
  result = {}

  def target():
    try:
      result["value"] = fn()
    except BaseException as e:  # pylint: disable=broad-except
      result["error"] = e

  thread = threading.Thread(target=target, daemon=True, name="tpu_" + what.replace(" ", "_"))
  thread.start()
  thread.join(timeout_s)
  if thread.is_alive():
    raise TimeoutError(f"{what}: no answer within {timeout_s:g} s")
  if "error" in result:
    raise result["error"]
  return result["value"]
