"""cudecomp.io against a hostile user: layouts that do not tile, arguments that differ
across ranks, sizes that overflow, bad types and values, failed and killed writes. Each
case raises on every rank (the rank at fault its own error, the others
``InvalidUsageError``), nothing hangs, and the handle and the file still work after."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from conftest import requires_data_path
from cudecomp import BoxLayout, DataType
from oracle import device, factor_pairs, make, to_host, xp

h5py = pytest.importorskip("h5py")
cio = pytest.importorskip("cudecomp.io")

pytestmark = [pytest.mark.mpi, requires_data_path()]

COMM = MPI.COMM_WORLD
RANK, NRANKS = COMM.rank, COMM.size
LAST = NRANKS - 1
Invalid = cudecomp.InvalidUsageError
GDIMS = (4, 4, 4)


def shared_path(tmp_path: Any, name: str) -> str:
    """A path in rank 0's temporary directory, the same on every rank."""
    return COMM.bcast(os.path.join(str(tmp_path), name) if RANK == 0 else None)


def slab_box(gdims: tuple[int, int, int] = GDIMS) -> BoxLayout:
    """This rank's Z slab of whole X rows (empty where Z is short)."""
    z0, z1 = gdims[2] * RANK // NRANKS, gdims[2] * (RANK + 1) // NRANKS
    return BoxLayout((0, 0, z0), (gdims[0] - 1, gdims[1] - 1, z1 - 1)) if z1 > z0 else BoxLayout.empty()


def filled(box: BoxLayout, gdims: tuple[int, int, int] = GDIMS) -> Any:
    """The oracle's cells of ``box`` (global index)."""
    return device(make(box.info, gdims, DataType.DOUBLE))


def mine_or_others(bad: bool, own: type[BaseException] = Invalid) -> type[BaseException]:
    """The class a rank raises: its own error where it is at fault, InvalidUsageError elsewhere."""
    return own if bad else Invalid


def leftovers(path: str) -> list[str]:
    """The package's hidden files beside ``path``."""
    d, name = os.path.split(path)
    return sorted(n for n in os.listdir(d) if n.startswith(f".{name}"))


def assert_readable(handle: cudecomp.Handle, path: str, step: int | None = None, scale: float = 1.0) -> None:
    box = slab_box()
    got = cio.read(path, "u", box, handle=handle, gdims=GDIMS, step=step)
    assert np.array_equal(to_host(got), scale * make(box.info, GDIMS, DataType.DOUBLE))


# A: layouts that do not tile the grid, whole X rows or not.
@pytest.mark.mpi(min_ranks=2)
@pytest.mark.parametrize("case", ["same-box", "box-and-empty", "partial-rows-gap"])
def test_boxes_that_do_not_tile_are_refused_on_every_rank(handle: cudecomp.Handle, tmp_path: Any, case: str) -> None:
    path = shared_path(tmp_path, f"{case}.h5")
    if case == "same-box":
        box = BoxLayout((0, 0, 0), (3, 3, 1))  # z 0..1 on every rank
    elif case == "box-and-empty":
        box = BoxLayout((0, 0, 0), (3, 3, 1)) if RANK == 0 else BoxLayout.empty()
    else:
        box = BoxLayout((1, 0, 0), (3, 3, 3)) if RANK == 0 else BoxLayout.empty()
    u = filled(box)
    with pytest.raises(Invalid, match="the layout: .*(overlap|cover)"):
        cio.write(path, {"u": u}, box, handle=handle, gdims=GDIMS)
    assert not os.path.exists(path) and not leftovers(path)
    cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS)
    with pytest.raises(Invalid, match="the layout: .*(overlap|cover)"):
        cio.read(path, "u", box, handle=handle, gdims=GDIMS)
    assert_readable(handle, path)


