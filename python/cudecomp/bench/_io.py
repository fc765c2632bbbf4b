"""``--ops io``: one-file writes and reads of ``cudecomp.io`` against every rank's own file.

Rows ``io-write`` and ``io-read`` time ``cudecomp.io.write`` (``read``) of one field, this
rank's X-pencil of the grid, into (from) one HDF5 file in ``--io-dir``. Their ceiling,
measured in the same run on the same file system, is every rank writing (reading) its
pencil's bytes from host memory to a new file of its own (the old one removed first, as
``cudecomp.io`` replaces its file) with one plain sequential write (read):
``own_files_ms``, and ``pct_of_ceiling`` the bandwidth ratio. In the GPU variant the field
is a CuPy array, so the rows also show the device path against the host's. Beside it,
``one_file_pwrite_ms``: the same bytes into (from) one file with one ``pwrite`` (``pread``)
per rank at its rank's block, from host memory: what one file allows on the file system. GB/s counts
every rank's pencil bytes (their mean over ranks) over the slowest rank's median time. The
run prints the file system it measured.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp import TransposeCommBackend

from ._common import Case, Row, config, pct_of
from ._measure import Session, mean_gbps

IO_OPS = ("io-write", "io-read")


def file_system(path: str) -> str:
    """Return the type and mount point of the file system holding ``path`` (from ``/proc/mounts``)."""
    best = ("?", "")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and os.path.abspath(path).startswith(parts[1]) and len(parts[1]) > len(best[1]):
                    best = (parts[2], parts[1])
    except OSError:
        pass
    return f"{best[0]} at {best[1] or '?'}"


def io_directory(s: Session) -> str:
    """Make a fresh directory under ``--io-dir`` for this configuration's files: the same on every rank (collective)."""
    made = tempfile.mkdtemp(prefix="cudecomp-bench-io-", dir=s.args.io_dir) if s.comm.rank == 0 else None
    return s.comm.bcast(made, root=0)  # type: ignore[no-any-return]


def _remove(comm: MPI.Comm, paths: list[str]) -> None:
    """Remove this rank's ``paths`` once every rank is done with them (collective)."""
    comm.Barrier()
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
    comm.Barrier()


def io_rows(s: Session, case: Case, bname: str) -> list[Row]:
    """Time the ``--ops io`` rows of ``case`` (collective)."""
    import cudecomp.io as cio

    comm, m = s.comm, s.xp.m
    try:
        grid = s.handle.create_grid(config(case.gdims, case.pdims, TransposeCommBackend[bname], False))
    except cudecomp.CudecompError as e:
        return [case.row("io-write", bname, False, note=f"skipped: {type(e).__name__}: {e}")]
    where = io_directory(s)
    try:
        info = grid.get_pencil_info(0)
        field = m.ones(info.array_shape, case.np_dtype)
        host = np.ones(info.array_shape, case.np_dtype)
        nbytes = int(host.nbytes)
        shared = os.path.join(where, "field.h5")
        own = os.path.join(where, f"own-{comm.rank}.bin")
        layout = grid.pencil(0)

        def own_write() -> None:
            # A new file each time, as cudecomp.io writes: truncating the old one instead
            # would make ext4 flush it to the disk on close (auto_da_alloc).
            with contextlib.suppress(FileNotFoundError):
                os.remove(own)
            with open(own, "wb") as f:
                f.write(host.data)

        def own_read() -> None:
            with open(own, "rb") as f:
                f.readinto(host.data)

        # The same bytes into (from) one file with one plain pwrite (pread) per rank at
        # its rank's block: what one file allows on this file system, whatever writes it.
        flat = os.path.join(where, "one-file.bin")
        block = comm.allreduce(nbytes, op=MPI.MAX)

        def one_file_write() -> None:
            if comm.rank == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(flat)
                with open(flat, "wb") as f:
                    f.truncate(block * comm.size)
            comm.Barrier()
            fd = os.open(flat, os.O_WRONLY)
            try:
                view, at = host.data.cast("B"), block * comm.rank
                while view:  # one call moves at most about 2 GiB on Linux
                    n = os.pwrite(fd, view, at)
                    view, at = view[n:], at + n
            finally:
                os.close(fd)

        def one_file_read() -> None:
            fd = os.open(flat, os.O_RDONLY)
            try:
                view, at = host.data.cast("B"), block * comm.rank
                while view:
                    n = os.preadv(fd, [view], at)
                    if n == 0:
                        raise OSError(f"{flat}: ended early")
                    view, at = view[n:], at + n
            finally:
                os.close(fd)

        write = functools.partial(cio.write, shared, {"u": field}, layout, overwrite=True)
        read = functools.partial(cio.read, shared, "u", layout, out=field)
        if comm.rank == 0 and not s.args.quiet:
            print(f"cudecomp.bench: --ops io writes under {s.args.io_dir}: {file_system(where)}", flush=True)
        # Each kind of file is written, read back and removed before the next, so that at
        # most one field's files (and cudecomp.io's file being replaced) take disk space.
        own_ms = [s.time(own_write)[0], s.time(own_read)[0]]
        _remove(comm, [own])
        one_ms = [s.time(one_file_write)[0], s.time(one_file_read)[0]]
        _remove(comm, [flat] if comm.rank == 0 else [])
        try:
            ours = [s.time(write), s.time(read)]
        except (OSError, cudecomp.InvalidUsageError) as e:  # raised on every rank
            return [case.row(op, bname, False, note=f"skipped: {type(e).__name__}: {e}") for op in IO_OPS]
        rows = []
        for op, (med, mn), ceil_med, one_med in zip(IO_OPS, ours, own_ms, one_ms, strict=True):
            gbps, ceil_gbps = mean_gbps(comm, nbytes, med), mean_gbps(comm, nbytes, ceil_med)
            rows.append(
                case.row(
                    op,
                    bname,
                    False,
                    ms=med * 1e3,
                    ms_min=mn * 1e3,
                    gbps_per_rank=gbps,
                    bytes_per_rank=block,
                    ceiling_gbps=ceil_gbps,
                    ceiling="own_files",
                    pct_of_ceiling=pct_of(gbps, ceil_gbps),
                    distributed=comm.size > 1,
                    baseline={
                        "own_files_ms": ceil_med * 1e3,
                        "ratio_vs_own_files": med / ceil_med,
                        "one_file_pwrite_ms": one_med * 1e3,
                        "ratio_vs_one_file_pwrite": med / one_med,
                    },
                )
            )
        return rows
    finally:
        grid.destroy()
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(where, ignore_errors=True)
