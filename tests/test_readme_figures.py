"""Every figure on the README's front door is the current one on its page.

For each figure of the README's Results table (its question and answer
cells, checked against the row's link) and of its Speed section (checked
against the first link after the figure in its paragraph), the link's
section, from the anchor's heading down to the next heading of the same or
a higher level, must hold the figure verbatim, and not only as a past one.

What counts as a figure: a number, with its sign, a `±` spread, a bracketed
interval (also after "points"), a range (`1.5-2.1x`) or a `x` / `%` attached
as one figure (the page must hold `-0.18 [-1.08, +0.74]` whole, not its three
numbers scattered), or a date. Code spans are not figures. Verbatim means after the
same normalisation on both sides: thousands separators dropped (a comma, thin
space, narrow or plain no-break space between a digit and three digits:
`2,074` = `2074`), the Unicode minus read as `-`, `*` and backquotes dropped,
and runs of white space made one space. A figure matches only whole: `0.85`
is not in `0.853` nor in `-0.85`, nor in `1.2-0.85`. A figure on the page
directly followed by "before" (the page's mark for a replaced figure, as in
docs/speed.md's "(1.17x; 1.9x before)") does not count.

Pure text: no TensorFlow import.
"""

import os
import re

from markdown_text import links, section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

_NUM = r"[-+]?\d+(?:\.\d+)?"
_FIGURE = re.compile(
    r"(?<![\w.+\-])(?:\d{4}-\d{2}-\d{2}"
    rf"|{_NUM}(?:-\d+(?:\.\d+)?)?[x%]?(?: ± \d+(?:\.\d+)?)?(?:(?: points)? \[{_NUM}, {_NUM}\])?)"
    r"(?![\w%]|[.,]\d)")
_SEPARATOR = re.compile(r"(?<=\d)[,\u2009\u202f\u00a0](?=\d{3}(?!\d))")
_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")


def normalize(text):
  text = text.replace("\u2212", "-")
  text = _SEPARATOR.sub("", text)
  text = re.sub(r"[*`]", "", text)
  return re.sub(r"\s+", " ", text)


def figures(text):
  """The figures of README prose `text`, code spans and link targets left out."""
  text = re.sub(r"`[^`]*`", " ", text)
  text = _LINK_TARGET.sub("]", text)
  return _FIGURE.findall(normalize(text))


def on_page(figure, page_text):
  """Whether `figure` is in the (normalised) `page_text`, whole and current."""
  pattern = rf"(?<![\w.+\-]){re.escape(figure)}(?![\w%]|[.,]\d)(?! before\b)"
  return re.search(pattern, page_text) is not None


def _readme_section(text, title):
  match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
  assert match, f'README.md has no "## {title}" section'
  return match.group(1)


def claims(readme_text):
  """[(figure, link target, where)] for the Results table and the Speed section;
  a figure with no link to check it against gets the target None."""
  out = []
  for line in _readme_section(readme_text, "Results").split("\n"):
    if not line.startswith("| ") or "](" not in line:
      continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    targets = [t for _, t in links(cells[-1])]
    for cell in cells[:-1]:
      for figure in figures(cell):
        out.append((figure, targets[0] if len(targets) == 1 else None,
                    f"Results row {cells[0][:40]!r}"))
  for paragraph in re.split(r"\n\s*\n", _readme_section(readme_text, "Speed")):
    pending = []
    for piece in re.split(r"(\[(?:[^\[\]]|\[[^\]]*\])*\]\([^)\s]+\))", paragraph):
      target = _LINK_TARGET.search(piece)
      if target and piece.startswith("["):
        out += [(f, target.group(1), "Speed") for f in pending + figures(piece[:target.start()])]
        pending = []
      else:
        pending += figures(piece)
    out += [(f, None, "Speed") for f in pending]
  return out


def problems(readme_text, root=ROOT):
  """What is wrong with the README's figures, one line each."""
  found, pages = [], {}
  for figure, target, where in claims(readme_text):
    if target is None:
      found.append(f"{where}: {figure!r} has no link after it to the page that measured it")
      continue
    file_part, _, anchor = target.partition("#")
    if not file_part or not anchor:
      found.append(f"{where}: {figure!r} links to {target}, not to a section of a page")
      continue
    if target not in pages:
      with open(os.path.join(root, file_part), encoding="utf-8") as f:
        pages[target] = normalize(section(f.read(), anchor))
    if not on_page(figure, pages[target]):
      found.append(f"{where}: {figure!r} is not a current figure of {target}")
  return found


def test_every_readme_figure_is_the_one_on_its_page():
  with open(README, encoding="utf-8") as f:
    text = f.read()
  assert len(claims(text)) >= 30, "the Results table and Speed section hold the figures"
  assert problems(text) == []


def test_figures_are_read_whole():
  assert figures("size 64: -0.18 [-1.08, +0.74]; 0.781 ± 0.008, 2.61% and "
                 "-1.6 points [-2.9, -0.4], 1.5-2.1x, 1.03x, 2,074 responses "
                 "on 2026-11-29 (`--seq=128`)") == [
      "64", "-0.18 [-1.08, +0.74]", "0.781 ± 0.008", "2.61%", "-1.6 points [-2.9, -0.4]",
      "1.5-2.1x", "1.03x",
      "2074", "2026-11-29"]
  assert figures("[link 7](docs/speed.md#figures-3-5)") == ["7"]


def test_page_matching_is_whole_and_current():
  page = normalize("peak memory 1,291\u2009MiB (1.17x; 1.9x before), "
                   "0.853 and \u22120.5, 2.12x, **2.00**")
  assert on_page("1291", page) and on_page("1.17x", page) and on_page("2.00", page)
  assert on_page("-0.5", page) and on_page("2.12x", page)
  assert not on_page("1.9x", page)  # a replaced figure
  assert not on_page("0.85", page) and not on_page("0.5", page)
  assert not on_page("2.1x", page) and not on_page("1.17", page)


def test_checker_catches_a_stale_figure_a_wrong_section_and_no_link(tmp_path):
  (tmp_path / "page.md").write_text(
      "# Page\n\n## Memory\n\n`bash m.sh`: 1,291 MiB (1.17x; 1.9x before).\n\n"
      "## Speed\n\n2.1x the steps.\n")
  readme = ("## Results\n\n| question | answer | details |\n|---|---|---|\n"
            "| Memory? | 1.9x | [m](page.md#memory) |\n"
            "| Memory now? | 1291 MiB, 1.17x | [m](page.md#memory) |\n\n"
            "## Speed\n\nSteps 2.1x ([s](page.md#memory)), 2.1x ([s](page.md#speed)); "
            "and 3.5x.\n\n## Tests\n")
  assert problems(readme, root=str(tmp_path)) == [
      "Results row 'Memory?': '1.9x' is not a current figure of page.md#memory",
      "Speed: '2.1x' is not a current figure of page.md#memory",
      "Speed: '3.5x' has no link after it to the page that measured it"]
