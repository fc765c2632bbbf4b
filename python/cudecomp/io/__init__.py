"""Parallel I/O of distributed fields: one HDF5 file per call, read back on any decomposition.

``write`` puts one or several fields of a decomposition (any pencil of a grid, with any
layout, halos and padding, or boxes) into one HDF5 file: one dataset per field, the
global array ``[z, y, x]`` in C order, with the global extents and your attributes (time,
step, parameters). ``read`` fills a field into any decomposition of the same global grid
(another rank count, process grid, pencil or layout), from a file ``write`` made or from
any HDF5 file with a dataset of the grid's shape (``(nz, ny, nx)``: initial conditions,
other codes' output), contiguous, chunked or compressed. Both are collective over the
handle's ranks and run on both variants: from CuPy arrays, the bytes go to the file
through page-locked buffers piece by piece, never as a host copy of the whole pencil.

How it works: rank 0 lays out the file with h5py (contiguous datasets allocated up
front, so that every dataset's bytes sit at a known offset); each rank moves its cells
into Z slabs with a ``cudecomp.Redistribution`` (skipped where the layout is one
already) and writes its slab's bytes at its offset with ``pwrite`` (``pread`` to read),
in the package's Rust core with the GIL released. Datasets of other files that are
chunked, compressed or of another type or byte order are read through h5py, each rank
reading its slab. The file is an ordinary HDF5 file: ``h5py.File(path)["u"][...]`` (or
any HDF5 reader) reads it without this package.

Checks: every argument on every rank before the ranks meet; then that the ranks pass the
same arguments (attributes compared by the digests of their bytes) and that their
layouts cover the global grid exactly once (no gap, no overlap, sizes that fit in 64
bits). A failure on any rank raises on every rank: the failing rank its own error, the
others ``InvalidUsageError`` naming it, the step it failed in and its error.

Safety: a new file is written under a hidden name in the same directory and renamed
when every rank has finished; a replaced file is kept until then. A step added to an
existing file is laid out in a hidden group, which takes the step's name (replacing an
older step of that number) only when every rank has finished; rank 0 edits the file's
metadata through a journal beside it, so that a process killed at any moment (by
SIGTERM, SIGKILL, a full disk) leaves every step that was complete readable. ``read``
refuses an incomplete step, a missing field, a field of another shape, and a truncated
file, with ``InvalidUsageError`` on every rank naming the file and the field. Nothing is
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

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._collective import collective
from .._cudecomp import BoxLayout, Handle, PencilLayout
from .._errors import InvalidUsageError, NotSupportedError
from . import _args, _data, _file, _journal
from ._file import FORMAT_VERSION

__all__ = ["FORMAT_VERSION", "attributes", "read", "steps", "write"]


def _h5py() -> Any:
    try:
        import h5py  # type: ignore[import-untyped]
    except ImportError as e:
        raise NotSupportedError("cudecomp.io needs h5py: pip install h5py") from e
    return h5py


def _flag(what: str, v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{what}: expected a bool, got {type(v).__name__}")
    return bool(v)


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
            variant. Names must be the same on every rank. A batch of ``k`` fields
            (shape ``(k, *array_shape)``, as the transposes take) is stored as one
            dataset ``(k, nz, ny, nx)``, its fields redistributed in one exchange.
        layout: ``grid.pencil(axis, halo_extents, padding)``, or this rank's
            ``BoxLayout`` (then pass ``handle`` and ``gdims``); the ranks' boxes must
            cover the grid exactly once.
        step: The step of a time series (an int from 0 to 9999999999), or ``None``.
        attrs: Attributes stored with the fields (numbers, strings, bytes, arrays of
            numbers or strings), the same on every rank.
        overwrite: Replace an existing file (or step); the old one stays until the new
            one is complete.
        handle: The handle, for a ``BoxLayout`` (a pencil's grid knows it).
        gdims: The global extents (X, Y, Z), for a ``BoxLayout``.
        stream: GPU variant: the stream the arrays are ready on.

    Raises:
        InvalidUsageError: On every rank: differing arguments across ranks, boxes that do
            not cover the grid exactly once, an array of another shape or dtype than the
            layout's, an existing file or step without ``overwrite``, a directory at
            ``path``, or another rank's failure.
        TypeError: An argument of the wrong type (on the rank that passed it; the others
            raise ``InvalidUsageError``).
        OSError: The file system refused (the other ranks raise ``InvalidUsageError``
            naming this rank).
        NotSupportedError: h5py is not installed.
    """
    h = _args.handle_of(layout, handle)
    what = f"cudecomp.io.write({path!r})"
    with collective(h, what) as call:
        path = _args.path_arg(path)
        h5py = _h5py()
        t = _args.target(layout, h, gdims)
        names = _args.field_names(fields)
        step = _args.step_arg(step)
        overwrite = _flag("overwrite", overwrite)
        shape = t.info.array_shape
        datasets = []
        for n in names:
            dtype, batch = _args.check_array(h, f"fields[{n!r}]", fields[n], shape, False, stream)
            datasets.append(_file.Dataset(n, dtype.str, batch))
        reserved = _args.OWN_ATTRS if step is None else (_file.COMPLETE,)
        stored, attr_fields = _args.attributes(attrs, reserved)
        dtypes, batches = [d.dtype for d in datasets], [d.fields for d in datasets]
        call.agree(
            path=path, layout=t.described, gdims=t.gdims, fields=names, dtypes=dtypes, batches=batches, step=step, overwrite=overwrite
        )
        call.fields += attr_fields
    boxes = h._gather_boxes(f"{what}: the layout", t.gdims, t.info)
    direct = _data.owns_whole_rows(t, boxes)
    plan: _file.Plan | None = None
    laid_out: dict[str, Any] = {}
    with collective(h, f"{what}: laying out the file"):
        if h.rank == 0:
            plan = _file.plan(path, step, overwrite)
            laid_out = {"target": plan.target, "offsets": _file.lay_out(h5py, plan, datasets, t.gdims, stored)}
    laid_out = json.loads(h._share_from_rank0(json.dumps(laid_out).encode()))
    try:
        with collective(h, f"{what}: writing the fields"):
            _data.write_fields(h, t, layout, direct, laid_out["target"], laid_out["offsets"], [fields[n] for n in names], stream)
        with collective(h, f"{what}: completing the file"):
            if plan is not None:
                _file.complete(h5py, plan)
    except BaseException:
        if plan is not None:
            _file.discard(plan)
        raise


