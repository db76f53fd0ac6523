"""Process topologies of the stand-in: Cartesian, graph and distributed
graph communicators (``Cartcomm``, ``Graphcomm``, ``Distgraphcomm``).

A topology communicator is a new communicator (a ``Split`` of the old one,
so its messages and collectives are its own) whose state carries a
description of the topology (``Cart``, ``Graph``, ``DistGraph``): what the
inquiry calls answer and whom the neighbour collectives (``_neighbors``)
talk to. Ranks are never reordered (``reorder`` is allowed to keep them).
Ranks beyond the topology's size get ``MPI.COMM_NULL``.

The neighbour lists are MPI's: a Cartesian communicator has, per
dimension, the source then the destination of ``Shift(d, 1)``
(``MPI.PROC_NULL`` at the edge of a non-periodic dimension); a graph
communicator the edges of its node; a distributed graph its sources and
destinations in the order given (for ``Create_dist_graph``: in the order of
the ranks that named the edges, then of their lists).

The constructors (``Create_cart``, ...) are methods of ``Intracomm``;
``CONSTRUCTORS`` holds them for ``MPI`` to attach, since this module builds
on the communicator module and not the reverse.
"""

from __future__ import annotations

import math

from . import _errhandlers, _handleleaks
from ._comm import CLASS_OF_TOPOLOGY, UNDEFINED, Intracomm
from ._errors import ERR_ARG, ERR_DIMS, ERR_RANK, ERR_TOPOLOGY, Exception as MPIException
from ._handles import new_handle
from ._neighbors import NeighborCollectives

CART, GRAPH, DIST_GRAPH = 1, 2, 3
PROC_NULL = -2
UNWEIGHTED, WEIGHTS_EMPTY = 2, 3


def _ints(values, call: str, what: str) -> list[int]:
    try:
        return [int(v) for v in values]
    except TypeError:
        raise TypeError(f"{call}: {what} must be a sequence of ints, got {values!r}") from None


def _exactly(values, n: int, call: str, what: str) -> list[int]:
    """mpi4py's check of a sequence whose length the call fixes."""
    values = _ints(values, call, what)
    if len(values) != n:
        raise ValueError(f"expecting {n} items, got {len(values)}")
    return values


class Cart:
    """A Cartesian topology: ``dims`` and ``periods``; ranks in row-major order."""

    kind = CART

    def __init__(self, dims: list[int], periods: list[bool]):
        self.dims, self.periods = dims, periods

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def coords(self, rank: int) -> list[int]:
        out = []
        for d in reversed(self.dims):
            rank, c = divmod(rank, d)
            out.append(c)
        return out[::-1]

    def rank(self, coords: list[int], call: str) -> int:
        rank = 0
        for c, d, periodic in zip(coords, self.dims, self.periods):
            if periodic:
                c %= d
            elif not 0 <= c < d:
                raise MPIException(ERR_ARG, f"{call}: coordinate {c} is outside the non-periodic dimension of "
                                            f"size {d} (coords {coords})")
            rank = rank * d + c
        return rank

    def shift(self, rank: int, direction: int, disp: int, call: str) -> tuple[int, int]:
        if not 0 <= direction < len(self.dims):
            raise MPIException(ERR_DIMS, f"{call}: direction={direction} of a {len(self.dims)}-dimensional grid")
        coords = self.coords(rank)

        def moved(by: int) -> int:
            c = coords[direction] + by
            if not self.periods[direction] and not 0 <= c < self.dims[direction]:
                return PROC_NULL
            return self.rank(coords[:direction] + [c] + coords[direction + 1:], call)

        return moved(-disp), moved(disp)

    def neighbors(self, rank: int):
        """(sources, destinations, receive tags, send tags): per dimension
        the lower then the upper neighbour. The block sent up arrives in the
        receiver's lower slot and the block sent down in its upper slot,
        also when both are one process (a periodic dimension of 1 or 2)."""
        ranks, recv_tags, send_tags = [], [], []
        for d in range(len(self.dims)):
            ranks.extend(self.shift(rank, d, 1, "neighbors"))
            recv_tags.extend((2 * d, 2 * d + 1))
            send_tags.extend((2 * d + 1, 2 * d))
        return ranks, ranks, recv_tags, send_tags


