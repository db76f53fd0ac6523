"""The rank side of a world, common to every backend: the channel to the
driver, log forwarding, and running one function.

Messages from the driver (pickled tuples)::

    ("run", run_id, payload, sys_path, cwd, log_levels)   payload = cloudpickle of (fn, args, kwargs)
    ("exit",)

Messages to the driver::

    ("ready", pid)
    ("log", record)                              a LogRecord, message already formatted
    ("done", run_id, outcome, data)              outcome: ok, error, mismatch, aborted
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback

from . import _pickling
from ._errors import Aborted, CollectiveMismatch, SimdistError
from ._frames import user_frame

_current = None  # the communicator of the function this rank is running
_at_return: list = []  # callbacks for the end of that function (see at_return)


def comm():
    """The communicator of the rank this code runs on.

    Inside a function run by ``World.run`` or a script run by ``simdist run``
    it returns the same communicator the function was given; elsewhere it
    raises SimdistError.
    """
    if _current is None:
        raise SimdistError(
            "simdist.comm() is only available on a rank: run the script with "
            "`simdist run -n N script.py`, or call it inside a function passed to World.run"
        )
    return _current


def at_return(callback) -> None:
    """Call ``callback(returned)`` when the function this rank runs ends:
    ``returned`` is True if it returned (what the callback raises is then
    the rank's error, as if the function had raised it), False if it raised
    (what the callback raises is dropped: the function's error is the one)."""
    _at_return.append(callback)


def _function_ended(returned: bool) -> None:
    """Call the ``at_return`` callbacks not yet called, in the order given."""
    while _at_return:
        callback = _at_return.pop(0)
        if returned:
            callback(True)
        else:
            try:
                callback(False)
            except BaseException:
                pass


_PR_SET_PDEATHSIG = 1


class Channel:
    """The rank's end of its pipe; sends are serialised so that log records
    from any thread and the final result never interleave. A process forked
    by the rank's code inherits the pipe but does not write on it: its
    messages would interleave with the rank's."""

    def __init__(self, conn):
        self.conn = conn
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def send(self, msg) -> None:
        if os.getpid() != self.pid:
            return
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self.lock:
            self.conn.send_bytes(data)


class ForwardHandler(logging.Handler):
    """Sends every record to the driver, which hands it to its own loggers."""

    def __init__(self, channel: Channel):
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            record.msg = record.getMessage()
            record.args = None
            if record.exc_info:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
                record.exc_info = None
            record.stack_info = record.stack_info
            self.channel.send(("log", record))
        except Exception:
            self.handleError(record)


def become_worker(own_fds) -> None:
    """Make this process a simulator rank's worker, before anything else runs in it.

    It dies with its parent and ignores Ctrl-C (see :func:`ignore_interrupts`).
    It leads a session and process group of its own, which whatever the rank's code
    starts joins: the driver ends the whole group with the rank (and the
    terminal's Ctrl-C, meant for the driver, no longer reaches the rank).
    It may have children, although multiprocessing started it as a daemon
    and refuses children to daemons (``multiprocessing.Pool``,
    ``ProcessPoolExecutor`` and a World inside a rank): the driver ends them.
    Its own descriptors ``own_fds`` are made close-on-exec (the spawn and
    fork-server start methods hand them over inheritable).
    """
    die_with_parent()
    ignore_interrupts()
    try:  # a session, not only a group: rank 0 may read the terminal, which a
        os.setsid()  # background group of the driver's session may not (SIGTTIN)
    except OSError:  # pragma: no cover - a group leader already
        os.setpgid(0, 0)
    multiprocessing.current_process().daemon = False
    for fd in own_fds:
        os.set_inheritable(fd, False)


def ignore_interrupts() -> None:
    """Ignore SIGINT (the driver handles Ctrl-C), then unblock it: the driver
    starts workers with it blocked, so that none arrives before this."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL us when our parent exits (Linux).

    The parent is the driver (fork, spawn) or multiprocessing's fork server,
    which exits when the driver does (forkserver).
    """
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def watch_lifeline(lifeline) -> None:
    """Exit when the driver's end of the lifeline closes (the driver died).

    The driver's end is the only write end: a worker forked from the driver
    had its copy closed at the fork (``_inherited``).
    """

    def watch():
        while os.read(lifeline.fd, 1):
            pass
        os._exit(70)

    threading.Thread(target=watch, name="simdist-lifeline", daemon=True).start()


def forward_logs(channel: Channel) -> None:
    """Send every record logged in this process to the driver."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(ForwardHandler(channel))


_levels_set: set[str] = set()  # loggers whose level mirrors the driver's


def _configure(sys_path, cwd, log_levels) -> None:
    if sys.path != sys_path:
        sys.path[:] = sys_path
    if cwd and os.getcwd() != cwd:
        os.chdir(cwd)
    for name in _levels_set - log_levels.keys():  # reset in the driver since
        logging.getLogger(name or None).setLevel(logging.NOTSET)
    for name, level in log_levels.items():
        logging.getLogger(name or None).setLevel(level)
    _levels_set.clear()
    _levels_set.update(log_levels)


def execute(rank: int, make_comm, payload: bytes, sys_path, cwd, log_levels, *, started=None, failed=None, returned=None):
    """Run one function on this rank; return (outcome, data).

    ``make_comm()`` builds the rank's communicator; ``started``, ``failed``
    and ``returned`` are called when the function starts, raises, returns.
    """
    global _current
    pid = os.getpid()
    try:
        _configure(sys_path, cwd, log_levels)
        fn, args, kwargs = pickle.loads(payload)
        _current = make_comm()
        if getattr(_current, "transport", None) is not None:  # a simulator rank: torch.distributed joins it
            from .torch._hook import arm

            arm()
        if started:
            started()
        try:
            value = fn(_current, *args, **kwargs)
            if os.getpid() == pid:
                _function_ended(returned=True)
        except BaseException as exc:
            if os.getpid() != pid:
                _leave_forked_child(exc)
            raise
        if os.getpid() != pid:
            _leave_forked_child(None)
    except Aborted as exc:
        failed and failed()
        return "aborted", exc.reason
    except CollectiveMismatch as exc:
        failed and failed()
        return "mismatch", (str(exc), exc.calls, _user_traceback(exc), _call_site(exc))
    except BaseException as exc:
        failed and failed()
        return "error", (_user_traceback(exc), _pickled_or_none(exc))
    finally:
        _function_ended(returned=False)  # the callbacks left: the function raised
        _current = None
    if returned:
        returned()
    try:
        return "ok", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        try:
            return "ok", _pickling.dumps(value)
        except Exception as exc:
            return "error", (
                f"rank {rank} returned a value that cannot be pickled back to the driver: "
                f"{type(value).__name__}: {exc}\n",
                None,
            )


def _leave_forked_child(exc: BaseException | None) -> None:
    """End a process that the rank's code forked and that left the rank's
    function (returned or raised) instead of exiting: it must not go on as
    a second copy of the rank. Exits as a script would: status 0, the
    ``sys.exit`` status, or 1 after printing the traceback."""
    code = 0
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    elif exc is not None:
        traceback.print_exception(exc)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _user_traceback(exc: BaseException) -> str:
    """The formatted traceback from the user's function down: this module's
    frame, which only called it, is left out."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is execute.__code__ and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _call_site(exc: BaseException) -> str:
    """``file:line: source`` of the user's call that raised ``exc``."""
    frame = user_frame(exc.__traceback__)
    if frame is None:
        return ""
    return f"{os.path.basename(frame.filename)}:{frame.lineno}" + (f": {frame.line.strip()}" if frame.line else "")


def _pickled_or_none(exc: BaseException):
    try:
        data = _pickling.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return None
