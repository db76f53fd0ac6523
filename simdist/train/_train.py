"""``train``: the data-parallel (or tensor-parallel) MLP example, verified.

It trains the MLP on N ranks of a world, with one device in lockstep on
rank 0 (``_shadow.py``), then verifies the run against one device, against
itself (a rerun) and, on MPI, against the simulator; see ``_verify.py``. Everything is returned as one JSON-ready report.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from .. import graph as g
from .._errors import InvalidValue
from .._world import World
from ._data import DATASETS, load
from ._loop import Job, train_rank
from ._models import mlp, mlp_tensor_parallel
from ._verify import verify

__all__ = ["TrainConfig", "train", "BUGS", "PARALLEL"]

BUGS = ("sum-gradients", "unsharded-data")
PARALLEL = ("data", "tensor")


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters and set-up of one run; ``batch_size`` is the global batch."""

    size: int = 4
    backend: str = "sim"
    epochs: int = 10
    batch_size: int | None = None      # default: the multiple of size nearest to 64
    lr: float = 0.5
    hidden: int = 64
    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    inject_bug: str | None = None
    parallel: str = "data"
    dtype: str = "float32"
    timeout: float = 120.0

    def checked(self, n_train: int) -> "TrainConfig":
        """This config with the default batch size filled in; raises on bad values."""
        size = self.size
        for name in ("size", "epochs", "hidden"):
            if getattr(self, name) < 1:
                raise InvalidValue(f"train: {name}={getattr(self, name)} must be >= 1")
        if self.parallel not in PARALLEL:
            raise InvalidValue(f"train: parallel={self.parallel!r} is not one of {', '.join(PARALLEL)}")
        if self.inject_bug not in (None, *BUGS):
            raise InvalidValue(f"train: inject_bug={self.inject_bug!r} is not one of {', '.join(BUGS)}")
        if self.inject_bug and self.parallel != "data":
            raise InvalidValue("train: --inject-bug applies to data parallelism (--parallel data)")
        if self.inject_bug and size < 2:
            raise InvalidValue(f"train: --inject-bug {self.inject_bug} needs at least 2 ranks to show; use -n 2 or more")
        if not self.timeout > 0:
            raise InvalidValue(f"train: timeout={self.timeout} must be > 0 seconds")
        if self.dtype not in ("float32", "float64"):
            raise InvalidValue(f"train: dtype={self.dtype!r} must be float32 or float64")
        if not self.lr > 0:
            raise InvalidValue(f"train: lr={self.lr} must be > 0")
        batch = self.batch_size if self.batch_size is not None else size * max(1, round(64 / size))
        if batch < 1:
            raise InvalidValue(f"train: batch_size={batch} must be >= 1 (a multiple of the {size} ranks)")
        if batch % size:
            lower, upper = batch - batch % size, batch - batch % size + size
            choices = f"{lower} or {upper}" if lower else f"{upper} or {upper + size}"
            raise InvalidValue(f"train: batch size {batch} does not split evenly over {size} ranks; "
                               f"use a multiple of {size}, e.g. {choices}")
        if batch > n_train:
            raise InvalidValue(f"train: batch size {batch} exceeds the {n_train} training samples")
        if self.parallel == "tensor" and self.hidden % size:
            raise InvalidValue(f"train: tensor parallelism splits the {self.hidden} hidden units over "
                               f"{size} ranks; use --hidden {self.hidden - self.hidden % size or size}")
        return dataclasses.replace(self, batch_size=batch)


def train(config: TrainConfig, progress: bool = False, say=lambda line: None) -> dict:
    """Train, verify, and return the report (see docs/training.md for its fields).

    ``progress`` shows a bar per epoch on standard error (from rank 0);
    ``say`` receives a line per phase.
    """
    if config.dataset not in DATASETS:
        raise InvalidValue(f"train: dataset={config.dataset!r} is not one of {', '.join(DATASETS)}")
    data = load(config.dataset, config.data_dir, seed=config.seed)
    cfg = config.checked(len(data.y_train))
    job = _job(cfg, data, cfg.size, progress)
    quiet = dataclasses.replace(job, progress=False)
    describe = (f"{data.describe()}; {job.model.describe}; {cfg.parallel} parallel on {cfg.size} "
                f"{'simulated' if cfg.backend == 'sim' else 'MPI'} ranks, global batch {cfg.batch_size}")
    say(f"simdist train: {describe}")
    started = time.perf_counter()
    with World(cfg.size, cfg.backend, timeout=cfg.timeout) as world:
        main = world.run(train_rank, job)
        seconds = time.perf_counter() - started
        say("verifying: a rerun, for determinism")
        rerun = world.run(train_rank, quiet)
    sim = None
    if cfg.backend != "sim":
        say("verifying: the simulator's run")
        with World(cfg.size, "sim", timeout=cfg.timeout) as world:
            sim = world.run(train_rank, quiet)
    report = {
        "config": dataclasses.asdict(cfg),
        "description": describe,
        "epochs": main[0].epochs,
        "test_accuracy": main[0].epochs[-1]["test_accuracy"],
        "single_device_test_accuracy": main[0].check["test_accuracy"],
        "final_loss": main[0].losses[-1],
        "train_seconds": round(seconds, 3),
        "steps": len(main[0].losses),
        "diverged": not np.isfinite(main[0].losses[-1]),
    }
    report.update(verify(cfg.size, main, rerun, sim))
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def _job(cfg: TrainConfig, data, size: int, progress: bool) -> Job:
    d, h, c, b = data.features, cfg.hidden, data.classes, cfg.batch_size
    tensor = cfg.parallel == "tensor" and size > 1
    reference = mlp(d, h, c, b, cfg.lr, cfg.dtype)
    if size == 1:
        model = reference
    elif tensor:
        model = mlp_tensor_parallel(d, h, c, b, cfg.lr, size, cfg.dtype)
    else:
        model = mlp(d, h, c, b // size, cfg.lr, cfg.dtype)
        model = dataclasses.replace(model, step=g.data_parallel(
            model.step, "sum" if cfg.inject_bug == "sum-gradients" else "mean"))
    return Job(
        data=data if cfg.dataset == "digits" else None,
        source=(cfg.dataset, cfg.data_dir, cfg.seed),
        model=model, evaluate=_evaluate(d, h, c, len(data.y_test), size if tensor else 1, cfg.dtype),
        evaluate_one=_evaluate(d, h, c, len(data.y_test), 1, cfg.dtype),
        size=size, parallel="tensor" if tensor else "data", epochs=cfg.epochs, batch=b, hidden=h,
        seed=cfg.seed, dtype=cfg.dtype, bug=cfg.inject_bug if size > 1 else None,
        reference=reference, progress=progress,
    )


def _evaluate(d: int, h: int, c: int, rows: int, size: int, dtype: str) -> tuple:
    """``(x, logits)`` over the test set; split like training under tensor parallelism."""
    x = g.parameter("x", (rows, d), dtype)
    W1, b1 = g.parameter("W1", (d, h // size), dtype), g.parameter("b1", (h // size,), dtype)
    W2, b2 = g.parameter("W2", (h // size, c), dtype), g.parameter("b2", (c,), dtype)
    partial = g.relu(x @ W1 + b1) @ W2
    return x, (g.allreduce(partial) if size > 1 else partial) + b2
