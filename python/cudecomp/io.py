"""Parallel I/O of distributed fields: one HDF5 file per call, read back on any decomposition.

``write`` puts one or several fields of a decomposition (any pencil of a grid, with any
layout, halos and padding, or boxes) into one HDF5 file: one dataset per field, the
global array ``[z, y, x]`` in C order, with the global extents and your attributes (time,
step, parameters). ``read`` fills a field into any decomposition of the same global grid
(another rank count, process grid, pencil or layout). Both are collective over the
handle's ranks and run on both variants: from CuPy arrays, the bytes go to the file
through page-locked buffers piece by piece, never as a host copy of the whole pencil.

How it works: rank 0 lays out the file with h5py (contiguous datasets allocated up
front, so that every dataset's bytes sit at a known offset); each rank moves its cells
into Z slabs with a ``cudecomp.Redistribution`` (skipped where the layout is one
already) and writes its slab's bytes at its offset with ``pwrite`` (``pread`` to read),
in the package's Rust core with the GIL released. The file is an ordinary HDF5 file:
``h5py.File(path)["u"][...]`` (or any HDF5 reader) reads it without this package.

Safety: a new file is written under a temporary name in the same directory and renamed
when every rank has finished; a step appended to an existing file is marked complete
(attribute ``cudecomp_complete``) only then. ``read`` refuses an incomplete step, a
missing field, a field of another shape or dtype, and a truncated file, with
``InvalidUsageError`` on every rank naming the file and the field. Nothing is
overwritten unless ``overwrite=True``. A step counts as complete once every rank's bytes
are in the operating system's hands; flushing them to the disk is the file system's
business (as for any write without ``fsync``).

Time series: ``write(..., step=n)`` puts the fields of step ``n`` into group
``steps/<n>`` (``n`` zero-padded to 10 digits) of the file, creating it if needed, with
the attributes on the group; ``steps(path)`` lists the complete steps.

Needs h5py (``pip install h5py``; serial HDF5 is enough: the parallel part is the
package's own).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from . import _cudecomp
from ._cudecomp import BoxLayout, Handle, PencilInfo, PencilLayout, Redistribution
from ._errors import InvalidUsageError, NotSupportedError

FORMAT_VERSION = 1
"""Version of the file layout ``write`` produces (root attribute ``cudecomp_format``)."""

_COMPLETE = "cudecomp_complete"


def _h5py() -> Any:
    try:
        import h5py  # type: ignore[import-untyped]
    except ImportError as e:
        raise NotSupportedError("cudecomp.io needs h5py: pip install h5py") from e
    return h5py


def _xp() -> Any:
    if _cudecomp.CPU_ONLY:
        return np
    import cupy

    return cupy


def _group_name(step: int | None) -> str:
    return "/" if step is None else f"steps/{step:010d}"


def _handle_and_gdims(layout: Any, handle: Handle | None, gdims: Any) -> tuple[Handle, tuple[int, int, int]]:
    if isinstance(layout, PencilLayout):
        g = layout.grid
        return g.handle, tuple(int(v) for v in g.config.gdims)  # type: ignore[return-value]
    if isinstance(layout, BoxLayout):
        if handle is None or gdims is None:
            raise TypeError("a BoxLayout needs handle= and gdims= (the pencil of a grid knows both)")
        return handle, (int(gdims[0]), int(gdims[1]), int(gdims[2]))
    raise TypeError(f"layout: expected a cudecomp.PencilLayout (GridDesc.pencil) or a cudecomp.BoxLayout, got {type(layout).__name__}")


def _info(layout: Any) -> PencilInfo:
    """Describe the array of ``layout`` on this rank."""
    if isinstance(layout, BoxLayout):
        return layout.info
    return layout.grid.get_pencil_info(layout.axis, layout.halo_extents, layout.padding)


def _slab(gdims: tuple[int, int, int], rank: int, nranks: int) -> BoxLayout:
    """Return the Z slab of the file ``rank`` moves (planes ``z0 .. z1 - 1``; empty where Z is short)."""
    nz = gdims[2]
    z0, z1 = nz * rank // nranks, nz * (rank + 1) // nranks
    if z1 <= z0:
        return BoxLayout.empty()
    return BoxLayout((0, 0, z0), (gdims[0] - 1, gdims[1] - 1, z1 - 1))


def _agree_outcome(handle: Handle, what: str, error: BaseException | None) -> None:
    """Tell every rank whether some rank failed (``error``; collective); the failing rank raises its own."""
    if error is None:
        handle._agree(what, [("outcome", "ok")])
        return
    handle._agree(what, None, f"{type(error).__name__}: {error}")
    raise error


def _refused(handle: Handle, what: str, e: BaseException) -> None:
    """Join the agreement as failed with a local argument error (the others raise), then raise it."""
    handle._agree(what, None, f"{type(e).__name__}: {e}")
    raise e


def _local_write(h: Handle, target: str, offset: int, info: PencilInfo, g: tuple[int, int, int], a: Any, stream: Any) -> None:
    """Write this rank's owned cells of ``a`` (local: the step that meets the file system)."""
    h._write_part(target, offset, info, g, a, stream)