class Graph:
    """A graph topology: MPI's ``index`` (cumulative degrees) and ``edges``."""

    kind = GRAPH

    def __init__(self, index: list[int], edges: list[int]):
        self.index, self.edges = index, edges
        self.size = len(index)

    def of(self, rank: int, call: str) -> list[int]:
        if not 0 <= rank < len(self.index):
            raise MPIException(ERR_RANK, f"{call}: rank={rank} of a graph of {len(self.index)} nodes")
        return self.edges[(self.index[rank - 1] if rank else 0):self.index[rank]]

    def neighbors(self, rank: int):
        ranks = self.of(rank, "neighbors")
        return ranks, ranks, [0] * len(ranks), [0] * len(ranks)


class DistGraph:
    """A distributed graph: this rank's sources and destinations, with weights."""

    kind = DIST_GRAPH

    def __init__(self, sources, destinations, weights, size: int):
        self.sources, self.destinations, self.weights = sources, destinations, weights
        self.size = size  # every rank of the communicator is a node

    def neighbors(self, rank: int):
        return self.sources, self.destinations, [0] * len(self.sources), [0] * len(self.destinations)


# -- the communicators ------------------------------------------------------------------
class Topocomm(NeighborCollectives, Intracomm):
    """A communicator with a topology; ``MPI.Topocomm(comm)`` of one without raises TypeError."""

    _kinds = (CART, GRAPH, DIST_GRAPH)
    _expecting = "a topology communicator"

    def _init(self, comm=None) -> None:
        super()._init(comm)
        st = self._live()
        if st is not None and (st.topo is None or st.topo.kind not in self._kinds):
            raise TypeError(f"expecting {self._expecting}")

    def _topo(self):
        return self._st().topo

    @property
    def degrees(self) -> tuple[int, int]:
        sources, destinations, _, _ = self._topo().neighbors(self.Get_rank())
        return len(sources), len(destinations)

    indegree = property(lambda self: self.degrees[0])
    outdegree = property(lambda self: self.degrees[1])

    @property
    def inoutedges(self) -> tuple[list[int], list[int]]:
        sources, destinations, _, _ = self._topo().neighbors(self.Get_rank())
        return list(sources), list(destinations)

    inedges = property(lambda self: self.inoutedges[0])
    outedges = property(lambda self: self.inoutedges[1])


class Cartcomm(Topocomm):
    """A Cartesian communicator."""

    _kinds, _expecting = (CART,), "a Cartesian communicator"

    def Get_dim(self) -> int:
        return len(self._topo().dims)

    dim = ndim = property(Get_dim)

    def Get_topo(self) -> tuple[list[int], list[int], list[int]]:
        topo = self._topo()
        return list(topo.dims), [int(p) for p in topo.periods], topo.coords(self.Get_rank())

    topo = property(Get_topo)
    dims = property(lambda self: self.Get_topo()[0])
    periods = property(lambda self: self.Get_topo()[1])
    coords = property(lambda self: self.Get_topo()[2])

    def Get_cart_rank(self, coords) -> int:
        topo = self._topo()
        return topo.rank(_exactly(coords, len(topo.dims), "Get_cart_rank", "coords"), "Get_cart_rank")

    def Get_coords(self, rank: int) -> list[int]:
        st = self._st()
        if not 0 <= rank < st.size:
            raise MPIException(ERR_RANK, f"Get_coords: rank={rank} on {st.name} of {st.size} ranks")
        return st.topo.coords(int(rank))

    def Shift(self, direction: int, disp: int) -> tuple[int, int]:
        """(source, dest): the ranks ``disp`` below and above along ``direction``."""
        return self._topo().shift(self.Get_rank(), int(direction), int(disp), "Shift")

    def Sub(self, remain_dims) -> "Cartcomm":
        """The sub-grids that keep the dimensions where ``remain_dims`` is
        true (collective): one Cartesian communicator per sub-grid."""
        st = self._st()
        topo = st.topo
        keep = [bool(k) for k in _exactly(remain_dims, len(topo.dims), "Sub", "remain_dims")]
        coords = topo.coords(st.rank)
        kept = Cart([d for d, k in zip(topo.dims, keep) if k], [p for p, k in zip(topo.periods, keep) if k])
        dropped = Cart([d for d, k in zip(topo.dims, keep) if not k], [False] * keep.count(False))
        color = dropped.rank([c for c, k in zip(coords, keep) if not k], "Sub")
        key = kept.rank([c for c, k in zip(coords, keep) if k], "Sub")
        return _with_topology(self.Split(color, key), kept, Cartcomm, f"Sub({keep}) of {st.name}")


