"""The original's Cloud TPU flags, and how a TPU VM's TensorFlow reaches its chips.

Without TensorFlow: cli/launch.py parses them before TensorFlow loads.
"""

from absl import flags


def define_tpu_flags(flag_values=flags.FLAGS):
  """The original's Cloud TPU flags, and --tpu_runtime."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.", **fv)
  flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use for training. This should be "
                      "either the name used when creating the Cloud TPU, or a "
                      "grpc://ip.address.of.tpu:8470 url, or local: this TPU VM's own TPU. "
                      "Not given: local on a TPU VM (Colab's too), else TPU_NAME or "
                      "COLAB_TPU_ADDR (a TPU Node, which reads and writes gs:// paths only).",
                      **fv)
  flags.DEFINE_string("tpu_zone", None, "[Optional] GCE zone where the Cloud TPU is located "
                      "in.", **fv)
  flags.DEFINE_string("gcp_project", None, "[Optional] Project name for the Cloud "
                      "TPU-enabled project.", **fv)
  flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.", **fv)
  flags.DEFINE_integer("num_tpu_cores", None, "Only used if `use_tpu` is True. Total number "
                       "of TPU cores to use. The run uses the cores the TPU system reports "
                       "and logs their count; given, a different count is a warning. Unset "
                       "(the default): no check (a v5e-1 has 1 core, a v2-8 or v3-8 8).",
                       **fv)
  flags.DEFINE_enum("tpu_runtime", "pjrt", ["pjrt", "legacy"],
                    "How TensorFlow reaches a TPU VM's chips (--use_tpu with "
                    "--tpu_name=local, or a TPU VM found): pjrt, the PJRT plugin of the "
                    "libtpu package, set up before TensorFlow loads as the public "
                    "tensorflow-tpu 2.19 recipes do; legacy, TensorFlow's own TPU "
                    "runtime (no variables set). A TPU Node ignores it.", **fv)