def _write_fields(
    h: Handle, target: str, offsets: list[int] | None, arrays: list[Any], layout: Any, g: tuple[int, int, int], stream: Any
) -> None:
    """Write every rank's owned cells of ``arrays`` to the file (collective; ``offsets``: None where this rank failed).

    Straight from the arrays where every rank's array owns whole X rows in file order;
    otherwise through Z slabs (a redistribution) first. Every rank runs every collective
    step even after a local failure, which it raises at the end.
    """
    info = _info(layout)
    error: BaseException | None = None if offsets is not None else InvalidUsageError("no dataset offsets")

    def local(off: int, part: PencilInfo, a: Any) -> None:
        nonlocal error
        if error is None:
            try:
                _local_write(h, target, off, part, g, a, stream)
            except Exception as e:  # raised after the collective steps
                error = e

    places = offsets if offsets is not None else [0] * len(arrays)
    if h._all(h._owns_whole_rows(info, g)):
        for a, off in zip(arrays, places, strict=True):
            local(off, info, a)
    else:
        slab = _slab(g, h.rank, h.nranks)
        xp = _xp()
        with _slab_redistribution(h, layout, slab, to_slab=True) as r:
            for a, off in zip(arrays, places, strict=True):
                piece = r.run(a, xp.empty(slab.array_shape, a.dtype), stream=stream)
                local(off, r.output_info, piece)
    if error is not None:
        raise error


def _read_field(h: Handle, path: str, offset: int, result: Any, layout: Any, g: tuple[int, int, int], stream: Any) -> None:
    """Fill the owned cells of ``result`` from the file (collective), directly or through Z slabs.

    Every rank runs the redistribution even where its own read failed, and raises after.
    """
    info = _info(layout)
    if h._all(h._owns_whole_rows(info, g)):
        h._read_part(path, offset, info, g, result, stream)
        return
    slab = _slab(g, h.rank, h.nranks)
    error: BaseException | None = None
    with _slab_redistribution(h, layout, slab, to_slab=False) as r:
        piece = _xp().zeros(slab.array_shape, result.dtype)
        try:
            h._read_part(path, offset, r.input_info, g, piece, stream)
        except Exception as e:
            error = e
        r.run(piece, result, stream=stream)
    if error is not None:
        raise error


