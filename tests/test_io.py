"""cudecomp.io: one HDF5 file per call, read back on any decomposition, checked by h5py.

Writes from random layouts (pencils of random grids with halos, padding, memory orders;
bricks), reads into others (another process grid, pencil, layout; another rank count
through a sub-communicator), time series, and the refusals: an existing file, a missing
field or step, another shape or dtype, a truncated or incomplete file, a failure in the
middle of a write (which leaves no file).
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import BoxLayout, DataType, RankOrder
from oracle import ALL_CONTIGUOUS, NUMPY_DTYPES, device, factor_pairs, interior, make, to_host, xp

h5py = pytest.importorskip("h5py")
cio = pytest.importorskip("cudecomp.io")

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
NRANKS = COMM.size


def shared_path(tmp_path: Any, name: str) -> str:
    """A path in rank 0's temporary directory, the same on every rank."""
    return COMM.bcast(os.path.join(str(tmp_path), name) if COMM.rank == 0 else None)


def global_array(gdims: tuple[int, int, int], dtype: DataType) -> np.ndarray:
    """The oracle's global array ``[z, y, x]``."""
    idx = np.arange(int(np.prod(gdims)), dtype=np.int64).reshape(gdims[::-1])
    a = idx.astype(NUMPY_DTYPES[dtype])
    return a - 1j * idx if np.iscomplexobj(a) else a


def grid_config(gdims: tuple[int, int, int], rng: random.Random, nranks: int = NRANKS) -> cudecomp.GridDescConfig:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, rng.choice(factor_pairs(nranks))
    cfg.transpose_axis_contiguous = rng.choice(ALL_CONTIGUOUS)
    cfg.rank_order = rng.choice(list(RankOrder))
    return cfg


@pytest.mark.parametrize("seed", range(8))
def test_any_layout_to_any_layout(handle: cudecomp.Handle, tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed * 100 + NRANKS)
    gdims = (rng.randint(1, 11), rng.randint(1, 11), rng.randint(1, 11))
    dtype = rng.choice(list(NUMPY_DTYPES))
    path = shared_path(tmp_path, f"f{seed}.h5")
    with handle.create_grid(grid_config(gdims, rng)) as a, handle.create_grid(grid_config(gdims, rng)) as b:
        halo = (rng.randint(0, 1), rng.randint(0, 2), rng.randint(0, 1))
        pad = (rng.randint(0, 1), 0, rng.randint(0, 1))
        src = a.pencil(rng.randrange(3), halo, pad)
        info = a.get_pencil_info(src.axis, halo, pad)
        u = device(make(info, gdims, dtype))
        cio.write(path, {"u": u, "twice": u * 2}, src, attrs={"time": 0.25 * seed, "name": "test"})
        if COMM.rank == 0:
            with h5py.File(path, "r") as f:
                assert np.array_equal(f["u"][...], global_array(gdims, dtype)), "what h5py reads"
                assert np.array_equal(f["twice"][...], 2 * global_array(gdims, dtype))
                assert f.attrs["time"] == 0.25 * seed and tuple(f.attrs["gdims"]) == gdims
            assert cio.attributes(path) == {"time": 0.25 * seed, "name": "test"}
        COMM.Barrier()
        axis = rng.randrange(3)
        out_halo = (1, 0, 1)
        into = b.pencil(axis, out_halo)
        info_b = b.get_pencil_info(axis, out_halo)
        got = cio.read(path, "twice", into)
        mask = interior(info_b)
        assert np.array_equal(to_host(got)[mask], 2 * make(info_b, gdims, dtype)[mask])
        # Into bricks, and into a given out.
        bricks = split_bricks(gdims)
        box = bricks[COMM.rank]
        out = xp.full(box.array_shape, -5.0, NUMPY_DTYPES[dtype])
        assert cio.read(path, "u", box, out=out, handle=handle, gdims=gdims) is out
        r = handle.create_redistribution(a.pencil(0), box)
        expected = make(r.output_info, gdims, dtype)
        r.destroy()
        assert np.array_equal(to_host(out), expected)


def split_bricks(gdims: tuple[int, int, int]) -> list[BoxLayout]:
    """Boxes cutting X in two (where there are two ranks or more) and Z among the rest."""
    nx = 2 if NRANKS % 2 == 0 and gdims[0] >= 2 else 1
    nz = NRANKS // nx
    boxes = []
    for r in range(NRANKS):
        i, k = r % nx, r // nx
        x0, x1 = gdims[0] * i // nx, gdims[0] * (i + 1) // nx
        z0, z1 = gdims[2] * k // nz, gdims[2] * (k + 1) // nz
        boxes.append(BoxLayout((x0, 0, z0), (x1 - 1, gdims[1] - 1, z1 - 1)))
    return boxes


