"""The file's structure: what rank 0 lays out, marks complete and reads for the other ranks.

Rank 0 lays out the file before the ranks write, marks it complete after, and reads the
metadata (the datasets, where their bytes are, what a reader may trust) before they read.

A new file (or one replaced with ``overwrite=True``) is made under a hidden name beside
it and renamed when complete. A step added to an existing file goes into a hidden group
(``steps/.<n>``) that becomes ``steps/<n>`` only when the step is complete, replacing an
older step of that number in the same edit; both edits go through the journal, so that
a process killed at any moment leaves every complete step readable.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import InvalidUsageError
from . import _journal
from ._args import DTYPES

FORMAT_VERSION = 1
"""Version of the file layout ``write`` produces (root attribute ``cudecomp_format``)."""

COMPLETE = "cudecomp_complete"


def group_name(step: int | None) -> str:
    """Return the group of a step's fields (the root without a step)."""
    return "/" if step is None else f"steps/{step:010d}"


def _partial_name(step: int) -> str:
    return f"steps/.{step:010d}"


def _is_complete(f: Any, group: str) -> bool:
    return group in f and bool(f[group].attrs.get(COMPLETE, False))


@dataclass(frozen=True)
class Plan:
    """What one write does to the file: where the ranks write (``target``) and what completes it."""

    path: str
    target: str
    step: int | None
    overwrite: bool

    @property
    def fresh(self) -> bool:
        """True when the file is made anew (under a hidden name, renamed at the end)."""
        return self.target != self.path

    @property
    def group(self) -> str:
        """The group the fields are laid out in until the write completes."""
        return group_name(None) if self.step is None else group_name(self.step) if self.fresh else _partial_name(self.step)


def plan(path: str, step: int | None, overwrite: bool) -> Plan:
    """Rank 0: how a write goes, from what is at ``path`` (refusing before it touches anything)."""
    if os.path.isdir(path):
        raise InvalidUsageError(f"{path}: is a directory; expected the path of a file")
    exists = os.path.lexists(path)
    if step is None and exists and not overwrite:
        raise InvalidUsageError(f"{path}: exists; pass overwrite=True to replace it")
    fresh = step is None or not exists
    return Plan(path, _journal.sibling(path, "partial") if fresh else path, step, overwrite)


