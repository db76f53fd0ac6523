"""The pytest plugin: run property suites against any backend.

Registered through the ``pytest11`` entry point, so installing simdist is
enough. Options:

``--simdist-backend sim|mpi|torch-gloo|torch-nccl|MODULE:FACTORY[,...]``
    what to test (default ``sim``); ``torch-gloo`` is torch's Gloo on the
    simulated ranks (``torch-nccl``: NCCL, one GPU per rank);
    ``MODULE:FACTORY`` wraps the simulator's communicator: ``FACTORY(base)``
    returns the communicator to test, or a torch process group (tested
    through the contract, ``simdist.torch.check.TorchCommunicator``). Several,
    separated by commas, run every test against each (one world serves them
    all);
``--simdist-factory MODULE:FACTORY``
    the same, wrapping the communicator of ``--simdist-backend`` (e.g. mpi);
``--simdist-np N``
    ranks of the world (default 4); several sizes (``2-5``, ``2,3,5,8``) run
    every test at each;
``--simdist-collectives A,B`` / ``--simdist-ops A,B`` / ``--simdist-dtypes A,B``
    test only these (the focus; see ``properties._cases``); a factory whose
    callable has ``implements = {...}`` is tested on those collectives only;
``--simdist-explore``
    random examples: a fresh Hypothesis seed per session, instead of seeds
    derived from each test's id (ignored when ``CI`` is set; see
    ``properties._seeds``);
``--simdist-timeout S``
    seconds before a waiting rank is reported as hung (default 30);
``--simdist-first-failure``
    once a backend fails a test, skip its remaining tests (a kill table's
    "which property catches it first", at a fraction of the time).

Fixtures: ``world``, a :class:`properties.Backend` whose ``run(fn, *args)``
calls ``fn(comm, *args)`` on every rank with the communicator under test (one
persistent world per size for the whole session, so all Hypothesis examples
share it); ``comm``: a test that asks for it runs its body on every rank,
with the communicator under test (a Hypothesis test draws here, and each
example's body runs on every rank). Marker: ``@pytest.mark.world_size(n)``
for a world of ``n`` ranks instead of ``--simdist-np``.

A failing test gets a "simdist replay" section: its seed and the one command
that runs that test again with the same backend, size and Hypothesis seed.
"""

from __future__ import annotations

import contextlib
import functools
import shlex
import sys

import pytest

from simdist.mpi._spmd import launched
from simdist.reference._focus import implemented, parse_sizes

from . import _seeds
from ._backend import Backend, parse_spec
from ._cases import Focus, focus, set_focus, wanted

_WORLDS = pytest.StashKey[dict]()
_FAILED = pytest.StashKey[dict]()      # (backend spec, size) -> the first test it failed


def pytest_addoption(parser):
    group = parser.getgroup("simdist", "simdist: the backend that property suites test")
    group.addoption("--simdist-backend", default="sim", metavar="sim|mpi|torch-gloo|torch-nccl|MODULE:FACTORY",
                    help="backend to test (default sim)")
    group.addoption("--simdist-factory", default=None, metavar="MODULE:FACTORY",
                    help="test FACTORY(base), base being --simdist-backend's communicator")
    group.addoption("--simdist-np", default="4", metavar="N",
                    help="ranks (default 4); several: 2-5 or 2,3,5,8 run every test at each size")
    group.addoption("--simdist-timeout", type=float, default=30.0, metavar="S",
                    help="seconds before a waiting rank is reported as hung (default 30)")
    group.addoption("--simdist-sync-sends", dest="simdist_sync_sends", action="store_true", default=True,
                    help="every send waits until its recv takes the message, as MPI's Ssend (the default)")
    group.addoption("--simdist-buffered-sends", dest="simdist_sync_sends", action="store_false",
                    help="sends return once the message is buffered (the World default)")
    group.addoption("--simdist-first-failure", action="store_true",
                    help="once a backend fails a test, skip its remaining tests")
    group.addoption("--simdist-collectives", default=None, metavar="A,B",
                    help="test only these collectives (and relations that involve them)")
    group.addoption("--simdist-ops", default=None, metavar="A,B", help="test only these reduction ops")
    group.addoption("--simdist-dtypes", default=None, metavar="A,B", help="test only these dtypes")
    group.addoption("--simdist-explore", action="store_true",
                    help="random examples (a fresh seed per session) instead of seeds derived from each "
                         "test's id; ignored when CI is set")


