"""Hypothesis strategies for degenerate and hostile inputs, shared by the readers'
fuzz tests (test_fuzz_readers.py): texts that are empty, blank, control
characters, very long or of mixed scripts, files that are not UTF-8, and the
files and flag lists built from them."""

import json

from hypothesis import strategies as st

# Bounded so that every reader's test stays at a few seconds; derandomized so that
# every run (CI's included) draws the same inputs: a failure is reproducible and
# never depends on the day. For new inputs, run with derandomize=False by hand.
SETTINGS = dict(max_examples=60, deadline=None, derandomize=True, database=None)

_SCRIPTS = (
    "abc xyz", "Ünïcödé", "Привет мир", "中文字符", "日本語のテキスト", "한국어", "مرحبا بالعالم",
    "שלום", "ελληνικά", "हिन्दी", "🙂🚀👍🏽", "e\u0301 a\u0300",  # combining marks
    "\u200b\u200d\ufeff",  # zero-width characters and a BOM
    "\u202e\u202d",  # bidirectional overrides
)
_CONTROL = "".join(map(chr, [0, 1, 7, 8, 11, 12, 14, 27, 127, 0x85, 0x9f, 0xfffd]))
_BLANK = " \t\u00a0\u2003\u3000\u202f"  # Unicode spaces (a tab only where allowed).

# Text without the characters that make the structure of a TSV row (tab, newline).
_CELL_ALPHABET = st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r")


def hostile_text(allow_structure: bool = False) -> st.SearchStrategy[str]:
  """Empty, blank, control characters, very long, mixed scripts, or any text.

  Without `allow_structure`, no tab, carriage return or newline (a TSV cell);
  with it, anything a JSON string can hold.
  """
  alphabet = st.characters(blacklist_categories=("Cs",)) if allow_structure else _CELL_ALPHABET
  blank = _BLANK + ("\t\n\r" if allow_structure else "")
  return st.one_of(
      st.just(""),
      st.text(alphabet=blank, min_size=1, max_size=8),
      st.text(alphabet=_CONTROL, min_size=1, max_size=8),
      st.lists(st.sampled_from(_SCRIPTS), min_size=1, max_size=6).map(" ".join),
      st.builds(lambda word, n: (word + " ") * n, st.sampled_from(_SCRIPTS + ("a",)),
                st.integers(200, 2000)),  # Very long: far beyond any max_seq_length.
      st.just("x" * 5000),  # One word longer than the tokenizer's 200 characters.
      st.text(alphabet=alphabet, max_size=40),
  )


def invalid_utf8(text: str, data: st.DataObject) -> bytes:
  """`text` encoded, with a byte sequence that is not UTF-8 at a drawn position."""
  raw = text.encode("utf-8")
  bad = data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xe9", b"\xed\xa0\x80", b"\xf8\x88"]))
  at = data.draw(st.integers(0, len(raw)))
  return raw[:at] + bad + raw[at:]


@st.composite
def tsv_file(draw, header=("sentence", "label"), labels=("a", "b")) -> bytes:
  """A TSV file's bytes: maybe the header, rows of hostile cells and drawn labels, maybe a
  row of the wrong width, a blank line, a CRLF ending or a byte that is not UTF-8."""
  rows = [] if draw(st.integers(0, 9)) == 0 else [list(header)]
  for _ in range(draw(st.integers(0, 5))):
    row = [draw(hostile_text()) for _ in header[:-1]]
    row.append(draw(st.one_of(st.sampled_from(labels), hostile_text())))
    if draw(st.integers(0, 9)) == 0:
      row = row[:draw(st.integers(0, len(row)))] + ([draw(hostile_text())]
                                                     if draw(st.booleans()) else [])
    rows.append(row)
  if draw(st.integers(0, 9)) == 0:
    rows.insert(draw(st.integers(0, len(rows))), [])
  ending = draw(st.sampled_from(["\n", "\r\n"]))
  text = "".join("\t".join(row) + ending for row in rows)
  if draw(st.integers(0, 7)) == 0:
    text = text[:draw(st.integers(0, len(text)))]  # Cut short, even mid-row.
  data = text.encode("utf-8")
  if draw(st.integers(0, 7)) == 0:
    data = invalid_utf8(text, draw(st.data()))
  return data


def _json_value() -> st.SearchStrategy:
  """Any JSON value, for a field given the wrong type."""
  return st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                      | hostile_text(True),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                      max_leaves=5)


