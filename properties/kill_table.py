"""The kill table: does the property suite (and ``simdist check``) catch every fake?

``python -m properties.kill_table`` runs the property suite against every fake
of :mod:`fake_backends` and against the simulator in one pytest session (one
world serves them all), then ``simdist check --sync-sends``'s sweep against
each (synchronous sends, as the suite has by default), and
prints, per backend: its bug class, the first property that failed, the time
until that failure, how many properties failed, and the sweep's failed rows.
Every faulty fake must be caught by both; the simulator and the legal fakes
must pass both. ``--json FILE`` writes the table as JSON; exit status 1 when
any row disagrees with what it should be.

``--first-failure`` stops testing a backend at its first failing property
(``--simdist-first-failure``), which is what the project's tests use; they
also stop each sweep at its first failed row (``sweep_first_failure``).

``--torch`` adds a column: the property suite against every fake as a
torch process group (``fake_backends.torch_groups``), driven through
``torch.distributed``'s calls; a fake whose bug torch's interface cannot
carry (``INEXPRESSIBLE``) must pass there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import fake_backends

__all__ = ["kill_table", "torch_column", "main"]


def _properties(specs: list[str], size: int, examples: int, seed: int, timeout: float,
                first_failure: bool, focus: dict) -> dict:
    """Per spec: [(test, failed, seconds)] in suite order."""
    with tempfile.TemporaryDirectory(prefix="simdist-kill-") as tmp:
        xml = os.path.join(tmp, "kill.xml")
        command = [sys.executable, "-m", "pytest", "--pyargs", "properties", "-q", "-p", "no:cacheprovider",
                   "--simdist-backend", ",".join(specs), "--simdist-np", str(size),
                   "--simdist-timeout", str(timeout), f"--hypothesis-seed={seed}", f"--junitxml={xml}"]
        if first_failure:
            command.append("--simdist-first-failure")
        for option, names in focus.items():
            if names is not None:
                command += [f"--simdist-{option}", ",".join(names)]
        # A fresh working directory: no Hypothesis database, so the seed alone decides the examples.
        subprocess.run(command, cwd=tmp, env=dict(os.environ, SIMDIST_PROPERTY_EXAMPLES=str(examples)),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
        results: dict = {spec: [] for spec in specs}
        for case in ET.parse(xml).getroot().iter("testcase"):
            spec, test = _split(case.get("name", ""), specs)
            failed = case.find("failure") is not None or case.find("error") is not None
            skipped = case.find("skipped") is not None
            if spec is not None and not skipped:
                results[spec].append((test, failed, float(case.get("time", 0))))
    return results


def _split(name: str, specs: list[str]) -> tuple[str | None, str]:
    """``(backend spec, test id without it)`` of a test's name: the plugin puts
    the backend first among the parameters (``test[sim-allreduce-sum]``)."""
    match = re.fullmatch(r"(.*?)\[(.*)\]", name)
    if not match:
        return None, name
    test, params = match.groups()
    for spec in sorted(specs, key=len, reverse=True):
        if params == spec:
            return spec, test
        if params.startswith(spec + "-"):
            return spec, f"{test}[{params[len(spec) + 1:]}]"
    return None, name


def _sweep(spec: str, size: int, timeout: float, dtypes, ops, first_failure: bool) -> dict:
    from simdist.reference import sweep

    started = time.perf_counter()
    factory = None if spec == "sim" else spec
    # synchronous sends, as in the suite: a send that needs buffering to complete is a bug here too
    report = sweep(size, "sim", factory, quick=True, timeout=timeout, dtypes=dtypes, ops=ops, sync_sends=True,
                   first_failure=first_failure)
    failed = [r for r in report["rows"] if r["verdict"] == "FAIL"]
    return {"ok": report["ok"], "failed_rows": len(failed), "rows": len(report["rows"]),
            "first_failed": f"{failed[0]['collective']} {failed[0]['dtype'] or ''} {failed[0]['op'] or ''}".strip()
            if failed else None, "seconds": round(time.perf_counter() - started, 2)}


def _bug(cls) -> str:
    """The first sentence of a fake's docstring: its bug class."""
    if cls is None:
        return "none (the simulator)"
    paragraph = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "`")
    sentence = re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0].rstrip(".")
    return sentence if len(sentence) <= 90 else sentence[:90].rsplit(" ", 1)[0] + " ..."


def _caught(results: list) -> dict:
    """What the suite's ``results`` (test, failed, seconds) say of a backend."""
    failed = [test for test, bad, _ in results if bad]
    elapsed, caught_after = 0.0, None
    for _, bad, seconds in results:
        elapsed += seconds
        if bad:
            caught_after = elapsed
            break
    return {"properties_run": len(results), "properties_failed": len(failed),
            "first_property": failed[0] if failed else None,
            "seconds_to_catch": round(caught_after, 2) if caught_after is not None else None}


