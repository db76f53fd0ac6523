"""The training loop each rank runs, and what it records for verification.

A :class:`Job` holds everything a rank needs (data, graphs, hyperparameters)
and travels to the ranks once. :func:`train_rank` runs it on a communicator,
or on one device when ``comm`` is ``None``, and returns a :class:`Record`.

Besides training, each rank records a digest of its replicated parameters
after every step (``replicas_identical``) and of its local gradients (to
tell unsharded data apart), and rank 0 runs one device in lockstep, the
evidence for ``matches_single_device`` (see ``_shadow.py``).
"""

from __future__ import annotations

import functools
import hashlib
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .. import graph as g
from ._data import Dataset, load
from ._models import SHARD_AXIS, Model, init_params, shard, unshard
from ._shadow import Shadow

__all__ = ["Job", "Record", "train_rank", "batches"]


@dataclass
class Job:
    """One training run: ``size`` ranks (1: one device, no communication)."""

    data: Dataset | None         # None: each rank loads ``source`` itself (large data)
    source: tuple                # (name, data_dir, seed) for ``load``
    model: Model                 # this rank's model (one device: the whole batch)
    evaluate: tuple              # (x node, logits node) over the whole test set
    evaluate_one: tuple          # the same on one device (for the shadow's accuracy)
    size: int
    parallel: str                # "data" or "tensor"
    epochs: int
    batch: int                   # global batch size
    hidden: int
    seed: int
    dtype: str
    bug: str | None = None
    reference: Model | None = None   # one device's model, for the per-step check
    progress: bool = False

    def dataset(self) -> Dataset:
        return self.data if self.data is not None else _load_cached(*self.source)


@dataclass
class Record:
    """What one rank reports; the check fields are filled on rank 0 only."""

    digests: list = field(default_factory=list)       # replicated parameters, per step
    grad_digests: list = field(default_factory=list)  # local gradients, per step
    losses: list = field(default_factory=list)        # global batch loss, per step
    epochs: list = field(default_factory=list)        # {"epoch", "loss", "test_accuracy", "seconds"}
    final: dict | None = None                          # the whole model's parameters
    check: dict | None = None


@functools.lru_cache(maxsize=1)
def _load_cached(name: str, data_dir: str | None, seed: int) -> Dataset:
    return load(name, data_dir, seed=seed)


def batches(n_train: int, batch: int, seed: int, epoch: int) -> np.ndarray:
    """The epoch's global batches, ``(steps, batch)`` row indices; the rest is dropped."""
    order = np.random.default_rng([seed, epoch]).permutation(n_train)
    steps = n_train // batch
    return order[: steps * batch].reshape(steps, batch)


def _digest(arrays) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.digest()


def _rows(job: Job, rank: int) -> slice:
    """This rank's rows of a global batch (``unsharded-data``: rank 0's, everywhere)."""
    local = job.batch // job.size
    start = 0 if job.bug == "unsharded-data" else rank * local
    return slice(start, start + local)


