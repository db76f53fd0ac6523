"""Verification of a training run, from what its ranks recorded.

Each check gives a boolean and an explanation a user can act on:

* ``replicas_identical``: every rank's (replicated) parameters are the same
  bits after every step;
* ``matches_single_device``: at every step the N-rank gradient is within the
  summation bound of one device's gradient on the same global batch from the
  same weights, and the final weights are within the bound carried along the
  run of one device's run in lockstep (``_shadow.py``);
* ``deterministic``: a second run gives the same bits;
* ``matches_simulator`` (MPI runs): the final weights are within the sum of
  the two runs' carried bounds of the simulator's (both are that close to
  the same one-device run).

When ``matches_single_device`` fails, the records say why in the terms of
the two classic data-parallel bugs: every rank computing the same local
gradient (the data was not sharded), or a gradient ``N`` times too large
(summed instead of averaged).
"""

import numpy as np

__all__ = ["verify"]


def verify(size: int, main: list, rerun: list, sim: list | None = None) -> dict:
    """``{"verification": {name: bool}, "details": {name: {...}}, "tolerance": str}``."""
    details = {
        "replicas_identical": _replicas(main),
        "matches_single_device": _single(size, main),
        "deterministic": _deterministic(main, rerun),
    }
    if sim is not None:
        details["matches_simulator"] = _simulator(main[0], sim[0])
    return {
        "verification": {name: d["ok"] for name, d in details.items()},
        "details": details,
        "tolerance": _tolerance(main[0].check),
    }


def _replicas(main: list) -> dict:
    steps = len(main[0].digests)
    for i in range(steps):
        digests = [r.digests[i] for r in main]
        if len(set(digests)) > 1:
            odd = [r for r, d in enumerate(digests) if d != digests[0]]
            return {"ok": False, "first_step": i + 1,
                    "explanation": f"after step {i + 1}, ranks {odd} hold parameters that differ from rank 0's: "
                                   "the replicas have diverged (a gradient not synchronised, or a "
                                   "reduction whose bits differ between ranks)"}
    return {"ok": True, "steps": steps,
            "explanation": f"every rank's parameters were equal to the bit after each of {steps} steps"}


def _deterministic(main: list, rerun: list) -> dict:
    for rank, (a, b) in enumerate(zip(main, rerun)):
        for i, (x, y) in enumerate(zip(a.digests + a.grad_digests, b.digests + b.grad_digests)):
            if x != y:
                step = i % len(a.digests) + 1
                return {"ok": False, "explanation": f"a rerun differed on rank {rank} at step {step}"}
    if not _same_bits(main[0].final, rerun[0].final):
        return {"ok": False, "explanation": "a rerun ended with different final weights"}
    return {"ok": True, "explanation": "a rerun gave the same bits at every step, on every rank"}


def _same_bits(a: dict, b: dict) -> bool:
    return all(a[n].tobytes() == b[n].tobytes() for n in a)


def _single(size: int, main: list) -> dict:
    check = main[0].check
    same_local = size > 1 and all(len({r.grad_digests[i] for r in main}) == 1
                                  for i in range(len(main[0].grad_digests)))
    facts = {k: check[k] for k in ("worst_ratio", "worst_step", "worst_param", "norm_ratio", "cosine",
                                   "final_difference", "final_bound", "final_ratio")}
    steps_ok, final_ok = check["worst_ratio"] <= 1.0, check["final_ratio"] <= 1.0
    final = (f"the final weights were {check['final_difference']:.3g} from one device's at most, "
             f"{check['final_ratio']:.2g}x the bound carried along the run")
    if steps_ok and final_ok and check["worst_ratio"] == 0 and check["final_ratio"] == 0:
        text = f"the gradients of all {check['steps']} steps and the final weights were identical to one device's"
    elif steps_ok and final_ok:
        text = (f"the gradients of all {check['steps']} steps were within the bound of one device's "
                f"(at worst {check['worst_ratio']:.2g}x of it, step {check['worst_step']}, "
                f"{check['worst_param']}); {final}")
    elif same_local:
        text = ("every rank computed the same local gradient at every step: the ranks train on the same "
                f"data instead of their own shards of each batch, so each step learns from 1/{size} of "
                f"the global batch and {size - 1} of {size} ranks repeat rank 0's work "
                f"(the gradients differ from one device's by up to {check['worst_ratio']:.3g}x the bound)")
    elif abs(check["norm_ratio"] / size - 1) < 0.05 and check["cosine"] > 0.99:
        text = (f"the gradients are {check['norm_ratio']:.2f}x one device's, pointing the same way "
                f"(cosine {check['cosine']:.3f}): they are summed over the {size} ranks instead of "
                f"averaged, so the effective learning rate is {size}x the intended one")
    elif not steps_ok:
        text = (f"at step {check['worst_step']} the gradient of {check['worst_param']} differs from "
                f"one device's by {check['worst_ratio']:.3g}x the bound")
    else:
        text = (f"every step's gradient was within the bound, but {final}: either the updates differ from "
                "one device's, or training amplified the rounding differences (a large --lr, tiny batches: try a smaller --lr or --dtype float64)")
    return {"ok": steps_ok and final_ok, "explanation": text, **facts}


def _simulator(mine, sim) -> dict:
    bound = mine.check["final_bound"] + sim.check["final_bound"]
    worst = 0.0
    for name, value in mine.final.items():
        a, b = value.astype(np.float64), sim.final[name].astype(np.float64)
        same = (a == b) | (np.isnan(a) & np.isnan(b))   # a NaN on one side only is a mismatch
        diff = float(np.max(np.nan_to_num(np.where(same, 0.0, np.abs(a - b)), nan=np.inf), initial=0))
        worst = max(worst, 0.0 if diff == 0 else diff / bound if bound else float("inf"))
    ok = worst <= 1.0
    text = (f"the final weights were within {worst:.2g}x of the simulator's, against the two runs' carried bounds"
            if ok else f"the final weights differ from the simulator's by {worst:.3g}x the two runs' carried bounds")
    return {"ok": ok, "worst_ratio": worst, "explanation": text}


def _tolerance(check: dict) -> str:
    k = ", ".join(f"{n} {v}" for n, v in check["summands"].items())
    return ("per element, |gradient on N ranks - on one device, from the same weights| <= 2 gamma(K) M, where "
            f"gamma(K) = K u / (1 - K u) (at most {check['gamma']:.3g} here), K = the terms of every sum and the "
            f"other roundings on the way ({k}) and M = the gradient's magnitude, computed on absolute values "
            "and carried through each nonlinear op by its slope; final weights: within T of one device's run "
            "(trained in lockstep on rank 0), per element, T <- T + lr tol + update rounding at each step")
