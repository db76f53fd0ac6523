"""The public surface: exported names, the error tree, the one-shot run, the CLI."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import simdist
import simdist.cli

EXPECTED_ALL = [
    "Communicator",
    "OPS",
    "World",
    "run",
    "comm",
    "mpi4py_comm",
    "Mpi4pyCommunicator",
    "SimdistError",
    "RankError",
    "CollectiveMismatch",
    "CollectiveTimeout",
    "Deadlock",
    "RankDied",
    "ChecksFailed",
    "InvalidArgument",
    "InvalidType",
    "InvalidValue",
]
ERRORS = [
    simdist.SimdistError,
    simdist.RankError,
    simdist.CollectiveMismatch,
    simdist.CollectiveTimeout,
    simdist.Deadlock,
    simdist.RankDied,
    simdist.ChecksFailed,
    simdist.InvalidArgument,
    simdist.InvalidType,
    simdist.InvalidValue,
]


# -- names ---------------------------------------------------------------------------


def test_all_is_exactly_the_public_names():
    assert sorted(simdist.__all__) == sorted(EXPECTED_ALL)
    assert len(set(simdist.__all__)) == len(simdist.__all__)


def test_every_public_name_resolves():
    namespace: dict = {}
    exec("from simdist import *", namespace)
    for name in EXPECTED_ALL:
        assert getattr(simdist, name) is namespace[name]


@pytest.mark.parametrize("module", ["simdist.graph", "simdist.train", "simdist.reference"])
def test_public_submodules_export_what_they_define(module):
    mod = __import__(module, fromlist=["__all__"])
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ lists {name!r}, which it does not define"


def test_importing_simdist_train_does_not_import_scikit_learn():
    code = "import sys, simdist.train; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ops_are_the_contracts_reduction_ops():
    assert simdist.OPS == ("sum", "prod", "min", "max", "mean", "band", "bor", "bxor", "land", "lor", "lxor")


# -- the error tree -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_is_a_simdist_error_importable_from_simdist(cls):
    assert issubclass(cls, simdist.SimdistError)
    assert issubclass(cls, Exception)
    assert getattr(simdist, cls.__name__) is cls  # so pickles refer to simdist.<name>


def test_invalid_argument_errors_are_builtin_type_and_value_errors():
    assert issubclass(simdist.InvalidType, TypeError)
    assert issubclass(simdist.InvalidType, simdist.InvalidArgument)
    assert issubclass(simdist.InvalidValue, ValueError)
    assert issubclass(simdist.InvalidValue, simdist.InvalidArgument)
    assert not issubclass(simdist.InvalidType, ValueError)
    assert not issubclass(simdist.InvalidValue, TypeError)


def roundtrip(exc):
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is type(exc)
    assert str(copy) == str(exc)
    return copy


@pytest.mark.parametrize("cls", [simdist.SimdistError, simdist.InvalidArgument, simdist.InvalidType, simdist.InvalidValue], ids=lambda c: c.__name__)
def test_plain_errors_pickle(cls):
    copy = roundtrip(cls("rank 0: allreduce: op='avg' is not a reduction op"))
    assert copy.args == ("rank 0: allreduce: op='avg' is not a reduction op",)


def test_rank_error_pickles_with_its_attributes():
    exc = simdist.RankError({2: "Traceback ...\nKeyError: 'k'\n", 0: "Traceback ...\nValueError: v\n"}, {0: ValueError("v"), 2: None}, [1])
    copy = roundtrip(exc)
    assert copy.failures == exc.failures and list(copy.failures) == [0, 2]
    assert copy.aborted == [1]
    assert sorted(copy.exceptions) == [0, 2]
    assert type(copy.exceptions[0]) is ValueError and copy.exceptions[0].args == ("v",)
    assert copy.exceptions[2] is None


def test_collective_mismatch_pickles_with_its_attributes():
    calls = {0: "allreduce #1 (float32 (4,), op=sum)", 1: "allgather #1 (float32 (4,))"}
    copy = roundtrip(simdist.CollectiveMismatch("ranks of the world called collectives that do not match", calls))
    assert copy.calls == calls


def test_collective_timeout_pickles_with_its_attributes():
    report = {1: "running user code (0 calls completed)", 0: "waiting in allreduce #1 (float64 (1,), op=sum) on the world"}
    copy = roundtrip(simdist.CollectiveTimeout(1.5, report))
    assert copy.timeout == 1.5
    assert copy.report == report and list(copy.report) == [0, 1]


def test_rank_died_pickles_with_its_attributes():
    copy = roundtrip(simdist.RankDied({1: "was killed by SIGKILL"}, " during World.run"))
    assert copy.ranks == {1: "was killed by SIGKILL"}
    assert copy.context == " during World.run"


def test_errors_raised_by_a_world_pickle():
    def program(comm):
        if comm.rank == 1:
            raise KeyError("missing")
        return comm.rank

    with simdist.World(2) as world:
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
        with pytest.raises(simdist.CollectiveMismatch) as mismatch:
            world.run(lambda comm: comm.allreduce(np.ones(1 + comm.rank)))
    copy = roundtrip(info.value)
    assert copy.failures == info.value.failures
    assert isinstance(copy.exceptions[1], KeyError)
    assert roundtrip(mismatch.value).calls == mismatch.value.calls


# -- World and run ----------------------------------------------------------------------------


def test_run_is_the_one_shot_form_and_passes_arguments():
    def program(comm, base, *, scale):
        assert isinstance(comm, simdist.Communicator)
        return (comm.rank, comm.size, float(comm.allreduce(np.float64(base + comm.rank))) * scale)

    assert simdist.run(program, 3, 10, scale=2) == [(r, 3, 66.0) for r in range(3)]


def test_run_takes_the_worlds_keywords():
    assert simdist.run(lambda comm: comm.size, 2, timeout=5, start_method="fork") == [2, 2]


def test_world_describes_itself_and_its_workers():
    with simdist.World(2, timeout=7) as world:
        assert world.size == 2 and world.timeout == 7.0
        assert len(set(world.pids)) == 2 and os.getpid() not in world.pids
        assert world.run(lambda comm: os.getpid()) == world.pids
        assert "size=2" in repr(world) and "open" in repr(world)
    assert "closed" in repr(world)


def test_run_rejects_what_it_cannot_send_to_the_ranks():
    with simdist.World(2) as world:
        with pytest.raises(simdist.InvalidType, match="not callable"):
            world.run(42)
        with pytest.raises(simdist.InvalidType, match="cannot pickle"):
            world.run(lambda comm, lock: None, threading.Lock())
        with pytest.raises(simdist.RankError, match="cannot be pickled back to the driver"):
            world.run(lambda comm: threading.Lock())
        assert world.run(lambda comm: comm.rank) == [0, 1]


# -- command line -------------------------------------------------------------------------------


def console_script() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "simdist")
    path = beside if os.path.exists(beside) else shutil.which("simdist")
    if path is None:
        pytest.fail("the simdist console script is not installed (pip install -e .)")
    return path


@pytest.mark.parametrize("command", [[sys.executable, "-m", "simdist"], ["simdist"]], ids=["python -m simdist", "console script"])
def test_demo_command_exits_zero(command):
    if command == ["simdist"]:
        command = [console_script()]
    done = subprocess.run([*command, "demo", "-n", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "simulated world of 2 ranks" in done.stdout
    assert " NO" not in done.stdout


def test_cli_main_writes_the_demo_report_as_json(tmp_path, capsys):
    path = tmp_path / "demo.json"
    assert simdist.cli.main(["demo", "-n", "2", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert report["size"] == 2
    checks = {k: v for k, v in report.items() if isinstance(v, bool)}
    assert checks and all(checks.values()), checks
    assert "simulated world of 2 ranks" in capsys.readouterr().out


def test_cli_main_writes_json_to_stdout(capsys):
    assert simdist.cli.main(["demo", "-n", "2", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["size"] == 2


def test_cli_rejects_a_world_of_no_ranks(capsys):
    with pytest.raises(SystemExit) as info:
        simdist.cli.main(["demo", "-n", "0"])
    assert info.value.code == 2
    assert "-n must be >= 1" in capsys.readouterr().err