class Graphcomm(Topocomm):
    """A graph communicator."""

    _kinds, _expecting = (GRAPH,), "a general graph communicator"

    def Get_dims(self) -> tuple[int, int]:
        topo = self._topo()
        return len(topo.index), len(topo.edges)

    dims = property(Get_dims)
    nnodes = property(lambda self: self.Get_dims()[0])
    nedges = property(lambda self: self.Get_dims()[1])

    def Get_topo(self) -> tuple[list[int], list[int]]:
        topo = self._topo()
        return list(topo.index), list(topo.edges)

    topo = property(Get_topo)
    index = property(lambda self: self.Get_topo()[0])
    edges = property(lambda self: self.Get_topo()[1])

    def Get_neighbors_count(self, rank: int) -> int:
        return len(self._topo().of(int(rank), "Get_neighbors_count"))

    def Get_neighbors(self, rank: int) -> list[int]:
        return list(self._topo().of(int(rank), "Get_neighbors"))

    nneighbors = property(lambda self: self.Get_neighbors_count(self.Get_rank()))
    neighbors = property(lambda self: self.Get_neighbors(self.Get_rank()))


class Distgraphcomm(Topocomm):
    """A distributed graph communicator."""

    _kinds, _expecting = (DIST_GRAPH,), "a distributed graph communicator"

    def Get_dist_neighbors_count(self) -> tuple[int, int, bool]:
        topo = self._topo()
        return len(topo.sources), len(topo.destinations), topo.weights is not None

    def Get_dist_neighbors(self):
        topo = self._topo()
        return list(topo.sources), list(topo.destinations), topo.weights


for _cls in (Topocomm, Cartcomm, Graphcomm, Distgraphcomm):
    _errhandlers.guard_calls(_cls)
CLASS_OF_TOPOLOGY.update({CART: Cartcomm, GRAPH: Graphcomm, DIST_GRAPH: Distgraphcomm})


def _with_topology(comm, topo, cls, name: str):
    """The new communicator ``comm`` (or COMM_NULL) as a ``cls`` with ``topo``."""
    out = new_handle(cls)
    if comm:
        out._state = comm._state
        out._state.topo, out._state.name = topo, name
        _handleleaks.handle_given(out, out._state)  # the user's object now (for --check=handle-leak)
    return out


def _topology_comm(comm, topo, cls):
    """Collective over ``comm``: its first ``topo.size`` ranks get a ``cls``."""
    st = comm._st()
    if topo.size > st.size:
        raise MPIException(ERR_ARG, f"{cls.__name__}: the topology has {topo.size} processes, {st.name} "
                                    f"only {st.size}")
    member = st.rank < topo.size
    return _with_topology(comm.Split(0 if member else UNDEFINED, st.rank), topo, cls, f"{cls.__name__} of {st.name}")


def _weights(weights, n: int, call: str):
    """mpi4py's weights argument: None or MPI.UNWEIGHTED (no weights),
    MPI.WEIGHTS_EMPTY (none, with zero degree), else ``n`` ints."""
    if weights is None or (isinstance(weights, int) and weights == UNWEIGHTED):
        return None
    if isinstance(weights, int) and weights == WEIGHTS_EMPTY:
        if n > 0:
            raise ValueError("empty weights but nonzero degree")
        return []
    return _exactly(weights, n, call, "weights")


def _check_ranks(ranks, size: int, call: str) -> None:
    bad = [r for r in ranks if not 0 <= r < size]
    if bad:  # MPI_ERR_ARG, as Open MPI's Dist_graph_create_adjacent
        raise MPIException(ERR_ARG, f"{call}: ranks {bad} of a communicator of {size}")


# -- constructors (methods of Intracomm) -------------------------------------------------
def Create_cart(self, dims, periods=None, reorder: bool = False) -> Cartcomm:
    """A Cartesian communicator of ``prod(dims)`` ranks (collective)."""
    dims = _ints(dims, "Create_cart", "dims")
    if periods is None or isinstance(periods, bool):
        periods = [bool(periods)] * len(dims)
    periods = [bool(p) for p in _exactly(periods, len(dims), "Create_cart", "periods")]
    if any(d <= 0 for d in dims):
        raise MPIException(ERR_DIMS, f"Create_cart: dims={dims} must be positive")
    return _topology_comm(self, Cart(dims, periods), Cartcomm)


