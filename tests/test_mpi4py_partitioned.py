"""Partitioned point to point on the simulated mpi4py (its semantics
against Open MPI are in tests/mpi4py_programs/simdist_partitioned.py):
the errors of a misused partitioned request, and a send waited on before
its last partition is ready, which is a hang naming that partition."""

from __future__ import annotations

from simdist._script import HUNG

from mpi4py_prelude import passes, run_program

HEADER = "import numpy as np\n"


def test_a_send_waited_on_with_a_partition_not_ready_is_a_hang_naming_it(tmp_path):
    outcome = run_program(tmp_path, """
    buf = np.zeros(4, "i")
    if rank == 0:
        req = comm.Psend_init(buf, 2, 1)
        req.Start()
        req.Pready(1)
        req.Wait()
    else:
        req = comm.Precv_init(buf, 2, 0)
        req.Start()
        req.Wait()
    """, 2, timeout=1.0, header=HEADER)
    assert outcome.status == HUNG
    assert "Psend_init(dest=1, tag=0): partitions [0] not marked ready (Pready)" in outcome.error, outcome.error


def test_misused_partitioned_requests_raise_mpi_errors(tmp_path):
    passes(tmp_path, """
    def error_class(call, *args):
        try:
            call(*args)
        except MPI.Exception as exc:
            return exc.Get_error_class()
        raise AssertionError(f"{call.__name__}{args} did not raise")

    buf = np.zeros(4, "i")
    send, recv = comm.Psend_init(buf, 2, rank), comm.Precv_init(buf, 2, rank)
    assert error_class(send.Pready, 0) == MPI.ERR_REQUEST           # not started
    send.Start()
    assert error_class(send.Pready, 2) == MPI.ERR_ARG               # no such partition
    assert error_class(send.Parrived, 0) == MPI.ERR_REQUEST         # a send has no arrivals
    assert error_class(recv.Pready, 0) == MPI.ERR_REQUEST           # a receive is not made ready
    assert error_class(comm.Send_init(buf, rank).Pready, 0) == MPI.ERR_REQUEST  # not partitioned
    try:
        comm.Psend_init(np.zeros(3, "i"), 2, rank)
    except ValueError:
        pass
    else:
        raise AssertionError("3 ints cut in 2 partitions")
    recv.Start()
    send.Pready_list([0, 1])
    MPI.Request.Waitall([send, recv])
    assert recv.Parrived(0)                                          # inactive: its message is in
    send.Free()
    recv.Free()
    """, 1, header=HEADER)
