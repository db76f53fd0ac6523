"""The suite table's comparison (``tests/mpi4py_suite_table.py``): runs
measured now and runs read back from a ``--json`` file (``--resume``) are
compared rank by rank alike."""

from __future__ import annotations

import json

import mpi4py_suite_table as table


def test_a_run_read_now_and_one_resumed_from_json_compare_rank_by_rank(tmp_path):
    for rank, b in enumerate(["passed", "failed", "passed"]):  # what the plugin writes on each rank
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"t::a": "passed", "t::b": b}))
    simdist = {"ended": "exit", "ranks": table.read_ranks(tmp_path, 3)}
    mpiexec = json.loads(json.dumps({"ended": "exit", "ranks": {
        str(rank): {"t::a": "passed", "t::b": "passed"} for rank in range(3)}}))  # from --json
    assert table.cell(mpiexec, 3) == "2" and table.cell(simdist, 3) == "2/1/2"
    assert table.differences(mpiexec, simdist) == {"t::b": "failed"}
    assert table.differences(mpiexec, json.loads(json.dumps(simdist))) == {"t::b": "failed"}
