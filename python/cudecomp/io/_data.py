"""Moving the cells between the ranks' arrays and the file (collective).

Where every rank's array owns whole X rows in file order, each rank writes (reads) its
rows at their offsets straight from (into) its array. Otherwise each rank first moves
its cells into a Z slab of the file (a ``cudecomp.Redistribution``), then writes the
slab's bytes; reading is the reverse. The bytes meet the file system in the package's
Rust core with the GIL released (``pwrite``/``pread``); datasets that are chunked,
compressed, of another byte order or type are read through h5py instead, each rank its
slab. Every rank runs every collective step even after a local failure, which it raises
at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _cudecomp
from .._cudecomp import BoxLayout, Handle, PencilInfo, Redistribution
from . import _file
from ._args import Target


def xp() -> Any:
    """Return the array module of the variant: NumPy (CPU) or CuPy (GPU)."""
    if _cudecomp.CPU_ONLY:
        return np
    import cupy

    return cupy


def slab(gdims: tuple[int, int, int], rank: int, nranks: int) -> BoxLayout:
    """Return the Z slab of the file ``rank`` moves (planes ``z0 .. z1 - 1``; empty where Z is short)."""
    nz = gdims[2]
    z0, z1 = nz * rank // nranks, nz * (rank + 1) // nranks
    if z1 <= z0:
        return BoxLayout.empty()
    return BoxLayout((0, 0, z0), (gdims[0] - 1, gdims[1] - 1, z1 - 1))


def owns_whole_rows(t: Target, boxes: list[tuple[Any, Any]]) -> bool:
    """Tell whether every rank's array (of the layout's memory order) owns whole X rows in file order."""
    in_order = tuple(t.info.order) == (0, 1, 2)
    return in_order and all(0 in ln or (lo[0] == 0 and ln[0] == t.gdims[0]) for lo, ln in boxes)


def write_part(h: Handle, path: str, offset: int, info: PencilInfo, g: tuple[int, int, int], a: Any, stream: Any) -> None:
    """Write this rank's owned cells of ``a`` (local: the step that meets the file system)."""
    h._write_part(path, offset, info, g, a, stream)


@contextlib.contextmanager
def _redistribution(h: Handle, layout: Any, s: BoxLayout, to_slab: bool) -> Iterator[Redistribution]:
    """Make the redistribution between ``layout`` and this rank's slab ``s`` (collective), destroyed on leaving."""
    r = h.create_redistribution(layout, s) if to_slab else h.create_redistribution(s, layout)
    try:
        yield r
    finally:
        r.destroy()


def _fields_of(a: Any, info: PencilInfo) -> list[Any]:
    """Return the fields of ``a``: itself, or each field of a batch (a leading axis beyond ``info``'s array)."""
    return [a] if a.ndim == len(info.array_shape) else list(a)


def _field_bytes(gdims: tuple[int, int, int], itemsize: int) -> int:
    """Bytes of one field in the file: a batch's dataset holds its fields one after another."""
    return gdims[0] * gdims[1] * gdims[2] * itemsize


def write_fields(h: Handle, t: Target, layout: Any, direct: bool, path: str, offsets: list[int], arrays: list[Any], stream: Any) -> None:
    """Write every rank's owned cells of ``arrays`` (fields or batches) to the file at ``offsets`` (collective).

    A batch goes through the redistribution in one exchange, then each of its fields to
    its place in the batch's dataset.
    """
    error: BaseException | None = None

    def local(off: int, part: PencilInfo, a: Any) -> None:
        nonlocal error
        for f, field in enumerate(_fields_of(a, part)):
            if error is None:
                try:
                    write_part(h, path, off + f * _field_bytes(t.gdims, a.dtype.itemsize), part, t.gdims, field, stream)
                except Exception as e:  # raised after the collective steps
                    error = e

    if direct:
        for a, off in zip(arrays, offsets, strict=True):
            local(off, t.info, a)
    else:
        s = slab(t.gdims, h.rank, h.nranks)
        with _redistribution(h, layout, s, to_slab=True) as r:
            for a, off in zip(arrays, offsets, strict=True):
                batch = tuple(a.shape[: a.ndim - 3])
                piece = r.run(a, xp().empty((*batch, *s.array_shape), a.dtype), stream=stream)
                local(off, r.output_info, piece)
    if error is not None:
        raise error


def _read_through_h5py(h5py: Any, path: str, source: _file.Source, s: BoxLayout, piece: Any) -> None:
    """Read slab ``s`` of a dataset h5py must decode (chunked, compressed, converted) into ``piece`` (every field of a batch's)."""
    if 0 in s.array_shape:
        return
    z0, z1 = s.lo[2], s.hi[2] + 1
    with _file.opened(h5py, path) as f:
        d = f[source.dataset]
        host = np.asarray(d[z0:z1] if source.fields is None else d[:, z0:z1]).astype(piece.dtype, copy=False)
    if isinstance(piece, np.ndarray):
        piece[...] = host
    else:
        import cupy

        piece.set(np.ascontiguousarray(host))
        cupy.cuda.get_current_stream().synchronize()


def read_field(
    h5py: Any, h: Handle, t: Target, layout: Any, direct: bool, path: str, source: _file.Source, result: Any, stream: Any
) -> None:
    """Fill the owned cells of ``result`` (a batch's: of each field) from the file (collective)."""
    step = _field_bytes(t.gdims, np.dtype(source.dtype).itemsize)

    def read_parts(info: PencilInfo, a: Any) -> None:
        for f, field in enumerate(_fields_of(a, info)):
            h._read_part(path, source.offset + f * step, info, t.gdims, field, stream)

    if direct and source.offset >= 0:
        read_parts(t.info, result)
        return
    s = slab(t.gdims, h.rank, h.nranks)
    error: BaseException | None = None
    with _redistribution(h, layout, s, to_slab=False) as r:
        batch = () if source.fields is None else (source.fields,)
        piece = xp().zeros((*batch, *s.array_shape), result.dtype)
        try:
            if source.offset >= 0:
                read_parts(r.input_info, piece)
            else:
                _read_through_h5py(h5py, path, source, s, piece)
        except Exception as e:
            error = e
        r.run(piece, result, stream=stream)
    if error is not None:
        raise error
