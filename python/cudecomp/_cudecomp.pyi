"""Type stubs of the Rust extension module ``cudecomp._cudecomp``.

The classes defined here are re-exported by the ``cudecomp`` package: use them as
``cudecomp.Handle``, ``cudecomp.GridDesc`` and ``cudecomp.PencilInfo``.
"""

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ._autotune import AutotuneResult
from ._config import GridDescAutotuneOptions, GridDescConfig
from ._enums import DataType, TransposeCommBackend

CPU_ONLY: bool
"""True when this extension is the CPU variant."""

VERSION: str
"""Package version without the variant suffix."""

def transpose_comm_backend_to_string(backend: int) -> str:
    """Display name of a transpose backend value (``"ERROR"`` when unknown)."""

def halo_comm_backend_to_string(backend: int) -> str:
    """Display name of a halo backend value (``"ERROR"`` when unknown)."""

def get_data_type_size(dtype: int) -> int:
    """Bytes per element of a ``DataType`` value."""

def _compile_kernels(major: int, minor: int) -> int: ...
def _single_copy_count() -> int: ...
def _queue_notice(text: str) -> None: ...
def _local_fft(
    kind: str,
    input: Any,
    output: Any,
    axes: Sequence[int],
    inverse: bool = False,
    scale: float = 1.0,
    threads: int = 1,
    overwrite: bool = False,
) -> None: ...
def _local_r2r(
    kind: str, array: Any, axis: int, inverse: bool = False, norm: str = "backward", threads: int = 1, batch: bool = False
) -> None: ...
def _host_threads(handle: Handle) -> int: ...
def _xla_grid_id(grid: GridDesc) -> int: ...
def _xla_redistribution_id(redistribution: Redistribution) -> int: ...
def _xla_targets() -> dict[str, int]: ...
def _xla_ffi_layout() -> dict[str, int]: ...

Triple = tuple[int, int, int] | list[int] | Any
"""Three non-negative ints in global axis order (X, Y, Z): a tuple, list or NumPy array."""

Stream = int | Any | None
"""A CUDA stream: None, an int handle, an object with ``__cuda_stream__``, or one with an int ``ptr``."""

class PencilInfo:
    """Where this rank's part of one pencil lives and how it is laid out in memory.

    Returned by [`GridDesc.get_pencil_info`][cudecomp.GridDesc.get_pencil_info]; read-only.
    ``shape``, ``lo``, ``hi`` and ``order`` are listed in *memory order*, fastest-varying
    axis first, exactly as in the C structure ``cudecompPencilInfo_t``; ``halo_extents``
    and ``padding`` echo the query in global axis order (X, Y, Z).

    Arrays are C-contiguous, so their NumPy/CuPy shape lists the slowest axis first:
    allocate them with [`array_shape`][cudecomp.PencilInfo.array_shape] (``shape``
    reversed), e.g. ``numpy.empty(info.array_shape, numpy.float64)``, or with
    [`GridDesc.empty_pencil`][cudecomp.GridDesc.empty_pencil].
    [`interior_slices`][cudecomp.PencilInfo.interior_slices],
    [`global_slices`][cudecomp.PencilInfo.global_slices] and
    [`to_global_axes`][cudecomp.PencilInfo.to_global_axes] relate the local array to a
    global one.

    It prints its fields as tuples, compares with ``==`` and pickles (so
    ``comm.gather(info)`` works).
    """

    @property
    def shape(self) -> tuple[int, int, int]:
        """Stored extents in memory order (fastest axis first), halos and padding included.

        Along global axis ``order[i]`` the extent is ``hi[i] - lo[i] + 1`` owned cells,
        plus ``2 * halo_extents[order[i]]`` halo cells and ``padding[order[i]]`` padding
        cells.
        """
    @property
    def lo(self) -> tuple[int, int, int]:
        """First global index of the owned interior along each memory-order axis (inclusive)."""
    @property
    def hi(self) -> tuple[int, int, int]:
        """Last global index of the owned interior along each memory-order axis (inclusive).

        ``hi[i] < lo[i]`` on a rank that owns no cells of this pencil (an empty pencil).
        """
    @property
    def order(self) -> tuple[int, int, int]:
        """Global axis (0 = X, 1 = Y, 2 = Z) stored at each memory position, fastest first.

        ``(0, 1, 2)`` by default; ``(1, 2, 0)`` for a Y-pencil with
        ``transpose_axis_contiguous[1]`` set.
        """
    @property
    def halo_extents(self) -> tuple[int, int, int]:
        """Halo cells on each side of each global axis (X, Y, Z), as queried."""
    @property
    def padding(self) -> tuple[int, int, int]:
        """Padding cells after the end of each global axis (X, Y, Z), as queried."""
    @property
    def size(self) -> int:
        """Number of elements of the stored pencil: the product of ``shape``."""
    @property
    def array_shape(self) -> tuple[int, int, int]:
        """Shape of the C-contiguous array that holds this pencil: ``shape`` reversed.

        Every array handed to a transpose or halo update must have exactly this shape
        (for the same halos and padding); any other shape raises ``InvalidUsageError``.
        """
    @property
    def interior_slices(self) -> tuple[slice, slice, slice]:
        """Slices of the local array selecting the cells this rank owns (no halos, no padding).

        ``local[info.interior_slices]`` is the owned part of an array of shape
        ``array_shape``, in local axis order.
        """
    @property
    def global_slices(self) -> tuple[slice, slice, slice]:
        """Slices of a global array selecting the cells this rank owns.

        The global array has the C shape ``(gdims[2], gdims[1], gdims[0])`` and is indexed
        ``g[z, y, x]``; see ``to_global_axes`` for the order of the local axes.
        """
    @property
    def to_global_axes(self) -> tuple[int, int, int]:
        """The permutation that puts the local array's axes in global ``(Z, Y, X)`` order.

        ``g[info.global_slices]`` equals ``local[info.interior_slices].transpose(info.to_global_axes)``;
        ``numpy.argsort(info.to_global_axes)`` is the permutation back.
        """

