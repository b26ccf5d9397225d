"""Recorded keys that were renamed, read under their current names.

run_config.json and an adapter weights file's metadata record a run's
settings. When a setting is renamed, runs written before still hold the old
key: their readers take it under the current name (`current_keys`), so an
older run still resumes, loads with --adapter_checkpoint and serves. Writers
write the current name only.
"""

from typing import Mapping

# Old key -> current key.
RENAMED_KEYS = {
    # run_multitask.py's --adapter_type, renamed with its flag: it says how the
    # tasks get their adapters (generated or shared), not how an adapter is
    # wired into a layer (--adapter_design).
    "adapter_type": "multitask_adapters",
}


def current_keys(record: Mapping[str, object]) -> dict:
  """`record` with each old key under its current name (the current key, if
  both are there, wins)."""
  current = {k: v for k, v in record.items() if k not in RENAMED_KEYS}
  for old, new in RENAMED_KEYS.items():
    if old in record and new not in record:
      current[new] = record[old]
  return current
