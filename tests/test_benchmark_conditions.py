"""benchmarks/run_conditions.py: the block that tells two machines of the same CPU
line apart (threads, oneDNN ISA, matmul ceiling and achieved share, steal and
load). Parsers against hand-written inputs and hand-computed values; the block
from a fake probe (a second, not TensorFlow's import)."""

import json
import os
import sys
import time

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
sys.path.insert(0, BENCHMARKS)  # benchmarks/ is not installed; on the path only to import.
try:
  import bench_harness  # noqa: E402
  import run_conditions  # noqa: E402
finally:
  sys.path.remove(BENCHMARKS)

# What TensorFlow 2.20's oneDNN (v3.7.3) prints with ONEDNN_VERBOSE=1 on an AVX2 machine.
TF_220_VERBOSE = """\
onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)
onednn_verbose,v1,info,cpu,runtime:threadpool,nthr:2
onednn_verbose,v1,info,cpu,isa:Intel AVX2
onednn_verbose,v1,info,gpu,runtime:none
onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0,,,64x32:32x16,24.4
"""


@pytest.mark.parametrize("text,isa", [
    (TF_220_VERBOSE, "Intel AVX2"),
    # oneDNN 2.x / 3.0: no "v1" field.
    ("onednn_verbose,info,cpu,isa:Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ "
     "extensions\n", "Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions"),
    ("dnnl_verbose,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support\n",
     "Intel AVX-512 with Intel DL Boost and bfloat16 support"),
    # ONEDNN_VERBOSE_TIMESTAMP=1 puts a time first.
    ("onednn_verbose,1764600000000.5,v1,info,cpu,isa:Intel AVX2 with Intel DL Boost\r\n",
     "Intel AVX2 with Intel DL Boost"),
    ("onednn_verbose,v1,info,gpu,runtime:none\nsome other line isa:AVX\n", None),
    ("", None),
])
def test_onednn_isa_from_its_verbose_line(text, isa):
  assert run_conditions.onednn_isa(text) == isa


def test_onednn_info_reads_version_runtime_and_threads():
  assert run_conditions.onednn_info(TF_220_VERBOSE) == {
      "version": "v3.7.3", "isa": "Intel AVX2", "runtime": "threadpool", "threads": 2}
  assert run_conditions.onednn_info("onednn_verbose,info,cpu,runtime:OpenMP,nthr:8\n") == {
      "version": None, "isa": None, "runtime": "OpenMP", "threads": 8}


STAT_BEFORE = """\
cpu  1000 10 500 8000 90 0 20 100 0 0
cpu0 500 5 250 4000 45 0 10 50 0 0
intr 12345
"""
# 600 ticks later: user +300, system +100, idle +140, iowait +10, softirq +5,
# steal +45; guest (inside user already) +30 and must not count twice.
STAT_AFTER = """\
cpu  1300 10 600 8140 100 0 25 145 30 0
cpu0 650 5 300 4070 50 0 12 72 15 0
"""


def test_steal_and_busy_shares_from_proc_stat_deltas():
  before, after = (run_conditions.cpu_times(t) for t in (STAT_BEFORE, STAT_AFTER))
  assert before == {"user": 1000, "nice": 10, "system": 500, "idle": 8000, "iowait": 90,
                    "irq": 0, "softirq": 20, "steal": 100}
  assert run_conditions.steal_share(before, after) == pytest.approx(45 / 600)
  # Busy: 600 - (140 idle + 10 iowait) = 450.
  assert run_conditions.busy_share(before, after) == pytest.approx(450 / 600)
  assert run_conditions.steal_share(before, before) is None
  # An old kernel's line without steal: counted as none.
  old = run_conditions.cpu_times("cpu  1 2 3 4\n")
  assert old["steal"] == 0 and old["idle"] == 4
  with pytest.raises(ValueError):
    run_conditions.cpu_times("intr 1\n")


def test_achieved_gflops_and_share_of_the_ceiling():
  # 2 * 2048 * 384 * 1536 FLOPs = 2.416 GFLOP in 40 ms = 60.4 GFLOP/s; ceiling 120.8.
  flops = 2 * 2048 * 384 * 1536
  gflops, share = run_conditions.achieved(flops, 0.040, 2 * 60.3979776)
  assert gflops == pytest.approx(60.3979776)
  assert share == pytest.approx(0.5)
  assert run_conditions.achieved(3e9, 0.1, None) == (pytest.approx(30.0), None)
  assert run_conditions.model_shapes(2048, 384, 1536) == [(2048, 384, 384),
                                                          (2048, 384, 1536)]


