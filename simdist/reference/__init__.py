"""Reference checking: is what a backend computed what the contract allows?

Two levels: :func:`check` judges one collective call; :func:`sweep` runs
every collective x dtype x op x root x shape on a backend (``simdist
check``) and judges each call.

:func:`check` takes, for one collective call, every rank's input and every
rank's output, and returns a :class:`Verdict` (data; printing is the caller's).
It needs no processes: feed it what a backend returned, e.g. from a
``World(backend=...)`` run. :func:`reduction` gives the bits of a named
reduction order.

What a backend is held to (DESIGN.md, "Reference checking"):

* **Data movement** (broadcast, allgather, gather, scatter, alltoall): the
  contract's bytes, dtype and shape, and ``None`` exactly where it says so.
* **Exact reductions**: integers and bool with every op (integer sum and prod
  wrap around, which is order-independent), min/max, bitwise and logical ops:
  the bits of the simulator's fold. Float min/max are compared by value, NaN
  with NaN: the sign of a zero min/max is not pinned (in numpy and in Open
  MPI's ``out > in ? out : in`` it depends on the order), but a NaN input must
  give NaN, as the contract says (Open MPI's MPI_MAX drops a NaN that is
  ``out``, so its NaN results depend on the order; such data fail here).
* **Floating-point reductions** (sum, mean, prod on float and complex): every
  rank's result identical to the bit (allreduce), and every element within a
  rigorous error bound of the exact result -- or the bits of a named order when
  ``order`` names one. The bounds follow.

Floating-point bounds
---------------------
``u`` is the unit roundoff (2**-8 bfloat16, 2**-11 float16, 2**-24 float32, 2**-53 float64;
complex: that of its components), ``eta`` the smallest subnormal,
``gamma(k) = k*u / (1 - k*u)``, ``N`` the number of ranks and ``k`` the
depth: the most operations one input can go through, ``N - 1`` for any order
(a fold, a ring, any tree), ``ceil(log2 N)`` for ``order="tree"`` or
``"recursive_doubling"``. All in exact arithmetic; see "How it is computed".

``sum`` (per component for complex). Any order of pairwise additions gives
``r = sum_i x_i (1 + d_i)`` with ``|d_i| <= gamma(k)`` (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., section 4.2 and Lemma 3.1), since
IEEE addition rounds with relative error ``<= u`` and is exact when the sum is
subnormal. So ``|r - S| <= gamma(k) * sum_i |x_i|`` where ``S`` is the exact
sum. This is measured against the exact ``S``, not its rounding: with a
rounded centre a further ``u*|S|`` would be needed.

``mean``: ``r = fl(t / N)`` with ``t`` the computed sum, so
``|r - S/N| <= (gamma(k) + u * (1 + gamma(k))) * sum_i |x_i| / N``.

``prod`` (real): any order gives ``r = p * prod(1 + d_j)`` over ``N - 1``
multiplications, so ``|r - p| <= gamma(N - 1) * |p|`` (Higham Lemma 3.1),
with ``p`` the exact product. If some order may underflow (the product of the
factors below 1 in magnitude, over ``1 + gamma(N-1)``, is below the smallest
normal), each rounding
into the subnormal range adds an absolute error ``<= eta / 2``, which the
later factors can magnify by at most ``Pbig = prod_i max(1, |x_i|)``; so the
slack becomes ``(N - 1) * eta * Pbig``. The sign of a product is exact in
IEEE arithmetic and is checked exactly.

``prod`` (complex): one multiplication by the textbook formula has normwise
relative error ``<= sqrt(2) * gamma(2)`` (Higham Lemma 3.5; it also covers
the fused multiply-add variant, whose sharp bound is ``2u``, and the sharp
``sqrt(5) u`` without FMA). Compounded over ``N - 1`` multiplications:
``|r - p| <= ((1 + mu)**(N-1) - 1) * |p|`` with ``mu = sqrt(2) * gamma(2)``,
plus ``2 * (N - 1) * eta * Pbig * (1 + mu)**(N-1)`` for underflow in the real
products (always included: a component can be tiny even when ``|z|`` is not).

Every bound gets a slack of ``N * eta`` (a few subnormals; flush-to-zero
hardware is not IEEE and may fail on subnormal data) and a relative margin of
``2**-40`` for the roundings in computing the bound and the error themselves;
both only make the check more lenient, by amounts far below one ulp of the
bound.

Exact in every order. When all partial sums of an element are representable
in every order -- all ``x_i`` are multiples of ``2**e`` (``e`` the lowest set
bit among them) and ``sum_i |x_i| < 2**(p + e)`` with ``p`` the precision, and
no overflow -- every order gives the exact sum, the sign of a zero result
included (``-0`` only when all inputs are ``-0``). Such elements (small
integers in float dtypes, N = 1, all zeros) are checked bit for bit against
the fold; likewise real products whose odd significands multiply to less than
``2**p`` with no possible under- or overflow. A result whose elements are all
of this kind gets ``exact=True``, ``bound=0``.

Not finite. NaN and Inf inputs: the result must be of the IEEE class the exact
operation gives -- NaN where any input is NaN or ``+inf`` meets ``-inf`` (sum)
or ``inf`` meets ``0`` (prod), else ``+-inf`` of the right sign. A complex
product with a non-finite input only needs a non-finite component (C's complex
Inf rules are not the textbook formula's), and a NaN is also accepted where
the finite terms may overflow to the opposite infinity, or the finite factors
underflow to zero, in some order. Finite inputs whose partial results may
overflow in some order (``(1 + gamma(k)) * sum |x_i|``, or the product of the
factors above 1 in magnitude times ``(1 + gamma(N-1))``, at or beyond the
largest finite value) may give a non-finite result; a finite result is still
held to the bound, which holds for every order that did not overflow.

How it is computed. Every (b)float16/32/64 value is a double; ``S`` and
``sum |x_i|`` are computed in double, which is exact when the element's terms
span fewer than 53 bits (checked as above with ``p = 53``; always for
float16), else with ``math.fsum``, which returns the correctly rounded exact
sum, as ``fsum([r, -x_0, ..., -x_{N-1}])`` so that the error ``r - S`` is
itself correctly rounded. Products are exact with Python integers.

Named orders. ``order="fold"``, ``"ring"`` or ``"recursive_doubling"``
demands the bits of that order; NaN payloads are not
compared. For Open MPI pin the algorithm with ``--mca
coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 3``
(recursive doubling) or ``4`` (ring). ``order="tree"`` asks only for the
tighter bound ``gamma(ceil(log2 N))``. For ``reduce_scatter`` the order is
that of the allreduce of the whole ``(N, ...)`` arrays, of which rank ``r``
gets block ``r``.
"""

from __future__ import annotations

from ._bounds import gamma, unit_roundoff
from ._cases import SWEEP_COLLECTIVES
from ._ranks import load_factory
from ._sweep import sweep
from ._verdict import COLLECTIVES, ORDERS, Verdict, check, reduction

__all__ = [
    "Verdict", "check", "reduction", "gamma", "unit_roundoff", "COLLECTIVES", "ORDERS",
    "sweep", "load_factory", "SWEEP_COLLECTIVES",
]