@pytest.mark.mpi(min_ranks=2)
def test_read_back_on_another_rank_count(handle: cudecomp.Handle, tmp_path: Any) -> None:
    """Written by every rank, read by all but the last (a handle on a sub-communicator)."""
    gdims = (8, 7, 6)
    path = shared_path(tmp_path, "restart.h5")
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, factor_pairs(NRANKS)[-1]
    with handle.create_grid(cfg) as g:
        cio.write(path, {"p": device(make(g.get_pencil_info(2), gdims, DataType.DOUBLE))}, g.pencil(2))
    sub = COMM.Split(0 if COMM.rank < NRANKS - 1 else MPI.UNDEFINED, COMM.rank)
    if sub != MPI.COMM_NULL:
        with cudecomp.Handle(sub) as h:
            c = cudecomp.GridDescConfig()
            c.gdims, c.pdims = gdims, (1, sub.size)
            with h.create_grid(c) as g2:
                got = cio.read(path, "p", g2.pencil(0))
                assert np.array_equal(to_host(got), make(g2.get_pencil_info(0), gdims, DataType.DOUBLE))
        sub.Free()
    COMM.Barrier()


def test_time_series(handle: cudecomp.Handle, tmp_path: Any) -> None:
    gdims = (6, 5, 4)
    path = shared_path(tmp_path, "series.h5")
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, factor_pairs(NRANKS)[0]
    with handle.create_grid(cfg) as g:
        u = device(make(g.get_pencil_info(0), gdims, DataType.FLOAT))
        for step in (10, 20, 30):
            cio.write(path, {"u": u * step}, g.pencil(0), step=step, attrs={"t": step / 10})
        assert cio.steps(path) == [10, 20, 30]
        assert cio.attributes(path, step=20) == {"t": 2.0}
        got = cio.read(path, "u", g.pencil(1), step=20)
        assert np.array_equal(to_host(got), 20 * make(g.get_pencil_info(1), gdims, DataType.FLOAT))
        with pytest.raises(cudecomp.InvalidUsageError, match="step group steps/0000000020 exists"):
            cio.write(path, {"u": u}, g.pencil(0), step=20)
        cio.write(path, {"u": u}, g.pencil(0), step=20, overwrite=True)
        with pytest.raises(cudecomp.InvalidUsageError, match="no step 40"):
            cio.read(path, "u", g.pencil(0), step=40)
        if COMM.rank == 0:
            with h5py.File(path, "r") as f:
                assert sorted(f["steps"]) == ["0000000010", "0000000020", "0000000030"]
                assert np.array_equal(f["steps/0000000030/u"][...], 30 * global_array(gdims, DataType.FLOAT))


def test_refusals_on_every_rank(handle: cudecomp.Handle, tmp_path: Any) -> None:
    gdims = (6, 5, 4)
    path = shared_path(tmp_path, "checks.h5")
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, factor_pairs(NRANKS)[-1]
    with handle.create_grid(cfg) as g:
        u = device(make(g.get_pencil_info(0), gdims, DataType.DOUBLE))
        cio.write(path, {"u": u}, g.pencil(0))
        with pytest.raises(cudecomp.InvalidUsageError, match="exists; pass overwrite=True"):
            cio.write(path, {"u": u}, g.pencil(0))
        with pytest.raises(cudecomp.InvalidUsageError, match="no field 'w'"):
            cio.read(path, "w", g.pencil(0))
        with pytest.raises(cudecomp.InvalidUsageError, match=r"fields\['u'\]: expected shape"):
            cio.write(path, {"u": u[:1]}, g.pencil(1), overwrite=True)
        with pytest.raises(cudecomp.InvalidUsageError, match="is float64; out is float32"):
            cio.read(path, "u", g.pencil(0), out=xp.zeros(g.get_pencil_info(0).array_shape, np.float32))
        other = cudecomp.GridDescConfig()
        other.gdims, other.pdims = (6, 5, 5), factor_pairs(NRANKS)[-1]
        with handle.create_grid(other) as g2, pytest.raises(cudecomp.InvalidUsageError, match=r"has shape \(4, 5, 6\)"):
            cio.read(path, "u", g2.pencil(0))
        with pytest.raises(cudecomp.InvalidUsageError, match="no such file"):
            cio.read(path + ".missing", "u", g.pencil(0))
        # One rank's wrong argument: it raises its own error, the others InvalidUsageError.
        if NRANKS > 1:
            name = "u" if COMM.rank else "v"
            with pytest.raises(cudecomp.InvalidUsageError, match="fields"):
                cio.write(path, {name: u}, g.pencil(0), overwrite=True)
        # A truncated file, and one whose completion marker is missing.
        if COMM.rank == 0:
            with h5py.File(path, "r") as f:
                end = f["u"].id.get_offset() + 8 * 120
            os.truncate(path, end - 8)
        COMM.Barrier()
        with pytest.raises(cudecomp.InvalidUsageError, match="truncated"):
            cio.read(path, "u", g.pencil(0))
        cio.write(path, {"u": u}, g.pencil(0), overwrite=True)
        if COMM.rank == 0:
            with h5py.File(path, "a") as f:
                f.attrs["cudecomp_complete"] = False
        COMM.Barrier()
        with pytest.raises(cudecomp.InvalidUsageError, match="not completely written"):
            cio.read(path, "u", g.pencil(0))
        with pytest.raises(TypeError, match="PencilLayout"):
            cio.write(path, {"u": u}, "x-pencil", overwrite=True)  # type: ignore[arg-type]


