"""Groups of the stand-in (``MPI.Group``) and the communicator calls that
use them: ``Get_group``, ``Create``, ``Compare``.

A group is an ordered list of processes, held as world ranks. A ``Group``
handle refers to a ``_Members`` object; handles compare equal when they
refer to the same one, as mpi4py's compare MPI handles: a communicator's
``Get_group`` gives handles on one object (Open MPI hands out the
communicator's own group), every constructor a new one, except that an
empty result is ``MPI.GROUP_EMPTY`` itself, as under Open MPI. ``Free``
makes the handle null and leaves other handles on the group valid.

``Comm.Create(group)`` is collective over the communicator and becomes a
``Split``: members of the group get a communicator ordered as the group,
the others ``MPI.COMM_NULL``. ``Comm.Create_group`` is collective over the
group only, and the simulator makes communicators only by splitting one
that every member calls: its communicator runs its collectives on
point-to-point messages (``_groupcomm``).
"""

from __future__ import annotations

import copyreg
import operator

from . import _handleleaks, _runtime
from ._errors import ERR_ARG, ERR_GROUP, ERR_RANK, ERR_TAG, Exception as MPIException
from ._groupcomm import create_group
from ._handles import Handle, IntegerHandles, check_handle, new_handle, predefined
from ._pointtopoint import c_int

UNDEFINED = -32766
PROC_NULL = -2
IDENT, CONGRUENT, SIMILAR, UNEQUAL = 0, 1, 2, 3


class _Members:
    """The processes of a group, as world ranks in group order."""

    __slots__ = ("ranks",)

    def __init__(self, ranks):
        self.ranks = tuple(ranks)


_EMPTY = _Members(())


class Group(Handle, IntegerHandles):
    """A group of processes (see the module docstring); the calls are mpi4py's."""

    def _init(self, group: "Group | None" = None) -> None:
        if group is not None:
            check_handle(group, Group, type(self))
        self._members = None if group is None else group._members

    @classmethod
    def _of(cls, members: _Members) -> "Group":
        group = new_handle(cls)
        group._members = members
        _handleleaks.handle_made(group, "group", group)
        return group

    @classmethod
    def _from_ranks(cls, ranks) -> "Group":
        ranks = tuple(ranks)
        return cls._of(_Members(ranks) if ranks else _EMPTY)

    def __eq__(self, other):
        if not isinstance(other, Group):
            return NotImplemented
        return self._members is other._members

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __bool__(self):
        return self._members is not None

    def __repr__(self):
        return f"<mpi4py.MPI.Group {list(self._members.ranks) if self else 'MPI_GROUP_NULL'} (simdist)>"

    def _ranks(self, call: str) -> tuple:
        if self._members is None:
            raise MPIException(ERR_GROUP, f"Group.{call}: the group is MPI.GROUP_NULL")
        return self._members.ranks

    # -- accessors ---------------------------------------------------------------------
    def Get_size(self) -> int:
        return len(self._ranks("Get_size"))

    def Get_rank(self) -> int:
        """This process's rank in the group, MPI.UNDEFINED if it is not a member."""
        ranks = self._ranks("Get_rank")
        me = _runtime.get().me
        return ranks.index(me) if me in ranks else UNDEFINED

    size = property(Get_size)
    rank = property(Get_rank)

    def _checked_ranks(self, ranks, call: str, proc_null_ok: bool = False) -> list[int]:
        size = len(self._ranks(call))
        out = []
        for r in ranks:
            r = operator.index(r)  # as mpi4py reads a list of ranks: a bool is 0 or 1, a float a TypeError
            if not (0 <= r < size or (proc_null_ok and r == PROC_NULL)):
                raise MPIException(ERR_RANK, f"Group.{call}: rank {r!r} of a group of {size}")
            out.append(r)
        return out

    def Translate_ranks(self, ranks=None, group: "Group | None" = None) -> list[int]:
        """The ranks in ``group`` (default: COMM_WORLD's) of the processes of
        ``ranks`` here (default: all); MPI.UNDEFINED for those not in it."""
        mine = self._ranks("Translate_ranks")
        theirs = (tuple(_runtime.get().world.transport.members) if group is None
                  else group._ranks("Translate_ranks"))
        ranks = list(range(len(mine))) if ranks is None else self._checked_ranks(ranks, "Translate_ranks", True)
        where = {world: i for i, world in enumerate(theirs)}
        return [PROC_NULL if r == PROC_NULL else where.get(mine[r], UNDEFINED) for r in ranks]

    def Compare(self, group: "Group") -> int:
        """MPI.IDENT (same processes, same order), MPI.SIMILAR (same
        processes) or MPI.UNEQUAL."""
        return compare(self._ranks("Compare"), group._ranks("Compare"))

    # -- constructors ------------------------------------------------------------------
    def Dup(self) -> "Group":
        return type(self)._of(_Members(self._ranks("Dup")))

    @classmethod
    def Union(cls, group1: "Group", group2: "Group") -> "Group":
        """``group1``'s processes, then those of ``group2`` not in ``group1``."""
        first, second = group1._ranks("Union"), group2._ranks("Union")
        return cls._from_ranks(first + tuple(r for r in second if r not in first))

    @classmethod
    def Intersection(cls, group1: "Group", group2: "Group") -> "Group":
        """``group1``'s processes that are in ``group2``, in ``group1``'s order."""
        second = set(group2._ranks("Intersection"))
        return cls._from_ranks(r for r in group1._ranks("Intersection") if r in second)

    @classmethod
    def Difference(cls, group1: "Group", group2: "Group") -> "Group":
        """``group1``'s processes that are not in ``group2``."""
        second = set(group2._ranks("Difference"))
        return cls._from_ranks(r for r in group1._ranks("Difference") if r not in second)

    def _distinct(self, ranks, call: str) -> list[int]:
        ranks = self._checked_ranks(ranks, call)
        if len(set(ranks)) != len(ranks):
            raise MPIException(ERR_RANK, f"Group.{call}: ranks {ranks} repeat a rank")
        return ranks

    def Incl(self, ranks) -> "Group":
        """The processes of ``ranks``, in that order."""
        mine = self._ranks("Incl")
        return type(self)._from_ranks(mine[r] for r in self._distinct(ranks, "Incl"))

    def Excl(self, ranks) -> "Group":
        """The processes not in ``ranks``, in this group's order."""
        mine = self._ranks("Excl")
        gone = set(self._distinct(ranks, "Excl"))
        return type(self)._from_ranks(w for i, w in enumerate(mine) if i not in gone)

    def _ranges(self, ranges, call: str) -> list[int]:
        """The ranks of MPI's ``(first, last, stride)`` triplets: ``first``,
        ``first + stride``, ... as far as ``last``."""
        out = []
        for triplet in ranges:
            first, last, stride = (int(v) for v in triplet)
            self._checked_ranks([first, last], call)
            if stride == 0:
                raise MPIException(ERR_ARG, f"Group.{call}: range {(first, last, stride)} has stride 0")
            out.extend(range(first, last + (1 if stride > 0 else -1), stride))
        return self._distinct(out, call)

    def Range_incl(self, ranks) -> "Group":
        return self.Incl(self._ranges(ranks, "Range_incl"))

    def Range_excl(self, ranks) -> "Group":
        return self.Excl(self._ranges(ranks, "Range_excl"))

    def Free(self) -> None:
        """Make this handle MPI.GROUP_NULL (the predefined handles stay)."""
        self._ranks("Free")
        if self is not predefined("GROUP_EMPTY"):
            self._members = None
            _handleleaks.handle_freed(self)

    def free(self) -> None:
        """Free unless null (GROUP_EMPTY stays, as Free leaves it; mpi4py's ``free``)."""
        if self:
            self.Free()

    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute("Group", name)


