"""``simdist scale``'s library: projected data-parallel throughput on 1 ... 1024 devices.

The projection is a model, not a measurement, and everything it rests on is
written down (``ASSUMPTIONS``, also in the report):

* compute: the time of one device's training step (forward, backward and
  SGD update of the example MLP on ``batch`` rows), measured here, on one
  pinned rank of ``World(1)``, with no communication;
* communication: one allreduce per parameter tensor (what
  :func:`simdist.graph.data_parallel` emits: no fusion, no bucketing), each
  costed by the alpha-beta model of the chosen algorithm
  (:mod:`simdist.bench.alpha_beta`);
* step(D) = compute + Σ allreduce(n_i, D): no overlap of communication with
  compute; weak scaling (the per-device batch is fixed, the global batch is
  ``D·batch``); throughput(D) = D·batch / step(D); efficiency(D) =
  throughput(D) / (D·throughput(1)) = compute / step(D).

``alpha`` and ``beta`` default to a least-squares fit of the simulator's own
allreduce times (a few message sizes on ``World(2)`` and ``World(4)``), so
the small-N check compares like with like; given values put in a real
network instead (5 µs and 12.5 GB/s: 100 Gb/s). The check runs the
data-parallel step on ``World(N)`` for N in ``measure_n`` and compares the
measured step time with the model's. With more ranks than CPUs, the ranks
share the CPUs, so the model used for the check scales compute by
``max(1, N / cpus)``; the projection itself assumes one device per rank.
:func:`scale` returns the report; :func:`format_report` and :func:`plot`
turn it into text and a chart. See docs/scaling.md.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import os
import platform
import time

import numpy as np

from .._errors import InvalidValue
from .._world import World
from .alpha_beta import ALGORITHMS, FORMULAS, allreduce_seconds, fit_alpha_beta, project, step_seconds
from .sweep import cpu_model

__all__ = [
    "ASSUMPTIONS", "DEFAULT_DEVICES", "gradient_tensors", "measure_compute", "measure_allreduce", "measure_step",
    "scale", "format_report", "plot",
]

FEATURES, CLASSES = 64, 10  # the digits data set: 8x8 images, 10 classes
FIT_SIZES = (8, 16 << 10, 256 << 10, 1 << 20)
DEFAULT_DEVICES = tuple(2 ** k for k in range(11))  # 1 ... 1024

ASSUMPTIONS = (
    "compute per step is one device's forward + backward + SGD update on its batch, measured on one pinned "
    "rank of World(1) on this machine, and is the same on every device",
    "weak scaling: the per-device batch is fixed; the global batch grows as devices x batch",
    "no overlap of communication with compute: step = compute + allreduce time",
    "one allreduce per parameter tensor (as simdist.graph.data_parallel emits them), no fusion or bucketing",
    "each allreduce costs its algorithm's alpha-beta time; no contention, no congestion, no stragglers, "
    "uniform links (one alpha and one beta for every pair of devices)",
    "the projection assumes one device per rank; the check against measured runs scales compute by "
    "max(1, N / cpus) because simulated ranks beyond the CPU count share CPUs",
    "each rank's BLAS runs one thread (with threadpoolctl installed; see machine.blas_one_thread_per_rank)",
    "alpha and beta, unless given, are fitted to the simulator's shared-memory allreduce on this machine "
    "(they describe this machine, not a network)",
)


def gradient_tensors(hidden: int, dtype: str = "float32") -> dict:
    """``{name: bytes}`` of the MLP's gradients (= its parameters), in allreduce order."""
    size = np.dtype(dtype).itemsize
    shapes = {"W1": (FEATURES, hidden), "b1": (hidden,), "W2": (hidden, CLASSES), "b2": (CLASSES,)}
    return {name: int(np.prod(shape)) * size for name, shape in shapes.items()}


def _model(hidden: int, batch: int, dtype: str, parallel: bool):
    from .. import graph as g
    from ..train import init_params, mlp

    model = mlp(FEATURES, hidden, CLASSES, batch, lr=0.1, dtype=dtype)
    step = g.data_parallel(model.step) if parallel else model.step
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((batch, FEATURES)).astype(dtype),
             "labels": rng.integers(0, CLASSES, batch), **init_params(FEATURES, hidden, CLASSES, 0, dtype)}
    return g.Executor([step.loss, *step.updates]), feeds


