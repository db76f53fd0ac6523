"""Generalized requests (``MPI.Grequest``) of the simulated mpi4py: the
program's own operation, completed from a thread; what query, free and
cancel functions see; and a request never completed is a reported hang."""

from __future__ import annotations

import pytest

from simdist._script import HUNG
from test_mpi4py_api import ok, run


def test_a_thread_completes_the_request_and_the_wait_fills_the_status_by_query_fn(tmp_path):
    ok(tmp_path, """
        import threading, time
        calls = []
        def query(status, tag):
            calls.append("query")
            status.Set_source(rank)
            status.Set_tag(tag)
            status.Set_elements(MPI.DOUBLE, 3)
        def free(tag):
            calls.append("free")
        def cancel(completed, tag):
            calls.append(("cancel", completed))
        request = MPI.Grequest.Start(query, free, cancel, args=(7,))
        assert not request.Test() and calls == []
        request.Cancel()
        worker = threading.Thread(target=lambda: (time.sleep(0.2), request.complete("done")))
        worker.start()
        status = MPI.Status()
        assert request.wait(status) == "done" and not request   # a thread completed it
        worker.join()
        assert (status.Get_source(), status.Get_tag(), status.Get_count(MPI.DOUBLE)) == (rank, 7, 3)
        assert calls == [("cancel", False), "query", "free"], calls
        comm.Barrier()
    """, n=2)


def test_an_exception_in_query_fn_is_printed_and_raised_as_mpi_error(tmp_path, capfd):
    ok(tmp_path, """
        def query(status):
            raise ValueError("no status")
        request = MPI.Grequest.Start(query)
        request.Complete()
        try:
            request.Wait()
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_OTHER and not request
        else:
            raise AssertionError("the query's exception was lost")
    """, n=1)
    assert "ValueError: no status" in capfd.readouterr().err


@pytest.mark.slow  # the world's timeout
def test_a_request_never_completed_is_a_reported_hang(tmp_path):
    outcome = run(tmp_path, """
        request = MPI.Grequest.Start()
        if rank == 1:
            request.Wait()          # nobody completes it
        comm.Barrier()
    """, n=2, timeout=2)
    assert outcome.status == HUNG, outcome.error
    assert "rank 0: waiting in barrier" in outcome.error and "rank 1: running user code" in outcome.error, \
        outcome.error
