"""notebooks/adapter_bert_colab.ipynb runs top to bottom on CPU.

The code cells run in order in one fresh Python process, in one namespace, as a
Jupyter kernel would run them (the notebook uses no IPython magics, so no
kernel is needed). NOTEBOOK_SMOKE_TEST=1 shrinks the run to a few steps on a few
examples; ADAPTER_BERT_WORK_DIR keeps the generated model and outputs in tmp_path.
"""

import json
import os
import subprocess
import sys

import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "adapter_bert_colab.ipynb")

# Runs the cells given as a JSON list of sources; a failing cell is named.
_DRIVER = """
import json, sys
namespace = {"__name__": "__main__"}
for index, source in enumerate(json.load(open(sys.argv[1]))):
    print("=== cell %d" % index, flush=True)
    exec(compile(source, "<cell %d>" % index, "exec"), namespace)
"""


def _code_cells():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  return [c.source for c in notebook.cells if c.cell_type == "code"]


def test_notebook_is_plain_python_with_tpu_settings_on_cpu():
  cells = _code_cells()
  for source in cells:
    compile(source, "<cell>", "exec")  # IPython magics (!cmd, %cd) are syntax errors here.
  settings = cells[0]
  # The cell a Colab TPU user edits: its defaults run on CPU, and the edit it
  # asks for (USE_TPU = True) is refused until BUCKET is a gs:// path.
  namespace = {}
  exec(settings, namespace)
  assert (namespace["USE_TPU"], namespace["TPU_NAME"], namespace["BUCKET"]) == (False, None, None)
  on_tpu = settings.replace("USE_TPU = False", "USE_TPU = True", 1)
  assert on_tpu != settings
  with pytest.raises(ValueError, match="USE_TPU needs BUCKET = 'gs://...'"):
    exec(on_tpu, {})
  with pytest.raises(ValueError, match="USE_TPU needs BUCKET"):
    exec(on_tpu.replace("BUCKET = None", 'BUCKET = "/tmp/adapter_bert"', 1), {})
  namespace = {}
  exec(on_tpu.replace("BUCKET = None", 'BUCKET = "gs://bucket/adapter_bert"', 1), namespace)
  assert namespace["USE_TPU"] and namespace["BUCKET"] == "gs://bucket/adapter_bert"
  # Committed without outputs, so the diff shows code only.
  with open(NOTEBOOK, encoding="utf-8") as f:
    raw = json.load(f)
  assert all(not c.get("outputs") and c.get("execution_count") is None
             for c in raw["cells"] if c["cell_type"] == "code")


@pytest.mark.slow  # About a minute on 2 CPU cores: MiniLM conversion and 3 training steps.
def test_notebook_runs_top_to_bottom_on_cpu(tmp_path):
  cells_file = tmp_path / "cells.json"
  cells_file.write_text(json.dumps(_code_cells()))
  env = dict(os.environ, NOTEBOOK_SMOKE_TEST="1", ADAPTER_BERT_WORK_DIR=str(tmp_path),
             TF_CPP_MIN_LOG_LEVEL="2")
  # Jupyter starts a notebook's kernel in the notebook's folder.
  result = subprocess.run([sys.executable, "-c", _DRIVER, str(cells_file)],
                          cwd=os.path.dirname(NOTEBOOK), env=env, capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

  output_dir = tmp_path / "output" / "notebook_demo"
  results = dict(line.split(" = ") for line in
                 (output_dir / "eval_results.txt").read_text().splitlines())
  assert 0.0 <= float(results["eval_accuracy"]) <= 1.0
  assert int(results["global_step"]) == 3  # int(48 examples / 16 * 1 epoch).
  assert (output_dir / "adapter_model" / "adapter_weights.safetensors").exists()
  assert (tmp_path / "models" / "minilm" / "bert_model.ckpt.index").exists()
  # The last cell printed the counts that run_classifier.py logged.
  assert "parameters: 23312266 total, 595200 adapter, 609034 trained" in result.stdout
  # ... and the accuracy line reports the accuracy run_classifier.py wrote.
  assert ("dev accuracy: %s (10 classes, chance 0.10)\n" % results["eval_accuracy"]
          in result.stdout)