class Handle:
    """The library handle: one per MPI communicator, shared by every grid built on it.

    Args:
        mpi_comm: An initialised ``mpi4py.MPI.Comm``, an intracommunicator (an
            intercommunicator, ``MPI.COMM_NULL`` or a finalized MPI raises
            ``InvalidUsageError``); every rank of it must construct the handle
            (collective). The handle works on a private duplicate of it; keep MPI
            initialised until ``finalize()``: after ``MPI.Finalize()`` every method
            raises ``InvalidUsageError``.

    The GPU variant binds the CUDA device that is current when the handle is created
    (select it first, e.g. with ``cupy.cuda.Device(local_rank).use()``) and raises
    ``CudaError`` where no CUDA driver is found.

    Use it as a context manager (``with cudecomp.Handle(comm) as handle:``) or call
    ``finalize()`` yourself, on every rank, before MPI is finalised. Python's garbage
    collector never runs collective cleanup: a handle collected without ``finalize()``
    emits a ``ResourceWarning``. ``create_grid``, ``destroy`` and ``finalize`` are
    collective on the handle's communicator: never call them from several threads at
    once.
    """

    def __init__(self, mpi_comm: Any) -> None: ...
    @property
    def rank(self) -> int:
        """Rank of this process in the handle's communicator."""
    @property
    def nranks(self) -> int:
        """Number of ranks in the handle's communicator."""
    @property
    def _fft_settings(self) -> dict[str, Any]:
        """The settings of the distributed FFTs (``CUDECOMP_FFT_*``).

        Read with every other setting when the handle was created: a dict with ``stream`` (``None``: where every
        rank has a GPU of its own; ``True``, ``False``), ``chunks`` (slabs a streamed plan
        cuts each direction into) and ``backward`` (``"rows"`` or ``"planes"``).
        """
    def _write_part(
        self,
        path: str | os.PathLike[str],
        offset: int,
        info: PencilInfo,
        gdims: tuple[int, int, int],
        array: Any,
        stream: Stream = None,
    ) -> None:
        """Write this rank's owned cells of ``array`` into the file ``path`` (local).

        For ``cudecomp.io``: ``info`` describes the array, ``gdims`` the field, which
        starts at byte ``offset`` of the existing file. The array must keep X fastest, then
        Y, then Z, and own whole X rows. Host arrays at once; device arrays after the work on
        ``stream``, piece by piece through page-locked buffers. ``OSError`` where the
        system refuses.
        """
    def _read_part(
        self, path: str | os.PathLike[str], offset: int, info: PencilInfo, gdims: tuple[int, int, int], array: Any, stream: Stream = None
    ) -> None:
        """Read this rank's owned cells from the file ``path`` into ``array`` (local).

        As ``_write_part``, the other way; the array's other cells are left alone.
        """
    def _gather_boxes(
        self, which: str, gdims: tuple[int, int, int], info: PencilInfo
    ) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
        """Every rank's owned box of one layout of the global grid ``gdims`` (collective).

        ``info`` describes this rank's array; returns ``[(lo, len), ...]`` in rank order
        (global X, Y, Z). ``InvalidUsageError`` on every rank, naming ``which``, unless the
        boxes cover the grid exactly once (no gap, overlap or stray box; sizes that fit in
        64 bits).
        """
    def _share_from_rank0(self, data: bytes) -> bytes:
        """Rank 0's ``data`` on every rank (collective; the others' ``data`` is ignored)."""
    def _check_array(self, array: Any, writable: bool, stream: Stream = None) -> None:
        """Check that ``array`` is one the package's data path takes (local).

        As the operations convert their arrays: ``InvalidUsageError`` or ``TypeError``
        for an array of the wrong kind, layout or byte order, or (``writable``) a
        read-only one; ``stream`` is parsed as they parse it. For the package's own
        collective calls (``cudecomp.io``), which check every array before the ranks meet.
        """
    def one_node(self) -> bool:
        """Whether every rank of the handle runs on one node (collective).

        Nodes as the package sees them everywhere (DIRECT, copy threads, NVSHMEM peers):
        the host name, or ``CUDECOMP_NODE_ID`` / ``CUDECOMP_SIMULATE_NODES`` when set.
        """
    def one_gpu_per_rank(self) -> bool:
        """Whether every rank of the handle drives a GPU of its own (collective).

        False where ranks share a GPU (NCCL and the NVSHMEM backends then refuse to run,
        and GPU FFT plans do not stream their slabs), and always in the CPU variant.
        """
    def _settle(self, what: str, fields: list[tuple[str, str]] | None = None, error: str | None = None) -> None:
        """Settle the outcome of one of the package's collective calls (collective).

        Every rank passes the call's name ``what``, ``fields`` (``(name, canonical text)``
        pairs, in the same order on every rank: the arguments that must be alike) and,
        where this rank failed locally, ``error`` (the text of its error, which the caller
        raises itself after this returns). Unless every rank is at the same call with the
        same fields and none failed, every other rank raises ``InvalidUsageError`` naming
        the failed rank and its error, both calls, or the first field that differs and
        both values. ``cudecomp._collective.collective`` wraps it for a block of code.
        """
    def finalize(self) -> None:
        """Release the handle and its workspaces (collective).

        Destroy the handle's grids first. Any later use of the handle, or a second
        ``finalize()``, raises ``InvalidUsageError``.
        """
    def create_redistribution(
        self, src: PencilLayout | BoxLayout, dst: PencilLayout | BoxLayout, *, backend: TransposeCommBackend | None = None
    ) -> Redistribution:
        """Make a redistribution from ``src`` to ``dst`` (collective).

        Each side is a pencil of one of this handle's grids (``GridDesc.pencil(axis,
        halo_extents, padding)``) or this rank's box (``BoxLayout``); the grids may differ
        in process grid, backends, layout and rank order, not in ``gdims``. For two box
        sides the global grid is the smallest from the origin that holds every box.

        Args:
            src: The layout the data is in.
            dst: The layout it is moved to.
            backend: The ``TransposeCommBackend`` that moves it; ``None``: the source
                grid's transpose backend, else the destination grid's, else ``MPI_P2P``.

        Returns:
            The ``Redistribution``, to run as often as needed and destroy collectively.

        Raises:
            InvalidUsageError: On every rank: layouts that do not cover the global grid
                exactly once (a gap, an overlap, a box outside it), grids of different
                ``gdims`` or of another handle, or ranks passing different grids, axes,
                halos, padding or backends.
            NotSupportedError: A backend this variant or machine cannot run.
            TypeError: A side that is neither a ``PencilLayout`` nor a ``BoxLayout``.
        """

    def create_grid(self, config: GridDescConfig, autotune_options: GridDescAutotuneOptions | None = None) -> GridDesc:
        """Create a grid descriptor (collective).

        Every rank must pass the same configuration and options; a mismatch raises
        ``InvalidUsageError`` on every rank instead of hanging.

        Args:
            config: The decomposition. ``pdims = (0, 0)`` asks the autotuner for the
                process grid (then ``autotune_options`` is required). On return the
                resolved ``pdims``, ``transpose_comm_backend``, ``halo_comm_backend``
                and ``rank_order`` are written back into it, as the C API does.
            autotune_options: What to search: the process grid (when ``pdims`` is
                ``(0, 0)``) and/or the transpose and halo backends. ``None`` runs no
                search.

        Returns:
            The new descriptor. Call its ``destroy()`` (or use it in a ``with`` block)
            on every rank before finalizing the handle.

        Raises:
            InvalidUsageError: Invalid configuration (``pdims`` product differs from the
                number of ranks, partial ``transpose_mem_order``, ``gdims_dist`` larger
                than ``gdims``, ...), invalid options of a search that runs
                (``n_trials < 1``, ``n_warmup_trials < 0``, ``transpose_op_weights``
                not finite, negative or all zero, ``skip_threshold`` negative or not
                finite, ``halo_axis`` outside 0-2, negative halos or padding), ranks
                that disagree (also on ``CUDECOMP_PIPELINE_SLICE_BYTES`` and
                ``CUDECOMP_CHECK_COLLECTIVES``), bad environment values, or autotuning
                filters that leave no candidate. Raised on every rank.
            NotSupportedError: A backend this variant or machine cannot run (NCCL or
                NVSHMEM in the CPU variant; NVSHMEM with shared GPUs or without its
                library; DIRECT across nodes), or no usable process grid for the
                autotuner.
            TypeError: ``config`` or ``autotune_options`` of the wrong class.
        """
    def malloc(self, grid: GridDesc, nbytes: int) -> Any:
        """Allocate a workspace buffer for ``grid`` (collective).

        Args:
            grid: The descriptor the buffer will serve.
            nbytes: Size in bytes, greater than zero. A transpose needs
                ``grid.get_transpose_workspace_size() * cudecomp.get_data_type_size(dtype)``
                bytes, a halo update ``grid.get_halo_workspace_size(axis, halo_extents)``
                elements of the same size.

        Returns:
            A NumPy ``uint8`` array of ``nbytes`` zeros in the CPU variant; in the GPU
            variant a device buffer of the handle's device exposing
            ``__cuda_array_interface__`` (``ptr`` and ``nbytes`` attributes). Pass it as
            the ``work`` argument of transposes and halo updates. When ``grid``'s
            transpose or halo backend is of the NVSHMEM family the buffer is NVSHMEM
            symmetric memory (``symmetric`` is true) of the largest ``nbytes`` any rank
            asks for: NVSHMEM operations to which every rank passes it exchange through
            it instead of the handle's own symmetric workspace. Such a buffer is freed by
            ``free`` (collective) or, when left, by ``finalize``; dropping it frees
            nothing.
        """
    def free(self, grid: GridDesc, buffer: Any) -> None:
        """Release a buffer returned by ``malloc`` (collective; ``None`` is accepted).

        The GPU variant synchronises the default stream before releasing the memory
        (finish work on other streams that uses the buffer first; symmetric buffers:
        the whole device); freeing a buffer twice raises ``InvalidUsageError``, freeing
        anything else ``TypeError``. Every rank must free the same symmetric buffer at
        once (checked: ``InvalidUsageError`` on every rank otherwise, nothing freed). In
        the CPU variant the memory goes when the last reference to the array goes:
        ``free`` refuses anything but a NumPy array (``TypeError``) and otherwise does
        nothing, so freeing twice goes unnoticed there.
        """
    def __enter__(self) -> Handle: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool: ...

