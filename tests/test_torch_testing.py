"""simdist.torch.testing.on_ranks: a test body on N simulated ranks in a process group."""

from __future__ import annotations

import pytest

import simdist
from conftest import Deferred
from simdist.torch.testing import on_ranks

pytestmark = pytest.mark.torch
torch, dist = Deferred("torch"), Deferred("torch.distributed")


@on_ranks(3)
def test_a_body_runs_on_every_rank_in_a_default_group(tmp_path):
    t = torch.ones(2) * dist.get_rank()
    dist.all_reduce(t)
    assert t.tolist() == [3.0, 3.0]
    (tmp_path / f"rank{dist.get_rank()}").write_text(str(dist.get_world_size()))  # fixtures reach the ranks


def test_fixtures_reached_every_rank(tmp_path):
    test_a_body_runs_on_every_rank_in_a_default_group(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1", "rank2"]


def test_a_failing_rank_fails_the_test_with_its_traceback():
    @on_ranks(2)
    def body():
        t = torch.ones(1)
        dist.all_reduce(t)
        assert dist.get_rank() == 0, f"rank {dist.get_rank()} saw {t.item()}"

    with pytest.raises(simdist.RankError, match="rank 1 saw 2.0"):
        body()


def test_ranks_that_disagree_fail_the_test_with_a_mismatch_naming_their_lines():
    @on_ranks(2)
    def body():
        dist.broadcast(torch.zeros(3), src=dist.get_rank())

    with pytest.raises(simdist.CollectiveMismatch, match=r"dist.broadcast\(torch.zeros\(3\), src=dist.get_rank\(\)\)"):
        body()


def test_without_torch_on_ranks_says_how_to_install_it(tmp_path):
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
            "import simdist, simdist.torch\n"
            "from simdist.torch.testing import on_ranks\n"
            "on_ranks(2)(lambda: None)()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "pip install 'simdist[torch]'" in done.stderr, done.stderr
