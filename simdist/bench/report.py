"""The sweep and the targets as text, and the sweep as a plot.

Functions of the report :func:`simdist.bench.sweep.sweep` returns (and
:func:`simdist.bench.targets.add_to` completes): they return strings or
write a file, and print nothing.
"""

from __future__ import annotations

from .cells import COLLECTIVES, human_bytes

__all__ = ["columns", "headline", "format_table", "copy_line", "format_targets", "plot"]


def columns(head: tuple, lines: list, left: tuple) -> str:
    """``head`` and ``lines`` (tuples of strings) in aligned columns under a rule;
    ``left[i]``: column i is left-aligned (else right-aligned)."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if lf else c.rjust(w) for c, w, lf in zip(cells, widths, left)).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines])


def headline(machine: dict) -> str:
    """The line above the table: when, where, with what, and how to read it."""
    m = machine
    return (f"# simdist bench  {m['date']}  {m['cpus_usable']} CPUs ({m['cpu_model']})  Python {m['python']}  "
            f"numpy {m['numpy']}  mpi4py {m['mpi4py']}  {m['mpiexec']}  load {m['loadavg_start'][0]:.1f}"
            f"->{m['loadavg_end'][0]:.1f}; S as nccl-tests; #wrong: every warm-up result and the last timed one")


def format_table(rows: list[dict]) -> str:
    """nccl-tests-like columns, grouped by collective, then N, then backend."""
    head = ("collective", "N", "backend", "size", "dtype", "time(us)", "min(us)", "max(us)",
            "algbw(GB/s)", "busbw(GB/s)", "#wrong")
    order = {c: i for i, c in enumerate(COLLECTIVES)}
    key = lambda r: (order.get(r["collective"], 99), r["n"], r["backend"], r["bytes"])
    bw = lambda v: "-" if v is None else f"{v:.3f}"
    size = lambda r: human_bytes(r["bytes"]) if r["collective"] != "barrier" else "-"
    lines = [(r["collective"], str(r["n"]), r["backend"], size(r),
              r["dtype"] or "-", f"{r['time_us']:.2f}", f"{r['time_min_us']:.2f}", f"{r['time_max_us']:.2f}",
              bw(r["algbw_GBps"]), bw(r["busbw_GBps"]), str(r["wrong"])) for r in sorted(rows, key=key)]
    return columns(head, lines, left=(True, False, True, False, True) + (False,) * 6)


def copy_line(copy: dict) -> str:
    """The line above the targets: what the ratios are and the copy bandwidth."""
    return (f"# targets: sim/reference of the mean time per call over ranks; copy bandwidth {copy['GBps']:.2f} "
            f"GB/s (numpy.copyto of {human_bytes(copy['bytes'])}, median of {copy['repeats']})")


def _figure(value, unit) -> str:
    if value is None:
        return "-"
    formats = {"us": f"{value:.2f} us", "GB/s": f"{value:.2f} GB/s", "runs/s": f"{value:.0f}/s"}
    return formats.get(unit, f"{value:.3f} s")


def format_targets(items: list[dict]) -> str:
    """The targets as a table: name, simulator, reference, ratio, limit, verdict, detail."""
    head = ("target", "simulator", "reference", "ratio", "limit", "verdict", "detail")
    lines = [(t["name"], _figure(t["value"], t["unit"]), _figure(t["reference"], t["unit"]),
              "-" if t["ratio"] is None else f"{t['ratio']:.2f}", t["limit"], t["verdict"], t["detail"])
             for t in items]
    return columns(head, lines, left=(True, False, False, False, True, True, True))


def plot(rows: list[dict], path: str) -> None:
    """Latency and bus bandwidth against message size (log-log), one row of two
    panels per collective, one line per backend and N. Needs matplotlib
    (RuntimeError saying how to install it)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'simdist[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = [r for r in rows if r["collective"] != "barrier"]
    collectives = [c for c in COLLECTIVES if any(r["collective"] == c for r in sized)]
    if not collectives:
        raise RuntimeError("--plot: no sized results to plot (only barrier)")
    fig, axes = plt.subplots(len(collectives), 2, figsize=(11, 3.6 * len(collectives)), squeeze=False)
    for (lat, bus), collective in zip(axes, collectives):
        mine = [r for r in sized if r["collective"] == collective]
        for backend, n in sorted({(r["backend"], r["n"]) for r in mine}):
            line = sorted((r for r in mine if r["backend"] == backend and r["n"] == n), key=lambda r: r["bytes"])
            xs = [r["bytes"] for r in line]
            style = "-" if backend == "sim" else "--"
            lat.plot(xs, [r["time_us"] for r in line], style, marker="o", ms=3, label=f"{backend} N={n}")
            bus.plot(xs, [max(r["busbw_GBps"], 1e-9) for r in line], style, marker="o", ms=3, label=f"{backend} N={n}")
        for ax, what in ((lat, "time per call (µs)"), (bus, "bus bandwidth (GB/s)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size S (bytes)")
            ax.set_ylabel(what)
            ax.set_title(f"{collective}: {what.split(' (')[0]}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
