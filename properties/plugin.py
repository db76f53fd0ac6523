"""The pytest plugin: run property suites against any backend.

Registered through the ``pytest11`` entry point, so installing simdist is
enough. Options:

``--simdist-backend sim|mpi|MODULE:FACTORY[,...]``
    what to test (default ``sim``); ``MODULE:FACTORY`` wraps the simulator's
    communicator: ``FACTORY(base)`` returns the communicator to test. Several,
    separated by commas, run every test against each (one world serves them
    all);
``--simdist-factory MODULE:FACTORY``
    the same, wrapping the communicator of ``--simdist-backend`` (e.g. mpi);
``--simdist-np N``
    ranks of the world (default 4);
``--simdist-timeout S``
    seconds before a waiting rank is reported as hung (default 30);
``--simdist-first-failure``
    once a backend fails a test, skip its remaining tests (a kill table's
    "which property catches it first", at a fraction of the time).

Fixtures: ``world``, a :class:`properties.Backend` whose ``run(fn, *args)``
calls ``fn(comm, *args)`` on every rank with the communicator under test (one
persistent world per size for the whole session, so all Hypothesis examples
share it); ``comm``: a test that asks for it runs its body on every rank,
with the communicator under test. Marker: ``@pytest.mark.world_size(n)``
for a world of ``n`` ranks instead of ``--simdist-np``.

A failing test gets a "simdist replay" section: the one command that runs
that test again with the same backend, size and Hypothesis seed.
"""

from __future__ import annotations

import random
import shlex
import sys

import pytest

from ._backend import Backend, parse_spec

_WORLDS = pytest.StashKey[dict]()
_FAILED = pytest.StashKey[dict]()      # backend spec -> the first test it failed


def pytest_addoption(parser):
    group = parser.getgroup("simdist", "simdist: the backend that property suites test")
    group.addoption("--simdist-backend", default="sim", metavar="sim|mpi|MODULE:FACTORY",
                    help="backend to test (default sim)")
    group.addoption("--simdist-factory", default=None, metavar="MODULE:FACTORY",
                    help="test FACTORY(base), base being --simdist-backend's communicator")
    group.addoption("--simdist-np", type=int, default=4, metavar="N", help="ranks (default 4)")
    group.addoption("--simdist-timeout", type=float, default=30.0, metavar="S",
                    help="seconds before a waiting rank is reported as hung (default 30)")
    group.addoption("--simdist-sync-sends", dest="simdist_sync_sends", action="store_true", default=True,
                    help="every send waits until its recv takes the message, as MPI's Ssend (the default)")
    group.addoption("--simdist-buffered-sends", dest="simdist_sync_sends", action="store_false",
                    help="sends return once the message is buffered (the World default)")
    group.addoption("--simdist-first-failure", action="store_true",
                    help="once a backend fails a test, skip its remaining tests")


def pytest_configure(config):
    config.addinivalue_line("markers", "world_size(n): run the test on a world of n ranks")
    config.stash[_WORLDS] = {}
    config.stash[_FAILED] = {}


def pytest_unconfigure(config):
    for key, world in config.stash.get(_WORLDS, {}).items():
        if not isinstance(world, Backend):
            world.close()


def pytest_generate_tests(metafunc):
    specs = _specs(metafunc.config)
    if len(specs) > 1 and {"world", "comm"} & set(metafunc.fixturenames):
        metafunc.parametrize("simdist_backend_spec", specs, ids=specs)


@pytest.fixture
def simdist_backend_spec(request) -> str:
    """The backend a test runs against (parametrised when several are given)."""
    return _specs(request.config)[0]


def _specs(config) -> list[str]:
    return [s.strip() for s in config.getoption("simdist_backend").split(",") if s.strip()]


def _backend(config, size: int, spec: str) -> Backend:
    """The backend ``spec`` on ``size`` ranks; backends of one kind share a world."""
    cache = config.stash[_WORLDS]
    if (spec, size) not in cache:
        import simdist

        kind, factory = parse_spec(spec, config.getoption("simdist_factory"))
        if ("world", kind, size) not in cache:
            cache["world", kind, size] = simdist.World(size, kind, timeout=config.getoption("simdist_timeout"),
                                                       sync_sends=config.getoption("simdist_sync_sends"))
        cache[spec, size] = Backend(kind, factory, size, cache["world", kind, size])
    return cache[spec, size]


