"""Object lifecycles: context managers, and destructors that run while an exception is
propagating (the exception must reach the caller unchanged, and the process must live)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_cpu_variant, requires_data_path
from oracle import factor_pairs

NRANKS = MPI.COMM_WORLD.size

pytestmark = pytest.mark.mpi  # grids are made and dropped collectively


def config() -> cudecomp.GridDescConfig:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims = (9, 10, 11)
    cfg.pdims = factor_pairs(NRANKS)[-1]
    return cfg


@requires_cpu_variant()
def test_temporary_grid_keeps_the_pending_error(handle: cudecomp.Handle) -> None:
    """A grid created and dropped in one expression while its method raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        with pytest.raises(cudecomp.InvalidUsageError, match="array_shape"):
            handle.create_grid(config()).transpose_x_to_y(np.zeros((2, 2, 2)))
        with pytest.raises(TypeError, match="expected a NumPy array"):
            handle.create_grid(config()).update_halos_x("junk", (1, 1, 1), None, 0)
        gc.collect()


@requires_cpu_variant()
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_leak_warning_as_error_keeps_the_pending_error(handle: cudecomp.Handle) -> None:
    """With ResourceWarning turned into errors, the warning is unraisable, not a replacement."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(cudecomp.InvalidUsageError):
            handle.create_grid(config()).transpose_x_to_y(np.zeros((2, 2, 2)))
        gc.collect()


@requires_data_path()
def test_temporary_handle_keeps_the_pending_error(comm: MPI.Comm) -> None:
    bad = config()
    bad.pdims = (NRANKS + 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        with pytest.raises(cudecomp.InvalidUsageError, match="pdims"):
            cudecomp.Handle(comm).create_grid(bad)
        gc.collect()


@requires_data_path()
def test_grid_context_manager(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config()) as g:
        assert g.get_pencil_info(0).size >= 0
    assert "released" in repr(g)
    with pytest.raises(cudecomp.InvalidUsageError):
        g.destroy()
    # Destroyed inside the block: leaving it is fine.
    with handle.create_grid(config()) as g:
        g.destroy()
    # An exception inside the block propagates, and the grid is destroyed.
    with pytest.raises(KeyError):
        with handle.create_grid(config()) as g:
            raise KeyError("inside")
    assert "released" in repr(g)


@requires_data_path()
def test_grid_context_manager_after_finalize(comm: MPI.Comm) -> None:
    h = cudecomp.Handle(comm)
    with h.create_grid(config()) as g:
        h.finalize()
    assert "released" in repr(g)


def launcher_variable(name: str) -> bool:
    """Variables mpiexec sets for its ranks: a child started without them runs as a singleton."""
    if name.startswith("OMPI_ALLOW_RUN_AS_ROOT"):
        return False
    return name.startswith(("PMI", "PMIX", "HYDRA", "OMPI_", "PRTE", "MPI_LOCALRANK", "MPI_LOCALNRANKS"))


@requires_cpu_variant()
@pytest.mark.skipif(NRANKS > 1, reason="runs a child interpreter; one rank is enough")
def test_leaks_with_pending_errors_in_a_child_process() -> None:
    """The original crash reports, run in a fresh interpreter: exit status 0, right classes."""
    code = textwrap.dedent(
        """
        import gc, warnings
        import numpy as np
        from mpi4py import MPI
        import cudecomp
        warnings.simplefilter("always")
        c = cudecomp.GridDescConfig(); c.gdims = (4, 4, 4); c.pdims = (1, 1)
        h = cudecomp.Handle(MPI.COMM_WORLD)
        try:
            h.create_grid(c).transpose_x_to_y(np.zeros((2, 2, 2)))
        except cudecomp.InvalidUsageError:
            print("invalid-usage-1")
        bad = c.copy(); bad.pdims = (2, 1)
        try:
            cudecomp.Handle(MPI.COMM_WORLD).create_grid(bad)
        except cudecomp.InvalidUsageError:
            print("invalid-usage-2")
        try:
            with h.create_grid(c) as g:
                g.transpose_x_to_y(np.zeros((2, 2, 2)))
        except cudecomp.InvalidUsageError:
            print("invalid-usage-3")
        gc.collect()
        h.finalize()
        print("done")
        """
    )
    env = {k: v for k, v in os.environ.items() if not launcher_variable(k)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["invalid-usage-1", "invalid-usage-2", "invalid-usage-3", "done"], r.stdout + r.stderr
