"""A serving process for the tests of an export (test_serving.py): one Python that
cannot import this repository (its modules are blocked and its root is off
sys.path; the editable install would find them anywhere), in which the steps a
server or a user takes with an export run one after another, as TensorFlow
Serving and TensorFlow's saved_model_cli run them (run, which gives each step's
result).

A step is one of:
  - {"export_dir", "signature", "request"}: loads the export with
    tf.saved_model.load and runs the signature; or, with "session": true, runs
    it in a TF1 session by the SignatureDef's tensor names, as TensorFlow
    Serving and saved_model_cli do. Its outputs (lists), or {"error": "Type:
    message"}; and "tensorflow_text": whether tensorflow_text was loaded then.
  - {"saved_model_cli": [arguments]}: TensorFlow's command (its console script's
    main, on those arguments, its absl flags at their defaults as in a fresh
    process); {"returncode", "stdout", "stderr"} as its process would end
    (status 1 and the traceback on stderr for an exception).
  - {"import": "tensorflow_text"}: imports tensorflow_text (it registers the
    tokenizer's ops). Until this step it cannot be imported: the steps before
    it run on stock TensorFlow.
"""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CLIENT = r"""
import contextlib, io, json, os, sys, traceback
config = json.loads(sys.stdin.read())
blocked = set(config["blocked"]) | {"tensorflow_text"}

class Blocker:
  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] in blocked:
      raise ImportError("blocked: " + name)
    return None

sys.meta_path.insert(0, Blocker())
repo = config["repo"]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != repo]
try:
  from adapter_bert.model import modeling
  raise SystemExit("modeling was importable")
except ImportError:
  pass
import tensorflow as tf

def in_session(export_dir, signature, request):
  graph = tf.Graph()
  with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
    signature = meta_graph.signature_def[signature]
    keys = sorted(signature.outputs)
    values = session.run([signature.outputs[k].name for k in keys],
                         {signature.inputs[k].name: v for k, v in request.items()})
    return {k: v.tolist() for k, v in zip(keys, values)}

def serve(call):
  try:
    if call.get("session"):
      return in_session(call["export_dir"], call["signature"], call["request"])
    model = tf.saved_model.load(call["export_dir"])
    outputs = model.signatures[call["signature"]](
        **{k: tf.constant(v) for k, v in call["request"].items()})
    return {k: v.numpy().tolist() for k, v in outputs.items()}
  except Exception as e:  # The test asserts which.
    return {"error": type(e).__name__ + ": " + str(e)}

def saved_model_cli(args):
  from absl import flags
  from tensorflow.python.tools import saved_model_cli as cli
  sys.argv = ["saved_model_cli", *args]
  flags.FLAGS.unparse_flags()  # A fresh process's defaults.
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      cli.main()  # absl's app.run: exits.
      code = 0
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except Exception:  # As the interpreter ends on an uncaught one.
      traceback.print_exc()
      code = 1
  return {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

results = []
for step in config["steps"]:
  if "import" in step:
    blocked.discard(step["import"])
    __import__(step["import"])
    results.append({})
  elif "saved_model_cli" in step:
    results.append(saved_model_cli(step["saved_model_cli"]))
  else:
    results.append(dict(serve(step), tensorflow_text="tensorflow_text" in sys.modules))
venv = sys.prefix + os.sep  # The venv may lie in the repository (.venv).
from_repo = [m for m, module in sys.modules.items()
             if (getattr(module, "__file__", None) or "").startswith(repo + os.sep)
             and not module.__file__.startswith(venv)]
print(json.dumps({"from_repo": from_repo, "results": results}, default=bytes.decode))
"""


def run(directory, steps):
  """Runs the steps (module docstring) in one serving process with cwd `directory`
  (a pathlib.Path); their results, in order."""
  blocked = sorted({name[:-3] if name.endswith(".py") else name
                    for name in os.listdir(REPO)
                    if name.endswith(".py") or os.path.exists(
                        os.path.join(REPO, name, "__init__.py"))})
  assert {"modeling", "tokenization", "adapter_bert"} <= set(blocked)
  script = directory / "client.py"
  script.write_text(_CLIENT)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  config = dict(blocked=blocked, repo=REPO, steps=steps)
  result = subprocess.run([sys.executable, str(script)], input=json.dumps(config),
                          capture_output=True, text=True, cwd=directory, env=env, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  got = json.loads(result.stdout.strip().splitlines()[-1])
  assert got["from_repo"] == [], got["from_repo"]
  return got["results"]
