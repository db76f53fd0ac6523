"""Process topologies in the mpi4py stand-in (issue 20): Cartesian, graph
and distributed graph communicators and the neighbour collectives, on 1 to
5 ranks. Each program asserts the values MPI defines, computed here from
the neighbour lists (tests/mpi4py_programs/simdist_topologies.py compares
the same calls with Open MPI's)."""

from __future__ import annotations

import textwrap

import pytest

from simdist._script import run_script

from mpi4py_prelude import PRELUDE as BASE_PRELUDE

PRELUDE = BASE_PRELUDE + """\
import numpy as np


def expected_alltoall(me, sources, destinations_of, block):
    # MPI's pairing on a graph: the k-th time a source names me among its
    # destinations is the k-th time I name it among my sources.
    out, seen = [], {}
    for s in sources:
        k = seen.get(s, 0)
        seen[s] = k + 1
        slots = [j for j, d in enumerate(destinations_of(s)) if d == me]
        out.append(block(s, slots[k]))
    return out
"""


def ok(tmp_path, source: str, n: int):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(source))
    outcome = run_script(str(path), [], n, timeout=30.0)
    assert outcome.status == 0, outcome.error


CART = """
    dims = MPI.Compute_dims(size, 2)
    assert dims[0] * dims[1] == size and dims[0] >= dims[1]
    cart = comm.Create_cart(dims, periods=[True, False])
    assert type(cart) is MPI.Cartcomm and cart.Get_topology() == MPI.CART and cart.is_topo
    row, col = divmod(rank, dims[1])
    assert cart.Get_topo() == (dims, [1, 0], [row, col]) and cart.Get_coords(rank) == [row, col]
    assert cart.Get_cart_rank([row - dims[0], col]) == rank  # periodic: wraps
    assert error_class(lambda: cart.Get_cart_rank([row, dims[1]])) == MPI.ERR_ARG  # not periodic
    up, down = ((row - 1) % dims[0]) * dims[1] + col, ((row + 1) % dims[0]) * dims[1] + col
    left = rank - 1 if col > 0 else MPI.PROC_NULL
    right = rank + 1 if col < dims[1] - 1 else MPI.PROC_NULL
    assert cart.Shift(0, 1) == (up, down) and cart.Shift(1, 1) == (left, right)
    neighbours = [up, down, left, right]
    assert cart.inoutedges == (neighbours, neighbours) and cart.degrees == (4, 4)
    # neighbour allgather: PROC_NULL slots keep their value
    got = np.full(4, -1, dtype="i")
    cart.Neighbor_allgather(np.array([rank], dtype="i"), got)
    assert got.tolist() == [-1 if n == MPI.PROC_NULL else n for n in neighbours]
    assert cart.neighbor_allgather(rank) == [None if n == MPI.PROC_NULL else n for n in neighbours]
    # alltoall: block 2d+1 goes up a dimension and lands in the lower slot, also
    # when both neighbours are one rank (a periodic dimension of 1 or 2)
    got = np.full(4, -1, dtype="i")
    cart.Neighbor_alltoall(np.arange(4, dtype="i") + 100 * rank, got)
    want = [100 * up + 1, 100 * down, -1 if left < 0 else 100 * left + 3, -1 if right < 0 else 100 * right + 2]
    assert got.tolist() == want, (got.tolist(), want)
    objs = cart.neighbor_alltoall([(rank, k) for k in range(4)])
    assert objs == [(up, 1), (down, 0), None if left < 0 else (left, 3), None if right < 0 else (right, 2)]
    # nonblocking, two at once: they complete in call order
    a, b = np.full(4, -1, dtype="i"), np.full(4, -1, dtype="i")
    r1 = cart.Ineighbor_allgather(np.array([rank], dtype="i"), a)
    r2 = cart.Ineighbor_alltoall(np.arange(4, dtype="i") + 100 * rank, b)
    MPI.Request.Waitall([r2, r1])
    assert b.tolist() == want and a.tolist() == [-1 if n == MPI.PROC_NULL else n for n in neighbours]
    # persistent: each Start sends the buffer as it is then
    send, b = np.zeros(4, dtype="i"), np.full(4, -1, dtype="i")
    persistent = cart.Neighbor_alltoall_init(send, b)
    for round in range(2):
        send[:] = np.arange(4) + 100 * rank + 1000 * round
        persistent.Start()
        persistent.Wait()
        assert b.tolist() == [w if w < 0 else w + 1000 * round for w in want]
    persistent.Free()
    # a user's ANY_SOURCE receive never takes a neighbour collective's message
    pending = cart.irecv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    cart.Neighbor_allgather(np.array([rank], dtype="i"), a)
    cart.send(("user", rank), dest=(rank + 1) % size, tag=9)
    assert pending.wait() == ("user", (rank - 1) % size)
    # Sub: rows and columns
    rows, cols = cart.Sub([False, True]), cart.Sub([True, False])
    assert (rows.rank, rows.size, rows.dims, rows.periods) == (col, dims[1], [dims[1]], [0])
    assert (cols.rank, cols.size, cols.dims, cols.periods) == (row, dims[0], [dims[0]], [1])
    assert rows.allreduce(rank) == sum(row * dims[1] + c for c in range(dims[1]))
    point = cart.Sub([False, False])
    assert (point.size, point.dim, point.Get_topo()) == (1, 0, ([], [], []))
    dup = cart.Dup()
    assert type(dup) is MPI.Cartcomm and dup.topo == cart.topo and comm.Compare(dup) == MPI.CONGRUENT
    assert MPI.Comm.fromint(cart.toint()) == cart and type(MPI.Comm.fromint(cart.toint())) is MPI.Cartcomm
    line = comm.Create_cart([size - 1] if size > 1 else [1])
    assert (line == MPI.COMM_NULL) == (size > 1 and rank == size - 1)
    try:
        MPI.Graphcomm(cart)
        raise AssertionError("a Cartesian communicator became a Graphcomm")
    except TypeError:
        pass
    assert error_class(lambda: comm.Create_cart([size + 1])) == MPI.ERR_ARG
"""

