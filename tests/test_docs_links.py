"""The README is the front door and docs/ the manual: both stay navigable.

The README stays short (at most 450 lines); every relative link of the README
and of docs/*.md lands on a file that exists and, for a Markdown target, on a
heading that exists (GitHub's anchors); every page of docs/ can be reached
from the README; and each row of the README's results table links to a
section that holds the row's numbers and a command that produced them.
"""

import os
import re

import pytest

from markdown_text import headings, links, section, slug

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
MAX_README_LINES = 450

_DECIMAL = re.compile(r"[-+]?\d+(?:[.,]\d+)+")


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def broken_links(path):
  """The relative links of the Markdown file `path` that land nowhere."""
  problems = []
  for number, target in links(_read(path)):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
      continue
    file_part, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
        if file_part else path
    where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
    if not os.path.exists(resolved):
      problems.append(f"{where}: no such file")
    elif anchor and resolved.endswith(".md"):
      if anchor not in {a for _, a, _ in headings(_read(resolved))}:
        problems.append(f"{where}: no heading with anchor #{anchor}")
  return problems


def markdown_pages():
  pages = [README] + sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS)
                            if n.endswith(".md"))
  return [os.path.relpath(p, ROOT) for p in pages]


def test_readme_is_short():
  with open(README, encoding="utf-8") as f:
    count = sum(1 for _ in f)
  assert count <= MAX_README_LINES, (
      f"README.md has {count} lines (at most {MAX_README_LINES}): move the "
      f"detail to a page under docs/ and link to it")


@pytest.mark.parametrize("page", markdown_pages())
def test_relative_links_land(page):
  assert broken_links(os.path.join(ROOT, page)) == []


def test_every_docs_page_is_reachable_from_the_readme():
  """A page no link reaches is lost to a reader who starts at the README."""
  reached, todo = set(), [README]
  while todo:
    page = todo.pop()
    for _, target in links(_read(page)):
      file_part = target.partition("#")[0]
      if not file_part.endswith(".md") or re.match(r"^[a-z]+:", file_part):
        continue
      resolved = os.path.normpath(os.path.join(os.path.dirname(page), file_part))
      if resolved.startswith(DOCS + os.sep) and resolved not in reached \
          and os.path.exists(resolved):
        reached.add(resolved)
        todo.append(resolved)
  pages = {os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md")}
  assert sorted(os.path.relpath(p, ROOT) for p in pages - reached) == []


def _results_rows():
  table = section(_read(README), "results")
  rows = [line for line in table.split("\n")
          if line.startswith("| ") and "](" in line]
  assert len(rows) >= 5, "the README's Results section should hold its table"
  return rows


@pytest.mark.parametrize("row", _results_rows(), ids=lambda r: r.split("|")[1][:40])
def test_results_row_lands_on_its_numbers_and_command(row):
  """Every number the README quotes is one click from the command behind it:
  the row's link lands on a section holding the row's numbers and a command."""
  cells = [c.strip() for c in row.strip().strip("|").split("|")]
  answer = cells[1]
  (target,) = [t for _, t in links(cells[-1])]
  file_part, _, anchor = target.partition("#")
  text = section(_read(os.path.join(ROOT, file_part)), anchor)
  missing = [n for n in _DECIMAL.findall(answer) if n not in text]
  assert not missing, f"{target} does not hold {missing}"
  assert re.search(r"python -m |\.py\b|bash ", text), f"{target} names no command"


def test_checker_finds_broken_links(tmp_path):
  """The checks above can fail: a missing file, a missing anchor and code."""
  (tmp_path / "other.md").write_text("# A page\n\n## The `flag`: one, two\n")
  page = tmp_path / "page.md"
  page.write_text("[ok](other.md#the-flag-one-two) [gone](nothing.md)\n"
                  "[bad anchor](other.md#two-one) [self](#a-title)\n"
                  "# A title\n```\n[in code](nowhere.md)\n```\n"
                  "`[in a span](nowhere.md)`\n")
  found = broken_links(str(page))
  assert [p.split(": ", 1)[1] for p in found] == [
      "nothing.md: no such file", "other.md#two-one: no heading with anchor #two-one"]


def test_slug_matches_github_anchors():
  assert slug("AdapterFusion: a new task over a bank's adapters") == \
      "adapterfusion-a-new-task-over-a-banks-adapters"
  assert slug("Many tasks trained together: HyperFormer++ and shared adapters") == \
      "many-tasks-trained-together-hyperformer-and-shared-adapters"
  assert slug("TPU, GPUs, several machines") == "tpu-gpus-several-machines"
  assert slug("`bash demo.sh`") == "bash-demosh"
  assert slug("Figures 3-5: the trade-off") == "figures-3-5-the-trade-off"


def test_every_test_the_fault_table_names_exists():
  """docs/errors.md shows each fault by `tests/FILE.py::TEST`: each is a test there."""
  named = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`",
                     _read(os.path.join(DOCS, "errors.md")))
  assert len(named) >= 10
  for path, test in named:
    assert re.search(rf"^def {test}\(", _read(os.path.join(ROOT, path)), re.M), (path, test)
