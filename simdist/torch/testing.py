"""Testing torch.distributed code on simulated ranks (the role of PyTorch's
``MultiProcessTestCase``, with simdist's reports).

::

    from simdist.torch.testing import on_ranks

    @on_ranks(4)
    def test_sum():
        t = torch.ones(2) * dist.get_rank()
        dist.all_reduce(t)
        assert t.tolist() == [6.0, 6.0]

The decorated test runs its body on every rank of a new ``World(size)``,
inside a default process group (``init_process_group`` has been called;
the group is destroyed when the body ends). pytest's fixtures reach every
rank (they are pickled with the body). A rank that raises fails the test
with ``simdist.RankError`` (each failed rank's traceback); ranks that
disagree, hang or die give ``CollectiveMismatch``, ``CollectiveTimeout``
and ``RankDied`` within ``timeout`` seconds, naming the ranks and lines.
"""

from __future__ import annotations

import functools

__all__ = ["on_ranks"]


def _in_group(comm, body, args, kwargs):
    import torch.distributed as dist

    dist.init_process_group()
    try:
        return body(*args, **kwargs)
    finally:
        dist.destroy_process_group()


def on_ranks(size: int, *, timeout: float = 60.0):
    """Run the decorated function on ``size`` simulated ranks (see the module docstring)."""

    def decorate(body):
        @functools.wraps(body)
        def test(*args, **kwargs):
            from simdist import World

            from ._launch import require_torch

            require_torch()
            with World(size, timeout=timeout) as world:
                world.run(_in_group, body, args, kwargs)

        return test

    return decorate
