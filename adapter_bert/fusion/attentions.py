"""Each example's fusion attention, for inspection: a table and a plot.

A fusion model (fusion/model.py) with `output_attentions` also returns, per
example, each place's attention over the fused tasks averaged over the
example's real tokens. `write` puts them in `<split>_fusion_attentions.tsv`
(one row per example and place: example index in the split, layer, sub-layer,
then one column per fused task; each row sums to 1) and draws the mean over
the examples per layer as `<split>_fusion_attentions.png` (a panel per
sub-layer, a line per fused task).
"""

import io
import posixpath
from typing import Mapping, Sequence, Tuple

from absl import logging
import numpy as np

from adapter_bert.storage import file_io

OUTPUT_KEY = "fusion_attentions"


def table(attentions: np.ndarray, places: Sequence[str], tasks: Sequence[str]) -> str:
  """The TSV of `attentions` [examples, places, tasks]; places as "layer_N/sublayer"."""
  lines = ["\t".join(["example", "layer", "sublayer", *tasks])]
  for example, per_place in enumerate(attentions):
    for place, weights in zip(places, per_place):
      layer, sublayer = place.split("/")
      lines.append("\t".join([str(example), layer[len("layer_"):], sublayer,
                              *(f"{w:.6f}" for w in weights)]))
  return "\n".join(lines) + "\n"


def plot(attentions: np.ndarray, places: Sequence[str], tasks: Sequence[str], title: str):
  """The figure of the mean attention over examples, per layer: PNG bytes."""
  # Imported on use: matplotlib adds ~20 MiB to every process that imports this
  # module. A Figure without pyplot draws with Agg: no display, no global state.
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  means = attentions.mean(axis=0)  # [places, tasks]
  sublayers = list(dict.fromkeys(p.split("/")[1] for p in places))
  fig = Figure(figsize=(5 * len(sublayers), 3.8))
  axes = fig.subplots(1, len(sublayers), squeeze=False, sharey=True)
  for ax, sublayer in zip(axes[0], sublayers):
    rows = [i for i, p in enumerate(places) if p.split("/")[1] == sublayer]
    layers = [int(places[i].split("/")[0][len("layer_"):]) for i in rows]
    for t, task in enumerate(tasks):
      ax.plot(layers, means[rows, t], marker="o", label=task)
    ax.set_xticks(layers)
    ax.set_xlabel("layer")
    ax.set_title(f"after the {sublayer.replace('_', '-')} sub-layer", fontsize=10)
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
  axes[0][0].set_ylabel(f"mean fusion attention ({len(attentions)} examples)")
  axes[0][-1].legend(fontsize=8, title="fused task")
  fig.suptitle(title, fontsize=11)
  fig.tight_layout()
  png = io.BytesIO()  # Drawn into memory, written whole through tf.io.gfile.
  fig.savefig(png, format="png", dpi=120)
  return png.getvalue()


def write(output_dir: str, split: str, outputs: Mapping[str, np.ndarray],
          places: Sequence[str], tasks: Sequence[str], task_name: str) -> Tuple[str, str]:
  """The split's table and plot (module docstring), from `prediction.predict` outputs
  (TPU padding examples left out); returns their paths."""
  real = np.asarray(outputs["is_real_example"]).astype(bool)
  attentions = np.asarray(outputs[OUTPUT_KEY])[real]
  tsv = posixpath.join(output_dir, f"{split}_{OUTPUT_KEY}.tsv")
  png = posixpath.join(output_dir, f"{split}_{OUTPUT_KEY}.png")
  file_io.atomic_write(tsv, table(attentions, places, tasks), what="the fusion attentions")
  file_io.atomic_write(png, plot(attentions, places, tasks,
                                 f"{task_name}: AdapterFusion over {', '.join(tasks)} "
                                 f"({split})"), binary=True,
                       what="the fusion attentions' plot")
  logging.info("Wrote the fusion attentions of %d %s examples to %s and %s",
               len(attentions), split, tsv, png)
  return tsv, png