class GridDesc:
    """One decomposition of a 3-D grid over the ranks of a handle.

    Created by [`Handle.create_grid`][cudecomp.Handle.create_grid], never directly. It
    keeps its handle alive. Release it with ``destroy()`` on every rank (collective), or
    use it as a context manager, which destroys it on leaving the block.

    Operations (transposes and halo updates) are collective: every rank calls the same
    operations, with the same arguments, in the same order (``CUDECOMP_CHECK_COLLECTIVES=1``
    makes the ranks check that before each operation). In the CPU variant, operations on
    distinct grids of one handle may run concurrently from several threads; a GPU handle
    runs one operation at a time.
    """

    @property
    def config(self) -> GridDescConfig:
        """A copy of the resolved configuration (process grid, backends, rank order)."""
    @property
    def handle(self) -> Handle:
        """The handle that created this descriptor."""
    @property
    def autotune_result(self) -> AutotuneResult | None:
        """What the autotuner measured and chose, or ``None`` without a search."""
    @property
    def _checks_collectives(self) -> bool:
        """Whether the ranks agree on every operation before it moves data.

        ``CUDECOMP_CHECK_COLLECTIVES=1`` when the grid's handle was created.
        """
    def destroy(self) -> None:
        """Release the descriptor (collective).

        With the performance report on, its summary is logged (logger ``cudecomp``) on
        rank 0. Any later use of the descriptor, or a second ``destroy()``, raises
        ``InvalidUsageError``.
        """
    def __enter__(self) -> GridDesc:
        """Use the descriptor in a ``with`` block; leaving it calls ``destroy()``."""
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        """Destroy the descriptor (collective) unless already destroyed or its handle finalized."""
    def get_pencil_info(self, axis: int, halo_extents: Triple | None = None, padding: Triple | None = None) -> PencilInfo:
        """Describe this rank's part of the ``axis``-pencil (local; not collective).

        Args:
            axis: Pencil orientation: 0 for X-pencils, 1 for Y-pencils, 2 for Z-pencils.
            halo_extents: Halo cells added on *both* sides of each global axis (X, Y, Z);
                ``None`` means none.
            padding: Padding cells added after the *end* of each global axis (X, Y, Z);
                ``None`` means none.

        Returns:
            The pencil's layout. Arrays passed to operations with the same halos and
            padding must have the shape ``array_shape`` of this result.

        Raises:
            InvalidUsageError: ``axis`` outside 0-2, or negative halos or padding.
        """
    def pencil(self, axis: int, halo_extents: Triple | None = None, padding: Triple | None = None) -> PencilLayout:
        """Return the ``axis``-pencil of this grid as one side of a redistribution (local).

        Args:
            axis: 0, 1 or 2 (X-, Y- or Z-pencil).
            halo_extents: Halo cells on both sides of each global axis (``None``: none).
            padding: Padding cells after each global axis (``None``: none).

        Returns:
            A ``PencilLayout`` for
            [`Handle.create_redistribution`][cudecomp.Handle.create_redistribution]: its
            arrays have the shape ``get_pencil_info(axis, halo_extents, padding).array_shape``.

        Raises:
            InvalidUsageError: ``axis`` outside 0-2, or negative halos or padding.
        """

    def empty_pencil(
        self, axis: int, dtype: Any, halo_extents: Triple | None = None, padding: Triple | None = None, *, fields: int | None = None
    ) -> Any:
        """Allocate an uninitialised array of this rank's ``axis``-pencil.

        Args:
            axis: 0, 1 or 2 (X-, Y- or Z-pencil).
            dtype: A ``DataType`` member or one of NumPy's ``float32``, ``float64``,
                ``complex64``, ``complex128`` (unlike the operations' ``dtype``, which
                takes ``DataType`` members only), or anything ``numpy.dtype()`` turns into
                one of these (``"float64"``, ``complex``). Anything else raises ``TypeError``.
            halo_extents: Halo cells on both sides of each global axis (``None``: none).
            padding: Padding cells after each global axis (``None``: none).
            fields: ``None`` for one pencil, or ``k >= 1`` for a batch of ``k`` fields
                (the form the operations move in one exchange): shape
                ``(k, *array_shape)``.

        Returns:
            A C-contiguous array of shape ``get_pencil_info(axis, halo_extents,
            padding).array_shape`` (with ``fields``: ``(fields, *array_shape)``): NumPy
            in the CPU variant, CuPy (current device) in the GPU variant. On DIRECT
            grids, arrays of 1 MiB or more live in memory the other ranks of the node
            map (node-shared host memory in the CPU variant, exported device memory of
            the handle's GPU in the GPU variant): when every rank's output of a
            transpose is such an array, each rank writes its chunks straight into the
            others' outputs (one copy instead of two, no workspace pass; on GPUs where
            the copy engine carries every chunk, or with ``CUDECOMP_SINGLE_COPY=1``;
            batches copy once in the CPU variant only). Such memory is zero-filled and
            freed with the last view.
        """
    def zeros_pencil(
        self, axis: int, dtype: Any, halo_extents: Triple | None = None, padding: Triple | None = None, *, fields: int | None = None
    ) -> Any:
        """As ``empty_pencil``, filled with zeros."""
    def get_transpose_workspace_size(self) -> int:
        """Workspace that transposes need, in *elements* of the operation's dtype.

        The same on every rank. Multiply by ``cudecomp.get_data_type_size(dtype)`` for
        bytes.
        """
    def get_halo_workspace_size(self, axis: int, halo_extents: Triple) -> int:
        """Workspace that halo updates of this rank's ``axis``-pencil need, in elements.

        Args:
            axis: Pencil orientation (0 = X, 1 = Y, 2 = Z).
            halo_extents: The halo extents of the updates (X, Y, Z).

        Returns:
            Elements of the operation's dtype. Computed from this rank's pencil, so it
            may differ between ranks.
        """
    def get_shifted_rank(self, axis: int, dim: int, displacement: int, periodic: bool) -> int:
        """Global rank of the neighbour ``displacement`` steps away along a dimension.

        Args:
            axis: Pencil orientation (0 = X, 1 = Y, 2 = Z) of the caller's data.
            dim: Global dimension to step along (0 = X, 1 = Y, 2 = Z).
            displacement: Number of ranks to step (negative: towards lower indices).
            periodic: Whether to wrap around at the ends of the dimension.

        Returns:
            The neighbour's rank in the handle's communicator, this rank when the
            step lands on itself, or ``-1`` when there is no neighbour (non-periodic,
            beyond the end).
        """
    def transpose_x_to_y(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
        input_ready: Sequence[tuple[Any, int]] | None = None,
        input_ready_axis: int | None = None,
        output_ready: Sequence[tuple[Any, int]] | None = None,
        output_ready_axis: int | None = None,
        own_cells: bool | None = None,
    ) -> Any:
        """Global transpose from X-pencils to Y-pencils (collective).

        Every owned cell of the Y-pencil receives the value the X-pencils hold for the
        same global point, bit for bit. Only the owned interior of ``out`` is written:
        its halo and padding cells keep their contents, and so does the whole input
        (unless in place).

        Args:
            input: The X-pencil: a C-contiguous 3-D array of shape
                ``get_pencil_info(0, input_halo_extents, input_padding).array_shape``
                (a native-byte-order NumPy array in the CPU variant, an object exposing
                ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                is a batch of ``k`` fields moved in one exchange (one message per
                peer for all of them); ``out`` is then the batch of ``k`` output
                pencils, and an explicit ``work`` holds ``k`` times the workspace.
            out: The Y-pencil, writable, of shape
                ``get_pencil_info(1, output_halo_extents, output_padding).array_shape``
                (after the batch axis of a batch).
                ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                the current device, from CuPy's memory pool on the operation's stream,
                in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                An allocated output's halo and padding cells are uninitialised.
                In place: pass an ``out`` that starts at the same address as ``input``
                (two views of one buffer large enough for the larger pencil); partial
                overlap raises ``InvalidUsageError``.
            work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                on first use, grown when an operation needs more, reused, never shrunk).
                Otherwise a writable C-contiguous array of the variant's kind, any
                shape and element type, disjoint from the data, of at least
                ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                (times ``k`` for a batch of ``k`` fields),
                for example from ``Handle.malloc``. DIRECT, and NCCL through its
                registered workspace, run in the handle's own workspace and do not use
                an explicit one (its size is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                from the arrays (float32, float64, complex64, complex128). An explicit
                value must agree with the arrays and converts nothing; opaque storage
                (NumPy ``V<n>``) requires one of the same element size.
            input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                input's layout; ``None`` means none.
            output_halo_extents: Halo cells of the output's layout (X, Y, Z).
            input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                input's layout.
            output_padding: Padding cells of the output's layout (X, Y, Z).
            stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                current stream for CuPy inputs, else the default stream 0; an int
                handle; an object with ``__cuda_stream__``; or an object with an int
                ``ptr``). The CPU variant accepts and ignores it.
            input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                int handles), ``n`` not decreasing: the input's first ``n`` cells
                along ``input_ready_axis`` (halo cells counted) are written once
                ``event`` has completed. The transpose may then run on a stream that
                does not wait for the writer and move each step as soon as its event
                completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                the peers by the copy engine while the writer produces the next;
                other backends wait for all the events first). Events must be
                recorded before the call. ``None`` (default): the stream alone
                orders the input. The CPU variant refuses events.
            input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ``input_ready`` run along; ``None``: the input's slowest axis in
                memory.
            output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                the transpose records each ``event`` on its stream once the
                output's first ``n`` cells along ``output_ready_axis`` (halo cells
                counted) are written, so that work on another stream that waits
                for it can start on them while the rest lands (DIRECT between
                ``empty_pencil`` arrays: the copy engine writes every peer's cells
                step by step, and each event follows its step, or, with more than
                15 steps, the group of steps it falls in; other backends record
                every event at the end). Cells past the last ``n`` are written
                when the operation is done on its stream. The CPU variant refuses
                events.
            output_ready_axis: The global axis the steps of ``output_ready`` run
                along; ``None``: the output's slowest axis in memory.
            own_cells: ``False`` leaves the cells that stay on this rank (those in
                both this rank's input and output pencils) unwritten in ``out``:
                only cells from other ranks land there, and the caller reads its
                own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                them). Out of place only. Each rank may choose for itself.
                ``None`` (the default) is ``True``: every owned cell is written.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                overlap (``own_cells=False`` in place among them) or workspace size,
                a released grid or handle, or MPI already
                finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                the ranks run different operations or one rank's arguments are wrong.
            NotSupportedError: A pencil of this transpose is empty on some rank.
            TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                a list as an array, a host array in the GPU variant).
        """
    def transpose_y_to_z(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
        input_ready: Sequence[tuple[Any, int]] | None = None,
        input_ready_axis: int | None = None,
        output_ready: Sequence[tuple[Any, int]] | None = None,
        output_ready_axis: int | None = None,
        own_cells: bool | None = None,
    ) -> Any:
        """Global transpose from Y-pencils to Z-pencils (collective).

        Every owned cell of the Z-pencil receives the value the Y-pencils hold for the
        same global point, bit for bit. Only the owned interior of ``out`` is written:
        its halo and padding cells keep their contents, and so does the whole input
        (unless in place).

        Args:
            input: The Y-pencil: a C-contiguous 3-D array of shape
                ``get_pencil_info(1, input_halo_extents, input_padding).array_shape``
                (a native-byte-order NumPy array in the CPU variant, an object exposing
                ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                is a batch of ``k`` fields moved in one exchange (one message per
                peer for all of them); ``out`` is then the batch of ``k`` output
                pencils, and an explicit ``work`` holds ``k`` times the workspace.
            out: The Z-pencil, writable, of shape
                ``get_pencil_info(2, output_halo_extents, output_padding).array_shape``
                (after the batch axis of a batch).
                ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                the current device, from CuPy's memory pool on the operation's stream,
                in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                An allocated output's halo and padding cells are uninitialised.
                In place: pass an ``out`` that starts at the same address as ``input``
                (two views of one buffer large enough for the larger pencil); partial
                overlap raises ``InvalidUsageError``.
            work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                on first use, grown when an operation needs more, reused, never shrunk).
                Otherwise a writable C-contiguous array of the variant's kind, any
                shape and element type, disjoint from the data, of at least
                ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                (times ``k`` for a batch of ``k`` fields),
                for example from ``Handle.malloc``. DIRECT, and NCCL through its
                registered workspace, run in the handle's own workspace and do not use
                an explicit one (its size is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                from the arrays (float32, float64, complex64, complex128). An explicit
                value must agree with the arrays and converts nothing; opaque storage
                (NumPy ``V<n>``) requires one of the same element size.
            input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                input's layout; ``None`` means none.
            output_halo_extents: Halo cells of the output's layout (X, Y, Z).
            input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                input's layout.
            output_padding: Padding cells of the output's layout (X, Y, Z).
            stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                current stream for CuPy inputs, else the default stream 0; an int
                handle; an object with ``__cuda_stream__``; or an object with an int
                ``ptr``). The CPU variant accepts and ignores it.
            input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                int handles), ``n`` not decreasing: the input's first ``n`` cells
                along ``input_ready_axis`` (halo cells counted) are written once
                ``event`` has completed. The transpose may then run on a stream that
                does not wait for the writer and move each step as soon as its event
                completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                the peers by the copy engine while the writer produces the next;
                other backends wait for all the events first). Events must be
                recorded before the call. ``None`` (default): the stream alone
                orders the input. The CPU variant refuses events.
            input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ``input_ready`` run along; ``None``: the input's slowest axis in
                memory.
            output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                the transpose records each ``event`` on its stream once the
                output's first ``n`` cells along ``output_ready_axis`` (halo cells
                counted) are written, so that work on another stream that waits
                for it can start on them while the rest lands (DIRECT between
                ``empty_pencil`` arrays: the copy engine writes every peer's cells
                step by step, and each event follows its step, or, with more than
                15 steps, the group of steps it falls in; other backends record
                every event at the end). Cells past the last ``n`` are written
                when the operation is done on its stream. The CPU variant refuses
                events.
            output_ready_axis: The global axis the steps of ``output_ready`` run
                along; ``None``: the output's slowest axis in memory.
            own_cells: ``False`` leaves the cells that stay on this rank (those in
                both this rank's input and output pencils) unwritten in ``out``:
                only cells from other ranks land there, and the caller reads its
                own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                them). Out of place only. Each rank may choose for itself.
                ``None`` (the default) is ``True``: every owned cell is written.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                overlap (``own_cells=False`` in place among them) or workspace size,
                a released grid or handle, or MPI already
                finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                the ranks run different operations or one rank's arguments are wrong.
            NotSupportedError: A pencil of this transpose is empty on some rank.
            TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                a list as an array, a host array in the GPU variant).
        """
    def transpose_z_to_y(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
        input_ready: Sequence[tuple[Any, int]] | None = None,
        input_ready_axis: int | None = None,
        output_ready: Sequence[tuple[Any, int]] | None = None,
        output_ready_axis: int | None = None,
        own_cells: bool | None = None,
    ) -> Any:
        """Global transpose from Z-pencils to Y-pencils (collective).

        Every owned cell of the Y-pencil receives the value the Z-pencils hold for the
        same global point, bit for bit. Only the owned interior of ``out`` is written:
        its halo and padding cells keep their contents, and so does the whole input
        (unless in place).

        Args:
            input: The Z-pencil: a C-contiguous 3-D array of shape
                ``get_pencil_info(2, input_halo_extents, input_padding).array_shape``
                (a native-byte-order NumPy array in the CPU variant, an object exposing
                ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                is a batch of ``k`` fields moved in one exchange (one message per
                peer for all of them); ``out`` is then the batch of ``k`` output
                pencils, and an explicit ``work`` holds ``k`` times the workspace.
            out: The Y-pencil, writable, of shape
                ``get_pencil_info(1, output_halo_extents, output_padding).array_shape``
                (after the batch axis of a batch).
                ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                the current device, from CuPy's memory pool on the operation's stream,
                in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                An allocated output's halo and padding cells are uninitialised.
                In place: pass an ``out`` that starts at the same address as ``input``
                (two views of one buffer large enough for the larger pencil); partial
                overlap raises ``InvalidUsageError``.
            work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                on first use, grown when an operation needs more, reused, never shrunk).
                Otherwise a writable C-contiguous array of the variant's kind, any
                shape and element type, disjoint from the data, of at least
                ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                (times ``k`` for a batch of ``k`` fields),
                for example from ``Handle.malloc``. DIRECT, and NCCL through its
                registered workspace, run in the handle's own workspace and do not use
                an explicit one (its size is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                from the arrays (float32, float64, complex64, complex128). An explicit
                value must agree with the arrays and converts nothing; opaque storage
                (NumPy ``V<n>``) requires one of the same element size.
            input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                input's layout; ``None`` means none.
            output_halo_extents: Halo cells of the output's layout (X, Y, Z).
            input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                input's layout.
            output_padding: Padding cells of the output's layout (X, Y, Z).
            stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                current stream for CuPy inputs, else the default stream 0; an int
                handle; an object with ``__cuda_stream__``; or an object with an int
                ``ptr``). The CPU variant accepts and ignores it.
            input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                int handles), ``n`` not decreasing: the input's first ``n`` cells
                along ``input_ready_axis`` (halo cells counted) are written once
                ``event`` has completed. The transpose may then run on a stream that
                does not wait for the writer and move each step as soon as its event
                completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                the peers by the copy engine while the writer produces the next;
                other backends wait for all the events first). Events must be
                recorded before the call. ``None`` (default): the stream alone
                orders the input. The CPU variant refuses events.
            input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ``input_ready`` run along; ``None``: the input's slowest axis in
                memory.
            output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                the transpose records each ``event`` on its stream once the
                output's first ``n`` cells along ``output_ready_axis`` (halo cells
                counted) are written, so that work on another stream that waits
                for it can start on them while the rest lands (DIRECT between
                ``empty_pencil`` arrays: the copy engine writes every peer's cells
                step by step, and each event follows its step, or, with more than
                15 steps, the group of steps it falls in; other backends record
                every event at the end). Cells past the last ``n`` are written
                when the operation is done on its stream. The CPU variant refuses
                events.
            output_ready_axis: The global axis the steps of ``output_ready`` run
                along; ``None``: the output's slowest axis in memory.
            own_cells: ``False`` leaves the cells that stay on this rank (those in
                both this rank's input and output pencils) unwritten in ``out``:
                only cells from other ranks land there, and the caller reads its
                own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                them). Out of place only. Each rank may choose for itself.
                ``None`` (the default) is ``True``: every owned cell is written.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                overlap (``own_cells=False`` in place among them) or workspace size,
                a released grid or handle, or MPI already
                finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                the ranks run different operations or one rank's arguments are wrong.
            NotSupportedError: A pencil of this transpose is empty on some rank.
            TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                a list as an array, a host array in the GPU variant).
        """
    def transpose_y_to_x(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
        input_ready: Sequence[tuple[Any, int]] | None = None,
        input_ready_axis: int | None = None,
        output_ready: Sequence[tuple[Any, int]] | None = None,
        output_ready_axis: int | None = None,
        own_cells: bool | None = None,
    ) -> Any:
        """Global transpose from Y-pencils to X-pencils (collective).

        Every owned cell of the X-pencil receives the value the Y-pencils hold for the
        same global point, bit for bit. Only the owned interior of ``out`` is written:
        its halo and padding cells keep their contents, and so does the whole input
        (unless in place).

        Args:
            input: The Y-pencil: a C-contiguous 3-D array of shape
                ``get_pencil_info(1, input_halo_extents, input_padding).array_shape``
                (a native-byte-order NumPy array in the CPU variant, an object exposing
                ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                is a batch of ``k`` fields moved in one exchange (one message per
                peer for all of them); ``out`` is then the batch of ``k`` output
                pencils, and an explicit ``work`` holds ``k`` times the workspace.
            out: The X-pencil, writable, of shape
                ``get_pencil_info(0, output_halo_extents, output_padding).array_shape``
                (after the batch axis of a batch).
                ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                the current device, from CuPy's memory pool on the operation's stream,
                in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                An allocated output's halo and padding cells are uninitialised.
                In place: pass an ``out`` that starts at the same address as ``input``
                (two views of one buffer large enough for the larger pencil); partial
                overlap raises ``InvalidUsageError``.
            work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                on first use, grown when an operation needs more, reused, never shrunk).
                Otherwise a writable C-contiguous array of the variant's kind, any
                shape and element type, disjoint from the data, of at least
                ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                (times ``k`` for a batch of ``k`` fields),
                for example from ``Handle.malloc``. DIRECT, and NCCL through its
                registered workspace, run in the handle's own workspace and do not use
                an explicit one (its size is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                from the arrays (float32, float64, complex64, complex128). An explicit
                value must agree with the arrays and converts nothing; opaque storage
                (NumPy ``V<n>``) requires one of the same element size.
            input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                input's layout; ``None`` means none.
            output_halo_extents: Halo cells of the output's layout (X, Y, Z).
            input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                input's layout.
            output_padding: Padding cells of the output's layout (X, Y, Z).
            stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                current stream for CuPy inputs, else the default stream 0; an int
                handle; an object with ``__cuda_stream__``; or an object with an int
                ``ptr``). The CPU variant accepts and ignores it.
            input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                int handles), ``n`` not decreasing: the input's first ``n`` cells
                along ``input_ready_axis`` (halo cells counted) are written once
                ``event`` has completed. The transpose may then run on a stream that
                does not wait for the writer and move each step as soon as its event
                completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                the peers by the copy engine while the writer produces the next;
                other backends wait for all the events first). Events must be
                recorded before the call. ``None`` (default): the stream alone
                orders the input. The CPU variant refuses events.
            input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ``input_ready`` run along; ``None``: the input's slowest axis in
                memory.
            output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                the transpose records each ``event`` on its stream once the
                output's first ``n`` cells along ``output_ready_axis`` (halo cells
                counted) are written, so that work on another stream that waits
                for it can start on them while the rest lands (DIRECT between
                ``empty_pencil`` arrays: the copy engine writes every peer's cells
                step by step, and each event follows its step, or, with more than
                15 steps, the group of steps it falls in; other backends record
                every event at the end). Cells past the last ``n`` are written
                when the operation is done on its stream. The CPU variant refuses
                events.
            output_ready_axis: The global axis the steps of ``output_ready`` run
                along; ``None``: the output's slowest axis in memory.
            own_cells: ``False`` leaves the cells that stay on this rank (those in
                both this rank's input and output pencils) unwritten in ``out``:
                only cells from other ranks land there, and the caller reads its
                own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                them). Out of place only. Each rank may choose for itself.
                ``None`` (the default) is ``True``: every owned cell is written.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                overlap (``own_cells=False`` in place among them) or workspace size,
                a released grid or handle, or MPI already
                finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                the ranks run different operations or one rank's arguments are wrong.
            NotSupportedError: A pencil of this transpose is empty on some rank.
            TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                a list as an array, a host array in the GPU variant).
        """
    def transpose_x_to_z(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
        input_ready: Sequence[tuple[Any, int]] | None = None,
        input_ready_axis: int | None = None,
        output_ready: Sequence[tuple[Any, int]] | None = None,
        output_ready_axis: int | None = None,
        own_cells: bool | None = None,
    ) -> Any:
        """Global transpose from X-pencils to Z-pencils in one exchange over the whole process grid (collective; not in upstream cuDecomp).

        Every owned cell of the Z-pencil receives the value the X-pencils hold for the
        same global point, bit for bit. Only the owned interior of ``out`` is written:
        its halo and padding cells keep their contents, and so does the whole input
        (unless in place).

        Args:
            input: The X-pencil: a C-contiguous 3-D array of shape
                ``get_pencil_info(0, input_halo_extents, input_padding).array_shape``
                (a native-byte-order NumPy array in the CPU variant, an object exposing
                ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                is a batch of ``k`` fields moved in one exchange (one message per
                peer for all of them); ``out`` is then the batch of ``k`` output
                pencils, and an explicit ``work`` holds ``k`` times the workspace.
            out: The Z-pencil, writable, of shape
                ``get_pencil_info(2, output_halo_extents, output_padding).array_shape``
                (after the batch axis of a batch).
                ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                the current device, from CuPy's memory pool on the operation's stream,
                in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                An allocated output's halo and padding cells are uninitialised.
                In place: pass an ``out`` that starts at the same address as ``input``
                (two views of one buffer large enough for the larger pencil); partial
                overlap raises ``InvalidUsageError``.
            work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                on first use, grown when an operation needs more, reused, never shrunk).
                Otherwise a writable C-contiguous array of the variant's kind, any
                shape and element type, disjoint from the data, of at least
                ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                (times ``k`` for a batch of ``k`` fields),
                for example from ``Handle.malloc``. DIRECT, and NCCL through its
                registered workspace, run in the handle's own workspace and do not use
                an explicit one (its size is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                from the arrays (float32, float64, complex64, complex128). An explicit
                value must agree with the arrays and converts nothing; opaque storage
                (NumPy ``V<n>``) requires one of the same element size.
            input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                input's layout; ``None`` means none.
            output_halo_extents: Halo cells of the output's layout (X, Y, Z).
            input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                input's layout.
            output_padding: Padding cells of the output's layout (X, Y, Z).
            stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                current stream for CuPy inputs, else the default stream 0; an int
                handle; an object with ``__cuda_stream__``; or an object with an int
                ``ptr``). The CPU variant accepts and ignores it.
            input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                int handles), ``n`` not decreasing: the input's first ``n`` cells
                along ``input_ready_axis`` (halo cells counted) are written once
                ``event`` has completed. The transpose may then run on a stream that
                does not wait for the writer and move each step as soon as its event
                completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                the peers by the copy engine while the writer produces the next;
                other backends wait for all the events first). Events must be
                recorded before the call. ``None`` (default): the stream alone
                orders the input. The CPU variant refuses events.
            input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ``input_ready`` run along; ``None``: the input's slowest axis in
                memory.
            output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                the transpose records each ``event`` on its stream once the
                output's first ``n`` cells along ``output_ready_axis`` (halo cells
                counted) are written, so that work on another stream that waits
                for it can start on them while the rest lands (DIRECT between
                ``empty_pencil`` arrays: the copy engine writes every peer's cells
                step by step, and each event follows its step, or, with more than
                15 steps, the group of steps it falls in; other backends record
                every event at the end). Cells past the last ``n`` are written
                when the operation is done on its stream. The CPU variant refuses
                events.
            output_ready_axis: The global axis the steps of ``output_ready`` run
                along; ``None``: the output's slowest axis in memory.
            own_cells: ``False`` leaves the cells that stay on this rank (those in
                both this rank's input and output pencils) unwritten in ``out``:
                only cells from other ranks land there, and the caller reads its
                own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                them). Out of place only. Each rank may choose for itself.
                ``None`` (the default) is ``True``: every owned cell is written.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                overlap (``own_cells=False`` in place among them) or workspace size,
                a released grid or handle, or MPI already
                finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                the ranks run different operations or one rank's arguments are wrong.
            NotSupportedError: A pencil of this transpose is empty on some rank.
            TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                a list as an array, a host array in the GPU variant).
        """

    def transpose_z_to_x(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
        input_ready: Sequence[tuple[Any, int]] | None = None,
        input_ready_axis: int | None = None,
        output_ready: Sequence[tuple[Any, int]] | None = None,
        output_ready_axis: int | None = None,
        own_cells: bool | None = None,
    ) -> Any:
        """Global transpose from Z-pencils to X-pencils in one exchange over the whole process grid (collective; not in upstream cuDecomp).

        Every owned cell of the X-pencil receives the value the Z-pencils hold for the
        same global point, bit for bit. Only the owned interior of ``out`` is written:
        its halo and padding cells keep their contents, and so does the whole input
        (unless in place).

        Args:
            input: The Z-pencil: a C-contiguous 3-D array of shape
                ``get_pencil_info(2, input_halo_extents, input_padding).array_shape``
                (a native-byte-order NumPy array in the CPU variant, an object exposing
                ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                is a batch of ``k`` fields moved in one exchange (one message per
                peer for all of them); ``out`` is then the batch of ``k`` output
                pencils, and an explicit ``work`` holds ``k`` times the workspace.
            out: The X-pencil, writable, of shape
                ``get_pencil_info(0, output_halo_extents, output_padding).array_shape``
                (after the batch axis of a batch).
                ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                the current device, from CuPy's memory pool on the operation's stream,
                in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                An allocated output's halo and padding cells are uninitialised.
                In place: pass an ``out`` that starts at the same address as ``input``
                (two views of one buffer large enough for the larger pencil); partial
                overlap raises ``InvalidUsageError``.
            work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                on first use, grown when an operation needs more, reused, never shrunk).
                Otherwise a writable C-contiguous array of the variant's kind, any
                shape and element type, disjoint from the data, of at least
                ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                (times ``k`` for a batch of ``k`` fields),
                for example from ``Handle.malloc``. DIRECT, and NCCL through its
                registered workspace, run in the handle's own workspace and do not use
                an explicit one (its size is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                from the arrays (float32, float64, complex64, complex128). An explicit
                value must agree with the arrays and converts nothing; opaque storage
                (NumPy ``V<n>``) requires one of the same element size.
            input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                input's layout; ``None`` means none.
            output_halo_extents: Halo cells of the output's layout (X, Y, Z).
            input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                input's layout.
            output_padding: Padding cells of the output's layout (X, Y, Z).
            stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                current stream for CuPy inputs, else the default stream 0; an int
                handle; an object with ``__cuda_stream__``; or an object with an int
                ``ptr``). The CPU variant accepts and ignores it.
            input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                int handles), ``n`` not decreasing: the input's first ``n`` cells
                along ``input_ready_axis`` (halo cells counted) are written once
                ``event`` has completed. The transpose may then run on a stream that
                does not wait for the writer and move each step as soon as its event
                completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                the peers by the copy engine while the writer produces the next;
                other backends wait for all the events first). Events must be
                recorded before the call. ``None`` (default): the stream alone
                orders the input. The CPU variant refuses events.
            input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ``input_ready`` run along; ``None``: the input's slowest axis in
                memory.
            output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                the transpose records each ``event`` on its stream once the
                output's first ``n`` cells along ``output_ready_axis`` (halo cells
                counted) are written, so that work on another stream that waits
                for it can start on them while the rest lands (DIRECT between
                ``empty_pencil`` arrays: the copy engine writes every peer's cells
                step by step, and each event follows its step, or, with more than
                15 steps, the group of steps it falls in; other backends record
                every event at the end). Cells past the last ``n`` are written
                when the operation is done on its stream. The CPU variant refuses
                events.
            output_ready_axis: The global axis the steps of ``output_ready`` run
                along; ``None``: the output's slowest axis in memory.
            own_cells: ``False`` leaves the cells that stay on this rank (those in
                both this rank's input and output pencils) unwritten in ``out``:
                only cells from other ranks land there, and the caller reads its
                own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                them). Out of place only. Each rank may choose for itself.
                ``None`` (the default) is ``True``: every owned cell is written.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                overlap (``own_cells=False`` in place among them) or workspace size,
                a released grid or handle, or MPI already
                finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                the ranks run different operations or one rank's arguments are wrong.
            NotSupportedError: A pencil of this transpose is empty on some rank.
            TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                a list as an array, a host array in the GPU variant).
        """

    def update_halos_x(
        self,
        input: Any,
        halo_extents: Triple,
        halo_periods: Triple | None,
        dim: int,
        *,
        padding: Triple | None = None,
        work: Any | None = None,
        dtype: DataType | None = None,
        stream: Stream = None,
    ) -> None:
        """Fill the halo cells of an X-pencil along one global dimension (collective).

        The ``halo_extents[dim]`` owned layers next to each end of ``dim`` are copied
        into the neighbouring ranks' halos (or wrapped around locally when this rank is
        its own neighbour). Each face spans the other two dimensions including their
        halo cells, so updating ``dim`` 0, 1 and 2 in turn also fills edges and corners.
        At a non-periodic boundary of the global grid the halo is left as it was;
        padding cells are never touched. The array is updated in place.

        Args:
            input: The X-pencil, writable, of shape
                ``get_pencil_info(0, halo_extents, padding).array_shape`` (NumPy in
                the CPU variant, a CUDA array on the handle's device in the GPU variant).
                A 4-D array ``(k, *array_shape)`` is a batch of ``k`` fields whose
                halos are updated in one exchange; an explicit ``work`` then holds
                ``k`` times the workspace.
            halo_extents: Halo cells on each side of each global axis (X, Y, Z). All
                zeros returns at once. ``halo_extents[dim]`` may not exceed the cells
                any rank that exchanges along ``dim`` owns there.
            halo_periods: Per global axis (X, Y, Z), whether the grid wraps around;
                ``None`` means no axis is periodic.
            dim: The global dimension to update: 0 (X), 1 (Y) or 2 (Z).
            padding: Padding cells after the end of each axis (X, Y, Z) of the array's
                layout; ``None`` means none.
            work: Workspace. ``None`` uses the handle's automatic workspace; otherwise
                a writable array of the variant's kind, disjoint from ``input``, of at
                least ``get_halo_workspace_size(0, halo_extents)`` elements of the dtype.
                The DIRECT backend runs in the handle's own workspace (the size of an
                explicit one is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member, or ``None`` to
                infer it from the array (see the transposes).
            stream: GPU variant: the CUDA stream to order the work on (same forms as for
                the transposes). Ignored by the CPU variant.

        Raises:
            InvalidUsageError: Wrong array, ``dim`` outside 0-2, ``halo_extents`` missing,
                too small a workspace; on every rank, a halo wider than the cells some
                exchanging rank owns along ``dim`` (and, with
                ``CUDECOMP_CHECK_COLLECTIVES=1``, ranks that run different operations or
                one rank's wrong arguments).
            NotSupportedError: The X-pencil is empty on some rank.
        """
    def update_halos_y(
        self,
        input: Any,
        halo_extents: Triple,
        halo_periods: Triple | None,
        dim: int,
        *,
        padding: Triple | None = None,
        work: Any | None = None,
        dtype: DataType | None = None,
        stream: Stream = None,
    ) -> None:
        """Fill the halo cells of a Y-pencil along one global dimension (collective).

        The ``halo_extents[dim]`` owned layers next to each end of ``dim`` are copied
        into the neighbouring ranks' halos (or wrapped around locally when this rank is
        its own neighbour). Each face spans the other two dimensions including their
        halo cells, so updating ``dim`` 0, 1 and 2 in turn also fills edges and corners.
        At a non-periodic boundary of the global grid the halo is left as it was;
        padding cells are never touched. The array is updated in place.

        Args:
            input: The Y-pencil, writable, of shape
                ``get_pencil_info(1, halo_extents, padding).array_shape`` (NumPy in
                the CPU variant, a CUDA array on the handle's device in the GPU variant).
                A 4-D array ``(k, *array_shape)`` is a batch of ``k`` fields whose
                halos are updated in one exchange; an explicit ``work`` then holds
                ``k`` times the workspace.
            halo_extents: Halo cells on each side of each global axis (X, Y, Z). All
                zeros returns at once. ``halo_extents[dim]`` may not exceed the cells
                any rank that exchanges along ``dim`` owns there.
            halo_periods: Per global axis (X, Y, Z), whether the grid wraps around;
                ``None`` means no axis is periodic.
            dim: The global dimension to update: 0 (X), 1 (Y) or 2 (Z).
            padding: Padding cells after the end of each axis (X, Y, Z) of the array's
                layout; ``None`` means none.
            work: Workspace. ``None`` uses the handle's automatic workspace; otherwise
                a writable array of the variant's kind, disjoint from ``input``, of at
                least ``get_halo_workspace_size(1, halo_extents)`` elements of the dtype.
                The DIRECT backend runs in the handle's own workspace (the size of an
                explicit one is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member, or ``None`` to
                infer it from the array (see the transposes).
            stream: GPU variant: the CUDA stream to order the work on (same forms as for
                the transposes). Ignored by the CPU variant.

        Raises:
            InvalidUsageError: Wrong array, ``dim`` outside 0-2, ``halo_extents`` missing,
                too small a workspace; on every rank, a halo wider than the cells some
                exchanging rank owns along ``dim`` (and, with
                ``CUDECOMP_CHECK_COLLECTIVES=1``, ranks that run different operations or
                one rank's wrong arguments).
            NotSupportedError: The Y-pencil is empty on some rank.
        """
    def update_halos_z(
        self,
        input: Any,
        halo_extents: Triple,
        halo_periods: Triple | None,
        dim: int,
        *,
        padding: Triple | None = None,
        work: Any | None = None,
        dtype: DataType | None = None,
        stream: Stream = None,
    ) -> None:
        """Fill the halo cells of a Z-pencil along one global dimension (collective).

        The ``halo_extents[dim]`` owned layers next to each end of ``dim`` are copied
        into the neighbouring ranks' halos (or wrapped around locally when this rank is
        its own neighbour). Each face spans the other two dimensions including their
        halo cells, so updating ``dim`` 0, 1 and 2 in turn also fills edges and corners.
        At a non-periodic boundary of the global grid the halo is left as it was;
        padding cells are never touched. The array is updated in place.

        Args:
            input: The Z-pencil, writable, of shape
                ``get_pencil_info(2, halo_extents, padding).array_shape`` (NumPy in
                the CPU variant, a CUDA array on the handle's device in the GPU variant).
                A 4-D array ``(k, *array_shape)`` is a batch of ``k`` fields whose
                halos are updated in one exchange; an explicit ``work`` then holds
                ``k`` times the workspace.
            halo_extents: Halo cells on each side of each global axis (X, Y, Z). All
                zeros returns at once. ``halo_extents[dim]`` may not exceed the cells
                any rank that exchanges along ``dim`` owns there.
            halo_periods: Per global axis (X, Y, Z), whether the grid wraps around;
                ``None`` means no axis is periodic.
            dim: The global dimension to update: 0 (X), 1 (Y) or 2 (Z).
            padding: Padding cells after the end of each axis (X, Y, Z) of the array's
                layout; ``None`` means none.
            work: Workspace. ``None`` uses the handle's automatic workspace; otherwise
                a writable array of the variant's kind, disjoint from ``input``, of at
                least ``get_halo_workspace_size(2, halo_extents)`` elements of the dtype.
                The DIRECT backend runs in the handle's own workspace (the size of an
                explicit one is checked all the same).
            dtype: The element type, a ``cudecomp.DataType`` member, or ``None`` to
                infer it from the array (see the transposes).
            stream: GPU variant: the CUDA stream to order the work on (same forms as for
                the transposes). Ignored by the CPU variant.

        Raises:
            InvalidUsageError: Wrong array, ``dim`` outside 0-2, ``halo_extents`` missing,
                too small a workspace; on every rank, a halo wider than the cells some
                exchanging rank owns along ``dim`` (and, with
                ``CUDECOMP_CHECK_COLLECTIVES=1``, ranks that run different operations or
                one rank's wrong arguments).
            NotSupportedError: The Z-pencil is empty on some rank.
        """

