"""What the Rust core needs to bind to the MPI library mpi4py loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._errors import InvalidUsageError


@dataclass(frozen=True)
class MpiDescription:
    """What the core needs to bind to the MPI library mpi4py loaded, and to one communicator of it."""

    library: str
    """Path of the ``mpi4py.MPI`` extension module, which resolves the MPI symbols."""
    handle_bytes: int
    """``sizeof(MPI_Comm)``: 4 (MPICH family, int handles) or 8 (Open MPI, pointers)."""
    comm: int
    """The communicator's handle."""
    byte: int
    """The ``MPI_BYTE`` handle."""
    request_null: int
    """The ``MPI_REQUEST_NULL`` handle."""
    status_bytes: int
    """``sizeof(MPI_Status)``."""
    undefined: int
    """``MPI_UNDEFINED``."""


def describe(comm: Any) -> MpiDescription:
    """Describe ``comm`` and its MPI for the core."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - mpi4py is a dependency
        raise TypeError(f"mpi_comm: expected an mpi4py communicator, but mpi4py cannot be imported ({e})") from e
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"mpi_comm: expected an mpi4py.MPI.Comm, got {type(comm).__name__}")
    if not MPI.Is_initialized() or MPI.Is_finalized():
        raise InvalidUsageError("mpi_comm: MPI must be initialised (and not finalised) while a Handle exists")
    if comm == MPI.COMM_NULL:
        raise InvalidUsageError("mpi_comm: expected a valid communicator, got MPI.COMM_NULL")
    if comm.Is_inter():
        raise InvalidUsageError(
            "mpi_comm: expected an intracommunicator, got an intercommunicator (use Merge() to make one group of both sides)"
        )
    return MpiDescription(
        library=str(MPI.__file__),
        handle_bytes=int(MPI._sizeof(MPI.Comm)),
        comm=int(comm.handle),
        byte=int(MPI.BYTE.handle),
        request_null=int(MPI.REQUEST_NULL.handle),
        status_bytes=int(MPI._sizeof(MPI.Status)),
        undefined=int(MPI.UNDEFINED),
    )


def finalized() -> bool:
    """Tell whether MPI was finalised (every operation checks it before calling MPI)."""
    from mpi4py import MPI

    return bool(MPI.Is_finalized())