def Create_graph(self, index, edges, reorder: bool = False) -> Graphcomm:
    """A graph communicator of ``len(index)`` nodes (collective); ``index``
    may start with 0 (mpi4py's extension)."""
    index, edges = _ints(index, "Create_graph", "index"), _ints(edges, "Create_graph", "edges")
    if len(index) > 1 and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    if any(b < a for a, b in zip([0] + index, index)) or (index and index[-1] != len(edges)):
        raise MPIException(ERR_ARG, f"Create_graph: index={index} is not the cumulative degrees of "
                                    f"{len(edges)} edges")
    _check_ranks(edges, len(index), "Create_graph")
    return _topology_comm(self, Graph(index, edges), Graphcomm)


def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None, destweights=None, info=None,
                               reorder: bool = False) -> Distgraphcomm:
    """A distributed graph where each rank names its own sources and
    destinations (collective)."""
    st = self._st()
    sources = [] if sources is None else _ints(sources, "Create_dist_graph_adjacent", "sources")
    destinations = [] if destinations is None else _ints(destinations, "Create_dist_graph_adjacent",
                                                        "destinations")
    sw = _weights(sourceweights, len(sources), "Create_dist_graph_adjacent")
    dw = _weights(destweights, len(destinations), "Create_dist_graph_adjacent")
    _check_ranks(sources + destinations, st.size, "Create_dist_graph_adjacent")
    weights = None if sw is None and dw is None else (sw or [1] * len(sources), dw or [1] * len(destinations))
    return _topology_comm(self, DistGraph(sources, destinations, weights, st.size), Distgraphcomm)


def Create_dist_graph(self, sources, degrees, destinations, weights=None, info=None,
                      reorder: bool = False) -> Distgraphcomm:
    """A distributed graph where each rank names any edges (collective):
    ``degrees[i]`` edges from ``sources[i]``, to the next entries of
    ``destinations``."""
    st = self._st()
    sources = _ints(sources, "Create_dist_graph", "sources")
    degrees = _exactly(degrees, len(sources), "Create_dist_graph", "degrees")
    destinations = _exactly(destinations, sum(degrees), "Create_dist_graph", "destinations")
    w = _weights(weights, len(destinations), "Create_dist_graph")
    _check_ranks(sources + destinations, st.size, "Create_dist_graph")
    if any(d < 0 for d in degrees):
        raise MPIException(ERR_ARG, f"Create_dist_graph: degrees={degrees} must be >= 0")
    origins = [s for s, d in zip(sources, degrees) for _ in range(d)]
    edges = list(zip(origins, destinations, w if w else [1] * len(destinations)))
    every = self.allgather(edges)  # the graph: every rank's edges, in rank order
    me = st.rank
    incoming = [(s, wt) for rank_edges in every for s, d, wt in rank_edges if d == me]
    outgoing = [(d, wt) for rank_edges in every for s, d, wt in rank_edges if s == me]
    weighted = None if w is None else ([wt for _, wt in incoming], [wt for _, wt in outgoing])
    topo = DistGraph([s for s, _ in incoming], [d for d, _ in outgoing], weighted, st.size)
    return _topology_comm(self, topo, Distgraphcomm)


def Cart_map(self, dims, periods=None) -> int:
    """The rank this process would have in ``Create_cart(dims)`` (its own,
    or MPI.UNDEFINED beyond the grid)."""
    st = self._st()
    size = math.prod(_ints(dims, "Cart_map", "dims"))
    if size > st.size:
        raise MPIException(ERR_DIMS, f"Cart_map: dims={list(dims)} need {size} ranks, {st.name} has {st.size}")
    return st.rank if st.rank < size else UNDEFINED


def Graph_map(self, index, edges) -> int:
    st = self._st()
    index, edges = _ints(index, "Graph_map", "index"), _ints(edges, "Graph_map", "edges")
    if len(index) > 1 and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    if len(index) > st.size:
        raise MPIException(ERR_TOPOLOGY, f"Graph_map: {len(index)} nodes, {st.name} has {st.size} ranks")
    return st.rank if st.rank < len(index) else UNDEFINED


class _Constructors(Intracomm):
    """Only to wrap the constructors in the communicator's error handler."""


_NAMES = ("Create_cart", "Create_graph", "Create_dist_graph", "Create_dist_graph_adjacent", "Cart_map", "Graph_map")
for _name in _NAMES:
    setattr(_Constructors, _name, globals()[_name])
_errhandlers.guard_calls(_Constructors)
#: The methods ``MPI`` attaches to ``Intracomm``.
CONSTRUCTORS = {name: vars(_Constructors)[name] for name in _NAMES}