def pytest_configure(config):
    config.addinivalue_line("markers", "world_size(n): run the test on a world of n ranks")
    config.addinivalue_line("markers", "simdist_collectives(*names): the collectives a test exercises "
                                       "(deselected when --simdist-collectives leaves out all of them)")
    config.addinivalue_line("markers", "simdist_ops(*names): the reduction ops a test exercises")
    config.stash[_WORLDS] = {}
    config.stash[_FAILED] = {}
    try:
        set_focus(Focus.from_options(config.getoption("simdist_collectives"), config.getoption("simdist_ops"),
                                     config.getoption("simdist_dtypes")))
        _sizes(config)
        specs = _specs(config)
        if len(specs) == 1:       # one backend: its implements narrows the strategies too
            set_focus(Focus(_collectives_of(config, specs[0]), focus().ops, focus().dtypes))
    except (ValueError, TypeError) as exc:      # an option's message, not a traceback
        raise pytest.UsageError(str(exc)) from None
    _seeds.start(config)


def _sizes(config) -> list[int]:
    """The sizes of ``--simdist-np``: ``4``, ``2-5``, ``2,3,5,8`` or a mix."""
    return parse_sizes(config.getoption("simdist_np"), "--simdist-np")


def _collectives_of(config, spec: str) -> tuple:
    """The focus's collectives that ``spec`` is tested on (its factory's ``implements``)."""
    _, factory = parse_spec(spec, config.getoption("simdist_factory"))
    implements = implemented(factory)
    return tuple(c for c in focus().collectives if implements is None or c in implements)


def pytest_unconfigure(config):
    for key, world in config.stash.get(_WORLDS, {}).items():
        if not isinstance(world, Backend):
            world.close()


def pytest_generate_tests(metafunc):
    if not {"world", "comm"} & set(metafunc.fixturenames):
        return
    specs, sizes = _specs(metafunc.config), _sizes(metafunc.config)
    if len(specs) > 1:
        metafunc.parametrize("simdist_backend_spec", specs, ids=specs)
    if len(sizes) > 1 and not metafunc.definition.get_closest_marker("world_size"):
        metafunc.parametrize("simdist_size", sizes, ids=[f"np{n}" for n in sizes])


@pytest.fixture
def simdist_backend_spec(request) -> str:
    """The backend a test runs against (parametrised when several are given)."""
    return _specs(request.config)[0]


@pytest.fixture
def simdist_size(request) -> int:
    """The size of a test's world (parametrised when several are given)."""
    return _sizes(request.config)[0]


def _specs(config) -> list[str]:
    return [s.strip() for s in config.getoption("simdist_backend").split(",") if s.strip()]


def _backend(config, size: int, spec: str) -> Backend:
    """The backend ``spec`` on ``size`` ranks; backends of one kind share a world."""
    cache = config.stash[_WORLDS]
    if (spec, size) not in cache:
        import simdist

        kind, factory = parse_spec(spec, config.getoption("simdist_factory"))
        if ("world", kind, size) not in cache:
            # A world that joins the MPI job of a launcher keeps the job's stderr for its reports.
            with _uncaptured(config) if launched() else contextlib.nullcontext():
                cache["world", kind, size] = simdist.World(size, kind, timeout=config.getoption("simdist_timeout"),
                                                           sync_sends=config.getoption("simdist_sync_sends"))
        cache[spec, size] = Backend(kind, factory, size, cache["world", kind, size])
    return cache[spec, size]