def test_tensorflows_threads_when_zero_means_its_default():
  assert run_conditions.tf_effective_threads(0, None, 2) == 2  # The affinity mask.
  assert run_conditions.tf_effective_threads(0, "3", 2) == 3  # TF_NUM_INTRAOP_THREADS.
  assert run_conditions.tf_effective_threads(4, "3", 2) == 4  # Its own setting first.
  assert run_conditions.tf_effective_threads(0, "x", 2) == 2


FAKE_PROBE = r"""
import json, sys
shapes, dtypes, repeats = json.loads(sys.argv[1])
print("onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)")
print("onednn_verbose,v1,info,cpu,runtime:threadpool,nthr:2")
print("onednn_verbose,v1,info,cpu,isa:Intel AVX2")
print("@@CONDITIONS " + json.dumps({"version": "2.20.0",
    "threads": {"intra_op": 0, "inter_op": 0},
    "ceilings": {d: {"%dx%dx%d" % tuple(s): 10.0 * (i + 1) for i, s in enumerate(shapes)}
                 for d in dtypes}}))
"""


def test_finish_prints_the_block_and_writes_it(monkeypatch, tmp_path, capsys):
  monkeypatch.setitem(run_conditions.PROBES, "tensorflow", FAKE_PROBE)
  monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
  monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
  conditions = run_conditions.Conditions(
      {"tensorflow": sys.executable, "torch": None}, run_conditions.model_shapes(8, 4, 16))
  # 2 GFLOP in 100 ms = 20 GFLOP/s of the 20 GFLOP/s ceiling (8x4x16's).
  conditions.add_step("train adapters", "tensorflow", 2e9, 0.1)
  bench_harness.finish({}, start=0.0, json_out=str(tmp_path / "b.json"), cpu="A CPU",
                       conditions=conditions)
  out = capsys.readouterr().out
  cpus = run_conditions.affinity_cpus()
  assert out.startswith("conditions (what differs between two machines of the same CPU line):\n"
                        f"  tensorflow 2.20.0: threads intra-op 0 (runs {cpus}), inter-op 0 "
                        f"(runs {cpus}); 0 = the affinity mask's {cpus} CPUs\n"
                        "  tensorflow oneDNN v3.7.3: isa Intel AVX2, threadpool runtime, "
                        "2 threads\n"
                        "  tensorflow matmul ceiling at the start, float32: 20.0 GFLOP/s (the "
                        "best of the model's shapes M x K x N: 8x4x4 10.0, 8x4x16 20.0)\n"
                        "  achieved train adapters: 2.0 GFLOP in 100.0 ms = 20.0 GFLOP/s = "
                        "100.0% of tensorflow's float32 ceiling\n"
                        "  while it ran: steal ")
  assert "machine: A CPU; load average " in out
  with open(tmp_path / "b.json") as f:
    written = json.load(f)["conditions"]
  assert written["probes"]["tensorflow"]["onednn"]["isa"] == "Intel AVX2"
  assert written["steps"][0]["share_of_ceiling"] == pytest.approx(1.0)
  assert set(written["load"]) >= {"steal_share", "load_average_start", "load_average_end"}
  # The block reads back from the JSON as it was printed.
  assert run_conditions.describe(written)[4] == out.splitlines()[4]


def test_a_failed_probe_is_reported_not_raised(monkeypatch):
  monkeypatch.setitem(run_conditions.PROBES, "torch", "import sys; sys.exit(3)")
  conditions = run_conditions.Conditions({"torch": sys.executable}, [(2, 2, 2)])
  assert conditions.lines()[1].startswith("  torch: probe failed (probe exited with 3")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status")
def test_rss_split_peaks_catch_an_allocation_already_freed():
  """The sampled peak of anonymous memory holds a 256 MiB block freed before the
  end (VmRSS no longer shows it); file-backed pages (the loaded libraries) are
  counted apart and do not grow with it; the printed form names both."""
  sampler = bench_harness.RssSplitPeaks(interval_s=0.005).start()
  before = bench_harness.RssSplitPeaks()
  before.sample()
  block = b"\x01" * (256 << 20)  # Written: every page resident.
  time.sleep(0.1)
  del block
  time.sleep(0.05)
  peaks = sampler.stop()
  now = bench_harness.RssSplitPeaks()
  now.sample()
  assert peaks["anon_mib"] >= before.peaks["anon_mib"] + 250
  assert now.peaks["anon_mib"] < peaks["anon_mib"] - 200
  assert 0 < peaks["file_mib"] < before.peaks["file_mib"] + 50
  assert bench_harness.describe_split({"peak_rss_split": peaks}) == (
      f"; peaks: anonymous {peaks['anon_mib']:.0f}, file-backed "
      f"{peaks['file_mib']:.0f} MiB")
  assert bench_harness.describe_split({}) == ""
