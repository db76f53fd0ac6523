"""A state machine that issues random sequences of collectives on random sub-communicators.

Each rule adds one operation to a program (re-split the world, or call a
collective on every sub-communicator of the current split) and runs the
whole program so far in one run, so that a backend's state between calls
(caches, buffers, sequence numbers) is exercised as a program would. Every
call's results are judged by :func:`simdist.reference.check`, group by group.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from simdist import reference
from simdist._communicator import BLOCKED, COLLECTIVES, REDUCTIONS

from . import strategies as s
from .test_collectives import call

#: Collectives whose shapes do not depend on the (sub-)communicator's size:
#: those that take no blocks of one per rank.
SIZE_FREE = tuple(c for c in COLLECTIVES if c not in BLOCKED)


def _run_program(comm, program):
    current, results = comm, []
    for op in program:
        if op[0] == "split":
            if current is not comm and current is not None:
                current.free()
            color, key = op[1][comm.rank]
            current = comm.split(color, key)
            results.append(None)
        else:
            _, collective, operation, root, data = op
            if current is None:
                results.append(None)
                continue
            results.append(call(current, collective, data[comm.rank], operation, root % current.size))
    return results


def _groups(colors) -> dict:
    groups: dict = {}
    for rank, (color, key) in enumerate(colors):
        if color is not None:
            groups.setdefault(color, []).append((key, rank))
    return {c: [r for _, r in sorted(m)] for c, m in groups.items()}


class CollectivePrograms(RuleBasedStateMachine):
    def __init__(self, world):
        super().__init__()
        self.world = world
        self.program: list = []
        self.groups = {0: list(range(world.size))}

    @initialize()
    def start(self):
        self.program, self.groups = [], {0: list(range(self.world.size))}

    @rule(data=st.data())
    def resplit(self, data):
        colors = data.draw(s.colors_and_keys(self.world.size))
        self.program.append(("split", colors))
        self.groups = _groups(colors)
        self._run()

    @rule(data=st.data())
    def collective(self, data):
        collective = data.draw(s.collectives(SIZE_FREE))
        op, dtype = data.draw(s.ops_and_dtypes() if collective in REDUCTIONS else st.tuples(st.none(), s.dtypes()))
        shape = data.draw(s.shapes(max_dims=2, large=False))
        arrays = data.draw(s.rank_arrays(self.world.size, dtype, shape, op=op))
        root = data.draw(st.integers(0, self.world.size - 1))
        self.program.append(("call", collective, op, root, arrays))
        self._run()

    def _run(self):
        outs = self.world.run(_run_program, self.program)
        step = len(self.program) - 1
        op = self.program[step]
        if op[0] == "split":
            return
        _, collective, operation, root, arrays = op
        if collective == "barrier":
            return
        for color, members in self.groups.items():
            group_root = root % len(members)
            inputs = [arrays[m] if collective != "broadcast" or i == group_root else None
                      for i, m in enumerate(members)]
            verdict = reference.check(collective, inputs, [outs[m][step] for m in members],
                                      op=operation or "sum", root=group_root)
            assert verdict.ok, (f"call {step} of the program ({collective} on the group of ranks {members}): "
                                f"{verdict.reason}")


def test_random_programs_on_random_sub_communicators(world):
    run_state_machine_as_test(lambda: CollectivePrograms(world),
                              settings=settings(settings.default, stateful_step_count=6))
