"""The fakes as torch process groups: each bug met through torch.distributed.

``fake_backends.torch_groups:NAME`` is a factory (``simdist check
--backend``, the property plugin's ``--simdist-backend``) that makes the
fake ``NAME`` of :mod:`fake_backends.faulty` around the rank's
communicator and returns it as a torch ``ProcessGroup``
(:class:`simdist.torch.check.ContractGroup`): the check then drives it
through ``torch.distributed``'s calls, as it drives Gloo, and must catch
the same bugs there.

Two bugs cannot cross torch's interface: :data:`INEXPRESSIBLE` names them
and says why; the groups made of those fakes are correct ones.
Needs torch (``pip install "simdist[torch]"``).
"""

from __future__ import annotations

from typing import Callable

from simdist.torch.check import ContractGroup

from .faulty import FAKES, FAULTY, make

__all__ = ["INEXPRESSIBLE", "FAULTY_AS_GROUPS", "group_factory", "simulator", *FAKES]

#: Fakes whose bug torch's calls cannot carry, and why.
INEXPRESSIBLE = {
    "reused_result_buffer": "torch's calls write their results into tensors the caller gives, so a result "
                            "cannot be a view of a buffer of the backend's that a later call overwrites",
    "ring_aliases_input": "torch's all_reduce works in place: writing into the caller's tensor is its contract",
}

#: The fakes that are faulty as torch process groups too.
FAULTY_AS_GROUPS = {name: cls for name, cls in FAULTY.items() if name not in INEXPRESSIBLE}


def group_factory(name: str) -> Callable:
    """The factory ``fake_backends.torch_groups:NAME``: ``make(name, base)``
    as a torch process group (seed 0)."""
    def factory(base):
        return ContractGroup(make(name, base))

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"``ContractGroup(make({name!r}, base))``: the fake {name!r} as a torch process group."
    return factory


def simulator(base) -> ContractGroup:
    """The rank's own communicator as a torch process group, no fake around
    it: what every legal fake's group must pass like."""
    return ContractGroup(base)


globals().update({name: group_factory(name) for name in FAKES})
