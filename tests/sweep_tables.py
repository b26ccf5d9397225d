"""The tables a sweep writes, as the tests of experiments/ read them: the rows of a
results.csv, and a value as it appears in a cell of one (tables.csv_text)."""

import csv

from experiments.points import tables


def read_csv(path):
  """The rows of the CSV file at `path`, as dicts of strings."""
  with open(path) as f:
    return list(csv.DictReader(f))


def csv_cell(value):
  """`value` as tables.csv_text writes it into a cell."""
  return tables.csv_text([{"v": value}], ["v"]).splitlines()[1]