def write(
    path: str | os.PathLike[str],
    fields: Mapping[str, Any],
    layout: PencilLayout | BoxLayout,
    *,
    step: int | None = None,
    attrs: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    handle: Handle | None = None,
    gdims: Any = None,
    stream: Any = None,
) -> None:
    """Write ``fields`` (name -> this rank's array in ``layout``) into one HDF5 file (collective).

    Args:
        path: The file. Without ``step`` it holds these fields alone (refused if it exists,
            unless ``overwrite``); with ``step`` the fields go to group ``steps/<step>``
            of the file, which is created if needed.
        fields: Field name -> this rank's array: the shape of ``layout``'s arrays (with
            its halos and padding; only the owned cells are written), one of float32,
            float64, complex64, complex128; NumPy in the CPU variant, CuPy in the GPU
            variant. Names must be the same on every rank.
        layout: ``grid.pencil(axis, halo_extents, padding)``, or this rank's
            ``BoxLayout`` (then pass ``handle`` and ``gdims``).
        step: The step of a time series, or ``None``.
        attrs: Attributes stored with the fields (numbers, strings, arrays), the same on
            every rank.
        overwrite: Replace an existing file (or step).
        handle: The handle, for a ``BoxLayout`` (a pencil's grid knows it).
        gdims: The global extents (X, Y, Z), for a ``BoxLayout``.
        stream: GPU variant: the stream the arrays are ready on.

    Raises:
        InvalidUsageError: On every rank: differing arguments across ranks, an array of
            another shape than the layout's, an existing file or step without
            ``overwrite``, or another rank's failure.
        OSError: The file system refused (the other ranks raise ``InvalidUsageError``
            naming this rank).
        NotSupportedError: h5py is not installed.
    """
    path = os.fspath(path)
    h, g = _handle_and_gdims(layout, handle, gdims)
    names = list(fields)
    what = f"cudecomp.io.write({path!r})"
    try:
        h5py = _h5py()
        if not names:
            raise InvalidUsageError("fields: expected at least one field, got none")
        shape = _info(layout).array_shape
        for n in names:
            a = fields[n]
            if not isinstance(n, str) or not n or "/" in n:
                raise InvalidUsageError(f"fields: expected names without '/', got {n!r}")
            if tuple(a.shape) != tuple(shape):
                raise InvalidUsageError(f"fields[{n!r}]: expected shape {tuple(shape)} (the layout's array_shape), got {tuple(a.shape)}")
        dtypes = [np.dtype(fields[n].dtype).str for n in names]
        agreed = [("path", path), ("fields", repr(names)), ("dtypes", repr(dtypes)), ("step", repr(step))]
        agreed += [("overwrite", repr(bool(overwrite))), ("attrs", repr(sorted((attrs or {}).items())))]
    except (InvalidUsageError, NotSupportedError, TypeError, AttributeError) as e:
        _refused(h, what, e)
    h._agree(what, agreed)
    rank = h.rank
    group = _group_name(step)
    exists = os.path.exists(path)
    # A new file (or a replaced one) is written under a temporary name in the same
    # directory, renamed at the end; the name is the same on every rank (made from the
    # agreed path), and a write killed earlier leaves nothing that reads as complete.
    fresh = step is None or not exists
    target = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.cudecomp-partial") if fresh else path

    error: BaseException | None = None
    if rank == 0:
        try:
            _lay_out(h5py, target, path, fresh, exists, group, names, dtypes, g, attrs or {}, overwrite)
        except Exception as e:  # any failure on rank 0 must reach every rank
            error = e
    _agree_outcome(h, f"{what}: layout", error if rank == 0 else None)
    try:
        error = None
        offsets: list[int] | None = None
        try:
            with h5py.File(target, "r", locking=False) as f:
                offsets = [int(f[group][n].id.get_offset()) for n in names]
        except Exception as e:  # raised after the collective steps
            error = e
        try:
            _write_fields(h, target, offsets, [fields[n] for n in names], layout, g, stream)
        except Exception as e:  # a failure on any rank must reach every rank
            error = error or e
        _agree_outcome(h, f"{what}: data", error)
        error = None
        if rank == 0:
            try:
                with h5py.File(target, "a") as f:
                    f[group].attrs[_COMPLETE] = True
                if target != path:
                    _put_in_place(target, path)
            except Exception as e:
                error = e
        _agree_outcome(h, f"{what}: completion", error if rank == 0 else None)
    except BaseException:
        if rank == 0 and target != path:
            with contextlib.suppress(OSError):
                os.remove(target)
        raise