def _one_blas_thread():
    """BLAS limited to one thread, when threadpoolctl is installed (else a no-op).

    A simulated rank is pinned to one CPU, but OpenBLAS keeps the helper
    threads it started at import; on that one CPU they contend with the
    rank's own thread and a 64x1024 matmul step gets ~30x slower. One
    thread per rank is also what "one device per rank" means here.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ModuleNotFoundError:
        return contextlib.nullcontext(False)
    return threadpool_limits(1, user_api="blas")


def blas_threads_limited() -> bool:
    return importlib.util.find_spec("threadpoolctl") is not None


def _time_steps(comm, hidden, batch, dtype, warmup, steps, parallel) -> float:
    """Seconds per step on this rank (``comm`` None: one device); same feeds every step."""
    with _one_blas_thread():
        return _time_steps_now(comm, hidden, batch, dtype, warmup, steps, parallel)


def _time_steps_now(comm, hidden, batch, dtype, warmup, steps, parallel) -> float:
    executor, feeds = _model(hidden, batch, dtype, parallel)
    run_on = comm if parallel else None
    for _ in range(warmup):
        executor.run(run_on, feeds)
    if comm is not None:
        comm.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        executor.run(run_on, feeds)
    elapsed = time.perf_counter() - start
    if comm is not None:
        comm.barrier()
    return elapsed / steps


def measure_compute(hidden: int, batch: int, dtype: str = "float32", steps: int = 300, repeats: int = 3,
                    budget: float = 1.0) -> tuple[float, int]:
    """Seconds per single-device step (no communication), best of ``repeats``, on ``World(1)``'s pinned
    rank; and the step count that fits ``budget`` seconds per timed loop (at most ``steps``, at least 5)."""
    with World(1) as world:
        pilot = world.run(_time_steps, hidden, batch, dtype, 1, 3, False)[0]
        steps = max(5, min(steps, int(budget / pilot)))
        warmup = min(20, steps)
        return min(world.run(_time_steps, hidden, batch, dtype, warmup, steps, False)[0]
                   for _ in range(repeats)), steps


def _time_allreduce(comm, nbytes: int, iters: int) -> float:
    x = np.ones(max(1, nbytes // 4), np.float32)
    for _ in range(max(5, iters // 10)):
        comm.allreduce(x)
    comm.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        comm.allreduce(x)
    elapsed = time.perf_counter() - start
    comm.barrier()
    return elapsed / iters


def measure_allreduce(ns, sizes=FIT_SIZES, repeats: int = 3) -> list[dict]:
    """``[{"devices", "bytes", "seconds"}]``: simulator allreduce times (float32; slowest rank's mean, best repeat)."""
    out = []
    for n in ns:
        with World(n) as world:
            for nbytes in sizes:
                iters = 200 if nbytes < (256 << 10) else 30
                best = min(max(world.run(_time_allreduce, nbytes, iters)) for _ in range(repeats))
                out.append({"devices": n, "bytes": nbytes, "seconds": best})
    return out


def _time_both(comm, hidden, batch, dtype, warmup, steps) -> tuple[float, float]:
    """(data-parallel step, the same rank's compute-only step), seconds, all ranks computing at once."""
    compute = _time_steps(comm, hidden, batch, dtype, warmup, steps, False)
    comm.barrier()
    return _time_steps(comm, hidden, batch, dtype, warmup, steps, comm.size > 1), compute


def measure_step(n: int, hidden: int, batch: int, dtype: str = "float32", steps: int = 200,
                 repeats: int = 3) -> tuple[float, float]:
    """Seconds per data-parallel step (allreduces included) on ``World(n)``, and per compute-only
    step with every rank computing at once (what CPU sharing leaves of compute): slowest rank, best repeat."""
    with World(n) as world:
        runs = [world.run(_time_both, hidden, batch, dtype, min(10, steps), steps) for _ in range(repeats)]
    return min(max(t for t, _ in r) for r in runs), min(max(c for _, c in r) for r in runs)


def machine() -> dict:
    """Where the measurements were taken."""
    return {"cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": cpu_model(),
            "blas_one_thread_per_rank": blas_threads_limited(), "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def scale(hidden: int = 64, batch: int = 64, devices=DEFAULT_DEVICES, measure_n=(1, 2, 4), fit_n=(2, 4),
          algorithm: str = "ring", alpha: float | None = None, beta: float | None = None,
          dtype: str = "float32", steps: int = 200, repeats: int = 3, say=lambda line: None) -> dict:
    """Measure, fit, project and check; return the JSON-ready report.

    ``alpha`` (s) and ``beta`` (bytes/s) not given are fitted to the
    simulator's allreduce on ``fit_n`` ranks.
    """
    _check_args(hidden, batch, devices, measure_n, fit_n, algorithm, alpha, beta, steps, repeats)
    tensors = gradient_tensors(hidden, dtype)
    say(f"scale: measuring compute per step (MLP {FEATURES}-{hidden}-{CLASSES}, batch {batch}, {dtype})")
    compute, steps = measure_compute(hidden, batch, dtype, steps=steps, repeats=repeats)
    fit, samples = None, []
    if alpha is None or beta is None:
        say(f"scale: measuring the simulator's allreduce on {','.join(map(str, fit_n))} ranks to fit alpha, beta")
        samples = measure_allreduce(fit_n, repeats=repeats)
        fit = fit_alpha_beta([(s["devices"], s["bytes"], s["seconds"]) for s in samples], algorithm)
        for s in samples:
            s["model_seconds"] = allreduce_seconds(s["bytes"], s["devices"], fit["alpha_s"], fit["beta_Bps"],
                                                   algorithm)
        alpha = fit["alpha_s"] if alpha is None else alpha
        beta = fit["beta_Bps"] if beta is None else beta
    cpus = len(os.sched_getaffinity(0))
    checks = []
    for n in measure_n:
        say(f"scale: measuring the data-parallel step on World({n})")
        measured, local = measure_step(n, hidden, batch, dtype, steps, repeats)
        factor = max(1.0, n / cpus)
        model, comm = step_seconds(compute * factor, tensors.values(), n, alpha, beta, algorithm)
        checks.append({"devices": n, "measured_step_s": measured, "model_step_s": model,
                       "model_compute_s": compute * factor, "model_allreduce_s": comm,
                       "oversubscription": factor, "ratio": measured / model,
                       "measured_compute_s": local, "model_step_measured_compute_s": local + comm,
                       "ratio_measured_compute": measured / (local + comm),
                       "measured_throughput": n * batch / measured,
                       "note": (f"{n} ranks on {cpus} CPUs: compute modelled as {factor:g} x one device's; "
                                "ranks waiting in an allreduce also take CPU time from ranks still computing, "
                                "which the model leaves out (a known deviation)" if factor > 1 else "")})
    return {
        "assumptions": list(ASSUMPTIONS),
        "parameters": {
            "model": f"digits-mlp {FEATURES}-{hidden}-{CLASSES}", "hidden": hidden, "batch_per_device": batch,
            "dtype": dtype, "algorithm": algorithm, "alpha_s": alpha, "beta_Bps": beta,
            "alpha_beta_source": "fit to the simulator" if fit and fit["alpha_s"] == alpha and fit["beta_Bps"] == beta
            else ("given" if fit is None else "given in part, fitted in part"),
            "compute_s": compute, "gradient_bytes": sum(tensors.values()), "tensor_bytes": tensors,
            "formula": FORMULAS[algorithm], "fit": fit, "fit_samples": samples, "steps": steps, "repeats": repeats,
        },
        "projection": project(compute, tensors.values(), batch, devices, alpha, beta, algorithm),
        "checks": checks,
        "machine": machine(),
    }


def _check_args(hidden, batch, devices, measure_n, fit_n, algorithm, alpha, beta, steps, repeats) -> None:
    if algorithm not in ALGORITHMS:
        raise InvalidValue(f"scale: algorithm={algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    for name, value in (("hidden", hidden), ("batch", batch), ("steps", steps), ("repeats", repeats)):
        if value < 1:
            raise InvalidValue(f"scale: {name}={value} must be >= 1")
    if not devices or min(devices) < 1:
        raise InvalidValue(f"scale: devices={list(devices)} must be counts >= 1")
    if measure_n and min(measure_n) < 1:
        raise InvalidValue(f"scale: measure_n={list(measure_n)} must be counts >= 1")
    if (alpha is None or beta is None) and (not fit_n or min(fit_n) < 2):
        raise InvalidValue(f"scale: fit_n={list(fit_n)} needs counts >= 2 to fit alpha and beta "
                           f"(or give both --alpha-us and --beta-GBps)")
    if alpha is not None and alpha < 0:
        raise InvalidValue(f"scale: alpha={alpha} must be >= 0 seconds")
    if beta is not None and not beta > 0:
        raise InvalidValue(f"scale: beta={beta} must be > 0 bytes/s")


# -- output: text and chart ---------------------------------------------------------------------
def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def format_report(report: dict) -> str:
    p = report["parameters"]
    beta = p["beta_Bps"]
    lines = [
        f"model: {p['model']}, batch {p['batch_per_device']} per device, {p['dtype']}; gradients "
        f"{p['gradient_bytes']:,} bytes in {len(p['tensor_bytes'])} tensors",
        f"compute per step (one device, measured): {_us(p['compute_s'])} us",
        f"allreduce: {p['algorithm']}, {p['formula']}",
        f"  alpha = {p['alpha_s'] * 1e6:.3g} us, beta = {beta / 1e9:.3g} GB/s ({p['alpha_beta_source']})",
    ]
    if p["fit"]:
        lines.append(f"  fit to {p['fit']['samples']} simulator allreduce times (largest relative error "
                     f"{p['fit']['max_rel_error']:.0%}):")
        cpus = report["machine"]["cpus_usable"]
        lines += [f"    N={s['devices']} {s['bytes']:>9,} B: measured {_us(s['seconds'])} us, model "
                  f"{_us(s['model_seconds'])} us" + (f"  ({s['devices']} ranks on {cpus} CPUs)"
                                                     if s["devices"] > cpus else "")
                  for s in p["fit_samples"]]
    lines.append("")
    header = ("devices", "step us", "allreduce us", "samples/s", "linear samples/s", "efficiency")
    body = [(str(r["devices"]), _us(r["step_s"]), _us(r["allreduce_s"]), f"{r['throughput']:,.0f}",
             f"{r['linear_throughput']:,.0f}", f"{r['efficiency']:.1%}") for r in report["projection"]]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [header, *body]]
    if report["checks"]:
        lines += ["", "check against measured runs on the simulator (step time, us):"]
        header = ("N", "measured", "model", "measured/model", "compute here", "ratio, compute here",
                  "measured samples/s")
        body = [(str(c["devices"]), _us(c["measured_step_s"]), _us(c["model_step_s"]), f"{c['ratio']:.2f}",
                 _us(c["measured_compute_s"]), f"{c['ratio_measured_compute']:.2f}",
                 f"{c['measured_throughput']:,.0f}") for c in report["checks"]]
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [header, *body]]
        lines += ["  model: compute x max(1, N/cpus) + allreduce model; compute here: every rank's compute-only "
                  "step timed in the same World(N) (slowest rank), so 'ratio, compute here' isolates the "
                  "allreduce model from CPU sharing"]
        lines += [f"  N={c['devices']}: {c['note']}" for c in report["checks"] if c["note"]]
    lines += ["", "assumptions:"] + [f"  - {a}" for a in report["assumptions"]]
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    """Throughput vs devices, log-log: the projection, linear scaling, the measured points."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise ModuleNotFoundError("--plot needs matplotlib: pip install 'simdist[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p, rows = report["parameters"], report["projection"]
    d = [r["devices"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.loglog(d, [r["linear_throughput"] for r in rows], "--", color="grey", label="linear scaling")
    ax.loglog(d, [r["throughput"] for r in rows], "o-", label=f"projected ({p['algorithm']} allreduce)")
    if report["checks"]:
        ax.loglog([c["devices"] for c in report["checks"]], [c["measured_throughput"] for c in report["checks"]],
                  "rx", markersize=9, mew=2, label="measured on the simulator")
    ax.set_xlabel("devices")
    ax.set_ylabel("samples / s")
    ax.set_title(f"{p['model']}, batch {p['batch_per_device']}/device; alpha {p['alpha_s'] * 1e6:.3g} us, "
                 f"beta {p['beta_Bps'] / 1e9:.3g} GB/s", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
