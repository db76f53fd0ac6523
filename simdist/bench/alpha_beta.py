"""The alpha-beta model of an allreduce, and its fit to measured times.

An allreduce of ``n`` bytes on ``D`` devices costs ``a·alpha + b·n/beta``
(``alpha``: seconds per message, ``beta``: bytes per second), with ``(a, b)``
set by the algorithm:

==================== ==================================================
ring                 2(D-1)·alpha + 2(D-1)/D · n/beta
recursive_doubling   ceil(log2 D) · (alpha + n/beta)
tree                 2·ceil(log2 D) · (alpha + n/beta)   (reduce, then broadcast)
==================== ==================================================

A data-parallel step is compute, then one allreduce per gradient tensor, no
overlap (:func:`step_seconds`); :func:`project` turns that into throughput and
efficiency per device count. Pure functions; the measurements they are fed
with are :mod:`simdist.bench.scaling`'s.
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import InvalidValue

__all__ = ["ALGORITHMS", "FORMULAS", "coefficients", "allreduce_seconds", "step_seconds", "project",
           "fit_alpha_beta"]

ALGORITHMS = ("ring", "recursive_doubling", "tree")

FORMULAS = {
    "ring": "2(D-1)*alpha + 2(D-1)/D * n/beta, per tensor of n bytes",
    "recursive_doubling": "ceil(log2 D) * (alpha + n/beta), per tensor of n bytes",
    "tree": "2*ceil(log2 D) * (alpha + n/beta) (binomial reduce, then broadcast), per tensor of n bytes",
}


def coefficients(algorithm: str, devices: int) -> tuple[float, float]:
    """``(a, b)`` with allreduce time = ``a·alpha + b·bytes/beta`` for ``algorithm`` on ``devices``."""
    if algorithm not in ALGORITHMS:
        raise InvalidValue(f"scale: algorithm={algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    if devices < 1:
        raise InvalidValue(f"scale: devices={devices} must be >= 1")
    if devices == 1:
        return 0.0, 0.0
    if algorithm == "ring":
        return 2.0 * (devices - 1), 2.0 * (devices - 1) / devices
    rounds = math.ceil(math.log2(devices))
    return (float(rounds), float(rounds)) if algorithm == "recursive_doubling" else (2.0 * rounds, 2.0 * rounds)


def allreduce_seconds(nbytes: float, devices: int, alpha: float, beta: float, algorithm: str = "ring") -> float:
    """Alpha-beta time of one allreduce of ``nbytes`` on ``devices`` (``alpha`` s, ``beta`` bytes/s)."""
    a, b = coefficients(algorithm, devices)
    return a * alpha + b * nbytes / beta


def step_seconds(compute: float, tensor_bytes, devices: int, alpha: float, beta: float,
                 algorithm: str = "ring") -> tuple[float, float]:
    """``(step, communication)`` seconds: compute, then one allreduce per tensor, no overlap."""
    comm = sum(allreduce_seconds(n, devices, alpha, beta, algorithm) for n in tensor_bytes)
    return compute + comm, comm


def project(compute: float, tensor_bytes, batch: int, devices, alpha: float, beta: float,
            algorithm: str = "ring") -> list[dict]:
    """One row per device count: step time, throughput, efficiency vs linear scaling."""
    rows = []
    for d in devices:
        step, comm = step_seconds(compute, tensor_bytes, d, alpha, beta, algorithm)
        rows.append({"devices": d, "compute_s": compute, "allreduce_s": comm, "step_s": step,
                     "throughput": d * batch / step, "linear_throughput": d * batch / compute,
                     "efficiency": compute / step})
    return rows


def fit_alpha_beta(samples, algorithm: str = "ring") -> dict:
    """Least-squares ``alpha`` (s) and ``beta`` (bytes/s) from ``(devices, bytes, seconds)`` samples.

    Each sample says ``seconds = a·alpha + b·bytes·(1/beta)`` with ``(a, b)``
    from :func:`coefficients`; the residuals are relative (each row divided
    by its time), so 8-byte and 1 MiB messages count alike. Unknowns are
    kept non-negative (a negative one is set to 0 and the other refitted).
    Also returns the largest relative error of the fit.
    """
    rows, times = [], []
    for devices, nbytes, seconds in samples:
        a, b = coefficients(algorithm, devices)
        if a == 0 and b == 0:
            continue
        rows.append((a / seconds, b * nbytes / seconds))
        times.append(seconds)
    if len(rows) < 2:
        raise InvalidValue("scale: fitting alpha and beta needs at least 2 samples on 2 or more devices")
    A, y = np.array(rows), np.ones(len(rows))
    alpha, inv_beta = np.linalg.lstsq(A, y, rcond=None)[0]
    if alpha < 0:
        alpha, inv_beta = 0.0, float(A[:, 1] @ y / (A[:, 1] @ A[:, 1]))
    if inv_beta <= 0:
        alpha, inv_beta = float(A[:, 0] @ y / (A[:, 0] @ A[:, 0])), 0.0
    predicted = A @ np.array([alpha, inv_beta])
    return {"alpha_s": float(alpha), "beta_Bps": (1.0 / inv_beta) if inv_beta > 0 else math.inf,
            "max_rel_error": float(np.max(np.abs(predicted - 1.0))), "samples": len(rows)}
