"""Type maps of the mpi4py stand-in's derived datatypes, in this process:
their bounds agree with their elements whichever way they are computed,
regular types of many elements are made without listing them, decoding
leaves no handle behind, and what ``mpi4py.util.dtlib`` asks costs few
calls.

The datatype calls need no simulated run (they touch no communicator), so
these tests call ``fake_backends.mpi4py.MPI`` directly; the values asserted
for large types were measured with mpi4py 4.1 under Open MPI 5.
"""

from __future__ import annotations

import os
import random
import sys
import weakref

import numpy as np
import pytest

import fake_backends.mpi4py.MPI as MPI
from fake_backends.mpi4py import _derived, _typecalls
from simdist.bench import datatypes

BASICS = [MPI.INT, MPI.DOUBLE, MPI.BYTE, MPI.SHORT, MPI.FLOAT_INT, MPI.LONG_DOUBLE, MPI.C_BOOL]


def _random_type(rng: random.Random, depth: int):
    """A random derived datatype of ``depth`` constructors at most (or a predefined one)."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(BASICS)
    old = _random_type(rng, depth - 1)
    n = rng.choice([0, 1, 3, 40])  # 40: past the blocks from which numpy computes the bounds
    makers = [
        lambda: old.Create_contiguous(rng.choice([0, 1, 3, 40])),
        lambda: old.Create_vector(rng.choice([0, 1, 3, 40]), rng.choice([0, 1, 2]), rng.choice([-3, 0, 1, 4])),
        lambda: old.Create_hvector(rng.choice([0, 1, 3]), rng.choice([0, 1, 2]), rng.choice([-17, 0, 5, 64])),
        lambda: old.Create_indexed([rng.choice([0, 1, 3]) for _ in range(n)], [rng.randint(-5, 20) for _ in range(n)]),
        lambda: old.Create_hindexed_block(rng.choice([0, 1, 2]), [rng.randint(-50, 200) for _ in range(n)]),
        lambda: MPI.Datatype.Create_struct([rng.choice([0, 1, 2]) for _ in range(n)],
                                           [rng.randint(-20, 100) for _ in range(n)],
                                           [old] + [_random_type(rng, depth - 1) for _ in range(n - 1)] if n else []),
        lambda: old.Create_subarray([4, 3, 5], [2, 3, 1], [1, 0, 4], rng.choice([MPI.ORDER_C, MPI.ORDER_FORTRAN])),
        lambda: old.Create_darray(4, rng.randrange(4), [5, 7], [MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_CYCLIC],
                                  [MPI.DISTRIBUTE_DFLT_DARG, 2], [2, 2], rng.choice([MPI.ORDER_C, MPI.ORDER_FORTRAN])),
        lambda: old.Create_resized(rng.randint(-10, 10), rng.choice([-8, 0, 4, 24])),
        old.Dup,
    ]
    return rng.choice(makers)()


def test_the_bounds_of_random_types_are_those_of_their_elements():
    """The bounds are computed from the constructor's arguments (a grid's
    corners, or block by block); the elements, listed when first used, must
    give the same size, count and true bounds."""
    rng = random.Random(20)
    for _ in range(150):
        datatype = _random_type(rng, 3)
        tm = datatype._typemap()
        sizes = tm.sizes
        assert (tm.size, tm.nelem) == (int(sizes.sum()), tm.codes.size)
        if tm.nelem:
            assert (tm.true_lb, tm.true_ub) == (int(tm.offsets.min()), int((tm.offsets + sizes).max()))
        assert datatype.Get_true_extent() == (tm.true_lb, tm.true_ub - tm.true_lb)
        assert (datatype.size, datatype.extent, datatype.lb, datatype.ub) == (
            datatype.Get_size(), datatype.Get_extent()[1], datatype.Get_extent()[0], sum(datatype.Get_extent()))


def test_many_blocks_of_one_type_have_the_bounds_block_by_block_gives():
    rng = random.Random(7)
    for _ in range(100):
        old = _random_type(rng, 2)._typemap()
        n = rng.choice([0, 1, 5, 50])
        starts = [rng.randint(-100, 100) for _ in range(n)]
        lengths = [rng.choice([0, 1, 4]) for _ in range(n)]
        listed, build_listed = _derived._listed_bounds([old] * n, starts, lengths)
        repeated, build_repeated = _derived._repeated_bounds(old, np.array(starts, np.int64),
                                                             np.array(lengths, np.int64))
        assert listed == repeated
        if listed is not None:
            for a, b in zip(build_listed(), build_repeated()):
                assert a.tolist() == b.tolist()


def test_regular_types_of_billions_of_elements_are_made_without_listing_them():
    """Open MPI 5's figures; listing the elements would take 8 bytes each."""
    cube = MPI.DOUBLE.Create_subarray([2048] * 3, [1024] * 3, [512] * 3)
    assert (cube.Get_extent(), cube.Get_true_extent(), cube.Get_size()) == (
        (0, 68719476736), (17188261888, 34342952960), 8589934592)
    strided = MPI.DOUBLE.Create_vector(10**9, 1, 2)
    assert (strided.Get_extent(), strided.Get_true_extent(), strided.Get_size()) == (
        (0, 15999999992), (0, 15999999992), 8000000000)
    backwards = MPI.INT.Create_hvector(4, 2, -12)
    assert (backwards.Get_extent(), backwards.Get_true_extent()) == ((-36, 44), (-36, 44))
    for datatype in (cube, strided, backwards):
        datatype.Free()


