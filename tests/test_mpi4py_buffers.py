"""The buffers the mpi4py stand-in accepts, as mpi4py does: the buffer
protocol, DLPack (``__dlpack__``, versions 0 and 1) and the CUDA array
interface on host memory, and ``[buf, count, datatype]`` with every type
code of ``MPI._typedict``.

``BUFFERS`` asserts what mpi4py 4.1 under Open MPI gives;
``test_the_program_passes_under_mpiexec`` checks that there. Device memory
(a pointer that is not host memory) cannot be simulated: the stand-in
refuses it with mpi4py's words, which Open MPI, given such a pointer,
would not (it would read it).
"""

from __future__ import annotations

import textwrap

import pytest

from test_mpi4py_api import PRELUDE, ok
from test_mpi4py_handles import run_under_mpiexec

BUFFERS = """
    class DLPack:                       # only DLPack: no buffer protocol
        def __init__(self, array):
            self.array = array

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

    class DLPackV0(DLPack):             # DLPack 0.x: no max_version
        def __dlpack__(self, stream=None):
            return self.array.__dlpack__()

    class CudaArray:                    # the CUDA array interface, on host memory
        def __init__(self, array, readonly=False):
            self.array = array
            self.__cuda_array_interface__ = {"version": 3, "data": (array.ctypes.data, readonly),
                                             "typestr": array.dtype.str, "shape": array.shape}

    def exchange(send, recv, status=None):
        comm.Sendrecv(send, dest=rank, sendtag=7, recvbuf=recv, source=rank, recvtag=7, status=status)

    for wrap in (DLPack, DLPackV0, CudaArray):
        for dtype in ("i", "d", "F", "?", "b", "H", "q"):
            sent, got = np.arange(6).astype(dtype), np.zeros(6, dtype)
            status = MPI.Status()
            exchange(wrap(sent), wrap(got), status)
            assert (got == sent).all(), (wrap, dtype)
            assert status.Get_count(MPI._typedict[np.dtype(dtype).char]) == 6, (wrap, dtype)
        matrix = np.zeros((3, 2))
        exchange([wrap(np.arange(6.0)), 4, MPI.DOUBLE], [wrap(matrix), 4, MPI.DOUBLE])
        assert matrix.ravel().tolist() == [0, 1, 2, 3, 0, 0], wrap

    frozen = np.zeros(3)
    frozen.flags.writeable = False
    for readonly in (DLPack(frozen), CudaArray(np.zeros(3), readonly=True)):
        try:
            exchange(np.ones(3), readonly)
        except BufferError as exc:
            assert "buffer is not writable" in str(exc), exc
        else:
            raise AssertionError("a read-only buffer was written")
    try:
        exchange(np.ones(3), CudaArray(np.zeros((4, 3))[:, 0]))
    except BufferError as exc:
        assert "buffer is not contiguous" in str(exc), exc
    odd = CudaArray(np.zeros(3))
    odd.__cuda_array_interface__["descr"] = 42
    try:
        exchange(np.ones(3), odd)
    except TypeError:
        pass
    else:
        raise AssertionError("a descr that is no list was taken")
    import warnings
    odd.__cuda_array_interface__["descr"] = [("a", "<f8"), ("b", "<f8")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exchange(np.ones(3), odd)
    assert [str(w.message) for w in caught] == ["__cuda_array_interface__: ignoring 'descr' key"], caught
    # strided (F-order) is contiguous too
    fortran = np.asfortranarray(np.zeros((2, 3)))
    exchange(np.arange(6.0), DLPack(fortran))
    assert sorted(fortran.ravel(order="K").tolist()) == list(range(6))

    for table in (MPI._typedict, MPI._typedict_c, MPI._typedict_f):
        for code, datatype in sorted(table.items()):
            size = datatype.Get_size()
            sent = bytearray((7 * i + 1) % 256 for i in range(3 * size))
            specs = [[3, datatype], [(3, 0), datatype], [3, 0, datatype]]
            if table is MPI._typedict:    # a type code names a datatype of this table only
                specs.append([3, code])
            for spec in specs:
                got = bytearray(3 * size)
                try:
                    exchange([sent, *spec], [got, *spec])
                except MPI.Exception as exc:     # an optional datatype Open MPI does not provide
                    assert exc.Get_error_class() == MPI.ERR_TYPE and size == 0, (code, exc)
                    continue
                assert got == sent, (code, spec)
"""

DEVICE_MEMORY = """
    class DeviceArray:                   # a CUDA pointer: not memory of this process
        __cuda_array_interface__ = {"version": 3, "data": (0x10, False), "typestr": "<f8", "shape": (4,)}

    class Pointer:                       # numpy's view of the same pointer, never read
        __array_interface__ = DeviceArray.__cuda_array_interface__

    class DeviceTensor:                  # a DLPack tensor on a CUDA device
        def __dlpack_device__(self):
            return (2, 0)                # kDLCUDA

        def __dlpack__(self, stream=None, **kwargs):
            return np.asarray(Pointer()).__dlpack__(**kwargs)

    for buf in (DeviceArray(), [DeviceArray(), 4, MPI.DOUBLE], DeviceTensor(), [DeviceTensor(), "d"]):
        try:
            comm.Send(buf, dest=rank)
        except BufferError as exc:
            assert "buffer is not CPU-accessible" in str(exc) and "0x10" in str(exc), exc
        else:
            raise AssertionError("device memory was read")
    try:
        comm.Send(object(), dest=rank)
    except TypeError as exc:
        assert "message: expecting buffer or list/tuple" in str(exc)
    else:
        raise AssertionError("an object that is no buffer was sent")
"""


def test_dlpack_cuda_array_interface_and_typecodes_are_buffers(tmp_path):
    ok(tmp_path, BUFFERS, n=1)


def test_device_memory_is_refused_with_mpi4py_words(tmp_path):
    ok(tmp_path, DEVICE_MEMORY, n=1)


@pytest.mark.slow
def test_the_program_passes_under_mpiexec(tmp_path):
    path = tmp_path / "buffers.py"
    path.write_text(PRELUDE + textwrap.dedent(BUFFERS))
    done = run_under_mpiexec(path)
    assert done.returncode == 0, done.stderr[-3000:]