@contextlib.contextmanager
def _uncaptured(config):
    """Without pytest's capture of descriptors 1 and 2."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        yield


def _size(node) -> int:
    marker = node.get_closest_marker("world_size")
    if marker:
        return int(marker.args[0])
    callspec = getattr(node, "callspec", None)
    if callspec is not None and "simdist_size" in callspec.params:
        return callspec.params["simdist_size"]
    return _sizes(node.config)[0]


@pytest.fixture
def world(request, simdist_backend_spec, simdist_size) -> Backend:
    """The backend under test, on a persistent world (see the module docstring)."""
    return _backend(request.config, _size(request.node), simdist_backend_spec)


@pytest.fixture
def comm(request, simdist_backend_spec, simdist_size):
    """Marks a test whose body runs on every rank; see ``pytest_pyfunc_call``."""
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if "comm" not in pyfuncitem.funcargs:
        return None
    backend = _backend(pyfuncitem.config, _size(pyfuncitem), pyfuncitem.funcargs["simdist_backend_spec"])
    fixtures = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    test = pyfuncitem.obj
    if getattr(test, "is_hypothesis_test", False):
        _each_example_on_every_rank(test, backend, fixtures)
    else:
        backend.run(_on_rank_test, test, (), _for_ranks(fixtures))
    return True


def _each_example_on_every_rank(test, backend: Backend, fixtures: dict) -> None:
    """Run a Hypothesis test whose body takes ``comm``: Hypothesis draws
    here, once (so every rank gets the same example), and each example's
    body runs on every rank; a failure on any rank is the example's
    failure, which Hypothesis then shrinks."""
    body = test.hypothesis.inner_test

    @functools.wraps(body)  # Hypothesis names the body in its report
    def on_every_rank(*args, **kwargs):
        backend.run(_on_rank_test, body, args, _for_ranks(kwargs))

    test.hypothesis.inner_test = on_every_rank
    try:
        test(**fixtures)
    finally:
        test.hypothesis.inner_test = body


def _for_ranks(kwargs: dict) -> dict:
    """The arguments a body gets on the ranks, besides its ``comm``."""
    return {name: value for name, value in kwargs.items()
            if name not in ("comm", "world", "simdist_backend_spec", "simdist_size")}


def _on_rank_test(comm, test, args, kwargs):
    return test(*args, comm=comm, **kwargs)


def _uses_backend(item) -> bool:
    return bool({"world", "comm"} & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items):
    """Deselect what lies outside the focus, and let Hypothesis share the world.

    The ``world`` fixture is function-scoped (its size can differ per test)
    but returns a session-wide world, which is exactly what Hypothesis'
    function-scoped-fixture health check warns about; it is safe here. A
    world's round trip varies with the machine's load: no deadline.
    Hypothesis' own ``derandomize`` (its CI profile sets it) would override
    the plugin's seeds, which the replay section names: it is turned off;
    so is its database, unless exploring, so that a command's examples are
    the command's alone. Under an MPI launcher every rank runs the session
    and draws its own examples, so nothing Hypothesis decides may hang on
    the clock, which differs between ranks: no search for further bugs
    after the first (it stops 10 s after the first bug), no ``too_slow``
    health check.
    """
    users = [item for item in items if _uses_backend(item)]
    if not users:
        return
    collectives = {spec: _collectives_of(config, spec) for spec in _specs(config)}
    dropped = [item for item in users if not wanted(item, collectives[_spec_of(item)])]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in set(dropped)]
    from hypothesis import HealthCheck, Phase, settings

    explore = _seeds.mode(config) == "explore"
    every_rank_draws = launched() is not None
    for item in users:
        test = getattr(item, "obj", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if chosen is not None:
            test._hypothesis_internal_use_settings = settings(
                chosen, derandomize=False, database=chosen.database if explore else None, deadline=None,
                phases=[phase for phase in chosen.phases if phase != Phase.explain],
                report_multiple_bugs=chosen.report_multiple_bugs and not every_rank_draws,
                suppress_health_check=[*chosen.suppress_health_check, HealthCheck.function_scoped_fixture,
                                       *([HealthCheck.too_slow] if every_rank_draws else [])])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _seeds.seeded(item) if _uses_backend(item) else contextlib.nullcontext():
        yield


def pytest_report_header(config):
    factory = config.getoption("simdist_factory")
    return (f"simdist: backend {config.getoption('simdist_backend')}" + (f" + {factory}" if factory else "")
            + f", {config.getoption('simdist_np')} ranks, {_seeding(config)}" + _focus_line(config))


def _seeding(config) -> str:
    mode = _seeds.mode(config)
    if mode == "derived":
        note = " (CI is set: --simdist-explore ignored)" if config.getoption("simdist_explore") else ""
        return f"examples seeded from each test's id{note}"
    return f"hypothesis seed {_seed()}" + (" (--simdist-explore)" if mode == "explore" else "")


def _focus_line(config) -> str:
    everything, parts = Focus(), []
    for spec in _specs(config):
        chosen = _collectives_of(config, spec)
        if chosen != everything.collectives:
            said = implemented(parse_spec(spec, config.getoption("simdist_factory"))[1]) is not None
            parts.append(f"{spec}: collectives {', '.join(chosen)}" + (" (what its factory implements)" if said else ""))
    if focus().ops != everything.ops:
        parts.append(f"ops {', '.join(focus().ops)}")
    if focus().dtypes != everything.dtypes:
        parts.append(f"dtypes {', '.join(map(str, focus().dtypes))}")
    return f"\nsimdist: testing only {'; '.join(parts)}" if parts else ""


def pytest_terminal_summary(terminalreporter, config):
    if _seeds.mode(config) != "derived" and config.stash.get(_WORLDS, None):
        terminalreporter.write_line(f"simdist: hypothesis seed {_seed()} "
                                    f"(pass --hypothesis-seed={_seed()} to run the same examples again)")


def _seed():
    core = sys.modules.get("hypothesis.core")
    return getattr(core, "global_force_seed", None)


def replay_command(item) -> str:
    """The command that runs ``item`` again with its backend, size, focus and seed."""
    config = item.config
    args = [sys.executable, "-m", "pytest", f"{item.path}::{_seeds.own_name(item)}",
            "--simdist-backend", _spec_of(item), "--simdist-np", str(_size(item))]
    for option in ("factory", "collectives", "ops", "dtypes"):
        if config.getoption(f"simdist_{option}"):
            args += [f"--simdist-{option}", config.getoption(f"simdist_{option}")]
    seed = _seeds.seed_for(item)
    if seed is not None:
        args += [f"--hypothesis-seed={seed}"]
    return shlex.join(args)


def _spec_of(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "simdist_backend_spec" in callspec.params:
        return callspec.params["simdist_backend_spec"]
    return _specs(item.config)[0]


def pytest_runtest_setup(item):
    if {"world", "comm"} & set(getattr(item, "fixturenames", ())):
        _backend(item.config, _size(item), _spec_of(item)).refused = None
    if item.config.getoption("simdist_first_failure") and {"world", "comm"} & set(item.fixturenames):
        first = item.config.stash[_FAILED].get((_spec_of(item), _size(item)))
        if first is not None:
            pytest.skip(f"{_spec_of(item)} already failed {first} on {_size(item)} ranks")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    uses_backend = {"world", "comm"} & set(getattr(item, "fixturenames", ()))
    if report.when == "call" and report.failed and uses_backend and call.excinfo is not None:
        refused = _backend(item.config, _size(item), _spec_of(item)).refused
        if refused is not None and call.excinfo.typename in ("Unsatisfiable", "FailedHealthCheck"):  # refused
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1], f"Skipped: {_spec_of(item)} does not support "
                                                                 f"it: {refused}")
    if report.failed and uses_backend:
        item.config.stash[_FAILED].setdefault((_spec_of(item), _size(item)), _seeds.own_name(item))
    if report.when == "call" and report.failed and uses_backend:
        report.sections.append(("simdist replay", f"seed {_seeds.seed_for(item)}; replay this failure with:\n"
                                                  f"  {replay_command(item)}"))