def test_a_layout_known_from_the_constructor_moves_the_bytes_its_elements_name():
    """Where a vector, subarray, contiguous or darray type of a grid is a
    grid again, its layout comes from the constructor's numbers, never from
    the byte index; it must move exactly the bytes, in the order, that the
    listed elements give, and reach the same lowest and highest byte."""
    rng = random.Random(11)
    noise = np.random.default_rng(11)
    known = 0
    for _ in range(400):
        datatype = _random_type(rng, 3)
        tm = datatype._typemap()
        for count in (1, 2, 5):
            tm._layouts.clear()
            layout = tm.layout(count)
            index = tm.byte_index(count)
            known += tm._known_grid(count) is not None
            if index.size:
                base = -int(index.min())
                memory = noise.integers(0, 256, int(index.max()) + base + 1, dtype=np.uint8)
                assert layout.at(base).gather(memory).tolist() == memory[index + base].tolist()
                assert (layout.lo, layout.hi) == (int(index.min()), int(index.max()))
            else:
                assert layout.nbytes == 0
    assert known > 300


def test_a_subarray_of_billions_of_elements_is_laid_out_without_its_byte_index():
    """A parallel FFT's transposes build subarray types per plan: their
    layouts are a few numbers (an index would take 8 bytes per byte)."""
    cube = MPI.DOUBLE.Create_subarray([2048] * 3, [1024] * 3, [512] * 3)
    column = MPI.DOUBLE.Create_vector(10**9, 1, 2).Create_resized(0, 8)
    layouts = [cube._typemap().layout(2), column._typemap().layout(3)]
    assert [(g.start, g.shape, g.strides, g.run) for g in layouts] == [
        (17188261888, (2, 1024, 1024), (68719476736, 33554432, 16384), 8192), (0, (3, 10**9), (8, 16), 8)]
    assert cube._typemap()._index is None and column._typemap()._index is None
    for datatype in (cube, column):
        datatype.Free()



def test_a_type_made_again_shares_what_was_computed_and_keeps_its_own_handle_state():
    """A library that makes the same subarray types for every transform
    gets a new type map sharing the first one's bounds and grid; its
    commit, contents, layouts and life are its own, and numbers MPI refuses
    are refused every time."""
    shape, sub, start = [4, 6, 8], [4, 3, 8], [0, 3, 0]
    first = MPI.DOUBLE_COMPLEX.Create_subarray(shape, sub, start).Commit()
    layout = first._typemap().layout(1)
    again = MPI.DOUBLE_COMPLEX.Create_subarray(tuple(shape), np.array(sub), [np.int64(v) for v in start])
    tm, first_tm = again._typemap(), first._typemap()
    assert tm is not first_tm and tm.layout(1) is layout
    assert not tm.committed and first_tm.committed
    for name in _derived.TypeMap.__slots__:  # a scattered layout's index is each map's own
        if name not in ("contents", "committed", "handles", "_layouts"):
            assert getattr(tm, name) is getattr(first_tm, name), name
    assert tm._layouts is not first_tm._layouts
    assert again.Get_contents()[0] == first.Get_contents()[0] and tm.contents[1] is not first_tm.contents[1]
    first.Free()
    assert again.Get_extent() == (0, 4 * 6 * 8 * 16) and again.Commit().Get_size() == 4 * 3 * 8 * 16
    again.Free()
    for _ in range(2):
        with pytest.raises(MPI.Exception):
            MPI.DOUBLE.Create_subarray([4], [5], [0])
        with pytest.raises(TypeError):
            MPI.DOUBLE.Create_vector(2.0, 1, 3)
    strided = MPI.INT.Create_vector(3, 1, 2)
    made = [strided.Create_contiguous(2) for _ in range(2)]
    assert made[0]._typemap().layout(1) is made[1]._typemap().layout(1)
    for datatype in made:
        base, combiner, params = datatype.decode()
        assert (combiner, params, base.Get_extent()) == ("CONTIGUOUS", {"count": 2}, (0, 20))
        base.Free()
    for datatype in (*made, strided):
        datatype.Free()
    gone = weakref.ref(strided)
    del strided, made, datatype, base
    assert gone() is None  # nothing remembered holds the user's handle

