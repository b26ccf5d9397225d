"""Markdown as GitHub renders it, for the tests of the docs' text: the links and
headings outside code (fenced blocks and code spans), GitHub's heading anchors,
and the section under a heading."""

import re

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text):
  """(line number, line) outside fenced code blocks."""
  fenced = False
  for number, line in enumerate(text.split("\n"), 1):
    if _FENCE.match(line):
      fenced = not fenced
      continue
    if not fenced:
      yield number, line


def _masked(text):
  """`text` with fenced blocks and code spans (which may run over a line
  break within a paragraph) blanked out, newlines and offsets kept."""
  prose = {number for number, _ in _prose_lines(text)}
  kept = "\n".join(line if i + 1 in prose else " " * len(line)
                   for i, line in enumerate(text.split("\n")))
  return re.sub(r"`[^`\n]*(?:\n(?!\s*\n)[^`\n]*)*`",
                lambda m: re.sub(r"[^\n]", "x", m.group(0)), kept)


def slug(heading):
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces
  to hyphens (markup characters such as ` and * are punctuation too)."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
  text = re.sub(r"[^\w\- ]", "", text)
  return text.replace(" ", "-")


def headings(text):
  """[(level, anchor, line number)], with GitHub's -1, -2 for repeats."""
  seen, out = {}, []
  for number, line in _prose_lines(text):
    m = _HEADING.match(line)
    if m:
      base = slug(m.group(2))
      anchor = base if base not in seen else f"{base}-{seen[base]}"
      seen[base] = seen.get(base, 0) + 1
      out.append((len(m.group(1)), anchor, number))
  return out


def section(text, anchor):
  """The text under the heading `anchor`, down to the next heading of its
  level or above (its subsections included)."""
  found = headings(text)
  lines = text.split("\n")
  for i, (level, name, number) in enumerate(found):
    if name == anchor:
      end = next((n for lv, _, n in found[i + 1:] if lv <= level), len(lines) + 1)
      return "\n".join(lines[number - 1:end - 1])
  raise KeyError(anchor)


def links(text):
  """[(line number, target)] of the Markdown links outside code."""
  masked = _masked(text)
  return [(masked.count("\n", 0, m.start()) + 1, text[m.start(1):m.end(1)])
          for m in _LINK.finditer(masked)]
