"""runtime/machine.py: the CPU line, from the flags py-cpuinfo reports (faked
here as two CPUs this project ran on: /proc/cpuinfo's names and flags)."""

import importlib.util
import json
import os

import cpuinfo
import pytest

from runtime import machine


@pytest.mark.parametrize("info,expected", [
    ({"brand_raw": "AMD EPYC", "flags": ["avx2", "avx512f", "avx512_bf16", "fma"]},
     "AMD EPYC, 2 CPUs, avx512f, bfloat16 units (avx512_bf16)"),
    ({"brand_raw": "Intel(R) Xeon(R) CPU @ 2.20GHz", "flags": ["avx", "avx2", "fma"]},
     "Intel(R) Xeon(R) CPU @ 2.20GHz, 2 CPUs, avx2, no bfloat16 units"),
    # Sapphire Rapids: AMX tiles as well as AVX-512's bfloat16 instructions.
    ({"brand_raw": "Intel(R) Xeon(R) Platinum 8481C", "flags":
      ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]},
     "Intel(R) Xeon(R) Platinum 8481C, 2 CPUs, avx512f, bfloat16 units "
     "(amx_bf16, avx512_bf16)"),
    ({"arch": "ARM_8", "flags": []}, "ARM_8, 2 CPUs, no bfloat16 units"),
])
def test_cpu_line_names_the_widest_vector_unit_and_bfloat16(monkeypatch, info, expected):
  monkeypatch.setattr(cpuinfo, "get_cpu_info", lambda: info)
  monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
  machine.cpu_line.cache_clear()
  try:
    assert machine.cpu_line() == expected
  finally:
    machine.cpu_line.cache_clear()


def test_benchmarks_print_and_record_the_cpu_line(monkeypatch, tmp_path, capsys):
  """benchmarks/bench_harness.py: its machine line and JSON carry the same CPU line."""
  spec = importlib.util.spec_from_file_location("bench_harness", os.path.join(
      os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
      "bench_harness.py"))
  harness = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(harness)
  monkeypatch.setattr(cpuinfo, "get_cpu_info", lambda: {"brand_raw": "AMD EPYC",
                                                        "flags": ["avx512f", "avx512_bf16"]})
  monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
  machine.cpu_line.cache_clear()
  try:
    harness.finish({}, start=0.0, json_out=str(tmp_path / "bench.json"))
  finally:
    machine.cpu_line.cache_clear()
  printed = capsys.readouterr().out
  assert printed.startswith("machine: AMD EPYC, 2 CPUs, avx512f, bfloat16 units "
                            "(avx512_bf16); load average ")
  with open(tmp_path / "bench.json") as f:
    assert json.load(f)["cpu"] == "AMD EPYC, 2 CPUs, avx512f, bfloat16 units (avx512_bf16)"
