"""The simulator backend: shared-memory transport and its communicator."""

from ._comm import SimComm

__all__ = ["SimComm"]