def test_a_failed_write_leaves_no_file(handle: cudecomp.Handle, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank failing while the bytes go out: every rank raises, and neither the file nor its temporary copy is left."""
    gdims = (6, 5, 4)
    path = shared_path(tmp_path, "failed.h5")
    real = cio._data.write_part

    def failing(*args: Any) -> None:
        if COMM.rank == NRANKS - 1:
            raise OSError(28, "No space left on device (simulated)")
        real(*args)

    monkeypatch.setattr(cio._data, "write_part", failing)
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, factor_pairs(NRANKS)[-1]
    with handle.create_grid(cfg) as g:
        u = device(make(g.get_pencil_info(0), gdims, DataType.DOUBLE))
        with pytest.raises(OSError if COMM.rank == NRANKS - 1 else cudecomp.InvalidUsageError):
            cio.write(path, {"u": u}, g.pencil(0))
        COMM.Barrier()
        assert not os.path.exists(path)
        assert not any(n.startswith(".failed.h5") for n in os.listdir(os.path.dirname(path)))
        monkeypatch.setattr(cio._data, "write_part", real)
        cio.write(path, {"u": u}, g.pencil(0))  # the handle and grid still work
        assert np.array_equal(to_host(cio.read(path, "u", g.pencil(0))), make(g.get_pencil_info(0), gdims, DataType.DOUBLE))


def test_overwrite_replaces_the_file_or_keeps_the_old_one(handle: cudecomp.Handle, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``overwrite=True``: the new file takes the name and nothing is left aside; a failed overwrite keeps the old file."""
    gdims = (6, 5, 4)
    path = shared_path(tmp_path, "replaced.h5")
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = gdims, factor_pairs(NRANKS)[-1]
    with handle.create_grid(cfg) as g:
        info = g.get_pencil_info(0)
        old = make(info, gdims, DataType.DOUBLE)
        cio.write(path, {"u": device(old)}, g.pencil(0))
        real = cio._data.write_part

        def failing(*args: Any) -> None:
            if COMM.rank == 0:
                raise OSError(28, "No space left on device (simulated)")
            real(*args)

        monkeypatch.setattr(cio._data, "write_part", failing)
        with pytest.raises(OSError if COMM.rank == 0 else cudecomp.InvalidUsageError):
            cio.write(path, {"u": device(-old)}, g.pencil(0), overwrite=True)
        monkeypatch.setattr(cio._data, "write_part", real)
        assert np.array_equal(to_host(cio.read(path, "u", g.pencil(0))), old)
        cio.write(path, {"u": device(-old)}, g.pencil(0), overwrite=True)
        assert np.array_equal(to_host(cio.read(path, "u", g.pencil(0))), -old)
        for removal in list(cio._file._removing.values()):  # the old file goes in the background
            removal.join()
        COMM.Barrier()
        assert sorted(n for n in os.listdir(os.path.dirname(path)) if "replaced.h5" in n) == ["replaced.h5"]


@pytest.mark.mpi(ranks=(1,))
def test_killed_appends_keep_every_complete_step(tmp_path: Any) -> None:
    """A few rounds of scripts/io_soak.py: a rank killed (SIGKILL, SIGTERM) at a random point of its appends."""
    import subprocess
    import sys

    if MPI.get_vendor()[0] != "MPICH":
        pytest.skip("the soak runs under one MPI family (MPICH); the journal does not depend on it")
    launcher = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(launcher):
        pytest.skip("no mpiexec beside the interpreter")
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "io_soak.py")
    run = subprocess.run(
        [sys.executable, script, "--rounds", "4", "--ranks", "2", "--mpiexec", launcher, "--dir", str(tmp_path), "--max-wait", "0.8"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all readable" in run.stdout


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip", "big-endian", "float32-as-float64", "int32"])
def test_files_other_programs_wrote(handle: cudecomp.Handle, tmp_path: Any, storage: str) -> None:
    """Any HDF5 file with a dataset of the grid's shape reads into any decomposition, each rank its own part."""
    gdims = (7, 6, 5)
    path = shared_path(tmp_path, f"foreign-{storage}.h5")
    want = global_array(gdims, DataType.DOUBLE)
    if COMM.rank == 0:
        with h5py.File(path, "w") as f:
            grp = f.create_group("fields")
            kw: dict[str, Any] = {
                "contiguous": {},
                "chunked": {"chunks": (2, 3, 4)},
                "gzip": {"chunks": (5, 6, 7), "compression": "gzip", "shuffle": True},
                "big-endian": {"dtype": ">f8"},
                "float32-as-float64": {"dtype": "f4"},
                "int32": {"dtype": "i4"},
            }[storage]
            grp.create_dataset("u", data=want.astype(kw.pop("dtype", "f8")), **kw)
    COMM.Barrier()
    rng = random.Random(NRANKS)
    with handle.create_grid(grid_config(gdims, rng)) as g:
        for axis in range(3):
            info = g.get_pencil_info(axis, (1, 0, 1))
            layout = g.pencil(axis, (1, 0, 1))
            if storage == "int32":
                with pytest.raises(cudecomp.InvalidUsageError, match="stored as int32; pass dtype="):
                    cio.read(path, "/fields/u", layout)
                got = cio.read(path, "/fields/u", layout, dtype=np.float64)
            elif storage == "float32-as-float64":
                assert cio.read(path, "/fields/u", layout).dtype == np.float32
                with pytest.raises(cudecomp.InvalidUsageError, match="is float32; out is float64"):
                    cio.read(path, "/fields/u", layout, out=xp.zeros(info.array_shape))
                got = cio.read(path, "/fields/u", layout, out=xp.zeros(info.array_shape), dtype=np.float64)
            else:
                got = cio.read(path, "/fields/u", layout)
            mask = interior(info)
            assert np.array_equal(to_host(got)[mask], make(info, gdims, DataType.DOUBLE)[mask]), (storage, axis)
        # Into bricks, converted to float32 on the way.
        box = split_bricks(gdims)[COMM.rank]
        got = cio.read(path, "fields/u", box, handle=handle, gdims=gdims, dtype=np.float32)
        assert got.dtype == np.float32
        r = handle.create_redistribution(g.pencil(0), box)
        expected = make(r.output_info, gdims, DataType.FLOAT)
        r.destroy()
        assert np.array_equal(to_host(got), expected)
        with pytest.raises(cudecomp.InvalidUsageError, match="no field 'v'"):
            cio.read(path, "v", g.pencil(0))


@pytest.mark.parametrize("method", ["auto", "pwrite"])
def test_both_ways_of_writing_give_the_same_file(tmp_path: Any, method: str) -> None:
    """``CUDECOMP_IO_WRITE``: mapped where the blocks were allocated (auto), or positioned writes."""
    from conftest import handle_with

    gdims = (9, 7, 5)
    path = shared_path(tmp_path, f"{method}.h5")
    with handle_with(CUDECOMP_IO_WRITE=method) as h:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = gdims, factor_pairs(NRANKS)[-1]
        with h.create_grid(cfg) as g:
            for axis, halo in ((0, (1, 0, 1)), (2, (0, 0, 0))):
                info = g.get_pencil_info(axis, halo)
                cio.write(path, {"u": device(make(info, gdims, DataType.DOUBLE))}, g.pencil(axis, halo), overwrite=True)
                if COMM.rank == 0:
                    with h5py.File(path, "r") as f:
                        assert np.array_equal(f["u"][...], global_array(gdims, DataType.DOUBLE))
                COMM.Barrier()
            cio.write(path, {"u": device(make(g.get_pencil_info(0), gdims, DataType.FLOAT))}, g.pencil(0), step=3, overwrite=True)
            assert np.array_equal(to_host(cio.read(path, "u", g.pencil(1), step=3)), make(g.get_pencil_info(1), gdims, DataType.FLOAT))


def test_io_write_setting_is_checked() -> None:
    from conftest import handle_with

    with pytest.raises(cudecomp.InvalidUsageError, match="CUDECOMP_IO_WRITE: expected auto or pwrite"):
        with handle_with(CUDECOMP_IO_WRITE="mmap2"):
            pass


@pytest.mark.parametrize("seed", range(3))
def test_a_batch_is_one_dataset_of_its_fields(handle: cudecomp.Handle, tmp_path: Any, seed: int) -> None:
    """A batch ``(k, *array_shape)`` is stored as one dataset ``(k, nz, ny, nx)`` and read back as a batch on any layout."""
    rng = random.Random(seed * 7 + NRANKS)
    gdims = (rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 9))
    dtype = rng.choice(list(NUMPY_DTYPES))
    k = 3
    path = shared_path(tmp_path, f"batch{seed}.h5")
    with handle.create_grid(grid_config(gdims, rng)) as a, handle.create_grid(grid_config(gdims, rng)) as b:
        halo = (rng.randint(0, 1), 0, rng.randint(0, 1))
        src = a.pencil(rng.randrange(3), halo)
        info = a.get_pencil_info(src.axis, halo)
        one = make(info, gdims, dtype)
        u = np.stack([one * (f + 1) for f in range(k)])
        cio.write(path, {"u": device(u), "p": device(one)}, src)
        if COMM.rank == 0:
            with h5py.File(path, "r") as f:
                want = np.stack([global_array(gdims, dtype) * (f + 1) for f in range(k)])
                assert f["u"].shape == (k, *gdims[::-1]) and np.array_equal(f["u"][...], want)
                assert np.array_equal(f["p"][...], global_array(gdims, dtype))
        COMM.Barrier()
        for axis in range(3):
            into = b.pencil(axis, (0, 1, 0))
            ib = b.get_pencil_info(axis, (0, 1, 0))
            mask = interior(ib)
            got = to_host(cio.read(path, "u", into))
            assert got.shape == (k, *ib.array_shape)
            out = xp.zeros((k, *ib.array_shape), got.dtype)
            assert cio.read(path, "u", into, out=out) is out
            for f in range(k):
                assert np.array_equal(got[f][mask], (f + 1) * make(ib, gdims, dtype)[mask]), (axis, f)
                assert np.array_equal(to_host(out)[f][mask], got[f][mask])
        # A chunked batch (another program's) reads through h5py, converted on the way.
        if COMM.rank == 0:
            with h5py.File(path, "a") as f:
                f.create_dataset("chunked", data=f["u"][...], chunks=(1, 2, 2, 2))
        COMM.Barrier()
        got = to_host(cio.read(path, "chunked", b.pencil(0), dtype=np.complex128))
        for f in range(k):
            assert np.array_equal(got[f], (f + 1) * make(b.get_pencil_info(0), gdims, dtype).astype(np.complex128))


def test_what_a_batch_may_not_be_in_a_file(handle: cudecomp.Handle, tmp_path: Any) -> None:
    gdims = (5, 4, 6)
    path = shared_path(tmp_path, "batch-misuse.h5")
    with handle.create_grid(grid_config(gdims, random.Random(1))) as g:
        info = g.get_pencil_info(0)
        u = device(np.stack([make(info, gdims, DataType.DOUBLE)] * 2))
        with pytest.raises(TypeError, match=r"\(k, \*array_shape\)"):
            cio.write(path, {"u": [u[0], u[1]]}, g.pencil(0))
        with pytest.raises(cudecomp.InvalidUsageError, match="at least 1 field"):
            cio.write(path, {"u": u[:0]}, g.pencil(0))
        cio.write(path, {"u": u, "p": u[0].copy()}, g.pencil(0))
        with pytest.raises(cudecomp.InvalidUsageError, match=r"holds a batch of 2 fields; out must have shape"):
            cio.read(path, "u", g.pencil(0), out=xp.zeros(info.array_shape))
        with pytest.raises(cudecomp.InvalidUsageError, match=r"holds one field; out must have shape"):
            cio.read(path, "p", g.pencil(0), out=xp.zeros((2, *info.array_shape)))
        assert to_host(cio.read(path, "u", g.pencil(0))).shape == (2, *info.array_shape)  # still works


@pytest.mark.mpi(min_ranks=2)
def test_batches_of_different_sizes_on_different_ranks_are_refused_everywhere(handle: cudecomp.Handle, tmp_path: Any) -> None:
    gdims = (5, 4, 6)
    path = shared_path(tmp_path, "batch-ranks.h5")
    with handle.create_grid(grid_config(gdims, random.Random(2))) as g:
        k = 2 if COMM.rank == 0 else 3
        u = device(np.zeros((k, *g.get_pencil_info(1).array_shape)))
        with pytest.raises(cudecomp.InvalidUsageError, match="batches"):
            cio.write(path, {"u": u}, g.pencil(1))
        assert COMM.allreduce(int(os.path.exists(path))) == 0