GRAPHS = """
    right, left = (rank + 1) % size, (rank - 1) % size
    index = [4 * (i + 1) for i in range(size)]
    edges = [e for i in range(size) for e in ((i + 1) % size, (i - 1) % size) * 2]
    graph = comm.Create_graph(index, edges)  # each neighbour named twice
    mine = [right, left, right, left]
    assert graph.Get_topology() == MPI.GRAPH and graph.Get_topo() == (index, edges)
    assert graph.neighbors == mine and graph.Get_neighbors_count(rank) == 4 and graph.dims == (size, 4 * size)
    got = np.full(4, -1, dtype="i")
    graph.Neighbor_alltoall(np.arange(4, dtype="i") + 100 * rank, got)
    of = lambda i: [(i + 1) % size, (i - 1) % size] * 2
    assert got.tolist() == expected_alltoall(rank, mine, of, lambda s, j: 100 * s + j)
    assert graph.neighbor_alltoall([(rank, k) for k in range(4)]) == expected_alltoall(rank, mine, of,
                                                                                       lambda s, j: (s, j))
    counts = [1 + n % 2 for n in mine]
    got = np.full(sum(counts), -1, dtype="i")
    graph.Neighbor_allgatherv(np.arange(1 + rank % 2, dtype="i") + 10 * rank, [got, counts])
    assert got.tolist() == [10 * n + k for n in mine for k in range(1 + n % 2)]
    # distributed graphs: adjacent, weighted, and general (edges named by any rank)
    sources, destinations = [left, (rank - 2) % size], [right, (rank + 2) % size]
    adj = comm.Create_dist_graph_adjacent(sources, destinations, [1, 2], [3, 4])
    assert adj.Get_dist_neighbors() == (sources, destinations, ([1, 2], [3, 4]))
    assert adj.Get_dist_neighbors_count() == (2, 2, True) and adj.Get_topology() == MPI.DIST_GRAPH
    got = np.full(4, -1.0)
    adj.Neighbor_alltoallv([np.arange(3.0) + 100 * rank, ([1, 2], [0, 1])], [got, ([2, 2], [0, 2])])
    dests = lambda i: [(i + 1) % size, (i + 2) % size]
    blocks = {0: [0.0], 1: [1.0, 2.0]}
    want = expected_alltoall(rank, sources, dests, lambda s, j: [100 * s + v for v in blocks[j]])
    assert got[:1].tolist() == want[0] and got[2:].tolist() == want[1]  # the short block leaves the rest
    w = np.full(2, -1, dtype="i")
    adj.Neighbor_alltoallw([np.array([rank, -rank], dtype="i"), ([1, 1], [0, 4]), [MPI.INT, MPI.INT]],
                           [w, ([1, 1], [0, 4]), [MPI.INT, MPI.INT]])
    assert w.tolist() == expected_alltoall(rank, sources, dests, lambda s, j: [s, -s][j])
    general = comm.Create_dist_graph([rank], [2], [right, (rank + 2) % size], [5, 6])
    srcs, dsts, weights = general.Get_dist_neighbors()
    assert dsts == [right, (rank + 2) % size] and weights[1] == [5, 6]
    assert sorted(zip(srcs, weights[0])) == sorted([(left, 5), ((rank - 2) % size, 6)])
    assert general.neighbor_allgather(rank) == srcs
    empty = comm.Create_dist_graph_adjacent([], [], MPI.WEIGHTS_EMPTY, MPI.WEIGHTS_EMPTY)
    assert empty.Get_dist_neighbors() == ([], [], ([], [])) and empty.neighbor_allgather(rank) == []
"""


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_cartesian_communicators_and_their_neighbour_collectives(tmp_path, n):
    ok(tmp_path, CART, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_graphs_with_repeated_neighbours_and_distributed_graphs(tmp_path, n):
    ok(tmp_path, GRAPHS, n)


def test_a_two_by_two_grid_with_an_edge(tmp_path):
    ok(tmp_path, CART, 4)