class PencilLayout:
    """One side of a redistribution: a pencil of a grid, with its halos and padding.

    Made by [`GridDesc.pencil`][cudecomp.GridDesc.pencil]; it keeps its grid alive.
    """

    @property
    def grid(self) -> GridDesc:
        """The grid descriptor."""
    @property
    def axis(self) -> int:
        """The pencil axis: 0 (X), 1 (Y) or 2 (Z)."""
    @property
    def halo_extents(self) -> tuple[int, int, int]:
        """Halo cells on each side of each global axis (X, Y, Z)."""
    @property
    def padding(self) -> tuple[int, int, int]:
        """Padding cells after the end of each global axis (X, Y, Z)."""

class BoxLayout:
    """One side of a redistribution: this rank's box of the global grid.

    The cells ``lo[i]..=hi[i]`` along each global axis (X, Y, Z), both ends inclusive as in
    ``PencilInfo``, stored as a C-contiguous array of shape ``(nz, ny, nx)`` (X fastest),
    without halos. Each rank gives its own box; together they must cover the global grid,
    each cell once. A box with ``hi[i] < lo[i]`` along some axis holds no cells (its array
    has shape ``(0, 0, 0)``): gathering to one rank is the layout where that rank's box is
    the whole grid and every other rank's is empty.

    Args:
        lo: The first cell along X, Y, Z (non-negative ints).
        hi: The last cell along X, Y, Z (inclusive).
    """

    def __init__(self, lo: Triple, hi: Triple) -> None: ...
    @staticmethod
    def empty() -> BoxLayout:
        """Return a box with no cells (this rank holds nothing on this side)."""
    @staticmethod
    def whole(gdims: Triple) -> BoxLayout:
        """Return the whole grid of ``gdims`` cells along X, Y, Z (this rank holds it all)."""
    @property
    def lo(self) -> tuple[int, int, int]:
        """The first cell along X, Y, Z."""
    @property
    def hi(self) -> tuple[int, int, int]:
        """The last cell along X, Y, Z (inclusive)."""
    @property
    def info(self) -> PencilInfo:
        """Describe the box's array as a ``PencilInfo`` (X fastest, no halos)."""
    @property
    def array_shape(self) -> tuple[int, int, int]:
        """The C-contiguous array shape ``(nz, ny, nx)`` of the box (empty: ``(0, 0, 0)``)."""

