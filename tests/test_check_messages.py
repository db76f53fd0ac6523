"""Failure messages point at the bug: the user's frame, the element, its
chunk and inputs, every kind of finding of a row, and who raised."""

from __future__ import annotations

import numpy as np
import pytest

import simdist
from simdist import reference
from simdist._frames import where_raised
from simdist.reference import sweep


def _numpy_raises():
    out = np.zeros(3)
    out.flags.writeable = False
    np.add(out, 1, out=out)  # the user's line: numpy raises below it


def test_raised_at_names_the_users_frame_not_numpys():
    with pytest.raises(ValueError) as info:
        _numpy_raises()
    where = where_raised(info.value)
    assert where.startswith(f"{__file__}:") and where.endswith("in _numpy_raises"), where


def test_a_wrong_element_is_named_with_its_chunk_and_every_ranks_input():
    inputs = [np.arange(7, dtype=np.int64) * (r + 1) for r in range(3)]
    right = sum(inputs)
    wrong = right.copy()
    wrong[5] += 1
    verdict = reference.check("allreduce", inputs, [wrong, wrong.copy(), wrong.copy()])
    assert not verdict.ok
    assert verdict.reason == ("ranks 0-2: 1 of 7 element(s) wrong; worst element 5 (chunk 2 of 3: elements 5-6): "
                              "got 31, expected 30 (bit for bit); the inputs there: rank 0 5, rank 1 10, rank 2 15")


def test_chunks_of_an_uneven_split_are_longer_first():
    inputs = [np.zeros(10, np.int32) for _ in range(4)]
    for element, chunk in ((0, "chunk 0 of 4: elements 0-2"), (5, "chunk 1 of 4: elements 3-5"),
                           (6, "chunk 2 of 4: elements 6-7"), (9, "chunk 3 of 4: elements 8-9")):
        wrong = np.zeros(10, np.int32)
        wrong[element] = 1
        verdict = reference.check("allreduce", inputs, [wrong] * 4)
        assert f"element {element} ({chunk})" in verdict.reason, verdict.reason


def test_ranks_with_different_wrong_results_are_reported_apart():
    inputs = [np.ones(2, np.int8) for _ in range(3)]
    outs = [np.full(2, 3, np.int8), np.full(2, 4, np.int8), np.full(2, 3, np.int8)]
    verdict = reference.check("allreduce", inputs, outs)
    assert "ranks disagree: rank(s) [1]" in verdict.reason
    assert "rank 1: 2 of 2 element(s) wrong" in verdict.reason


def test_a_rank_that_raises_in_one_case_does_not_hide_the_rows_other_findings():
    report = sweep(2, factory="fake_backends:ring_aliases_input", quick=True, collectives=["allreduce"],
                   dtypes=["int8"])
    row = next(r for r in report["rows"] if r["op"] == "sum")
    assert row["verdict"] == "FAIL"
    kinds = {f["kind"]: f for f in row["findings"]}
    assert {"raised", "input modified", "result aliases the input"} <= set(kinds), row["findings"]
    assert "wrong result" not in kinds  # the ring's values are right; it writes into the input
    assert "also input modified in" in row["reason"]
    raised = kinds["raised"]["first"]
    assert "read-only" in raised and "ring.py:" in raised and "_reduction.py" not in raised, raised


def test_rank_error_headline_names_the_ranks_and_a_single_ranks_exception():
    def program(comm):
        if comm.rank != 1:
            raise KeyError(f"on {comm.rank}")
        return 0

    with simdist.World(3) as world:
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
    assert str(info.value).splitlines()[0] == "ranks 0 and 2 raised"
