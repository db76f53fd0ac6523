"""MPI-IO of the simulated mpi4py (``MPI.File``) beyond the program that
``tests/mpi4py_programs/simdist_file_io.py`` compares with Open MPI: a file
the program leaves open, the error handlers of files and of
``MPI.FILE_NULL``, and views whose filetype is not contiguous."""

from __future__ import annotations

from test_mpi4py_api import ok, run


def test_a_file_left_open_is_closed_when_the_run_ends_leaving_nothing(tmp_path):
    # the leak guard checks that the shared file pointer's file is gone too
    ok(tmp_path, f"""
        fh = MPI.File.Open(comm, {str(tmp_path / 'open.bin')!r}, MPI.MODE_WRONLY | MPI.MODE_CREATE)
        fh.Write_at(rank, np.array([rank], dtype="u1"))
    """, n=3)
    assert (tmp_path / "open.bin").read_bytes() == bytes([0, 1, 2])


def test_a_files_errors_go_through_its_error_handler(tmp_path):
    ok(tmp_path, f"""
        fh = MPI.File.Open(comm, {str(tmp_path / 'h.bin')!r}, MPI.MODE_RDWR | MPI.MODE_CREATE)
        assert fh.Get_errhandler() == MPI.ERRORS_RETURN and MPI.FILE_NULL.Get_errhandler() == MPI.ERRORS_RETURN
        seen = []
        handler = MPI.File.Create_errhandler(lambda f, code: seen.append((f == fh, MPI.Get_error_class(code))))
        fh.Set_errhandler(handler)
        try:
            fh.Seek(0, whence=12345)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_ARG
        else:
            raise AssertionError("a bad whence was taken")
        assert seen == [(True, MPI.ERR_ARG)], seen
        handler.Free()
        fh.Close()
        assert not fh and fh == MPI.FILE_NULL
    """, n=2)


def test_an_open_error_under_file_nulls_fatal_handler_ends_the_run(tmp_path, capfd):
    outcome = run(tmp_path, f"""
        MPI.FILE_NULL.Set_errhandler(MPI.ERRORS_ARE_FATAL)
        MPI.File.Delete({str(tmp_path / 'missing.bin')!r})
        print("caught: the handler was not honoured", flush=True)
    """, n=1)
    assert outcome.status == 1 and "an error occurred in File.Delete on MPI_FILE_NULL" in outcome.error, outcome.error
    assert "MPI_ERR_NO_SUCH_FILE" in outcome.error and "caught" not in capfd.readouterr().out


def test_ranks_killed_with_a_file_open_leave_no_shared_pointer_behind(tmp_path):
    # a hang ends with the ranks killed: no release runs, yet the leak guard finds nothing
    outcome = run(tmp_path, f"""
        import os, signal
        fh = MPI.File.Open(comm, {str(tmp_path / 'open.bin')!r}, MPI.MODE_WRONLY | MPI.MODE_CREATE)
        os.kill(os.getpid(), signal.SIGKILL)
    """, n=2, timeout=5.0)
    assert outcome.status != 0
