"""``simdist run --check`` on torch programs: torch's point-to-point calls are
the simulated MPI's, so the deadlock and buffering checks see them and name
the user's ``dist.*`` line."""

from __future__ import annotations

import textwrap

import pytest

from simdist import checks
from simdist._script import run_script

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # each runs a world whose ranks import torch

HEAD = "import torch, torch.distributed as dist\ndist.init_process_group('gloo')\nr = dist.get_rank()\n"


def _findings(tmp_path, body: str, kinds: str):
    program = tmp_path / "prog.py"
    program.write_text(HEAD + textwrap.dedent(body))
    outcome = run_script(str(program), [], 2, timeout=60, checks=checks.parse(kinds))
    return outcome, [(f.kind, sorted((c.rank, c.line) for c in f.calls)) for f in outcome.findings]


def test_two_ranks_that_each_receive_first_are_a_deadlock_at_their_recv_lines(tmp_path):
    outcome, found = _findings(tmp_path, """\
        t = torch.zeros(2)
        dist.recv(t, src=1 - r)
        dist.send(t, dst=1 - r)
        """, "deadlock")
    assert found == [("deadlock", [(0, 5), (1, 5)])], outcome.error
    assert outcome.status == 124  # the run hung, as `simdist run` says


def test_sends_that_complete_only_because_they_are_buffered_are_found(tmp_path):
    outcome, found = _findings(tmp_path, """\
        t = torch.ones(4)
        dist.send(t, dst=1 - r)
        dist.recv(t, src=1 - r)
        """, "buffering")
    assert found == [("buffering", [(0, 5)]), ("buffering", [(1, 5)])], outcome.error


def test_a_correct_exchange_gives_no_finding(tmp_path):
    outcome, found = _findings(tmp_path, """\
        t, u = torch.full((4,), float(r)), torch.zeros(4)
        ops = [dist.P2POp(dist.isend, t, 1 - r), dist.P2POp(dist.irecv, u, 1 - r)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        assert u.tolist() == [float(1 - r)] * 4
        """, "deadlock,buffering,read-before-wait")
    assert found == [] and outcome.status == 0, outcome.error