@st.composite
def squad_question(draw, context: str, version: str, index: int):
  """A question on `context`: a hostile question text, answers at drawn offsets (inside,
  outside or none), v2.0's is_impossible, now and then a field missing or mistyped."""
  qa = {"id": draw(st.one_of(st.just(f"q{index}"), hostile_text().map(lambda t: f"q{index}" + t))),
        "question": draw(hostile_text(True))}
  answers = []
  for _ in range(draw(st.integers(0, 2))):
    start = draw(st.integers(-2, len(context) + 2))
    length = draw(st.integers(0, 8))
    answers.append({"text": context[max(start, 0):max(start, 0) + length]
                    if draw(st.booleans()) else draw(hostile_text()),
                    "answer_start": start})
  qa["answers"] = answers
  if version == "2.0":
    qa["is_impossible"] = draw(st.booleans())
  if draw(st.integers(0, 11)) == 0:
    field = draw(st.sampled_from(sorted(qa)))
    if draw(st.booleans()):
      del qa[field]
    else:
      qa[field] = draw(_json_value())
  return qa


@st.composite
def squad_file(draw, version: str) -> bytes:
  """A SQuAD JSON file's bytes: paragraphs with hostile contexts and questions; now and
  then a mistyped context, an empty article, invalid JSON or a byte that is not UTF-8."""
  paragraphs = []
  index = 0
  for _ in range(draw(st.integers(0, 3))):
    context = draw(hostile_text(True))
    qas = []
    for _ in range(draw(st.integers(0, 3))):
      qas.append(draw(squad_question(context, version, index)))
      index += 1
    paragraph = {"context": context, "qas": qas}
    if draw(st.integers(0, 15)) == 0:
      paragraph["context"] = draw(_json_value())
    paragraphs.append(paragraph)
  text = json.dumps({"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]},
                    ensure_ascii=draw(st.booleans()))
  if draw(st.integers(0, 15)) == 0:
    text = text[:draw(st.integers(0, len(text)))]
  if draw(st.integers(0, 15)) == 0:
    return invalid_utf8(text, draw(st.data()))
  return text.encode("utf-8")


# A multi-task run's --task_name entries: GLUE names in any case, tsv, and others.
TASK_NAMES = st.one_of(st.sampled_from(["tsv", "TSV", "sst-2", "SST2", "mrpc", "sts-b", "cola"]),
                       hostile_text())
# A tsv task's directory base name (its task name): valid names and hostile ones.
# (no "/" or NUL, which no file name holds; at most 40 characters, as file systems allow).
DIR_NAMES = st.one_of(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True),
                      hostile_text().map(lambda t: t.replace("/", "").replace("\x00", "")[:40])
                      .filter(lambda t: t.strip() not in ("", ".", "..")))


# Text the in-graph tokenizer treats as Python's (tokenization.InGraphTokenizer's
# docstring: characters whose Unicode data changed after Unicode 14 differ; these
# blocks are older), as the raw bytes a SavedModel's text signature takes.
_SERVING_TEXT = st.one_of(hostile_text(True), st.text(
    alphabet=st.characters(max_codepoint=0x2fff, blacklist_categories=("Cs", "Cn", "Co")),
    max_size=30))
SERVING_BYTES = st.one_of(_SERVING_TEXT.map(lambda t: t.encode("utf-8")),
                          st.builds(invalid_utf8, _SERVING_TEXT, st.data()))


# Inputs that parse but could mean something else (test_fuzz_meanings.py).

# Spellings of a number that float() reads as no finite number.
NON_FINITE = st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-Infinity",
                              "1e999", "-1e400", " inf "])


@st.composite
def look_alike(draw, label: str) -> str:
  """`label` as another spelling that reads alike: another case, spaces around or
  inside, invisible characters (zero-width, joiners, a BOM, a soft hyphen), a
  compatibility form (full-width letters); never `label` itself."""
  variants = [
      label.upper(), label.title(), " " + label, label + " ", label + "\u00a0",
      "\u200b" + label, label + "\u200d", "\ufeff" + label, label[:1] + "\u00ad" + label[1:],
      label[:1] + "\u2060" + label[1:],
      "".join(chr(ord(c) + 0xfee0) if "!" <= c <= "~" else c for c in label),
  ]
  return draw(st.sampled_from([v for v in variants if v != label]))


# A question id as SQuAD files give them: a string or a number.
QUESTION_IDS = st.one_of(st.text(alphabet="abcdef0123456789", min_size=1, max_size=6),
                         st.integers(0, 99))