def _put_in_place(target: str, path: str) -> None:
    """Rank 0: rename the complete ``target`` to ``path``, replacing a file there.

    A file already at ``path`` is renamed aside first and removed last: renaming over an
    existing file makes some file systems (ext4's ``auto_da_alloc``) write the new file's
    bytes to the disk before the rename returns, which would make a replaced checkpoint
    cost a flush that a new one does not. ``path`` holds the old file or the new one at
    every moment but the one between the two renames.
    """
    if not os.path.lexists(path):
        os.replace(target, path)
        return
    aside = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.cudecomp-replaced")
    os.replace(path, aside)
    try:
        os.replace(target, path)
    except OSError:
        os.replace(aside, path)  # the old file back under its name
        raise
    os.remove(aside)


@contextlib.contextmanager
def _slab_redistribution(handle: Handle, layout: Any, slab: BoxLayout, to_slab: bool) -> Iterator[Redistribution]:
    """Make the redistribution between ``layout`` and this rank's ``slab`` (collective), destroyed on leaving."""
    r = handle.create_redistribution(layout, slab) if to_slab else handle.create_redistribution(slab, layout)
    try:
        yield r
    finally:
        r.destroy()


def _lay_out(
    h5py: Any,
    target: str,
    path: str,
    fresh: bool,
    exists: bool,
    group: str,
    names: list[str],
    dtypes: list[str],
    gdims: tuple[int, int, int],
    attrs: Mapping[str, Any],
    overwrite: bool,
) -> None:
    """Rank 0: the file's structure, every dataset allocated up front (contiguous, no fill)."""
    if fresh and exists and not overwrite and group == "/":
        raise InvalidUsageError(f"{path}: exists; pass overwrite=True to replace it")
    with h5py.File(target, "w" if fresh else "a") as f:
        if "cudecomp_format" in f.attrs and tuple(f.attrs.get("gdims", ())) != tuple(gdims):
            raise InvalidUsageError(f"{path}: holds a grid of gdims {tuple(f.attrs['gdims'])}, not {gdims}")
        f.attrs["cudecomp_format"] = FORMAT_VERSION
        f.attrs["gdims"] = np.asarray(gdims, np.int64)
        f.attrs["axes"] = "datasets are the global arrays [z, y, x] (C order, X fastest)"
        if group in f and group != "/":
            if not overwrite:
                raise InvalidUsageError(f"{path}: step group {group} exists; pass overwrite=True to replace it")
            del f[group]
        grp = f.require_group(group)
        grp.attrs[_COMPLETE] = False
        for k, v in attrs.items():
            grp.attrs[k] = v
        shape = (gdims[2], gdims[1], gdims[0])
        for n, dt in zip(names, dtypes, strict=True):
            if n in grp:
                del grp[n]
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
            space = h5py.h5s.create_simple(shape)
            tid = h5py.h5t.py_create(np.dtype(dt), logical=True)
            h5py.h5d.create(grp.id, n.encode(), tid, space, dcpl=dcpl).close()


def read(
    path: str | os.PathLike[str],
    name: str,
    layout: PencilLayout | BoxLayout,
    *,
    step: int | None = None,
    out: Any = None,
    handle: Handle | None = None,
    gdims: Any = None,
    stream: Any = None,
) -> Any:
    """Read field ``name`` into this rank's array of ``layout`` (collective).

    Any decomposition of the file's global grid serves: another rank count, process
    grid, pencil, memory order, halos or padding than the writer's. Only the owned cells
    of the result are written (its halos and padding are left as they are, or
    uninitialised when allocated).

    Args:
        path: A file written by ``write``.
        name: The field.
        layout: ``grid.pencil(axis, halo_extents, padding)``, or this rank's ``BoxLayout``
            (with ``handle`` and ``gdims``).
        step: The step of a time series, or ``None``.
        out: This rank's array to fill (the layout's shape, the field's dtype), or ``None``
            to allocate one.
        handle: The handle, for a ``BoxLayout``.
        gdims: The global extents (X, Y, Z), for a ``BoxLayout``.
        stream: GPU variant: the stream to order the work on.

    Returns:
        ``out``, or the allocated array.

    Raises:
        InvalidUsageError: On every rank: a missing or incomplete file, step or field, a
            field of other global extents or dtype, a truncated file, differing
            arguments across ranks, or another rank's failure.
        OSError: The file system refused on this rank.
        NotSupportedError: h5py is not installed.
    """
    path = os.fspath(path)
    h, g = _handle_and_gdims(layout, handle, gdims)
    what = f"cudecomp.io.read({path!r}, {name!r})"
    try:
        h5py = _h5py()
        shape = _info(layout).array_shape
        if out is not None and tuple(out.shape) != tuple(shape):
            raise InvalidUsageError(f"out: expected shape {tuple(shape)} (the layout's array_shape), got {tuple(out.shape)}")
    except (InvalidUsageError, NotSupportedError, TypeError, AttributeError) as e:
        _refused(h, what, e)
    h._agree(what, [("path", path), ("name", name), ("step", repr(step))])
    error: BaseException | None = None
    try:
        offset, dtype = _locate(h5py, path, name, step, g)
        if out is not None and np.dtype(out.dtype) != dtype:
            raise InvalidUsageError(f"{path}: field {name!r} is {dtype.name}; out is {np.dtype(out.dtype).name}")
    except Exception as e:
        error = e
    _agree_outcome(h, f"{what}: checks", error)
    xp = _xp()
    result = out if out is not None else xp.empty(shape, dtype)
    error = None
    try:
        _read_field(h, path, offset, result, layout, g, stream)
    except Exception as e:
        error = e
    _agree_outcome(h, f"{what}: data", error)
    return result


