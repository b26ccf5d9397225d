"""pyproject.toml lists every package and top-level module of the repository, so
an installed copy (CI's, a subprocess run from another directory) imports them all."""

import os
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_package_and_top_level_module_is_installed():
  with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
    setuptools = tomllib.load(f)["tool"]["setuptools"]
  packages = {name for name in os.listdir(REPO) if name != "tests"
              and os.path.isfile(os.path.join(REPO, name, "__init__.py"))}
  assert set(setuptools["packages"]) == packages
  modules = {name[:-3] for name in os.listdir(REPO) if name.endswith(".py")}
  assert set(setuptools["py-modules"]) == modules