def test_decode_gives_one_handle_per_datatype_and_freeing_them_leaves_none():
    """As mpi4py's: a constructor of one datatype gives it as the basetype
    (a struct of one block lists that same handle); the caller frees it."""
    held = len(_typecalls._MAPS)
    inner = MPI.INT.Create_contiguous(2)
    one = MPI.Datatype.Create_struct([1], [0], [inner])
    base, combiner, params = one.decode()
    assert combiner == "STRUCT" and params["datatypes"][0] is base and base != inner and base.combiner == 2
    strided = inner.Create_vector(2, 1, 3)
    base2, combiner2, params2 = strided.decode()
    assert (combiner2, params2, base2.combiner) == ("VECTOR", {"count": 2, "blocklength": 1, "stride": 3}, 2)
    pair = MPI.Datatype.Create_struct([1, 1], [0, 8], [inner, MPI.INT])
    base3, _, params3 = pair.decode()
    assert base3 == MPI.DATATYPE_NULL and params3["datatypes"][1] == MPI.INT
    for datatype in (base, base2, params3["datatypes"][0], inner, one, strided, pair):
        datatype.Free()
    assert len(_typecalls._MAPS) == held


@pytest.fixture
def dtlib():
    """mpi4py's own ``mpi4py.util.dtlib`` (its source, unmodified) on the stand-in's MPI."""
    module = datatypes.dtlib_on(MPI)
    if module is None:
        pytest.skip("mpi4py is not installed")
    return module


def _calls_into_the_stand_in(function) -> int:
    """How many Python functions of the stand-in ``function()`` calls."""
    root = os.path.dirname(MPI.__file__)
    count = 0

    def hook(frame, event, _arg):
        nonlocal count
        if event == "call" and frame.f_code.co_filename.startswith(root):
            count += 1

    sys.setprofile(hook)
    try:
        function()
    finally:
        sys.setprofile(None)
    return count


def test_a_dtlib_round_trip_of_a_struct_costs_few_calls(dtlib):
    """mpi4py's test_util_dtlib.py makes some 300,000 such round trips. The
    queries (combiner, is_predefined, extent) read the type map directly,
    Free and Dup skip empty attribute tables, and decode makes one handle
    per datatype: 313 calls into the stand-in (929 when each query went
    through Get_envelope and each decode made handles twice)."""
    dt = np.dtype("i,f,d", align=True)

    def round_trip():
        datatype = dtlib.from_numpy_dtype(dt)
        assert dtlib.to_numpy_dtype(datatype) == dt
        datatype.Free()

    round_trip()
    held = len(_typecalls._MAPS)
    assert _calls_into_the_stand_in(round_trip) <= 450
    assert len(_typecalls._MAPS) == held


def test_the_queries_of_a_null_datatype_raise_through_the_error_handler_as_over_open_mpi(tmp_path):
    """The properties read a live handle's type map without a call; any
    other handle makes the call, whose error goes through COMM_WORLD's
    handler as under Open MPI 5 (is_predefined of null is True there too)."""
    from test_mpi4py_api import ok

    ok(tmp_path, """
        calls = []
        comm.Set_errhandler(comm.Create_errhandler(lambda c, code: calls.append(code)))
        for name in ["combiner", "envelope", "contents", "extent", "size", "lb", "ub", "true_extent", "true_lb",
                     "is_named"]:
            try:
                getattr(MPI.DATATYPE_NULL, name)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_TYPE and calls == [MPI.ERR_TYPE], (name, calls)
            else:
                raise AssertionError(name)
            calls.clear()
        assert MPI.DATATYPE_NULL.is_predefined and not calls
        freed = MPI.INT.Dup()
        other = MPI.Datatype(freed)  # another handle on it: freed with it
        freed.Free()
        for name in ["combiner", "envelope", "contents", "extent", "true_ub"]:
            try:
                getattr(other, name)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_TYPE and calls == [MPI.ERR_TYPE], (name, calls)
            else:
                raise AssertionError(name)
            calls.clear()
        assert (MPI.INT.combiner, MPI.INT.extent, MPI.INT.envelope) == (MPI.COMBINER_NAMED, 4, (0, 0, 0, 0, 0))
    """, 1)
