"""The leak guard (conftest.py) blames a test for what its own processes
leave in /dev/shm, and not for what other jobs on the machine create
meanwhile (an Open MPI job of another user, whose segments appear and
stay while a test runs)."""

import os
import pathlib
import shutil
import subprocess
import uuid

import conftest
import private_shm
import pytest

needs_private_shm = pytest.mark.skipif(
    not private_shm.is_private(),
    reason="this pytest has no /dev/shm of its own (not root, or no mount namespace): "
    "the guard falls back to the processes that map a file",
)


def _snapshot():
    return (set(conftest.descendants()), conftest.dev_shm(), conftest.memfds(), conftest.temp_dirs())


def _segment_name() -> str:
    # Named like Open MPI's shared-memory segments: sm_segment.HOST.UID.JOBID.LOCALRANK
    return f"sm_segment.vm.0.{uuid.uuid4().hex[:8]}.0"


def _in_host_namespace(*command: str) -> None:
    subprocess.run(
        ["nsenter", f"--mount={private_shm.host_namespace_path()}", *command], check=True, timeout=30
    )


@needs_private_shm
@pytest.mark.skipif(shutil.which("nsenter") is None, reason="no nsenter (util-linux)")
def test_a_segment_another_job_leaves_meanwhile_is_not_the_tests_leak():
    before = _snapshot()
    name = _segment_name()
    # Another job, outside this test process's tree, leaves its segment
    # in the machine's /dev/shm and ends: no process maps it any more.
    _in_host_namespace("sh", "-c", f"echo other-job > /dev/shm/{name}")
    try:
        assert conftest._leaks(before) == []
    finally:
        _in_host_namespace("rm", "-f", f"/dev/shm/{name}")


def test_a_segment_the_tests_own_process_leaves_is_a_leak():
    before = _snapshot()
    name = _segment_name()
    # A process the test started writes the segment and exits without
    # removing it, as an MPI rank killed with SIGKILL does.
    subprocess.run(["sh", "-c", f"echo ours > /dev/shm/{name}"], check=True, timeout=30)
    try:
        assert conftest._leaks(before) == [f"/dev/shm/{name}"]
    finally:
        pathlib.Path("/dev/shm", name).unlink(missing_ok=True)


@needs_private_shm
def test_the_guards_dev_shm_is_not_the_machines():
    name = _segment_name()
    pathlib.Path("/dev/shm", name).write_text("ours")
    try:
        seen_from_host = subprocess.run(
            ["nsenter", f"--mount={private_shm.host_namespace_path()}", "ls", "/dev/shm"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
        assert name not in seen_from_host
        assert name in os.listdir("/dev/shm")
    finally:
        pathlib.Path("/dev/shm", name).unlink(missing_ok=True)
