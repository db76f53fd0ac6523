"""Shipping the user's functions to the ranks with their file names intact.

``World.run`` sends the function it runs by value (cloudpickle), so that
lambdas, closures and functions defined inside tests travel. A rank's
traceback is only useful if the frames of that function name the user's
file and line, which the traceback module then reads back as source text.
Since 3.1.3, cloudpickle replaces every code object's ``co_filename`` with
``"<dynamic-code>"`` (to make payloads independent of where a function was
defined). simdist needs the opposite, so its pickler ships code objects with
``marshal``, which keeps every field, the file name included. Nested code
objects (inner functions, lambdas, comprehensions) sit in ``co_consts`` and
travel inside their parent's marshalled bytes. Both ends run the same
Python, which marshal (like cloudpickle's own code reducer) requires.
"""

from __future__ import annotations

import io
import marshal
import pickle
import types
from collections import ChainMap

import cloudpickle


def _reduce_code(code: types.CodeType):
    return marshal.loads, (marshal.dumps(code),)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(obj) -> bytes:
    """cloudpickle's ``dumps`` at the highest protocol, keeping code objects' file names."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()