# B: gdims that differ across ranks.
@pytest.mark.mpi(min_ranks=2)
def test_gdims_that_differ_are_refused(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "gdims.h5")
    gdims = (8, 4, 4) if RANK == LAST else GDIMS
    box = slab_box(gdims)
    with pytest.raises(Invalid, match=r"gdims is \(4, 4, 4\) on rank 0 and \(8, 4, 4\) on rank"):
        cio.write(path, {"u": filled(box, gdims)}, box, handle=handle, gdims=gdims)
    assert not os.path.exists(path)
    with pytest.raises(Invalid, match="gdims is"):
        cio.read(path, "u", box, handle=handle, gdims=gdims)


# C: attributes compared by their bytes, not their printed form.
@pytest.mark.mpi(min_ranks=2)
def test_long_attributes_are_compared_by_value(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "attrs.h5")
    a = np.arange(5000.0)
    if RANK == LAST:
        a[2500] = -1.0
    with pytest.raises(Invalid, match=r"attrs\['a'\] is .* on rank 0 and .* on rank"):
        cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, attrs={"a": a, "t": 1.0})
    assert not os.path.exists(path)
    cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, attrs={"a": np.arange(5000.0), "name": "x"})
    got = cio.attributes(path)
    assert np.array_equal(got["a"], np.arange(5000.0)) and got["name"] == "x"


# D and G: failed appends and overwrites leave the series as it was.
def series(handle: cudecomp.Handle, path: str, steps: range) -> None:
    for s in steps:
        cio.write(path, {"u": s * filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, step=s)


def assert_series(handle: cudecomp.Handle, path: str, steps: list[int]) -> None:
    assert cio.steps(path) == steps
    for s in steps:
        assert_readable(handle, path, step=s, scale=s)


@pytest.mark.mpi(min_ranks=2)
def test_a_full_disk_during_an_append_keeps_the_series(handle: cudecomp.Handle, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = shared_path(tmp_path, "full.h5")
    series(handle, path, range(1, 3))
    real = cio._data.write_part

    def full(*args: Any) -> None:
        if RANK == LAST:
            raise OSError(28, "No space left on device (simulated)")
        real(*args)

    monkeypatch.setattr(cio._data, "write_part", full)
    with pytest.raises(mine_or_others(RANK == LAST, OSError), match="No space left" if RANK == LAST else "writing the fields"):
        series(handle, path, range(3, 4))
    monkeypatch.setattr(cio._data, "write_part", real)
    assert_series(handle, path, [1, 2])
    # The journal itself cannot be written: the file stays as it was.
    encoded = cio._journal.Pages.encoded

    def no_room(self: Any) -> bytes:
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(cio._journal.Pages, "encoded", no_room)
    with pytest.raises(mine_or_others(RANK == 0, OSError)):
        series(handle, path, range(3, 4))
    monkeypatch.setattr(cio._journal.Pages, "encoded", encoded)
    assert_series(handle, path, [1, 2])
    COMM.Barrier()
    assert not leftovers(path)
    # A plain re-write of the step that failed works, and so does the next append.
    series(handle, path, range(3, 5))
    assert_series(handle, path, [1, 2, 3, 4])


@pytest.mark.mpi(min_ranks=2)
def test_a_failed_overwrite_keeps_the_old_step(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "overwrite.h5")
    series(handle, path, range(1, 2))
    # An attribute h5py cannot store (a complex number is fine; None is not).
    with pytest.raises(Invalid, match=r"attrs\['bad'\]: expected a number"):
        box = slab_box()
        cio.write(path, {"u": filled(box)}, box, handle=handle, gdims=GDIMS, step=1, overwrite=True, attrs={"bad": None})
    # A field of another dtype than the file allows: refused at the layout, old step kept.
    bad = xp.zeros(slab_box().array_shape, np.int64)
    with pytest.raises(Invalid, match="expected one of float32"):
        cio.write(path, {"u": bad}, slab_box(), handle=handle, gdims=GDIMS, step=1, overwrite=True)
    assert_series(handle, path, [1])
    cio.write(path, {"u": 7 * filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, step=1, overwrite=True)
    assert_readable(handle, path, step=1, scale=7)


def test_attributes_h5py_cannot_store_leave_nothing(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "attrs.h5")
    for bad in (None, {"a": 1}, [1, None], object()):
        with pytest.raises(Invalid, match=r"attrs\['x'\]"):
            cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, attrs={"x": bad})
    for own in ("gdims", "cudecomp_complete"):
        with pytest.raises(Invalid, match="the package's own"):
            cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, attrs={own: 1})
    COMM.Barrier()
    assert not os.path.exists(path) and not leftovers(path)


def test_overwrite_onto_a_directory_is_refused_untouched(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "adir")
    if RANK == 0:
        os.mkdir(path)
        open(os.path.join(path, "keep"), "w").close()
    COMM.Barrier()
    for step in (None, 3):
        with pytest.raises(Invalid, match="is a directory"):
            cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, overwrite=True, step=step)
    assert os.listdir(path) == ["keep"] and not leftovers(path)
    with pytest.raises(Invalid, match="is a directory"):
        cio.read(path, "u", slab_box(), handle=handle, gdims=GDIMS)