def _size(node) -> int:
    marker = node.get_closest_marker("world_size")
    return int(marker.args[0]) if marker else node.config.getoption("simdist_np")


@pytest.fixture
def world(request, simdist_backend_spec) -> Backend:
    """The backend under test, on a persistent world (see the module docstring)."""
    return _backend(request.config, _size(request.node), simdist_backend_spec)


@pytest.fixture
def comm(request, simdist_backend_spec):
    """Marks a test whose body runs on every rank; see ``pytest_pyfunc_call``."""
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if "comm" not in pyfuncitem.funcargs:
        return None
    backend = _backend(pyfuncitem.config, _size(pyfuncitem), pyfuncitem.funcargs["simdist_backend_spec"])
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names if name not in ("comm", "world")}
    backend.run(_on_rank_test, pyfuncitem.obj, kwargs)
    return True


def _on_rank_test(comm, test, kwargs):
    return test(comm=comm, **kwargs)


def pytest_collection_modifyitems(config, items):
    """Give tests that use the backend a seed and let Hypothesis share the world.

    The ``world`` fixture is function-scoped (its size can differ per test)
    but returns a session-wide world, which is exactly what Hypothesis'
    function-scoped-fixture health check warns about; it is safe here.
    """
    users = [item for item in items if {"world", "comm"} & set(getattr(item, "fixturenames", ()))]
    if not users:
        return
    from hypothesis import HealthCheck, core, settings

    if config.getoption("hypothesis_seed", None) is None and core.global_force_seed is None:
        core.global_force_seed = random.SystemRandom().randrange(2**32)
    for item in users:
        test = getattr(item, "obj", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if chosen is not None and HealthCheck.function_scoped_fixture not in chosen.suppress_health_check:
            test._hypothesis_internal_use_settings = settings(
                chosen, suppress_health_check=[*chosen.suppress_health_check, HealthCheck.function_scoped_fixture])


def pytest_report_header(config):
    seed = _seed()
    return (f"simdist: backend {config.getoption('simdist_backend')}"
            + (f" + {config.getoption('simdist_factory')}" if config.getoption("simdist_factory") else "")
            + f", {config.getoption('simdist_np')} ranks"
            + (f", hypothesis seed {seed}" if seed is not None else ""))


def pytest_terminal_summary(terminalreporter, config):
    if _seed() is not None and config.stash.get(_WORLDS, None):
        terminalreporter.write_line(f"simdist: hypothesis seed {_seed()} "
                                    f"(pass --hypothesis-seed={_seed()} to run the same examples again)")


def _seed():
    core = sys.modules.get("hypothesis.core")
    return getattr(core, "global_force_seed", None)


def replay_command(item) -> str:
    """The command that runs ``item`` again with this session's backend and seed."""
    config = item.config
    spec = item.funcargs.get("simdist_backend_spec") if hasattr(item, "funcargs") else None
    args = [sys.executable, "-m", "pytest", f"{item.path}::{item.originalname}",
            "--simdist-backend", spec or config.getoption("simdist_backend"),
            "--simdist-np", str(config.getoption("simdist_np"))]
    if config.getoption("simdist_factory"):
        args += ["--simdist-factory", config.getoption("simdist_factory")]
    if _seed() is not None:
        args += [f"--hypothesis-seed={_seed()}"]
    return shlex.join(args)


def _spec_of(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "simdist_backend_spec" in callspec.params:
        return callspec.params["simdist_backend_spec"]
    return _specs(item.config)[0]


def pytest_runtest_setup(item):
    if item.config.getoption("simdist_first_failure") and {"world", "comm"} & set(item.fixturenames):
        first = item.config.stash[_FAILED].get(_spec_of(item))
        if first is not None:
            pytest.skip(f"{_spec_of(item)} already failed {first}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    uses_backend = {"world", "comm"} & set(getattr(item, "fixturenames", ()))
    if report.failed and uses_backend:
        item.config.stash[_FAILED].setdefault(_spec_of(item), item.originalname)
    if report.when == "call" and report.failed and uses_backend:
        report.sections.append(("simdist replay", f"seed {_seed()}; replay this failure with:\n"
                                                  f"  {replay_command(item)}"))
