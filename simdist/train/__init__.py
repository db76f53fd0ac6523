"""The data-parallel MLP example: data, models, training loop and verification.

``train(TrainConfig(...))`` trains the MLP of ``_models.py`` on N ranks and
returns a JSON-ready report with its verification; ``simdist train`` is its
command line. See docs/training.md.
"""

from ._data import Dataset, load, read_idx, write_idx
from ._models import init_params, mlp, mlp_tensor_parallel, shard, unshard
from ._train import BUGS, PARALLEL, TrainConfig, train

__all__ = [
    "TrainConfig", "train", "BUGS", "PARALLEL",
    "Dataset", "load", "read_idx", "write_idx",
    "mlp", "mlp_tensor_parallel", "init_params", "shard", "unshard",
]
