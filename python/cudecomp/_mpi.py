"""What the Rust core needs to bind to the MPI library mpi4py loaded."""

from __future__ import annotations

from typing import Any

from ._errors import InvalidUsageError


def describe(comm: Any) -> tuple[str, int, int, int, int, int, int]:
    """Describe ``comm`` and its MPI for the core.

    Returns ``(mpi4py module path, sizeof(MPI_Comm), comm handle, MPI_BYTE handle,
    MPI_REQUEST_NULL handle, sizeof(MPI_Status), MPI_UNDEFINED)``.
    """
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
    return (
        str(MPI.__file__),
        int(MPI._sizeof(MPI.Comm)),
        int(comm.handle),
        int(MPI.BYTE.handle),
        int(MPI.REQUEST_NULL.handle),
        int(MPI._sizeof(MPI.Status)),
        int(MPI.UNDEFINED),
    )


def finalized() -> bool:
    """Tell whether MPI was finalised (every operation checks it before calling MPI)."""
    from mpi4py import MPI

    return bool(MPI.Is_finalized())
