"""The layer rule of pyproject.toml's [tool.tach], checked by tach: no import runs
back up a layer (entry points > commands > runtime > model > foundation), the
commands import each other only as their `depends_on` says (training never
imports serving), and every installed module is under the rule."""

import pathlib
import shutil
import tomllib

import pytest
from tach import extension

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "adapter_bert"


def _diagnostics(root: pathlib.Path) -> list:
  """tach's findings on the project at `root`, as `path:line: message` lines
  (warnings too: e.g. a configured module that no longer exists)."""
  config = extension.parse_project_config_from_pyproject(root / "pyproject.toml")
  found = extension.check(project_root=root, project_config=config, dependencies=True,
                          interfaces=False)
  return [f"{d.pyfile_path()}:{d.pyline_number()}: {d.to_string()}" for d in found]


def _config() -> dict:
  with open(REPO / "pyproject.toml", "rb") as f:
    return tomllib.load(f)


def test_no_import_runs_up_a_layer():
  assert _diagnostics(REPO) == []


def test_every_installed_module_is_under_the_rule():
  config = _config()
  ruled = {m["path"] for m in config["tool"]["tach"]["modules"]}
  # The wheel's top-level modules: each is an entry point or part of the model.
  assert set(config["tool"]["setuptools"]["py-modules"]) == {p for p in ruled if "." not in p}
  # Each sub-package and module of the package is in a layer of its own.
  package = REPO / PACKAGE
  parts = {f"{PACKAGE}.{p.stem}" for p in package.iterdir()
           if (p.is_dir() and (p / "__init__.py").exists())
           or (p.suffix == ".py" and p.name != "__init__.py")}
  assert parts - ruled == set()


def _copy_project(dest: pathlib.Path) -> pathlib.Path:
  """What the rule checks (the package, the top-level modules, pyproject.toml)."""
  shutil.copytree(REPO / PACKAGE, dest / PACKAGE,
                  ignore=shutil.ignore_patterns("__pycache__"))
  for path in [*REPO.glob("*.py"), REPO / "pyproject.toml"]:
    shutil.copy(path, dest / path.name)
  return dest


def _refusal(used: str, why: str) -> str:
  return f"Cannot use '{used}'. {why}."


@pytest.mark.parametrize("path, line, refusal", [
    # The model imports a command.
    ("adapter_bert/model/modeling.py", "from adapter_bert.bank import adapter_bank", _refusal(
        "adapter_bert.bank.adapter_bank", "Layer 'model' ('adapter_bert.model') is lower than "
        "layer 'commands' ('adapter_bert.bank')")),
    # The model imports the original's module names (they re-export it).
    ("adapter_bert/model/optimization.py", "import modeling", _refusal(
        "modeling", "Layer 'model' ('adapter_bert.model') is lower than layer 'entry_points' "
        "('modeling')")),
    # Training imports serving.
    ("adapter_bert/classification/task.py", "from adapter_bert.serving import stacked_tasks",
     _refusal("adapter_bert.serving.stacked_tasks",
              "Module 'adapter_bert.classification' cannot depend on 'adapter_bert.serving'")),
    ("adapter_bert/fusion/fused_tasks.py", "from adapter_bert.serving import stacked_tasks",
     _refusal("adapter_bert.serving.stacked_tasks",
              "Module 'adapter_bert.fusion' cannot depend on 'adapter_bert.serving'")),
    ("adapter_bert/runtime/loop.py", "from adapter_bert.serving import stacked_tasks", _refusal(
        "adapter_bert.serving.stacked_tasks", "Layer 'runtime' ('adapter_bert.runtime') is lower "
        "than layer 'commands' ('adapter_bert.serving')")),
    # A command imports one above it in the commands' order.
    ("adapter_bert/bank/adapter_bank.py", "from adapter_bert.fusion import model",
     _refusal("adapter_bert.fusion.model",
              "Module 'adapter_bert.bank' cannot depend on 'adapter_bert.fusion'")),
    ("adapter_bert/serving/stacked_tasks.py", "from adapter_bert.cli import flags",
     _refusal("adapter_bert.cli.flags",
              "Module 'adapter_bert.serving' cannot depend on 'adapter_bert.cli'")),
    # The library imports an entry point; the foundation imports the model.
    ("adapter_bert/fusion/model.py", "import run_classifier", _refusal(
        "run_classifier", "Layer 'commands' ('adapter_bert.fusion') is lower than layer "
        "'entry_points' ('run_classifier')")),
    # The bank and serving libraries import their commands (top-level entry points).
    ("adapter_bert/bank/listing.py", "import manage_bank", _refusal(
        "manage_bank", "Layer 'commands' ('adapter_bert.bank') is lower than layer "
        "'entry_points' ('manage_bank')")),
    ("adapter_bert/serving/export.py", "import export_savedmodel", _refusal(
        "export_savedmodel", "Layer 'commands' ('adapter_bert.serving') is lower than layer "
        "'entry_points' ('export_savedmodel')")),
    ("adapter_bert/storage/file_io.py", "from adapter_bert.model import modeling", _refusal(
        "adapter_bert.model.modeling", "Layer 'foundation' ('adapter_bert.storage') is lower "
        "than layer 'model' ('adapter_bert.model')")),
    # Downward imports, and those a module's depends_on lists, pass.
    ("run_squad.py", "from adapter_bert.bank import bank_tasks", None),
    ("manage_bank.py", "from adapter_bert.serving import export", None),
    ("adapter_bert/serving/stacked_tasks.py", "from adapter_bert.fusion import fused_tasks", None),
    ("adapter_bert/cli/flags.py", "from adapter_bert.checkpoints import adapter_weights", None),
])
def test_an_added_import_is_refused_where_it_runs_up(tmp_path, path, line, refusal):
  root = _copy_project(tmp_path)
  source = (root / path).read_text()
  source += ("" if source.endswith("\n") else "\n") + line + "\n"
  (root / path).write_text(source)
  line_number = source.count("\n")
  assert _diagnostics(root) == ([] if refusal is None else [f"{path}:{line_number}: {refusal}"])