def _dataset(h5py: Any, grp: Any, name: str, dtype: str, shape: tuple[int, ...]) -> None:
    """Make a contiguous dataset, allocated at once and never filled: its bytes sit at a known offset."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    space = h5py.h5s.create_simple(shape)
    tid = h5py.h5t.py_create(np.dtype(dtype), logical=True)
    h5py.h5d.create(grp.id, name.encode(), tid, space, dcpl=dcpl).close()


@dataclass(frozen=True)
class Dataset:
    """One field a write lays out: its name, stored dtype (``numpy.dtype.str``) and batch (``None``: one field)."""

    name: str
    dtype: str
    fields: int | None = None


def _fill(h5py: Any, f: Any, group: str, datasets: list[Dataset], gdims: tuple[int, int, int], attrs: Mapping[str, Any]) -> list[int]:
    """Lay out ``group`` of ``f``: attributes, then the datasets (a batch's with its fields first); return their byte offsets."""
    grp = f.require_group(group)
    grp.attrs[COMPLETE] = False
    for k, v in attrs.items():
        grp.attrs[k] = v
    shape = (gdims[2], gdims[1], gdims[0])
    for d in datasets:
        _dataset(h5py, grp, d.name, d.dtype, shape if d.fields is None else (d.fields, *shape))
    return [int(grp[d.name].id.get_offset()) for d in datasets]


def _check_ours(f: Any, path: str, gdims: tuple[int, int, int]) -> None:
    if f.attrs.get("cudecomp_format") is None:
        why = "steps are added to cudecomp.io's files only"
        raise InvalidUsageError(f"{path}: not a file of cudecomp.io (no cudecomp_format attribute): {why}")
    if tuple(int(v) for v in f.attrs.get("gdims", ())) != tuple(gdims):
        raise InvalidUsageError(f"{path}: holds a grid of gdims {tuple(int(v) for v in f.attrs['gdims'])}, not {gdims}")


def _root_attrs(f: Any, gdims: tuple[int, int, int]) -> None:
    f.attrs["cudecomp_format"] = FORMAT_VERSION
    f.attrs["gdims"] = np.asarray(gdims, np.int64)
    f.attrs["axes"] = "datasets are the global arrays [z, y, x] (C order, X fastest)"


def lay_out(h5py: Any, p: Plan, datasets: list[Dataset], gdims: tuple[int, int, int], attrs: Mapping[str, Any]) -> list[int]:
    """Rank 0: the file's structure, every dataset allocated up front; returns the datasets' offsets."""
    if p.fresh:
        try:
            with h5py.File(p.target, "w") as f:
                _root_attrs(f, gdims)
                return _fill(h5py, f, p.group, datasets, gdims, attrs)
        except BaseException:
            discard(p)
            raise
    assert p.step is not None
    with _journal.edit(h5py, p.path) as f:
        _check_ours(f, p.path, gdims)
        final = group_name(p.step)
        if _is_complete(f, final) and not p.overwrite:
            raise InvalidUsageError(f"{p.path}: step group {final} exists; pass overwrite=True to replace it")
        if p.group in f:
            del f[p.group]  # what a failed or killed write of this step left
        return _fill(h5py, f, p.group, datasets, gdims, attrs)


def complete(h5py: Any, p: Plan) -> None:
    """Rank 0, once every rank's bytes are in: mark the fields complete and put them in place."""
    if p.fresh:
        with h5py.File(p.target, "a") as f:
            f[p.group].attrs[COMPLETE] = True
        _put_in_place(p.target, p.path)
        return
    assert p.step is not None
    with _journal.edit(h5py, p.path) as f:
        final = group_name(p.step)
        if final in f:
            del f[final]
        f.move(p.group, final)
        f[final].attrs[COMPLETE] = True


def discard(p: Plan) -> None:
    """Rank 0, after a failed write: remove a new file's hidden copy (a step's hidden group stays until the step is written again)."""
    if p.fresh:
        with contextlib.suppress(OSError):
            os.remove(p.target)


_removing: dict[str, threading.Thread] = {}
"""Files replaced by a write, being removed in the background (by their aside name)."""


def _put_in_place(target: str, path: str) -> None:
    """Rename the complete ``target`` to ``path``, replacing a file there.

    A file already at ``path`` is renamed aside first and removed last: renaming over an
    existing file makes some file systems (ext4's ``auto_da_alloc``) write the new file's
    bytes to the disk before the rename returns, which would make a replaced checkpoint
    cost a flush that a new one does not. ``path`` holds the old file or the new one at
    every moment but the one between the two renames. The old file is removed by a
    thread of its own: freeing a large file's blocks takes as long as a good part of the
    write, and nothing waits for it (a later replacement of the same file first waits for
    the removal before it, and the interpreter for the last one at exit; a process killed
    meanwhile leaves the aside file, which the next replacement takes the place of).
    """
    if not os.path.lexists(path):
        os.replace(target, path)
        return
    aside = _journal.sibling(path, "replaced")
    earlier = _removing.pop(aside, None)
    if earlier is not None:
        earlier.join()
    os.replace(path, aside)
    try:
        os.replace(target, path)
    except OSError:
        os.replace(aside, path)  # the old file back under its name
        raise

    def remove() -> None:
        with contextlib.suppress(OSError):
            os.remove(aside)

    t = threading.Thread(target=remove, name="cudecomp.io: removing a replaced file")
    t.start()
    _removing[aside] = t


@dataclass(frozen=True)
class Source:
    """Where a field's cells are: its dataset, stored type, and byte offset where the ranks may read its bytes directly."""

    dataset: str
    dtype: str
    #: Byte offset of a contiguous, unfiltered dataset of native byte order; -1: read through h5py.
    offset: int
    #: The fields of a batch's dataset ``(k, nz, ny, nx)``; None for one field ``(nz, ny, nx)``.
    fields: int | None = None


def _dataset_path(group: str, name: str) -> str:
    return name if name.startswith("/") or group == "/" else f"{group}/{name}"


def locate(h5py: Any, path: str, name: str, step: int | None, gdims: tuple[int, int, int]) -> Source:
    """Rank 0: where field ``name`` (of ``step``) is, after every check a reader makes."""
    if not os.path.lexists(path):
        raise InvalidUsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InvalidUsageError(f"{path}: is a directory; expected an HDF5 file")
    stack = contextlib.ExitStack()
    try:
        f = stack.enter_context(_journal.view(h5py, path))
    except OSError as e:
        raise InvalidUsageError(f"{path}: not a readable HDF5 file ({e})") from e
    with stack:
        ours = f.attrs.get("cudecomp_format") is not None
        group = group_name(step)
        if step is not None and group not in f:
            raise InvalidUsageError(f"{path}: no step {step}")
        if ours and step is None and COMPLETE not in f.attrs and "steps" in f:
            raise InvalidUsageError(f"{path}: holds a time series; pass step= (see cudecomp.io.steps)")
        if ours and not _is_complete(f, group):
            raise InvalidUsageError(f"{path}: {'step ' + str(step) if step is not None else 'the file'} was not completely written")
        where = _dataset_path(group, name)
        obj = f.get(where)
        if obj is None:
            datasets = sorted(k for k, v in f[group].items() if isinstance(v, h5py.Dataset))
            raise InvalidUsageError(f"{path}: no field {name!r} (datasets in {group}: {datasets})")
        if not isinstance(obj, h5py.Dataset):
            raise InvalidUsageError(f"{path}: {where!r} is a {type(obj).__name__.lower()}, not a dataset")
        want = (gdims[2], gdims[1], gdims[0])
        shape = tuple(int(n) for n in obj.shape)
        fields = shape[0] if len(shape) == 4 and shape[1:] == want and shape[0] >= 1 else None
        if shape != want and fields is None:
            raise InvalidUsageError(
                f"{path}: field {name!r} has shape {shape}; this grid's is {want} [z, y, x] (or (k, *{want}) for a batch of k fields)"
            )
        dtype = np.dtype(obj.dtype)
        if dtype.kind not in "biufc":
            raise InvalidUsageError(f"{path}: field {name!r} is stored as {dtype}, not as numbers")
        offset, dataset = obj.id.get_offset(), obj.name
        raw = offset is not None and obj.chunks is None and obj.compression is None and dtype.isnative and dtype in DTYPES
        if not raw:
            return Source(dataset, dtype.str, -1, fields)
        end = int(offset) + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = _journal.pending_length(path) or os.path.getsize(path)
    if size < end:
        raise InvalidUsageError(f"{path}: truncated: field {name!r} ends at byte {end}, the file has {size}")
    return Source(dataset, dtype.str, int(offset), fields)


@contextlib.contextmanager
def opened(h5py: Any, path: str) -> Iterator[Any]:
    """Open the file for reading datasets through h5py (every rank, for fields not read directly)."""
    with _journal.view(h5py, path) as f:
        yield f
