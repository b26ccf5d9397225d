"""runtime/machine.py: the CPU line, from the flags py-cpuinfo reports (faked
here as two CPUs this project ran on: /proc/cpuinfo's names and flags)."""

import json
import os
import subprocess
import sys

import cpuinfo
import pytest

from adapter_bert.runtime import machine


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


BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")


def test_benchmarks_print_and_record_the_projects_cpu_line(tmp_path, capsys, monkeypatch):
  """benchmarks/: bench_harness stays standard-library only (a bare python3 runs
  adapterhub_side_by_side.py's coordinator), so the CPU line comes from the
  project's venv, and its machine line and JSON carry the line it is given."""
  # No site-packages (-S), nor this repository's editable install: it still imports.
  # (`-c` puts the working directory first on sys.path, as a script its own.)
  subprocess.run([sys.executable, "-S", "-c", "import bench_harness"], check=True,
                 cwd=BENCHMARKS)
  monkeypatch.syspath_prepend(BENCHMARKS)
  import adapterhub_side_by_side
  import bench_harness
  # The coordinator asks the project's venv (here this one) for runtime/machine.py's line.
  assert adapterhub_side_by_side.cpu_line(sys.executable) == machine.cpu_line()
  line = "AMD EPYC, 2 CPUs, avx512f, bfloat16 units (avx512_bf16)"
  bench_harness.finish({}, start=0.0, json_out=str(tmp_path / "bench.json"), cpu=line)
  assert capsys.readouterr().out.startswith(f"machine: {line}; load average ")
  with open(tmp_path / "bench.json") as f:
    assert json.load(f)["cpu"] == line
