"""torch.distributed on the simulator: the ``simdist`` backend.

In a simulated rank, ``torch.distributed.init_process_group("simdist")``
(or ``"gloo"``, or no backend at all) makes the rank's process group on the
simulated world: every collective is the contract's, folded in rank order,
identical to the bit on every rank and in every run, and a rank that calls
something else than the others raises ``simdist.CollectiveMismatch``.
``simdist run -n N train.py`` runs an unmodified torchrun script so (with
the environment torchrun sets); in a function run by ``World(n).run``,
``init_process_group()`` joins that world; ``simdist.torch.testing.on_ranks``
runs a test's body so. See docs/torch.md.

torch is an optional dependency (``pip install "simdist[torch]"``).
"""

#: The backend's name for ``init_process_group``.
BACKEND = "simdist"

__all__ = ["BACKEND"]
