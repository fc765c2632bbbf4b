"""The library's advice reaches the user as ``RuntimeWarning`` at ``create_grid``, once.

The advice itself (e.g. NVSHMEM started on a rank bound to one core, checked in Rust and on
the GPU machine) is queued wherever the library finds it; this checks the
way out: the next grid creation warns, each text once per process."""

from __future__ import annotations

import warnings

from mpi4py import MPI

import cudecomp
from cudecomp import _cudecomp as ext


def config() -> cudecomp.GridDescConfig:
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = (8, 8, 8), (MPI.COMM_WORLD.size, 1)
    c.transpose_comm_backend = cudecomp.TransposeCommBackend.MPI_P2P
    c.halo_comm_backend = cudecomp.HaloCommBackend.MPI
    return c


def test_advice_warns_once_at_the_next_grid(handle: cudecomp.Handle) -> None:
    text = "test advice: nothing to do"
    ext._queue_notice(text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with handle.create_grid(config()):
            pass
        ext._queue_notice(text)  # the same text again: not repeated
        with handle.create_grid(config()):
            pass
    got = [str(w.message) for w in seen if w.category is RuntimeWarning]
    assert got.count(text) == 1, got
