"""Picks the tf.distribute strategy: TPU, several machines, several devices, or one."""

import json
import os
import socket
import sys
import threading
from typing import Callable, Optional, Sequence

import tensorflow as tf
from absl import logging

from adapter_bert import errors
# Found before TensorFlow loads too (cli/launch.py), so they live in a module without it.
from adapter_bert.runtime.tpu_target import TpuTarget, device_files, find_tpu  # pylint: disable=unused-import

# TPUClusterResolver and the TPU connection wait without a time limit on an
# address that does not answer (a grpc:// address, the GCE metadata server that
# resolves TPU names), and initialize_tpu_system on one that answers but is no
# TPU worker (wrong port, a busy or broken TPU), so --use_tpu looks the TPU up,
# connects and initializes it under these limits (connect_tpu's watchdog). A
# healthy TPU initializes in well under a minute; the last limit leaves room for
# large slices.
_CONNECT_TIMEOUT_S = 10.0
_RESOLVE_TIMEOUT_S = 60.0
_INITIALIZE_TIMEOUT_S = 300.0


def create_strategy(use_tpu: bool = False, tpu_name: Optional[str] = None,
                    tpu_zone: Optional[str] = None, gcp_project: Optional[str] = None,
                    master: Optional[str] = None,
                    devices: Optional[Sequence[str]] = None) -> tf.distribute.Strategy:
  """The strategy the original flags ask for.

  - `use_tpu`: TPUStrategy on the TPU that find_tpu names (tpu_name or master,
    else this TPU VM, else TPU_NAME / COLAB_TPU_ADDR), through
    TPUClusterResolver(zone=tpu_zone, project=gcp_project).
  - `TF_CONFIG` naming more than one worker: MultiWorkerMirroredStrategy.
  - `devices` given, or more than one GPU: MirroredStrategy.
  - otherwise the default strategy (one device).
  """
  if use_tpu:
    target = find_tpu(tpu_name, master, os.environ, device_files())
    return tf.distribute.TPUStrategy(connect_tpu(target, tpu_zone, gcp_project))
  cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1:
    logging.info("TF_CONFIG names several workers: MultiWorkerMirroredStrategy")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if devices:
    return tf.distribute.MirroredStrategy(list(devices))
  if len(tf.config.list_logical_devices("GPU")) > 1:
    return tf.distribute.MirroredStrategy()
  return tf.distribute.get_strategy()


def connect_tpu(target: TpuTarget, zone: Optional[str] = None,
                project: Optional[str] = None, *, resolver_class=None,
                connect: Optional[Callable] = None, initialize: Optional[Callable] = None,
                exit_fn: Callable[[int], None] = os._exit):  # pylint: disable=protected-access
  """Looks `target` up, connects to it and initializes it, in the calling thread.

  As Model Garden's distribute_utils: experimental_connect_to_cluster (a
  remote TPU only) puts the ops of the thread that calls it on the TPU's host,
  so the main thread must call it. None of the three calls has a time limit of
  its own (an address that does not answer, a metadata server off Google
  Cloud, a busy or broken TPU), so a watchdog ends the process with one
  `ERROR:` line, status 2, when one of them has not returned in time.

  Args:
    resolver_class, connect, initialize: TPUClusterResolver,
      tf.config.experimental_connect_to_cluster and
      tf.tpu.experimental.initialize_tpu_system unless given (tests).
    exit_fn: what ends the process when the watchdog fires.

  Returns:
    The TPUClusterResolver, connected and initialized.
  Raises:
    errors.UserError: naming the flag, when the TPU cannot be had.
  """
  connect = connect or tf.config.experimental_connect_to_cluster
  initialize = initialize or tf.tpu.experimental.initialize_tpu_system
  where = f"{target.flag}: could not reach the TPU (--tpu_zone={zone}, --gcp_project={project})"
  logging.info("TPU: %s (%s)", target.tpu, target.found_by)
  try:
    with _Watchdog(_RESOLVE_TIMEOUT_S, f"{where}: looking it up", exit_fn):
      resolver = _resolve_tpu(target.tpu, zone, project, resolver_class)
    with _Watchdog(_INITIALIZE_TIMEOUT_S, f"{where}: initializing it", exit_fn):
      if target.tpu != "local":  # A TPU VM's own TPU needs no connection.
        connect(resolver)
      initialize(resolver)
  # Broad on purpose: the resolver fails with ValueError, URLError, HttpError,
  # ImportError, OpError..., and each needs the flags in the message.
  except Exception as e:  # pylint: disable=broad-except
    raise errors.UserError(f"{where}: {e}") from e
  logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
  return resolver


def _resolve_tpu(tpu, zone, project, resolver_class=None):
  """TPUClusterResolver whose TPU address answers; fails fast where it can."""
  if (tpu != "local" and not tpu.startswith("grpc://") and not (zone and project)):
    # A TPU name (not an address) needs zone and project from the metadata server.
    host = _metadata_host()
    if not _answers(host):
      raise ValueError(
          f"TPU name {tpu!r} is looked up through the GCE metadata server "
          f"{host}, which does not answer (not on Google Cloud?); give the "
          "TPU's address instead, --tpu_name=grpc://HOST:8470")
  resolver_class = resolver_class or tf.distribute.cluster_resolver.TPUClusterResolver
  resolver = resolver_class(tpu=tpu, zone=zone, project=project)
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


class _Watchdog:
  """Within `with`: if the block has not ended after timeout_s, prints
  `ERROR: message: no answer within ...` and ends the process (exit_fn(2)).

  A timer thread, because a call without a time limit cannot be interrupted,
  and the call itself must stay in the calling thread (connect_tpu).
  """

  def __init__(self, timeout_s: float, message: str, exit_fn: Callable[[int], None]):
    self._message = f"{message}: no answer within {timeout_s:g} s"
    self._exit_fn = exit_fn
    self._done = threading.Event()
    self._timer = threading.Timer(timeout_s, self._fire)
    self._timer.daemon = True

  def _fire(self) -> None:
    if self._done.is_set():
      return
    logging.flush()
    sys.stdout.flush()
    errors.exit_with_message(self._message, self._exit_fn)

  def __enter__(self) -> "_Watchdog":
    self._timer.start()
    return self

  def __exit__(self, *exc_info) -> bool:
    self._done.set()
    self._timer.cancel()
    return False