def _torch_column(name: str, results: list) -> dict:
    """The suite against the fake ``name`` (or the simulator) as a torch process group."""
    from fake_backends.torch_groups import FAULTY_AS_GROUPS, INEXPRESSIBLE

    column = {"should_fail": name in FAULTY_AS_GROUPS, "why_not": INEXPRESSIBLE.get(name), **_caught(results)}
    column["as_expected"] = bool(column["properties_failed"]) == column["should_fail"] and bool(results)
    return column


def _torch_specs() -> list[str]:
    return [f"fake_backends.torch_groups:{n}" for n in ["simulator", *fake_backends.FAKES]]


def _torch_columns(suites: dict) -> dict:
    """Every backend's torch column, by name (``"sim"`` for the simulator), from the suite's results."""
    names = ["sim", *fake_backends.FAKES]
    return {name: _torch_column(name, suites[spec]) for name, spec in zip(names, _torch_specs())}


def torch_column(size: int = 4, examples: int = 25, seed: int = 0, timeout: float = 5.0,
                 first_failure: bool = False, dtypes=None, ops=None) -> dict:
    """The torch column alone, by backend name (``"sim"`` for the
    simulator): the suite against every fake as a torch process group."""
    return _torch_columns(_properties(_torch_specs(), size, examples, seed, timeout, first_failure,
                                      {"dtypes": dtypes, "ops": ops}))


def kill_table(size: int = 4, examples: int = 25, seed: int = 0, timeout: float = 5.0,
               first_failure: bool = False, dtypes=None, ops=None, torch: bool = False,
               progress=lambda line: None, sweep_first_failure: bool = False) -> list[dict]:
    """One row per backend (the simulator, then every fake); see the module
    docstring. ``dtypes`` and ``ops`` (names; None: all) narrow the suite
    and the sweep alike; ``torch`` adds each row's ``"torch"`` column
    (:func:`torch_column` makes it alone); ``sweep_first_failure`` stops
    each sweep at its first failed row (its ``rows`` are then those run)."""
    names = list(fake_backends.FAKES)
    specs = ["sim"] + [f"fake_backends:{n}" for n in names]
    torch_specs = _torch_specs() if torch else []
    progress(f"kill table: the property suite against {len(specs) + len(torch_specs)} backends ...")
    suites = _properties(specs + torch_specs, size, examples, seed, timeout, first_failure,
                         {"dtypes": dtypes, "ops": ops})
    columns = _torch_columns(suites) if torch else {}
    rows = []
    for spec in specs:
        name = spec.partition(":")[2] or "sim"
        cls = fake_backends.FAKES.get(name)
        should_fail = name in fake_backends.FAULTY
        results = suites[spec]
        caught = _caught(results)
        progress(f"kill table: simdist check's sweep against {spec} ...")
        sweep = _sweep(spec, size, timeout, dtypes, ops, sweep_first_failure)
        row = {"backend": spec, "bug": _bug(cls), "should_fail": should_fail, **caught, "check": sweep,
               "as_expected": (bool(caught["properties_failed"]) == should_fail) and (not sweep["ok"]) == should_fail
               and bool(results)}
        if torch:
            row["torch"] = columns[name]
            row["as_expected"] = row["as_expected"] and row["torch"]["as_expected"]
        rows.append(row)
    return rows


def format_markdown(rows: list[dict]) -> str:
    torch = any("torch" in r for r in rows)
    head = ("| backend | bug | first property to fail | time to catch | properties failed | check rows failed | "
            + ("as a torch group: properties failed | " if torch else "") + "expected |")
    lines = [head, "| --- | --- | --- | ---: | ---: | ---: | " + ("---: | " if torch else "") + "--- |"]
    for r in rows:
        caught = f"{r['seconds_to_catch']:.1f} s" if r["seconds_to_catch"] is not None else "-"
        cells = [f"`{r['backend']}`", r["bug"], r["first_property"] and f"`{r['first_property']}`" or "-", caught,
                 f"{r['properties_failed']}/{r['properties_run']}", f"{r['check']['failed_rows']}/{r['check']['rows']}"]
        if torch:
            column = r["torch"]
            cells.append(f"{column['properties_failed']}/{column['properties_run']}"
                         + (" (bug not expressible)" if column["why_not"] else ""))
        cells.append("yes" if r["as_expected"] else "**NO**")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.kill_table", description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--np", type=int, default=4, help="ranks (default 4)")
    parser.add_argument("--examples", type=int, default=25, help="Hypothesis examples per property (default 25)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds before a hang is reported (default 5)")
    parser.add_argument("--first-failure", action="store_true", help="stop testing a backend at its first failure")
    parser.add_argument("--torch", action="store_true", help="add the column of every fake as a torch process group")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = kill_table(args.np, args.examples, args.seed, args.timeout, args.first_failure, torch=args.torch,
                      progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_markdown(rows))
    print(f"\n{len(rows)} backends in {time.perf_counter() - started:.0f} s; "
          f"{sum(r['as_expected'] for r in rows)} as expected")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0 if all(r["as_expected"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
