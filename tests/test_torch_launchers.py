"""torch.distributed's own launchers on the simulator: processes that
torchrun, ``torch.multiprocessing.spawn`` or a plain loop of ``Popen``
started meet in one hosted world (``simdist.sim._hosted``) through the
launcher's store, and fail as simdist's ranks fail: a dead rank, a rank that
left, a hang and a deadlock are reported in every waiting rank, with the
rank and the user's line, within simdist's timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import Deferred

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # every test starts processes that import torch
torch = Deferred("torch")

#: The head of every script: rank, size and a file store from the command line.
HEAD = """\
import os, sys, time
import torch, torch.distributed as dist
rank, size, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("{backend}", init_method="file://" + store, rank=rank, world_size=size)
"""


def _launch(tmp_path, body: str, size: int, backend: str = "simdist", env=None, timeout: float = 180):
    """Start ``size`` processes of the script, as a launcher would; return
    each one's (exit status, stdout, stderr)."""
    script = tmp_path / "prog.py"
    script.write_text(HEAD.format(backend=backend) + textwrap.dedent(body))
    store = tmp_path / "store"
    environ = {**os.environ, "SIMDIST_TIMEOUT": "3", **(env or {})}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(size), str(store)], env=environ,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(size)]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
        return [(p.returncode, *out) for p, out in zip(procs, outputs)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _fold(parts):
    out = parts[0].copy()
    for p in parts[1:]:
        out = out + p
    return out


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_processes_started_elsewhere_meet_in_one_world_and_reduce_in_rank_order(tmp_path):
    results = _launch(tmp_path, """\
        import numpy as np
        from simdist.sim import _hosted
        x = torch.from_numpy(np.random.default_rng(rank).standard_normal(1000).astype(np.float32))
        dist.all_reduce(x)
        sub = dist.new_group([1, 2])
        y = torch.full((2,), float(rank))
        if rank in (1, 2):
            dist.all_reduce(y, group=sub)
        print(x.numpy().tobytes().hex())
        print(y.tolist(), type(dist.group.WORLD).__name__)
        print(_hosted._host.pid if rank == 0 else 0)
        dist.destroy_process_group()
        """, 3)
    assert all(code == 0 for code, _, _ in results), [err[-1500:] for _, _, err in results]
    expected = _fold([np.random.default_rng(r).standard_normal(1000).astype(np.float32) for r in range(3)])
    for rank, (_, out, _) in enumerate(results):
        lines = out.split("\n")
        assert bytes.fromhex(lines[0]) == expected.tobytes()  # the contract's fold, to the bit
        assert lines[1] == (f"[3.0, 3.0] SimdistGroup" if rank else "[0.0, 0.0] SimdistGroup")
    assert _gone(int(results[0][1].split("\n")[2]))  # the host ends with its ranks


def test_under_simdist_gloo_a_gloo_program_runs_on_the_simulator(tmp_path):
    results = _launch(tmp_path, """\
        t = torch.tensor([1.0 + rank])
        dist.all_reduce(t)
        print(type(dist.group.WORLD).__name__, dist.get_backend(), t.item())
        """, 2, backend="gloo", env={"SIMDIST_GLOO": "1"})
    assert [out.strip() for _, out, _ in results] == ["SimdistGroup gloo 3.0"] * 2, results


def test_a_rank_that_raises_is_reported_dead_in_the_ranks_that_wait_for_it(tmp_path):
    results = _launch(tmp_path, """\
        if rank == 1:
            raise ValueError("bad batch")
        dist.all_reduce(torch.ones(4))
        """, 3)
    assert [code for code, _, _ in results] == [1, 1, 1]
    assert "ValueError: bad batch" in results[1][2]
    for rank in (0, 2):
        assert "simdist.RankDied: rank 1 raised an exception (its traceback is in its output)" in results[rank][2]
        assert "prog.py\", line 7" in results[rank][2]  # the waiting rank's own all_reduce


def test_a_killed_rank_is_reported_dead(tmp_path):
    results = _launch(tmp_path, """\
        if rank == 0:
            os.kill(os.getpid(), 9)
        dist.all_reduce(torch.ones(4))
        """, 2)
    assert results[0][0] == -signal.SIGKILL
    assert "simdist.RankDied: rank 0 ended without returning" in results[1][2], results[1][2]


def test_a_rank_that_ends_without_the_call_is_a_mismatch(tmp_path):
    results = _launch(tmp_path, """\
        if rank == 1:
            sys.exit(0)
        dist.all_reduce(torch.ones(4))
        """, 2)
    assert results[1][0] == 0
    assert "simdist.CollectiveMismatch: rank 0 waits in all_reduce" in results[0][2]
    assert "rank 1 has returned" in results[0][2]


def test_a_deadlock_is_reported_at_once_with_each_ranks_line(tmp_path):
    began = time.monotonic()
    results = _launch(tmp_path, """\
        t = torch.zeros(2)
        dist.recv(t, src=1 - rank)
        """, 2, env={"SIMDIST_TIMEOUT": "60"})
    assert time.monotonic() - began < 50  # not at the timeout
    for code, _, err in results:
        assert code == 1
        assert "simdist.Deadlock: deadlock: rank 0 in Wait for irecv(src=1, tag=0)" in err, err[-2000:]
        assert "at prog.py:6" in err  # the user's dist.recv, not torch's frame


def test_a_rank_that_waits_while_another_computes_for_ever_times_out(tmp_path):
    results = _launch(tmp_path, """\
        if rank == 1:
            while True:
                time.sleep(0.01)
        dist.all_reduce(torch.ones(4))
        """, 2, timeout=60)
    assert results[0][0] == 1 and results[1][0] == -signal.SIGKILL  # stopped after the verdict, as in a World
    err = results[0][2]
    assert "simdist.CollectiveTimeout" in err and "rank 0: waiting in all_reduce" in err, err[-2000:]


def test_torchrun_starts_a_simulated_world(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import os, torch, torch.distributed as dist
        dist.init_process_group("simdist")
        t = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(t)
        os.write(1, f"{dist.get_rank()} {dist.get_world_size()} {t.item()}\\n".encode())  # one write: not interleaved
        dist.destroy_process_group()
        """))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                           str(script)], capture_output=True, text=True, timeout=300)  # a free port, not 29500
    assert done.returncode == 0, done.stderr[:3000]
    assert sorted(done.stdout.split("\n")[:-1]) == ["0 3 3.0", "1 3 3.0", "2 3 3.0"]


def test_torch_multiprocessing_spawn_starts_a_simulated_world(tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(textwrap.dedent("""\
        import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

        def work(rank, size, store):
            dist.init_process_group("simdist", init_method="file://" + store, rank=rank, world_size=size)
            t = torch.full((2,), float(rank + 1))
            dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
            os.write(1, f"{rank} {t.tolist()}\\n".encode())

        if __name__ == "__main__":
            mp.spawn(work, args=(4, sys.argv[1]), nprocs=4)
        """))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(done.stdout.split("\n")[:-1]) == [f"{r} [24.0, 24.0]" for r in range(4)]


def test_pytorchs_multiprocesstestcase_runs_its_test_on_a_simulated_world(tmp_path):
    pytest.importorskip("expecttest")  # PyTorch's harness needs it
    suite = tmp_path / "test_case.py"
    suite.write_text(textwrap.dedent("""\
        import torch, torch.distributed as dist
        from torch.testing._internal.common_distributed import MultiProcessTestCase
        from torch.testing._internal.common_utils import run_tests


        class SumTest(MultiProcessTestCase):
            world_size = 3

            def setUp(self):
                super().setUp()
                self._spawn_processes()

            def test_sum(self):
                dist.init_process_group("simdist", init_method="file://" + self.file_name, rank=self.rank,
                                        world_size=self.world_size)
                t = torch.full((2,), float(self.rank))
                dist.all_reduce(t)
                self.assertEqual(type(dist.group.WORLD).__name__, "SimdistGroup")
                self.assertEqual(t.tolist(), [3.0, 3.0])
                dist.destroy_process_group()


        if __name__ == "__main__":
            run_tests()
        """))
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # under CI, PyTorch's runner wants xmlrunner
    done = subprocess.run([sys.executable, str(suite)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Ran 1 test" in done.stderr and "OK" in done.stderr
