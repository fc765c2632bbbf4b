"""Resources: nothing is left in /dev/shm (normal runs, errors, a rank killed while
workspaces grow), and memory and file descriptors stay flat over many grid and handle
cycles."""

from __future__ import annotations

import gc
import glob
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_cpu_variant
from cudecomp import DataType, HaloCommBackend, TransposeCommBackend
from oracle import factor_pairs, make

pytestmark = requires_cpu_variant()

COMM = MPI.COMM_WORLD
NRANKS = COMM.size
PDIMS = factor_pairs(NRANKS)[-1]


def shm_names() -> set[str]:
    return set(glob.glob("/dev/shm/cudecomp-*"))


def config(gdims: tuple[int, int, int] = (9, 10, 11)) -> cudecomp.GridDescConfig:
    c = cudecomp.GridDescConfig()
    c.gdims = gdims
    c.pdims = PDIMS
    c.transpose_comm_backend = TransposeCommBackend.DIRECT
    c.halo_comm_backend = HaloCommBackend.DIRECT
    return c


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.mpi
def test_direct_leaves_nothing_in_dev_shm(handle: cudecomp.Handle) -> None:
    before = shm_names()
    for n in (8, 16, 24):  # each size grows the shared workspaces
        with handle.create_grid(config((n, n + 1, n + 2))) as g:
            ia, ib = g.get_pencil_info(0), g.get_pencil_info(1)
            out = g.transpose_x_to_y(make(ia, (n, n + 1, n + 2), DataType.DOUBLE))
            assert np.array_equal(out, make(ib, (n, n + 1, n + 2), DataType.DOUBLE))
            assert shm_names() - before == set()
            with pytest.raises(cudecomp.InvalidUsageError):
                g.transpose_x_to_y(np.zeros(3))
            assert shm_names() - before == set()
    COMM.Barrier()
    assert shm_names() - before == set()


def cycle(handle: cudecomp.Handle) -> None:
    with handle.create_grid(config()) as g:
        ia = g.get_pencil_info(0)
        g.transpose_x_to_y(np.zeros(ia.array_shape))


@pytest.mark.mpi(ranks=(1, 2))  # leaks do not depend on the rank count beyond peers or none
def test_grid_cycles_are_flat(handle: cudecomp.Handle) -> None:
    for _ in range(50):  # warm up allocators and the workspaces
        cycle(handle)
    gc.collect()
    fds, rss, shm = open_fds(), rss_kib(), shm_names()
    for _ in range(1000):
        cycle(handle)
    gc.collect()
    assert open_fds() <= fds
    assert rss_kib() - rss < 8 * 1024, f"RSS grew {rss_kib() - rss} KiB over 1000 grid cycles"
    assert shm_names() <= shm


@pytest.mark.mpi(ranks=(1, 2))  # leaks do not depend on the rank count beyond peers or none
def test_handle_cycles_are_flat() -> None:
    def one() -> None:
        with cudecomp.Handle(COMM) as h:
            cycle(h)

    for _ in range(20):
        one()
    gc.collect()
    fds, rss, shm = open_fds(), rss_kib(), shm_names()
    for _ in range(200):
        one()
    gc.collect()
    assert open_fds() <= fds
    assert rss_kib() - rss < 8 * 1024, f"RSS grew {rss_kib() - rss} KiB over 200 handle cycles"
    assert shm_names() <= shm


@pytest.mark.mpi(ranks=(1,))  # a grid of one rank, whatever the run's rank count
def test_a_transpose_within_one_rank_takes_no_workspace() -> None:
    # Out of place, a 1x1 grid's transpose copies straight into its output: the handle's
    # workspace (twice a pencil) is never allocated. In place it is.
    c = cudecomp.GridDescConfig()
    c.gdims, c.pdims = (128, 128, 64), (1, 1)
    with cudecomp.Handle(MPI.COMM_SELF) as h, h.create_grid(c) as g:
        pencil_kib = 128 * 128 * 64 * 8 // 1024
        x = np.ones(tuple(g.get_pencil_info(0).array_shape))
        y = np.full(tuple(g.get_pencil_info(1).array_shape), 2.0)  # its pages touched
        gc.collect()
        rss = rss_kib()
        g.transpose_x_to_y(x, y)
        g.transpose_y_to_x(y, x)
        grew = rss_kib() - rss
        assert grew < pencil_kib // 4, f"RSS grew {grew} KiB in two out-of-place transposes of {pencil_kib} KiB pencils"
        assert np.array_equal(x, np.ones_like(x))
        rss = rss_kib()
        g.transpose_x_to_y(x, x)  # in place (equal pencil sizes on one rank)
        assert rss_kib() - rss >= pencil_kib // 2, "an in-place transpose ran without its workspace"


def launcher() -> list[str] | None:
    """The mpiexec of the MPI this interpreter's environment holds, if any."""
    bindir = os.path.dirname(sys.executable)
    for name, extra in (("mpirun", ["--oversubscribe"]), ("mpiexec", [])):
        path = os.path.join(bindir, name)
        if os.path.exists(path):
            if name == "mpirun" and not os.path.exists(os.path.join(bindir, "ompi_info")):
                continue
            return [path, *extra]
    path = shutil.which("mpiexec")
    return [path] if path else None


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_rank_leaves_nothing(sig: signal.Signals) -> None:
    """A 2-rank job growing DIRECT workspaces in a loop; one rank is killed mid-run."""
    cmd = launcher()
    if cmd is None:
        pytest.skip("no MPI launcher beside this interpreter")
    code = textwrap.dedent(
        """
        import os, sys, numpy as np
        from mpi4py import MPI
        import cudecomp
        comm = MPI.COMM_WORLD
        if comm.rank == 1:
            print("pid", os.getpid(), flush=True)
        h = cudecomp.Handle(comm)
        n = 8
        while True:
            c = cudecomp.GridDescConfig(); c.gdims = (n, n, n); c.pdims = (2, 1)
            c.transpose_comm_backend = cudecomp.TransposeCommBackend.DIRECT
            g = h.create_grid(c)
            g.transpose_x_to_y(np.zeros(g.get_pencil_info(0).array_shape))
            g.destroy()
            n = 8 if n > 96 else n + 4
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "PMIX", "HYDRA", "OMPI_COMM", "OMPI_MCA", "PRTE"))}
    before = shm_names()
    job = subprocess.Popen(
        [*cmd, "-n", "2", sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert job.stdout is not None
        line = job.stdout.readline()
        assert line.startswith("pid"), line
        time.sleep(1.5)  # in the middle of growing workspaces
        os.kill(int(line.split()[1]), sig)
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    time.sleep(0.5)
    assert shm_names() - before == set()
