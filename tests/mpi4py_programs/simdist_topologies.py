"""Process topologies: MPI.Compute_dims, Comm.Create_cart and Cartcomm
(Get_topo, Get_coords, Get_cart_rank, Shift, Sub), Create_graph and
Graphcomm, Create_dist_graph(_adjacent) and Distgraphcomm, Get_topology,
and the neighbour collectives (Neighbor_allgather(v), Neighbor_alltoall(v/w),
Ineighbor_alltoall, neighbor_allgather, neighbor_alltoall) with
MPI.PROC_NULL neighbours (a non-periodic grid), periodic dimensions of one
or two processes (both neighbours the same rank) and a graph naming its
neighbours twice.

Origin: written for this project (mpi4py's tutorial has no example of these
calls).
"""
# simdist-run: 1
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4
# simdist-run: 5

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

dims = MPI.Compute_dims(size, 2)
cart = comm.Create_cart(dims, periods=[True, False])
print(f"rank {rank}: dims {dims} topology {cart.Get_topology() == MPI.CART} topo {cart.topo} "
      f"coords {cart.Get_coords(rank)} shifts {cart.Shift(0, 1)} {cart.Shift(1, 1)} {cart.Shift(1, -2)} "
      f"cart_rank {cart.Get_cart_rank([cart.coords[0] + dims[0], 0])} neighbours {cart.inoutedges[0]}")
rows, cols = cart.Sub([False, True]), cart.Sub([True, False])
print(f"rank {rank}: row rank {rows.rank} of {rows.size} dims {rows.dims}; column rank {cols.rank} of {cols.size} "
      f"dims {cols.dims} periods {cols.periods}; point {cart.Sub([False, False]).Get_topo()}")

recv = np.full(4, -1, dtype="i")
cart.Neighbor_allgather(np.array([rank], dtype="i"), recv)
send = np.array([100 * rank + k for k in range(4)], dtype="i")
got = np.full(4, -1, dtype="i")
cart.Neighbor_alltoall(send, got)
print(f"rank {rank}: cart allgather {recv.tolist()} alltoall {got.tolist()} objects "
      f"{cart.neighbor_allgather(rank)} {cart.neighbor_alltoall([(rank, k) for k in range(4)])}")

ring = comm.Create_cart([size], periods=True)
got = np.full(2, -1.0)
if size >= 3:  # Open MPI's nonblocking form misplaces the blocks when both neighbours are one rank (see docs)
    request = ring.Ineighbor_alltoall(np.array([10.0 * rank, 10.0 * rank + 1]), got)
    request.Wait()
print(f"rank {rank}: ring shifts {ring.Shift(0, 1)} alltoall {got.tolist()}")

# a graph whose every node names its right and left neighbours twice: right, left, right, left
right, left = (rank + 1) % size, (rank - 1) % size
index = [4 * (i + 1) for i in range(size)]
edges = [e for i in range(size) for e in ((i + 1) % size, (i - 1) % size) * 2]
graph = comm.Create_graph(index, edges)
got = np.full(4, -1, dtype="i")
graph.Neighbor_alltoall(send, got)
gotv = np.full(8, -1, dtype="i")
graph.Neighbor_allgatherv(np.arange(1 + rank % 2, dtype="i") + 10 * rank, [gotv, [1 + right % 2, 1 + left % 2] * 2])
print(f"rank {rank}: graph {graph.Get_topology() == MPI.GRAPH} dims {graph.dims} neighbours {graph.neighbors} "
      f"alltoall {got.tolist()} allgatherv {gotv.tolist()} objects {graph.neighbor_alltoall(list('abcd'))}")

sources, destinations = [left, (rank - 2) % size], [right, (rank + 2) % size]
adjacent = comm.Create_dist_graph_adjacent(sources, destinations, [1, 2], [3, 4])
sendv = np.arange(3, dtype="d") + 100 * rank
gotv = np.full(4, -1.0)
adjacent.Neighbor_alltoallv([sendv, ([1, 2], [0, 1])], [gotv, ([2, 2], [0, 2])])
gotw = np.full(2, -1, dtype="i")
adjacent.Neighbor_alltoallw([np.array([rank, -rank], dtype="i"), ([1, 1], [0, 4]), [MPI.INT, MPI.INT]],
                            [gotw, ([1, 1], [0, 4]), [MPI.INT, MPI.INT]])
print(f"rank {rank}: dist graph {adjacent.Get_topology() == MPI.DIST_GRAPH} {adjacent.Get_dist_neighbors()} "
      f"{adjacent.Get_dist_neighbors_count()} alltoallv {gotv.tolist()} alltoallw {gotw.tolist()}")

general = comm.Create_dist_graph([rank], [1], [right], MPI.UNWEIGHTED)
print(f"rank {rank}: general dist graph {general.Get_dist_neighbors()} {general.neighbor_allgather(rank)}")