def _locate(h5py: Any, path: str, name: str, step: int | None, gdims: tuple[int, int, int]) -> tuple[int, np.dtype]:
    """Return the byte offset and dtype of a complete field, after every check a reader makes."""
    if not os.path.exists(path):
        raise InvalidUsageError(f"{path}: no such file")
    group = _group_name(step)
    try:
        f = h5py.File(path, "r", locking=False)
    except OSError as e:
        raise InvalidUsageError(f"{path}: not a readable HDF5 file ({e})") from e
    with f:
        if f.attrs.get("cudecomp_format") is None:
            raise InvalidUsageError(f"{path}: not written by cudecomp.io (no cudecomp_format attribute)")
        if group not in f:
            raise InvalidUsageError(f"{path}: no step {step}" if step is not None else f"{path}: no fields")
        grp = f[group]
        if not bool(grp.attrs.get(_COMPLETE, False)):
            raise InvalidUsageError(f"{path}: {'step ' + str(step) if step is not None else 'the file'} was not completely written")
        if name not in grp:
            raise InvalidUsageError(f"{path}: no field {name!r} (fields: {sorted(grp)})")
        d = grp[name]
        want = (gdims[2], gdims[1], gdims[0])
        if tuple(d.shape) != want:
            raise InvalidUsageError(f"{path}: field {name!r} has shape {tuple(d.shape)} [z, y, x]; this grid's is {want}")
        offset = d.id.get_offset()
        if offset is None:
            raise InvalidUsageError(f"{path}: field {name!r} is not stored contiguously (not written by cudecomp.io)")
        dtype = np.dtype(d.dtype)
        end = int(offset) + int(np.prod(want)) * dtype.itemsize
    size = os.path.getsize(path)
    if size < end:
        raise InvalidUsageError(f"{path}: truncated: field {name!r} ends at byte {end}, the file has {size}")
    return int(offset), dtype


def steps(path: str | os.PathLike[str]) -> list[int]:
    """Return the complete steps of a time series file, in order (local: reads the file's metadata)."""
    h5py = _h5py()
    with h5py.File(os.fspath(path), "r", locking=False) as f:
        if "steps" not in f:
            return []
        return sorted(int(k) for k, g in f["steps"].items() if bool(g.attrs.get(_COMPLETE, False)))


def attributes(path: str | os.PathLike[str], step: int | None = None) -> dict[str, Any]:
    """Return the attributes ``write`` stored with the fields (of ``step``), without the package's own (local)."""
    h5py = _h5py()
    own = {_COMPLETE} if step is not None else {_COMPLETE, "cudecomp_format", "gdims", "axes"}
    with h5py.File(os.fspath(path), "r", locking=False) as f:
        return {k: v for k, v in f[_group_name(step)].attrs.items() if k not in own}


__all__ = ["FORMAT_VERSION", "attributes", "read", "steps", "write"]