def train_rank(comm, job: Job) -> Record:
    rank = 0 if comm is None else comm.rank
    model, names = job.model, [p.name for p in job.model.params]
    tensor = job.parallel == "tensor"
    params, initial = _initial_params(comm, job, rank)
    outputs = model.step.outputs
    loss = model.loss if comm is None else g.allreduce(model.loss, "sum" if tensor else "mean")
    step = g.Executor([loss, *outputs[1:]])
    count = len(names)
    evaluate = g.Executor([job.evaluate[1]])
    shadow = None
    if job.reference is not None and rank == 0:
        shadow = Shadow(job.reference, model.step.synced, job.size, initial, model.step.lr, job.dtype)
    record = Record()
    data = job.dataset()
    for epoch in range(1, job.epochs + 1):
        started = time.perf_counter()
        plan = batches(len(data.y_train), job.batch, job.seed, epoch)
        losses = []
        for i, rows in enumerate(plan):
            local = rows[_rows(job, rank)]
            x = data.x_train[rows if tensor else local].astype(job.dtype)
            feeds = {"x": x, "labels": data.y_train[local], **params}
            out = step.run(comm, feeds)
            before = params
            params = dict(zip(names, out[1:1 + count]))
            synced, local_grads = out[1 + count:1 + 2 * count], out[1 + 2 * count:]
            if job.reference is not None and (shadow is not None or tensor):
                _shadow_step(shadow, comm, job, before, synced, rows)
            record.losses.append(float(out[0]))
            losses.append(float(out[0]))
            record.digests.append(_digest(v for n, v in params.items() if not tensor or SHARD_AXIS[n] is None))
            record.grad_digests.append(_digest(local_grads))
            if job.progress and rank == 0:
                _progress(epoch, job.epochs, i + 1, len(plan), np.mean(losses))
        accuracy = _accuracy(evaluate, comm, job, params)
        record.epochs.append({"epoch": epoch, "loss": float(np.mean(losses)), "test_accuracy": accuracy,
                              "seconds": round(time.perf_counter() - started, 3)})
        if job.progress and rank == 0:
            _progress(epoch, job.epochs, len(plan), len(plan), np.mean(losses), accuracy)
    whole = _whole(comm, job, params)
    if rank == 0:
        record.final = whole
        if shadow is not None:
            record.check = shadow.summary(whole)
            one = g.Executor([job.evaluate_one[1]])
            record.check["test_accuracy"] = _accuracy(one, None, job, record.check.pop("weights"))
    return record


def _initial_params(comm, job: Job, rank: int) -> dict:
    """Rank 0's initial parameters on every rank (each rank draws its own first):
    this rank's part, and the whole model."""
    d, c = job.dataset().features, job.dataset().classes
    mine = init_params(d, job.hidden, c, job.seed + rank, job.dtype)
    if comm is not None:
        nodes = [g.parameter(name, v.shape, v.dtype) for name, v in mine.items()]
        mine = dict(zip(mine, g.Executor(g.broadcast_parameters(nodes)).run(comm, mine)))
    return (shard(mine, rank, job.size) if job.parallel == "tensor" else mine), mine


def _whole(comm, job: Job, params: dict) -> dict | None:
    """The whole model on rank 0 (gathering the blocks under tensor parallelism)."""
    if job.parallel != "tensor" or comm is None:
        return params
    stacks = {n: comm.gather(np.ascontiguousarray(v)) for n, v in params.items()}
    if comm.rank != 0:
        return None
    return unshard([{n: stacks[n][r] for n in params} for r in range(comm.size)])


def _accuracy(evaluate: g.Executor, comm, job: Job, params: dict) -> float | None:
    data = job.dataset()
    if comm is not None and job.parallel != "tensor" and comm.rank != 0:
        return None
    logits = evaluate.run(comm if comm is not None and job.parallel == "tensor" else None,
                          {"x": data.x_test.astype(job.dtype), **params})[0]
    return float(np.mean(np.argmax(logits, axis=1) == data.y_test))


def _progress(epoch, epochs, done, steps, loss, accuracy=None) -> None:
    width = 24
    bar = "#" * (width * done // steps) + "." * (width - width * done // steps)
    line = f"epoch {epoch}/{epochs} [{bar}] {done}/{steps} loss {loss:.4f}"
    if accuracy is not None:
        line += f"  test accuracy {accuracy:.4f}"
    if sys.stderr.isatty():
        sys.stderr.write("\r" + line + ("\n" if accuracy is not None else ""))
    elif accuracy is not None:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _shadow_step(shadow, comm, job: Job, before: dict, synced: list, rows) -> None:
    """Feed rank 0's shadow with the whole model's weights and gradients."""
    names = list(before)
    if job.parallel == "tensor":
        whole_before = _whole(comm, job, before)
        whole_synced = _whole(comm, job, dict(zip(names, synced)))
        if shadow is None:
            return
        before, synced = whole_before, [whole_synced[n] for n in names]
    data = job.dataset()
    shadow.step(before, synced, {"x": data.x_train[rows].astype(job.dtype), "labels": data.y_train[rows]})
