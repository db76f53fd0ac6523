"""The training loop each rank runs, and what it records for verification.

A :class:`Job` holds everything a rank needs (data, graphs, hyperparameters)
and travels to the ranks once. :func:`train_rank` runs it on a communicator,
or on one device when ``comm`` is ``None``, and returns a :class:`Record`.

Besides training, each rank records a digest of its replicated parameters
after every step (``replicas_identical``), a digest of its local gradients
(to tell unsharded data apart), and, on rank 0, the teacher-forced check
behind ``matches_single_device``: at every step, one device's gradient on the
whole global batch is computed from the same parameters with a graph that
has no communication, and the N-rank gradient must be within
``2 gamma(K) M`` of it (see ``simdist.graph._bounds``).
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

__all__ = ["Job", "Record", "train_rank", "batches"]


@dataclass
class Job:
    """One training run: ``size`` ranks (1: one device, no communication)."""

    data: Dataset | None         # None: each rank loads ``source`` itself (large data)
    source: tuple                # (name, data_dir, seed) for ``load``
    model: Model                 # this rank's model (one device: the whole batch)
    evaluate: tuple              # (x node, logits node) over the whole test set
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
    params = _initial_params(comm, job, rank)
    outputs = model.step.outputs
    loss = model.loss if comm is None else g.allreduce(model.loss, "sum" if tensor else "mean")
    step = g.Executor([loss, *outputs[1:]])
    count = len(names)
    evaluate = g.Executor([job.evaluate[1]])
    check = _Check(job, comm) if job.reference is not None and rank == 0 else None
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
            if job.reference is not None and (check is not None or tensor):
                _check_step(check, comm, job, before, synced, rows)
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
        record.check = None if check is None else check.summary()
    return record


def _initial_params(comm, job: Job, rank: int) -> dict:
    """Rank 0's initial parameters on every rank (each rank draws its own first)."""
    d, c = job.dataset().features, job.dataset().classes
    mine = init_params(d, job.hidden, c, job.seed + rank, job.dtype)
    if comm is not None:
        nodes = [g.parameter(name, v.shape, v.dtype) for name, v in mine.items()]
        mine = dict(zip(mine, g.Executor(g.broadcast_parameters(nodes)).run(comm, mine)))
    return shard(mine, rank, job.size) if job.parallel == "tensor" else mine


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
    if job.parallel != "tensor" and comm is not None and comm.rank != 0:
        return None
    logits = evaluate.run(comm if job.parallel == "tensor" else None,
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


def _check_step(check, comm, job: Job, before: dict, synced: list, rows) -> None:
    """Feed rank 0's check with the whole model's parameters and gradients."""
    names = list(before)
    if job.parallel == "tensor":
        whole_before = _whole(comm, job, before)
        whole_synced = _whole(comm, job, dict(zip(names, synced)))
        if check is None:
            return
        before, synced = whole_before, [whole_synced[n] for n in names]
    check.step(before, synced, rows)


class _Check:
    """Rank 0's teacher-forced comparison with one device, step by step."""

    def __init__(self, job: Job, comm):
        ref = job.reference
        size = 1 if comm is None else comm.size
        self.job = job
        self.names = [p.name for p in ref.params]
        self.exe = g.Executor([*ref.step.grads, *(g.magnitude(x) for x in ref.step.grads)])
        self.gammas = []
        for r, s in zip(ref.step.grads, job.model.step.synced):
            k = max(g.summands(r), g.summands(s, size))
            self.gammas.append((k, g.gamma(k, job.dtype)))
        self.worst = (0.0, 0, self.names[0])
        self.steps = 0
        self.dots = np.zeros(3)          # <par, par>, <ref, ref>, <par, ref>
        self.drift = {n: 0.0 for n in self.names}   # accumulated lr * tolerance

    def step(self, params: dict, synced: list, rows) -> None:
        data, job = self.job.dataset(), self.job
        out = self.exe.run(None, {"x": data.x_train[rows].astype(job.dtype), "labels": data.y_train[rows],
                                  **params})
        count = len(self.names)
        self.steps += 1
        for name, par, ref, mag, (k, gam) in zip(self.names, synced, out[:count], out[count:], self.gammas):
            par64, ref64 = par.astype(np.float64), ref.astype(np.float64)
            tol = 2 * gam * mag.astype(np.float64)
            diff = np.abs(par64 - ref64)
            same = (par64 == ref64) | (np.isnan(par64) & np.isnan(ref64))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.nan_to_num(np.where(same, 0.0, diff / tol), nan=np.inf, posinf=np.inf)
            worst = float(np.max(ratio, initial=0.0))
            if worst > self.worst[0]:
                self.worst = (worst, self.steps, name)
            self.dots += [np.vdot(par64, par64), np.vdot(ref64, ref64), np.vdot(par64, ref64)]
            self.drift[name] += job.model.step.lr * float(np.max(tol, initial=0.0))

    def summary(self) -> dict:
        pp, rr, pr = self.dots
        return {
            "steps": self.steps,
            "worst_ratio": self.worst[0], "worst_step": self.worst[1], "worst_param": self.worst[2],
            "norm_ratio": float(np.sqrt(pp / rr)) if rr else float("nan"),
            "cosine": float(pr / np.sqrt(pp * rr)) if pp and rr else float("nan"),
            "summands": {n: k for n, (k, _) in zip(self.names, self.gammas)},
            "gamma": {n: gam for n, (_, gam) in zip(self.names, self.gammas)},
            "drift": self.drift,
        }
