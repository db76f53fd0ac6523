"""The benchmark library behind ``simdist bench`` and ``simdist scale``.

Functions here take options and return data (rows, reports, verdicts,
text); progress goes through a ``say`` callback, and the command line
(:mod:`simdist.cli`) prints, writes JSON and sets the exit status. The
modules, by what depends on what:

- :mod:`~simdist.bench.cells`: sizes, nccl-tests' bandwidth factors, the
  exact inputs and results, the timed loop, one result row (pure);
- :mod:`~simdist.bench.mpi_side`: the same cells with mpi4py under
  ``mpiexec`` (``python -m simdist.bench.mpi_side SPEC`` is what each rank runs);
- :mod:`~simdist.bench.sweep`: every backend x N x collective x size, repeats merged;
- :mod:`~simdist.bench.measurements`: copy bandwidth, ``world.run`` rate,
  start-up, a big world;
- :mod:`~simdist.bench.targets`: the plan of ``--targets`` and the verdict of each target;
- :mod:`~simdist.bench.report`: the tables and the plot;
- :mod:`~simdist.bench.alpha_beta` and :mod:`~simdist.bench.scaling`: the
  scaling model and its measurements (``simdist scale``).

Experiments that back a finding in docs/performance.md run as
``python -m simdist.bench.<name>``: ``python_floor``, ``broadcast_none``,
``direct_read`` and ``allreduce_floor``.

Nothing is imported here, so that ``python -m simdist.bench.<name>`` runs a
module that no import has run before.
"""
