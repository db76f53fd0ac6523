"""One device in lockstep with the N-rank run: the evidence for ``matches_single_device``.

Rank 0 keeps a *shadow*: one device's model (the same graph without
communication) trained on the same global batches from the same initial
weights. At every step it computes, on the whole global batch,

* one device's gradient **from the N-rank run's weights** (teacher forcing):
  the N-rank gradient must be within ``2 gamma(K) M`` of it, element by
  element (``simdist.graph._bounds``), where only the split of the sums
  differs;
* one device's own step, from its own weights: the shadow's trajectory,
  which is exactly what a one-device run gives.

The two trajectories drift apart by rounding. The bound on the drift is
carried along the run element by element, ``T <- T + lr tol + r`` at each
step (``tol`` the step's gradient bound, ``r`` the rounding of the two
updates), and the final weights must be within ``T`` of the shadow's. This
assumes a step does not amplify a difference of weights; noisy training can
(tiny batches, a large ``lr``, many steps), and then a correct run fails the
final check while every step passes, which the report says in those words.
"""

from __future__ import annotations

import numpy as np

from .. import graph as g

__all__ = ["Shadow"]


def _ratio(diff: np.ndarray, tol: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The largest ``|a - b| / tol``; equal values (NaN with NaN) count 0, NaN against a number inf."""
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(same, 0.0, diff / tol)
    return float(np.max(np.nan_to_num(ratio, nan=np.inf, posinf=np.inf), initial=0.0))


class Shadow:
    """Rank 0's one-device run beside the N-rank one (see the module docstring)."""

    def __init__(self, reference, synced, size: int, initial: dict, lr: float, dtype: str):
        self.names = [p.name for p in reference.params]
        count = len(self.names)
        grads = reference.step.grads
        self.exe = g.Executor([*reference.step.updates, *grads, *(g.magnitude(x) for x in grads)])
        self.count = count
        self.summands = {}
        self.gammas = []
        for name, ref, par in zip(self.names, grads, synced):
            k = max(g.summands(ref), g.summands(par, size))
            self.summands[name] = k
            self.gammas.append(g.gamma(k, dtype))
        self.u = float(np.finfo(dtype).eps) / 2
        self.lr = lr
        self.weights = {n: np.array(v) for n, v in initial.items()}
        self.worst = (0.0, 0, self.names[0])
        self.steps = 0
        self.dots = np.zeros(3)           # <par, par>, <ref, ref>, <par, ref>
        self.drift = {n: np.zeros(np.shape(v)) for n, v in initial.items()}   # T, per element

    def _run(self, weights: dict, feeds: dict) -> tuple[list, list, list]:
        out = self.exe.run(None, {**feeds, **weights})
        c = self.count
        return out[:c], out[c:2 * c], out[2 * c:]

    def step(self, weights: dict, synced: list, feeds: dict) -> None:
        """One step: ``weights`` the N-rank run's before it, ``synced`` its gradients."""
        self.steps += 1
        _, forced, magnitudes = self._run(weights, feeds)
        updates, _, _ = self._run(self.weights, feeds)
        for name, par, ref, mag, gam in zip(self.names, synced, forced, magnitudes, self.gammas):
            par64, ref64 = par.astype(np.float64), ref.astype(np.float64)
            tol = 2 * gam * mag.astype(np.float64)
            worst = _ratio(np.abs(par64 - ref64), tol, par64, ref64)
            if worst > self.worst[0]:
                self.worst = (worst, self.steps, name)
            self.dots += [np.vdot(par64, par64), np.vdot(ref64, ref64), np.vdot(par64, ref64)]
            rounding = 2 * self.u * (np.abs(weights[name].astype(np.float64)) + self.lr * np.abs(ref64))
            self.drift[name] += self.lr * tol + rounding
        self.weights = dict(zip(self.names, updates))

    def summary(self, final: dict) -> dict:
        """The figures ``_verify`` judges, given the N-rank run's final weights."""
        pp, rr, pr = self.dots
        a = [np.asarray(final[n], np.float64) for n in self.names]
        b = [np.asarray(self.weights[n], np.float64) for n in self.names]
        final_ratio = max((_ratio(np.abs(x - y), self.drift[n], x, y) for n, x, y in zip(self.names, a, b)),
                          default=0.0)
        return {
            "steps": self.steps,
            "worst_ratio": self.worst[0], "worst_step": self.worst[1], "worst_param": self.worst[2],
            "norm_ratio": float(np.sqrt(pp / rr)) if rr else float("nan"),
            "cosine": float(pr / np.sqrt(pp * rr)) if pp and rr else float("nan"),
            "summands": self.summands,
            "gamma": max(self.gammas),
            "final_bound": max(float(np.max(t, initial=0.0)) for t in self.drift.values()),
            "final_difference": max((float(np.max(np.abs(x - y), initial=0.0)) for x, y in zip(a, b)), default=0.0),
            "final_ratio": final_ratio,
            "weights": self.weights,
        }
