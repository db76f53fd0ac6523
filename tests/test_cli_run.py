"""``simdist run``: an SPMD script on N ranks, as mpiexec runs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import simdist
from conftest import mpiexec_or_skip

SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import simdist

    comm = simdist.comm()
    total = comm.allreduce(np.array([comm.rank + 1]))
    print(f"rank {comm.rank} of {comm.size}: args={sys.argv[1:]} total={total[0]}", flush=True)
    if "--fail" in sys.argv and comm.rank == 1:
        raise RuntimeError("rank 1 failed on purpose")
    if "--exit" in sys.argv:
        sys.exit(3 if comm.rank == 0 else 0)
    if "--hang" in sys.argv and comm.rank == 0:
        time.sleep(100)
    comm.barrier()
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "spmd.py"
    path.write_text(SCRIPT)
    return path


def simdist_run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "simdist", "run", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_run_executes_the_script_on_every_rank_with_its_arguments(script):
    done = simdist_run("-n", 3, script.name, "a", "b", cwd=script.parent)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"rank {r} of 3: args=['a', 'b'] total=6" for r in range(3)]


def test_run_module_runs_it_as_main(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "job.py").write_text(SCRIPT)
    done = simdist_run("-n", 2, "-m", "pkg.job", "x", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"rank {r} of 2: args=['x'] total=3" for r in range(2)]


def test_a_failing_rank_gives_status_1_and_its_traceback(script):
    done = simdist_run("-n", 2, script.name, "--fail", cwd=script.parent)
    assert done.returncode == 1
    assert "RankError" in done.stderr and "--- rank 1 ---" in done.stderr
    assert "RuntimeError: rank 1 failed on purpose" in done.stderr


def test_sys_exit_codes_become_the_exit_status(script):
    done = simdist_run("-n", 2, script.name, "--exit", cwd=script.parent)
    assert done.returncode == 3


@pytest.mark.slow
def test_a_hang_ends_at_the_timeout_with_the_report(script):
    done = simdist_run("-n", 2, "--timeout", 2, script.name, "--hang", cwd=script.parent)
    assert done.returncode == 124
    assert "rank 0: running user code" in done.stderr
    assert "rank 1: waiting in barrier #2" in done.stderr


def test_a_missing_script_is_a_usage_error(tmp_path):
    done = simdist_run("-n", 2, "nothere.py", cwd=tmp_path)
    assert done.returncode == 2 and "no such script: nothere.py" in done.stderr


def test_comm_outside_a_rank_says_how_to_get_one():
    with pytest.raises(simdist.SimdistError, match="simdist run -n N"):
        simdist.comm()


def test_comm_inside_world_run_is_the_functions_communicator():
    assert simdist.run(lambda c: simdist.comm() is c, 2) == [True, True]


@pytest.mark.slow
def test_run_on_real_mpi_runs_the_same_script(script):
    mpiexec_or_skip()
    done = simdist_run("-n", 2, "--backend", "mpi", script.name, "z", cwd=script.parent)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"rank {r} of 2: args=['z'] total=3" for r in range(2)]


def test_options_after_the_script_or_module_belong_to_the_program(tmp_path, capfd):
    import simdist.cli

    script = tmp_path / "show_args.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    assert simdist.cli.main(["run", "-n", "1", str(script), "-q", "--timeout", "3"]) == 0
    assert "['-q', '--timeout', '3']" in capfd.readouterr().out
    (tmp_path / "show_args_mod.py").write_text("import sys\nprint(sys.argv[1:])\n")
    import os
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert simdist.cli.main(["run", "-n", "1", "-m", "show_args_mod", "-q", "-n", "2"]) == 0
    finally:
        os.chdir(here)
    assert "['-q', '-n', '2']" in capfd.readouterr().out