def test_a_step_a_killed_append_left_is_written_again_without_overwrite(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "killed.h5")
    series(handle, path, range(1, 2))
    if RANK == 0:
        # What an append killed between its layout and its completion leaves: a hidden
        # group, and one of an older version's incomplete step groups.
        with cio._journal.edit(h5py, path) as f:
            f.create_group("steps/.0000000002").attrs["cudecomp_complete"] = False
            f.create_group("steps/0000000003").attrs["cudecomp_complete"] = False
    COMM.Barrier()
    assert cio.steps(path) == [1]
    series(handle, path, range(2, 4))
    assert_series(handle, path, [1, 2, 3])


def test_long_file_names(handle: cudecomp.Handle, tmp_path: Any) -> None:
    name = "n" * (255 - len(".h5")) + ".h5"
    path = shared_path(tmp_path, name)
    cio.write(path, {"u": filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS)
    cio.write(path, {"u": 2 * filled(slab_box())}, slab_box(), handle=handle, gdims=GDIMS, overwrite=True)
    assert_readable(handle, path, scale=2)
    for removal in list(cio._file._removing.values()):
        removal.join()
    COMM.Barrier()
    assert not leftovers(path)
    other = shared_path(tmp_path, "s" * 252 + ".h5")
    series(handle, other, range(1, 3))
    assert_series(handle, other, [1, 2])


# E: sizes that overflow 64 bits.
def test_sizes_that_overflow_are_refused(handle: cudecomp.Handle) -> None:
    with pytest.raises(Invalid, match="does not fit in 64 bits"):
        BoxLayout((0, 0, 0), (2**40 - 1, 2**20 - 1, 2**20 - 1))
    with pytest.raises(Invalid, match="fits in 64 bits"):
        BoxLayout((0, 0, 0), (2**63, 0, 0))
    with pytest.raises(Invalid, match="does not fit in 64 bits"):
        BoxLayout((0, 0, 0), (2**32 - 1, 2**32 - 1, 2**32 - 1))
    with pytest.raises(Invalid, match="lo >= 0"):
        BoxLayout((-1, 0, 0), (1, 1, 1))
    with pytest.raises(Invalid, match="positive extents"):
        BoxLayout.whole((-3, 1, 1))
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = (8, 8, 8), factor_pairs(NRANKS)[0]
    with handle.create_grid(cfg) as g:
        with pytest.raises(Invalid, match="does not fit in 64 bits|hi below"):
            handle.create_redistribution(g.pencil(0), BoxLayout((0, 0, 0), (2**62, 2**62, 2**62)))
        r = handle.create_redistribution(g.pencil(0), BoxLayout.whole((8, 8, 8)) if RANK == 0 else BoxLayout.empty())
        r.destroy()
    with pytest.raises(Invalid, match="fit in 64 bits"):
        cio.write("/nonexistent/x.h5", {"u": xp.zeros((0, 0, 0))}, BoxLayout.empty(), handle=handle, gdims=(2**40, 2**20, 2**20))


# F: the smaller ones.
def test_bad_names_steps_and_dtypes(handle: cudecomp.Handle, tmp_path: Any) -> None:
    path = shared_path(tmp_path, "small.h5")
    box, u = slab_box(), filled(slab_box())
    cio.write(path, {"u": u}, box, handle=handle, gdims=GDIMS, step=2)
    with pytest.raises(Invalid, match="holds a time series; pass step="):
        cio.read(path, "u", box, handle=handle, gdims=GDIMS)
    with pytest.raises(Invalid, match="'/steps/0000000002' is a group, not a dataset"):
        cio.read(path, "/steps/0000000002", box, handle=handle, gdims=GDIMS, step=2)
    with pytest.raises(TypeError, match="step: expected an int or None, got float"):
        cio.write(path, {"u": u}, box, handle=handle, gdims=GDIMS, step=1.5)
    for bad in (-1, 10**12):
        with pytest.raises(Invalid, match="step: expected 0 <= step"):
            cio.write(path, {"u": u}, box, handle=handle, gdims=GDIMS, step=bad)
    with pytest.raises(TypeError, match="step"):
        cio.read(path, "u", box, handle=handle, gdims=GDIMS, step=True)
    with pytest.raises(Invalid, match="no step 5"):
        cio.attributes(path, step=5)
    with pytest.raises(Invalid, match="no such file"):
        cio.steps(path + ".missing")
    with pytest.raises(Invalid, match=r"fields\['u'\] dtype: expected one of float32"):
        cio.write(path, {"u": xp.zeros(box.array_shape, np.int64)}, box, handle=handle, gdims=GDIMS, step=3)
    with pytest.raises(TypeError, match="overwrite: expected a bool"):
        cio.write(path, {"u": u}, box, handle=handle, gdims=GDIMS, step=3, overwrite="yes")
    assert cio.steps(path) == [2]


def test_fft_library_scipy_without_scipy(handle: cudecomp.Handle, monkeypatch: pytest.MonkeyPatch) -> None:
    if not cudecomp.CPU_ONLY:
        pytest.skip("the GPU variant transforms with cupy")
    import builtins

    real = builtins.__import__

    def no_scipy(name: str, *args: Any, **kw: Any) -> Any:
        if name.startswith("scipy"):
            raise ImportError("No module named 'scipy' (simulated)")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    with pytest.raises(cudecomp.NotSupportedError, match="needs SciPy"):
        cudecomp.fft.FFT(handle, (8, 8, 8), factor_pairs(NRANKS)[0], fft_library="scipy")


# H: errors that hung every rank in the default mode.
@pytest.mark.mpi(min_ranks=2)
@pytest.mark.parametrize("contiguous", [(False, False), (True, True)], ids=["default", "z-axis-contiguous"])
def test_one_ranks_bad_array_raises_everywhere_in_the_default_mode(tmp_path: Any, contiguous: tuple[bool, bool]) -> None:
    from conftest import handle_with

    path = shared_path(tmp_path, "bad-array.h5")
    with handle_with(CUDECOMP_CHECK_COLLECTIVES="0") as handle:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims, cfg.pdims = (6, 5, 4), factor_pairs(NRANKS)[-1]
        cfg.transpose_axis_contiguous = (False, False, contiguous[1])
        with handle.create_grid(cfg) as g:
            info = g.get_pencil_info(2)
            u = device(make(info, (6, 5, 4), DataType.DOUBLE))
            strided = xp.zeros((info.array_shape[0], info.array_shape[1], 2 * info.array_shape[2]))[:, :, ::2] if RANK == LAST else u
            with pytest.raises(mine_or_others(RANK == LAST), match="contiguous" if RANK == LAST else f"rank {LAST} failed"):
                cio.write(path, {"u": strided}, g.pencil(2))
            cio.write(path, {"u": u}, g.pencil(2))
            if not cudecomp.CPU_ONLY:
                return  # CuPy arrays are always writable
            out = np.zeros(info.array_shape)
            out.flags.writeable = RANK != LAST
            with pytest.raises(mine_or_others(RANK == LAST), match="writable" if RANK == LAST else f"rank {LAST} failed"):
                cio.read(path, "u", g.pencil(2), out=out)
            got = cio.read(path, "u", g.pencil(2))
            assert np.array_equal(to_host(got), to_host(u))