def _result_dtype(path: str, name: str, stored: np.dtype, want: np.dtype | None, out: np.dtype | None) -> np.dtype:
    """Return the dtype the field is read as (the same on every rank: made of agreed values)."""
    native = stored.newbyteorder("=")
    if want is None and out is None:
        if native not in _args.DTYPES:
            names = ", ".join(d.name for d in _args.DTYPES)
            raise InvalidUsageError(f"{path}: field {name!r} is stored as {stored.name}; pass dtype= ({names}) to read it converted")
        return native
    if want is None:
        assert out is not None
        if out != native:
            raise InvalidUsageError(f"{path}: field {name!r} is {native.name}; out is {out.name} (pass dtype={out.name} to convert)")
        return out
    if stored.kind == "c" and want.kind != "c":
        raise InvalidUsageError(f"{path}: field {name!r} is complex ({stored.name}); dtype={want.name} would drop its imaginary part")
    return want


def read(
    path: str | os.PathLike[str],
    name: str,
    layout: PencilLayout | BoxLayout,
    *,
    step: int | None = None,
    out: Any = None,
    dtype: Any = None,
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
        path: A file written by ``write``, or any HDF5 file with a dataset of shape
            ``(nz, ny, nx)`` (contiguous, chunked or compressed). A dataset of shape
            ``(k, nz, ny, nx)`` (a batch ``write`` stored) is read as a batch of ``k``
            fields, shape ``(k, *array_shape)``, redistributed in one exchange.
        name: The field: a dataset of the step's group (or of the root), or a path
            inside the file (``"/fields/u"``).
        layout: ``grid.pencil(axis, halo_extents, padding)``, or this rank's ``BoxLayout``
            (with ``handle`` and ``gdims``).
        step: The step of a time series, or ``None``.
        out: This rank's array to fill (the layout's shape; for a batch
            ``(k, *array_shape)``), or ``None`` to allocate one.
        dtype: The dtype to read the field as (float32, float64, complex64,
            complex128), converting the stored values; ``None``: the stored dtype (one
            of those four), or ``out``'s, which must then be the stored one.
        handle: The handle, for a ``BoxLayout``.
        gdims: The global extents (X, Y, Z), for a ``BoxLayout``.
        stream: GPU variant: the stream to order the work on.

    Returns:
        ``out``, or the allocated array.

    Raises:
        InvalidUsageError: On every rank: a missing or incomplete file, step or field, a
            field of other global extents, a dtype that needs ``dtype=``, a truncated
            file, differing arguments across ranks, layouts that do not cover the grid
            exactly once, or another rank's failure.
        TypeError: An argument of the wrong type (on that rank; the others raise
            ``InvalidUsageError``).
        OSError: The file system refused on this rank.
        NotSupportedError: h5py is not installed.
    """
    h = _args.handle_of(layout, handle)
    what = f"cudecomp.io.read({path!r}, {name!r})"
    with collective(h, what) as call:
        path = _args.path_arg(path)
        h5py = _h5py()
        t = _args.target(layout, h, gdims)
        step = _args.step_arg(step)
        if not isinstance(name, str):
            raise TypeError(f"name: expected a str, got {type(name).__name__}")
        if not name.strip("/"):
            raise InvalidUsageError(f"name: expected a dataset name or path, got {name!r}")
        want = None if dtype is None else _args.supported_dtype("dtype", dtype)
        out_dtype, out_fields = (None, None) if out is None else _args.check_array(h, "out", out, t.info.array_shape, True, stream)
        if want is not None and out_dtype is not None and want != out_dtype:
            raise InvalidUsageError(f"out: expected an array of dtype={want.name}, got {out_dtype.name}")
        call.agree(path=path, name=name, step=step, layout=t.described, gdims=t.gdims, dtype=want, out=out_dtype, out_fields=out_fields)
    boxes = h._gather_boxes(f"{what}: the layout", t.gdims, t.info)
    direct = _data.owns_whole_rows(t, boxes)
    located: dict[str, Any] = {}
    with collective(h, f"{what}: checking the file"):
        if h.rank == 0:
            located = vars(_file.locate(h5py, path, name, step, t.gdims))
    source = _file.Source(**json.loads(h._share_from_rank0(json.dumps(located).encode())))
    stored = np.dtype(source.dtype)
    result_dtype = _result_dtype(path, name, stored, want, out_dtype)
    if out is not None and out_fields != source.fields:  # the same on every rank: agreed values
        held = "one field" if source.fields is None else f"a batch of {source.fields} fields"
        wanted = t.info.array_shape if source.fields is None else (source.fields, *t.info.array_shape)
        raise InvalidUsageError(f"{path}: field {name!r} holds {held}; out must have shape {tuple(wanted)}, got {tuple(out.shape)}")
    if result_dtype != stored:
        source = _file.Source(source.dataset, source.dtype, -1, source.fields)  # converted by h5py
    batch = () if source.fields is None else (source.fields,)
    result = out if out is not None else _data.xp().empty((*batch, *t.info.array_shape), result_dtype)
    with collective(h, f"{what}: reading the field"):
        _data.read_field(h5py, h, t, layout, direct, path, source, result, stream)
    return result


def _opened(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """Open the file for a local query: h5py's ``File`` as the last complete edit left it."""
    h5py = _h5py()
    p = _args.path_arg(path)
    if not os.path.lexists(p):
        raise InvalidUsageError(f"{p}: no such file")
    return h5py, _journal.view(h5py, p)


def steps(path: str | os.PathLike[str]) -> list[int]:
    """Return the complete steps of a time series file, in order (local: reads the file's metadata)."""
    h5py, opened = _opened(path)
    with opened as f:
        group = f.get("steps")
        if not isinstance(group, h5py.Group):
            return []
        done = []
        for k in group:
            g = group.get(k)
            if k.isdigit() and isinstance(g, h5py.Group) and bool(g.attrs.get(_file.COMPLETE, False)):
                done.append(int(k))
        return sorted(done)


def attributes(path: str | os.PathLike[str], step: int | None = None) -> dict[str, Any]:
    """Return the attributes ``write`` stored with the fields (of ``step``), without the package's own (local)."""
    step = _args.step_arg(step)
    h5py, opened = _opened(path)
    with opened as f:
        g = f.get(_file.group_name(step))
        if not isinstance(g, h5py.Group) or (step is not None and not bool(g.attrs.get(_file.COMPLETE, False))):
            raise InvalidUsageError(f"{os.fspath(path)}: no step {step}")
        own = {_file.COMPLETE} if step is not None else set(_args.OWN_ATTRS)
        return {k: v for k, v in g.attrs.items() if k not in own}
