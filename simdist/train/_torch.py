"""``simdist train --framework torch``: the MLP in torch, DDP on N simulated ranks, verified.

The same data, split and batches as the graph's example (``_loop.batches``),
the same model (``features -> hidden -> ReLU -> classes``, softmax
cross-entropy, SGD), written as a user writes it in torch:
``init_process_group``, ``DistributedDataParallel``, ``loss.backward()``,
``optimizer.step()``. Every rank loads the data and trains on its rows of
each global batch; rank 0 also computes, from the same weights before each
step, one device's gradient on the whole global batch.

Verification, from what the ranks record:

* ``replicas_identical``: every rank's parameters are the same bits after
  every step;
* ``matches_single_device``: at every step DDP's averaged gradient is one
  device's within a tolerance relative to the gradient's largest element
  (``TOLERANCE``: float32 rounding of sums over a batch, with room; it is a
  tolerance, not a bound derived per element as the graph's example
  derives one);
* ``deterministic``: a second run gives the same bits at every step.

``--inject-bug sum-gradients`` registers a comm hook that sums the
gradients without averaging them (a hand-written hook's classic slip);
``unsharded-data`` gives every rank rank 0's rows.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from .._errors import InvalidValue
from .._world import World
from ._data import load
from ._loop import Record, _digest, batches
from ._verify import _deterministic, _replicas

__all__ = ["train_torch", "TOLERANCE"]

#: The largest |DDP's gradient - one device's| / max |one device's| allowed at a step.
TOLERANCE = {"float32": 1e-4, "float64": 1e-12}


@dataclass(frozen=True)
class TorchJob:
    size: int
    epochs: int
    batch: int
    lr: float
    hidden: int
    seed: int
    dtype: str
    bug: str | None


def _mlp(job: TorchJob, features: int, classes: int):
    import torch

    torch.manual_seed(job.seed)
    dtype = getattr(torch, job.dtype)
    return torch.nn.Sequential(torch.nn.Linear(features, job.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(job.hidden, classes)).to(dtype)


def _summed(state, bucket):
    """A comm hook that forgets to divide: the sum of the ranks' gradients."""
    import torch.distributed as dist

    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


