"""The CPU a run or a benchmark ran on, in one line.

Timings from two machines compare only when their CPUs do: the benchmark's
adapter step ran 1.5x faster in bfloat16 than in float32 on a CPU with
bfloat16 units (`avx512_bf16`) and 1.5x slower on one with AVX2 only (README,
Speed). So the study records this line with each sitting and puts it on its
page, and the benchmarks print it with their figures.
"""

import functools
import os

import cpuinfo  # py-cpuinfo: reads the CPU's name and flags on every OS

VECTOR_UNITS = ("avx512f", "avx2")  # The widest wins.
BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")


@functools.lru_cache(maxsize=None)
def cpu_line() -> str:
  """E.g. "AMD EPYC, 2 CPUs, avx512f, bfloat16 units (avx512_bf16)"."""
  info = cpuinfo.get_cpu_info()
  flags = set(info.get("flags", ()))
  parts = [info.get("brand_raw") or info.get("arch") or "unknown CPU",
           f"{os.cpu_count()} CPUs"]
  parts += [unit for unit in VECTOR_UNITS if unit in flags][:1]
  bf16 = [f for f in BFLOAT16_FLAGS if f in flags]
  parts.append(f"bfloat16 units ({', '.join(bf16)})" if bf16 else "no bfloat16 units")
  return ", ".join(parts)