def compare(first, second) -> int:
    """MPI's comparison of two lists of processes."""
    if tuple(first) == tuple(second):
        return IDENT
    return SIMILAR if sorted(first) == sorted(second) else UNEQUAL


GROUP_NULL = Group()
GROUP_EMPTY = Group._of(_EMPTY)


def _reduce_group(group):
    """Pickling, as mpi4py: the predefined handles by name, a null or empty
    handle as a new equal one; a group of processes cannot travel."""
    if group is GROUP_NULL or group is GROUP_EMPTY:
        return predefined, ("GROUP_NULL" if group is GROUP_NULL else "GROUP_EMPTY",)
    if not group:
        return Group, ()
    if group == GROUP_EMPTY:
        return Group, (GROUP_EMPTY,)
    raise ValueError("cannot serialize 'mpi4py.MPI.Group' instance")


copyreg.pickle(Group, _reduce_group)


class GroupCalls:
    """Mixin of Comm: the calls that take or give groups."""

    def Get_group(self) -> Group:
        """A handle on the communicator's group (the same group each time)."""
        st = self._st()
        if st.group is None:
            st.group = _Members(st.members)
        return Group._of(st.group)

    group = property(Get_group)

    @staticmethod
    def _subgroup(st, group, call: str) -> tuple:
        """The processes of ``group``, which must all be in ``st``'s communicator."""
        if not isinstance(group, Group):
            raise TypeError(f"Argument 'group' has incorrect type (expected mpi4py.MPI.Group, got "
                            f"{type(group).__name__})")
        ranks = group._ranks(call)
        outside = [w for w in ranks if w not in st.members]
        if outside:
            raise MPIException(ERR_GROUP, f"{call}: world ranks {outside} of the group are not in {st.name}")
        return ranks

    def Create(self, group: Group):
        """MPI_Comm_create (collective over the communicator; every rank
        passes the same group, a subset of it, or, as MPI 2.2 allows,
        disjoint groups): each group's processes get a communicator ordered
        as the group, the others MPI.COMM_NULL."""
        st = self._st()
        ranks = self._subgroup(st, group, "Create")
        me = st.members[st.rank]
        color = ranks[0] if me in ranks else UNDEFINED  # disjoint groups have distinct first processes
        return self.Split(color, ranks.index(me) if me in ranks else 0)

    def Create_group(self, group: Group, tag: int = 0):
        """MPI_Comm_create_group (collective over the group's processes
        only, which call it with the same group and ``tag``): a communicator
        ordered as the group. A process outside the group (any, for
        ``MPI.GROUP_EMPTY``) gets ``MPI.COMM_NULL`` at once, as MPI has it."""
        st = self._st()
        ranks = self._subgroup(st, group, "Create_group")
        tag = c_int(tag, "tag")
        if tag < 0:
            raise MPIException(ERR_TAG, f"Create_group: tag={tag!r} must be an int >= 0")
        if st.members[st.rank] not in ranks:
            return predefined("COMM_NULL")
        st.engine.progress()
        return self._new(self._derived(st, create_group(st, ranks, tag), "Create_group"))
