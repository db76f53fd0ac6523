"""The kill table's torch column: every fake as a torch process group
(``fake_backends.torch_groups``), driven through torch.distributed's calls.
A file of its own, so that it runs beside tests/test_properties_suite.py."""

from __future__ import annotations

import pytest

import fake_backends
from conftest import KILL_FOCUS
from properties.kill_table import torch_column

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def column():
    return torch_column(**KILL_FOCUS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sim", *sorted(fake_backends.FAKES)])
def test_each_fake_as_a_torch_process_group_is_caught_unless_torch_cannot_carry_its_bug(column, name):
    """Through torch.distributed's calls (a ContractGroup of the fake), the
    suite catches what it catches on the fake itself; the bugs torch's
    interface cannot carry leave a correct group, which passes."""
    from fake_backends.torch_groups import FAULTY_AS_GROUPS, INEXPRESSIBLE

    got = column[name]
    if name in FAULTY_AS_GROUPS:
        assert got["properties_failed"] >= 1, f"no property caught {name} as a torch group: {got}"
    else:
        assert got["properties_failed"] == 0 and got["properties_run"] >= 60, f"{name}: {got}"
        assert (got["why_not"] is not None) == (name in INEXPRESSIBLE)