def rank_main(comm, job: TorchJob) -> Record:
    """One rank's training: digests, losses, the final weights and (rank 0)
    the per-step check, in ``check``."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)  # a pinned rank: more threads would only share its CPU
    data = load("digits", None, seed=job.seed)
    dist.init_process_group()  # the world this function runs in
    rank, size = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, job.dtype)
    x_train, y_train = torch.from_numpy(data.x_train).to(dtype), torch.from_numpy(data.y_train).long()
    model = _mlp(job, data.features, data.classes)
    ddp = DDP(model)
    if job.bug == "sum-gradients":
        ddp.register_comm_hook(None, _summed)
    reference = _mlp(job, data.features, data.classes) if rank == 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=job.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    local = job.batch // size
    first = 0 if job.bug == "unsharded-data" else rank * local
    record = Record(check={"worst": 0.0, "worst_step": 0, "norm_ratio": 1.0})
    step = 0
    for epoch in range(1, job.epochs + 1):
        started = time.perf_counter()
        for rows in batches(len(data.y_train), job.batch, job.seed, epoch):
            step += 1
            mine = torch.from_numpy(rows[first:first + local])
            if reference is not None:
                reference.load_state_dict(model.state_dict())
            opt.zero_grad()
            loss = loss_fn(ddp(x_train[mine]), y_train[mine])
            loss.backward()
            if reference is not None:
                _compare(record.check, step, model, reference, loss_fn, x_train[torch.from_numpy(rows)],
                         y_train[torch.from_numpy(rows)])
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)
            record.losses.append(float(mean))
            record.digests.append(_digest(p.detach().numpy() for p in model.parameters()))
        record.epochs.append({"epoch": epoch, "loss": record.losses[-1],
                                 "test_accuracy": _accuracy(model, data, dtype) if rank == 0 else None,
                                 "seconds": round(time.perf_counter() - started, 3)})
    record.final = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    dist.destroy_process_group()
    return record


def _compare(check: dict, step: int, model, reference, loss_fn, x, y) -> None:
    """One device's gradient on the global batch, from the same weights, against DDP's."""
    reference.zero_grad()
    loss_fn(reference(x), y).backward()
    worst, ours, theirs = 0.0, 0.0, 0.0
    for p, q in zip(model.parameters(), reference.parameters()):
        scale = float(q.grad.abs().max()) or 1.0
        worst = max(worst, float((p.grad - q.grad).abs().max()) / scale)
        ours, theirs = ours + float(p.grad.double().norm() ** 2), theirs + float(q.grad.double().norm() ** 2)
    if worst > check["worst"]:
        check.update(worst=worst, worst_step=step, norm_ratio=(ours / theirs) ** 0.5 if theirs else float("inf"))


def _accuracy(model, data, dtype) -> float:
    import torch

    with torch.no_grad():
        logits = model(torch.from_numpy(data.x_test).to(dtype))
    return float((logits.argmax(1).numpy() == data.y_test).mean())


def _one_device(job: TorchJob) -> float:
    """The test accuracy of the same training on one device (the global batch each step)."""
    import torch

    data = load("digits", None, seed=job.seed)
    dtype = getattr(torch, job.dtype)
    x, y = torch.from_numpy(data.x_train).to(dtype), torch.from_numpy(data.y_train).long()
    model = _mlp(job, data.features, data.classes)
    opt, loss_fn = torch.optim.SGD(model.parameters(), lr=job.lr), torch.nn.CrossEntropyLoss()
    for epoch in range(1, job.epochs + 1):
        for rows in batches(len(data.y_train), job.batch, job.seed, epoch):
            opt.zero_grad()
            loss_fn(model(x[torch.from_numpy(rows)]), y[torch.from_numpy(rows)]).backward()
            opt.step()
    return _accuracy(model, data, dtype)


def train_torch(config, say=lambda line: None) -> dict:
    """``simdist train --framework torch``: train and verify as ``config`` (a ``TrainConfig``) says."""
    from ..torch._launch import require_torch
    from ..torch._preload import import_quietly

    require_torch()
    import_quietly("torch._dynamo")  # DDP imports it: once here, not on every rank (torch._preload)
    for what, value, only in (("backend", config.backend, "sim"), ("parallel", config.parallel, "data"),
                              ("dataset", config.dataset, "digits")):
        if value != only:
            raise InvalidValue(f"train: --framework torch runs --{what} {only} only, not {value}")
    data = load("digits", None, seed=config.seed)
    config = config.checked(len(data.y_train))
    job = TorchJob(config.size, config.epochs, config.batch_size, config.lr, config.hidden, config.seed,
                   config.dtype, config.inject_bug)
    describe = (f"{data.describe()}; torch MLP {data.features}-{config.hidden}-{data.classes}, "
                f"DistributedDataParallel on {config.size} simulated ranks, global batch {config.batch_size}")
    say(f"simdist train: {describe}")
    started = time.perf_counter()
    with World(config.size, timeout=config.timeout) as world:
        main = world.run(rank_main, job)
        seconds = time.perf_counter() - started
        say("verifying: a rerun, for determinism")
        rerun = world.run(rank_main, job)
    details = {"replicas_identical": _replicas(main), "matches_single_device": _single(main[0].check, config),
               "deterministic": _deterministic(main, rerun)}
    losses = main[0].losses
    return {
        "config": {**dataclasses.asdict(config), "framework": "torch"},
        "description": describe,
        "epochs": main[0].epochs,
        "test_accuracy": main[0].epochs[-1]["test_accuracy"],
        "single_device_test_accuracy": _one_device(job),
        "final_loss": losses[-1],
        "train_seconds": round(seconds, 3),
        "steps": len(losses),
        "diverged": not np.isfinite(losses[-1]),
        "verification": {name: d["ok"] for name, d in details.items()},
        "details": details,
        "tolerance": (f"at every step, max |DDP's gradient - one device's| <= {TOLERANCE[config.dtype]:g} x "
                      "max |one device's|, per parameter (one device: the same weights, the whole global batch)"),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _single(check: dict, config) -> dict:
    tolerance, worst, size = TOLERANCE[config.dtype], check["worst"], config.size
    facts = {"worst_ratio": worst / tolerance, "worst_step": check["worst_step"], "norm_ratio": check["norm_ratio"]}
    if worst <= tolerance:
        text = (f"DDP's gradient was one device's at every step, within {worst:.2g} of its largest element "
                f"(tolerance {tolerance:g})")
    elif abs(check["norm_ratio"] / size - 1) < 0.05:
        text = (f"at step {check['worst_step']} the gradient is {check['norm_ratio']:.2f}x one device's: it is "
                f"summed over the {size} ranks instead of averaged")
    else:
        text = (f"at step {check['worst_step']} DDP's gradient differs from one device's by {worst:.3g} of its "
                "largest element: the ranks do not train on their own rows of each global batch")
    return {"ok": worst <= tolerance, "explanation": text, **facts}