class Redistribution:
    """A global array moved from one decomposition to another, in one exchange.

    Made by [`Handle.create_redistribution`][cudecomp.Handle.create_redistribution]
    (collective) once, run as often as needed. Each side is a pencil of one of the
    handle's grids (``GridDesc.pencil(axis, halo_extents, padding)``: any process grid,
    pencil axis, memory order, halos and padding; the grids may differ in everything but
    ``gdims``) or a box per rank (``BoxLayout``: bricks, or gather to and scatter from one
    rank). Every cell of the source's interior lands in the destination's, bit for bit;
    the destination's halo and padding cells are left as they are. It runs on the engine
    and backends of the transposes (the source grid's transpose backend unless
    ``backend`` says otherwise), with ``stream``, ``out``, ``work`` and the checking mode
    as they do. Release it with ``destroy()`` on every rank (or use it as a context
    manager) before finalizing its handle.
    """

    def run(
        self, input: Any, out: Any | None = None, *, work: Any | None = None, dtype: DataType | None = None, stream: Stream = None
    ) -> Any:
        """Move ``input`` (this rank's source array) into the destination layout (collective).

        Args:
            input: This rank's source array: C-contiguous, of shape
                ``input_info.array_shape`` (NumPy in the CPU variant, a CUDA array on the
                handle's device in the GPU variant). Only its interior is read. A 4-D
                array ``(k, *input_info.array_shape)`` is a batch of ``k`` fields moved in
                one exchange (out of place; ``out`` is then the batch of ``k`` outputs and
                an explicit ``work`` holds ``k`` times the workspace).
            out: The destination array, writable, of shape ``output_info.array_shape``;
                ``None`` allocates it (as the transposes do). In place: an ``out`` that
                starts at the address of ``input`` and holds both arrays.
            work: Workspace: ``None`` (the handle's), or a writable array of at least
                ``get_workspace_size() * get_data_type_size(dtype)`` bytes, disjoint from
                the data.
            dtype: A ``cudecomp.DataType`` member, or ``None`` to infer it from the arrays.
            stream: GPU variant: the CUDA stream (same forms as for the transposes);
                ignored by the CPU variant.

        Returns:
            ``out``, or the newly allocated output.

        Raises:
            InvalidUsageError: Wrong shape, dtype, contiguity, writability, overlap or
                workspace size, a destroyed object or finalized handle; with
                ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when one rank's
                arguments are wrong.
            TypeError: Arguments of the wrong Python type.
        """
    @property
    def input_info(self) -> PencilInfo:
        """The source array of this rank: shape, position, halos and padding."""
    @property
    def output_info(self) -> PencilInfo:
        """The destination array of this rank."""
    @property
    def gdims(self) -> tuple[int, int, int]:
        """Global extents along X, Y, Z."""
    @property
    def backend(self) -> int:
        """The transpose backend that runs it (a ``TransposeCommBackend`` value)."""
    @property
    def is_identity(self) -> bool:
        """Whether every rank's source and destination arrays are the same.

        The same on every rank: a run then only copies, and the source array may stand for
        the destination.
        """
    def get_workspace_size(self) -> int:
        """Workspace a run needs, in elements of its dtype (the same on every rank)."""
    def destroy(self) -> None:
        """Release it (collective). Any later use raises ``InvalidUsageError``."""
    def __enter__(self) -> Redistribution: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool: ...

class DeviceBuffer:
    """Device memory returned by ``Handle.malloc`` in the GPU variant (``uint8`` bytes)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA array interface (version 3) of the bytes; ``InvalidUsageError`` once freed."""
    @property
    def ptr(self) -> int:
        """Device address of the first byte."""
    @property
    def nbytes(self) -> int:
        """Size in bytes."""
    @property
    def symmetric(self) -> bool:
        """True for NVSHMEM symmetric memory (``malloc`` for a grid with an NVSHMEM backend).

        NVSHMEM operations exchange through it when every rank passes it as ``work``.
        """
