"""Crash-safe edits of an existing file's HDF5 metadata: a redo journal beside the file.

HDF5 changes a file's metadata in place (superblock, group B-trees, heaps), in an order
that a process killed half-way can leave unreadable, every earlier step of a time series
with it. So an edit (``edit``) runs h5py on a copy-on-write view of the file: every byte
HDF5 writes lands in memory pages. When h5py has closed the file cleanly, the pages and
the file's new length go into a journal beside the file (written under a temporary name,
renamed when whole, with a digest), then into the file, and the journal is removed.
A process killed before the rename leaves the file untouched; one killed after it leaves
a whole journal, which the next edit applies again before anything else (applying it
twice writes the same bytes) and which readers (``view``) read through, so that every
reader sees either the file before the edit or after it.

One writer at a time: the ranks of one ``cudecomp.io`` call edit through rank 0. A
process killed by the operating system keeps what it wrote, so the journal needs no
``fsync``; surviving a power failure is the file system's business, as for any write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from collections.abc import Iterator
from typing import Any

PAGE = 4096
_MAGIC = b"CDCJRNL1"
_HEAD = struct.Struct("<8sQQ")  # magic, the file's new length, number of pages
_PAGE_HEAD = struct.Struct("<Q")  # page index
_DIGEST = 16


def sibling(path: str, kind: str) -> str:
    """Return a hidden name beside ``path`` for the package's own files (``kind``: partial, journal, ...).

    The same on every rank (made from the path alone), distinct per file (a digest of the
    name), readable (the name's start) and short enough for any name the system takes.
    """
    head, name = os.path.split(path)
    tag = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return os.path.join(head or ".", f".{name[:96]}.{tag}.cdc-{kind}")


class Pages:
    """A file seen through pages of changes (h5py's ``fileobj`` driver calls these methods).

    Reads come from the changed pages where there are some, else from the file up to its
    length when the view opened (or where it was cut since), else zeros. Writes change
    pages only; the file itself is never written here.
    """

    def __init__(self, fd: int, pages: dict[int, bytearray] | None = None, length: int | None = None) -> None:
        self.fd = fd
        self.base = os.fstat(fd).st_size
        self.pages: dict[int, bytearray] = pages if pages is not None else {}
        self.length = self.base if length is None else length
        self.base = min(self.base, self.length)
        self.pos = 0

    def _page(self, k: int) -> bytearray:
        p = self.pages.get(k)
        if p is None:
            start = k * PAGE
            n = max(0, min(PAGE, self.base - start))
            p = bytearray(os.pread(self.fd, n, start) if n else b"")
            p.extend(bytes(PAGE - len(p)))
            self.pages[k] = p
        return p

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.length + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        n, at = len(view), self.pos
        done = 0
        while done < n:
            k, off = divmod(at + done, PAGE)
            take = min(PAGE - off, n - done)
            p = self.pages.get(k)
            if p is not None:
                view[done : done + take] = p[off : off + take]
            else:
                start = k * PAGE + off
                have = max(0, min(take, self.base - start))
                if have:
                    view[done : done + have] = os.pread(self.fd, have, start)
                view[done + have : done + take] = bytes(take - have)
            done += take
        self.pos += n
        return n

    def read(self, n: int = -1) -> bytes:
        buf = bytearray(max(0, self.length - self.pos) if n < 0 else n)
        self.readinto(buf)
        return bytes(buf)

    def write(self, data: Any) -> int:
        src = memoryview(data).cast("B")
        n, at, done = len(src), self.pos, 0
        while done < n:
            k, off = divmod(at + done, PAGE)
            take = min(PAGE - off, n - done)
            self._page(k)[off : off + take] = src[done : done + take]
            done += take
        self.pos += n
        self.length = max(self.length, at + n)
        return n

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if size < self.length:
            last = -(-size // PAGE)
            for k in [k for k in self.pages if k >= last]:
                del self.pages[k]
            k, off = divmod(size, PAGE)
            if off and k in self.pages:
                self.pages[k][off:] = bytes(PAGE - off)
            self.base = min(self.base, size)
        self.length = size
        return size

    def flush(self) -> None:
        pass

    def encoded(self) -> bytes:
        """Return the journal of these changes: header, pages, digest."""
        parts = [_HEAD.pack(_MAGIC, self.length, len(self.pages))]
        for k in sorted(self.pages):
            parts += [_PAGE_HEAD.pack(k), bytes(self.pages[k])]
        body = b"".join(parts)
        return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def _decode(raw: bytes) -> tuple[dict[int, bytearray], int] | None:
    """Return the pages and length of a whole journal, or ``None`` for anything else."""
    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    if len(raw) < _HEAD.size + _DIGEST or hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        return None
    magic, length, n = _HEAD.unpack_from(body)
    if magic != _MAGIC or len(body) != _HEAD.size + n * (_PAGE_HEAD.size + PAGE):
        return None
    pages, at = {}, _HEAD.size
    for _ in range(n):
        (k,) = _PAGE_HEAD.unpack_from(body, at)
        at += _PAGE_HEAD.size
        pages[k] = bytearray(body[at : at + PAGE])
        at += PAGE
    return pages, length


def _pending(path: str) -> tuple[dict[int, bytearray], int] | None:
    """Return the changes of a whole journal of ``path`` not yet known to be applied, if there is one."""
    try:
        with open(sibling(path, "journal"), "rb") as j:
            return _decode(j.read())
    except FileNotFoundError:
        return None


def _apply(path: str, pages: dict[int, bytearray], length: int) -> None:
    """Write journaled pages into the file and give it its new length (idempotent)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for k in sorted(pages):
            start = k * PAGE
            if start < length:
                os.pwrite(fd, bytes(pages[k][: min(PAGE, length - start)]), start)
        os.ftruncate(fd, length)
    finally:
        os.close(fd)


def recover(path: str) -> None:
    """Before editing ``path``: apply a whole journal an earlier writer left, drop a partial one."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(sibling(path, "journal-new"))
    pending = _pending(path)
    if pending is not None:
        _apply(path, *pending)
    with contextlib.suppress(FileNotFoundError):
        os.remove(sibling(path, "journal"))


@contextlib.contextmanager
def edit(h5py: Any, path: str) -> Iterator[Any]:
    """Open the existing HDF5 file ``path`` for an edit that takes effect whole or not at all.

    Yields an h5py ``File`` (mode ``r+``) over the copy-on-write view. The edit is
    committed when the block ends normally; an exception in the block (or in h5py's close)
    leaves the file as it was.
    """
    recover(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = Pages(fd)
        with h5py.File(pages, "r+") as f:
            yield f
        journal, staged = sibling(path, "journal"), sibling(path, "journal-new")
        try:
            with open(staged, "wb") as j:
                j.write(pages.encoded())
            os.replace(staged, journal)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(staged)
            raise
    finally:
        os.close(fd)
    # From here the edit is committed: a failure to apply it leaves the journal for the
    # next edit, and readers read through it.
    _apply(path, pages.pages, pages.length)
    os.remove(journal)


@contextlib.contextmanager
def view(h5py: Any, path: str) -> Iterator[Any]:
    """Open ``path`` read-only as the last committed edit left it (through a journal not yet applied)."""
    pending = _pending(path)
    if pending is None:
        with h5py.File(path, "r", locking=False) as f:
            yield f
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        with h5py.File(Pages(fd, *pending), "r") as f:
            yield f
    finally:
        os.close(fd)


def pending_length(path: str) -> int | None:
    """Return the file's length once a journal not yet applied is, or ``None`` without one."""
    pending = _pending(path)
    return None if pending is None else pending[1]
