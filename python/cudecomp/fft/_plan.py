"""The distributed FFT plan."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from .._collective import collective
from .._config import GridDescConfig
from .._cudecomp import CPU_ONLY, GridDesc, Handle, PencilInfo, _host_threads
from .._cupy import external_stream
from .._enums import TransposeCommBackend
from .._errors import InvalidUsageError, NotSupportedError
from ._args import _REAL, Kind, Norm, _Call, _form, _parse, check_array
from ._gpu import FftSettings, _SlabStream, _stream_ptr
from ._local import _into, _make_local, _RustLocal
from ._schedule import _MEM_ORDER, _STREAMED_ORDER, Schedule, _factor_pairs, _streams_slabs, _usable, schedule_of
from ._spectral import _SpectralHelpers
from ._stages import _ScheduleRunner

# What the ranks' agreements on a plan's transforms and destroy() are called in their
# messages (checking mode).
_CALLS = "cudecomp.fft.FFT calls"


class FFT(_SpectralHelpers, _ScheduleRunner):
    """A distributed 3-D FFT plan over ``handle``'s ranks (collective to create and destroy).

    Args:
        handle: The library handle; every rank of its communicator creates the plan with
            the same arguments.
        gdims: Global grid ``(X, Y, Z)`` of the real-space data (for ``r2c`` the real
            array; the spectral grid is ``(X // 2 + 1, Y, Z)``).
        pdims: Process grid ``(P_rows, P_cols)``. ``None`` or ``(0, 0)`` times the
            forward and backward transform on every usable process grid of the rank
            count (and every backend of ``backend`` when it is a list) and keeps the
            fastest (see ``autotune_times``). The grid decides the schedule: ``local``
            (one rank), ``slab-xy`` (``P_rows == 1``), ``slab-yz`` (``P_cols == 1``) or
            ``pencil``.
        kind: ``"c2c"``, ``"r2c"`` (``forward`` real to complex along X first, halving
            it, ``backward`` complex to real) or ``"r2r"`` (real data whose X is a cosine
            or sine axis); ``None`` (the default): ``"c2c"`` unless ``transforms`` has a
            cosine or sine axis, then ``"r2c"`` where X is an FFT axis and ``"r2r"``
            otherwise.
        transforms: The transform along each global axis (X, Y, Z): ``"fft"``
            (periodic), or ``scipy.fft``'s real-to-real types ``"dct1"`` ... ``"dct4"``,
            ``"dst1"`` ... ``"dst4"`` (the backward transform runs their inverses,
            ``idct``/``idst``, with the plan's ``norm``); ``None``: three FFTs. Cosine
            and sine axes take real data; spectral data is complex where some axis is an
            FFT (the first FFT axis makes it complex: halved along X for ``r2c``, cast
            otherwise) and real where none is.
        dtype: Real-space element type: ``complex64`` or ``complex128`` for ``c2c``
            (default ``complex128``), ``float32`` or ``float64`` for ``r2c`` (default
            ``float64``); a NumPy dtype, its name, or a ``cudecomp.DataType`` member.
            The spectral type is the complex type of the same precision.
        norm: As in ``numpy.fft``: ``"backward"`` (``backward`` scales by ``1/N``),
            ``"ortho"`` (both by ``1/sqrt(N)``) or ``"forward"`` (``forward`` scales by
            ``1/N``), ``N = X * Y * Z``.
        transposed_out: ``False``: spectral data lives in the X-pencil of the spectral
            grid, laid out like the input (``a[kz, ky, kx]``); ``True``: it stays in
            the Z-pencil where the forward transform ends (see ``output_info``), which
            skips the return transposes (two on pencil grids, one on slabs, none on one
            rank).
        backend: Transpose backend: a ``TransposeCommBackend`` member; a list of them
            to time (with the process grids when ``pdims`` is ``None``); or ``None``
            for ``config``'s backend (default ``MPI_P2P``).
        config: Optional base configuration whose ``rank_order``,
            ``transpose_comm_backend`` and ``halo_comm_backend`` are used; its
            ``gdims``, ``pdims``, ``gdims_dist`` and memory orders are replaced.
        fft_library: ``"auto"`` (the CPU variant: ``"rustfft"``; the GPU variant:
            ``"cupy"``), ``"rustfft"`` (the package's own transforms, RustFFT in the
            Rust core: SIMD code picked at run time, the norm applied inside the
            transforms, the GIL released), ``"scipy"`` (``scipy.fft``), ``"numpy"``
            (``numpy.fft``) or ``"cupy"`` (cuFFT).
        workers: Threads of the local FFTs: for ``rustfft`` ``None`` means the
            threads the handle gives each rank for host work (``CUDECOMP_HOST_THREADS``,
            or this node's cores shared among its ranks: one where every core runs a
            rank); for ``scipy.fft`` ``None`` means SciPy's default, one. Negative
            values count back from ``os.cpu_count()`` as in ``scipy.fft``. Ignored by
            ``numpy`` and ``cupy``.
        autotune_reps: Timed forward + backward pairs per candidate when autotuning.
        comm: The handle's ``mpi4py`` communicator, used only to agree on the
            autotuner's choice; ``None`` means ``MPI.COMM_WORLD``, which is right
            whenever the handle spans all processes (autotuning on a handle over fewer
            ranks needs it).

    The arguments are compared across the handle's ranks: where they differ, or fail on
    some rank, every rank raises (that rank its own error, the others
    ``InvalidUsageError`` naming it) instead of waiting in an exchange. Arguments that
    mean the same agree (``pdims`` ``None`` and ``(0, 0)``, ``backend=None`` and the
    configuration's backend, ``config=None`` and ``GridDescConfig()``).

    ``forward``, ``backward`` and ``destroy`` are collective too. With
    ``CUDECOMP_CHECK_COLLECTIVES=1`` (read when the plan's grids are created) the ranks
    agree on each call first, over the plan's own communicator: a rank whose arguments
    fail, or that calls another of the three, makes every rank raise instead of leaving
    the others waiting. Without it nothing is exchanged beforehand, and such a rank
    leaves the others waiting in the call, as with transposes.

    Calls of one plan from several threads take turns (a lock per plan: its scratch
    arrays are shared); which thread's call on one rank then meets which on another is
    decided by timing, so they must be the same call with the same data, or be ordered
    by you. Give each thread a plan of its own for independent work: distinct plans run
    concurrently (CPU variant).

    Raises:
        TypeError: An argument of the wrong type (e.g. ``gdims`` or ``pdims`` not
            integers, a ``dtype`` that does not fit ``kind``).
        InvalidUsageError: Unknown ``kind``, ``norm`` or ``fft_library``; bad ``gdims``,
            ``pdims`` or ``autotune_reps``; arguments that differ between ranks.
        NotSupportedError: A process grid on which some rank would own no cells of a
            pencil the schedule uses, or no usable process grid at all.
    """

    def __init__(
        self,
        handle: Handle,
        gdims: Sequence[int],
        pdims: Sequence[int] | None = None,
        *,
        kind: Kind | None = None,
        dtype: Any = None,
        norm: Norm = "backward",
        transposed_out: bool = False,
        backend: TransposeCommBackend | Sequence[TransposeCommBackend] | None = None,
        config: GridDescConfig | None = None,
        fft_library: str = "auto",
        workers: int | None = None,
        autotune_reps: int = 3,
        comm: Any = None,
        transforms: Sequence[str] | None = None,
    ) -> None:
        self._grids: list[GridDesc] = []
        # One call of the plan at a time (per process): its calls share the scratch arrays
        # and run a sequence of transposes that must not interleave with another call's.
        self._lock = threading.Lock()
        self._checking = False
        if not isinstance(handle, Handle):
            raise TypeError(f"handle: expected a cudecomp.Handle, got {type(handle).__name__}")
        # Every argument is checked, then the ranks agree on them: a rank whose arguments
        # fail, or differ, would otherwise leave the others waiting in the first exchange.
        with collective(handle, "cudecomp.fft.FFT") as call:
            a = _parse(gdims, pdims, kind, dtype, norm, transposed_out, backend, config, autotune_reps, workers, comm, transforms)
            local = _make_local(fft_library, a.norm, a.workers)
            if any(t != "fft" for t in a.transforms) and not local.cosine_sine:
                raise NotSupportedError(f"fft_library {local.name!r} has no cosine or sine transforms: use 'rustfft' or 'scipy'")
            call.fields += a.agreement_key()
        if CPU_ONLY:
            # Collective the first time on a handle, so every rank asks, whatever its library.
            threads = _host_threads(handle)
            if isinstance(local, _RustLocal) and local.threads is None:
                local.threads = threads
        g, p, kind = a.gdims, a.pdims, a.kind
        self._kind: Kind = kind
        self._transforms: tuple[str, str, str] = a.transforms
        self._norm: Norm = a.norm
        self._transposed = a.transposed_out
        self._gdims = g
        self._spectral_gdims = (g[0] // 2 + 1, g[1], g[2]) if kind == "r2c" else g
        self._in_dtype, self._out_dtype = a.in_dtype, a.out_dtype
        self._handle = handle
        self._local = local
        self._base = a.config.copy() if a.config is not None else GridDescConfig()
        self._streams: dict[int, Any] = {}
        self._scratch: dict[tuple[int, str], Any] = {}
        self._one_gpu_each: bool | None = None
        self._comm = a.comm
        self.autotune_times: dict[tuple[tuple[int, int], str], float] = {}
        """Autotuning: seconds of one forward + backward (slowest rank's median) per (pdims, backend name); empty without."""

        n = handle.nranks
        if p is None or p == (0, 0):
            cands = [p for p in _factor_pairs(n) if _usable(self._gdims, self._spectral_gdims[0], p)]
            if not cands:
                raise NotSupportedError(f"no process grid of {n} ranks leaves every pencil of {self._gdims} non-empty")
        else:
            if min(p) < 1 or p[0] * p[1] != n:
                raise InvalidUsageError(f"pdims {p}: expected (P_rows, P_cols) with P_rows * P_cols == {n} ranks")
            if not _usable(self._gdims, self._spectral_gdims[0], p):
                raise NotSupportedError(
                    f"pdims {p}: some rank would own no cells of a pencil of the {schedule_of(p)} schedule on {self._gdims}"
                    f"{' (spectral ' + str(self._spectral_gdims) + ')' if kind == 'r2c' else ''}"
                )
            cands = [(p[0], p[1])]
        trials = [(p, b) for p in cands for b in a.backends]
        try:
            if len(trials) == 1:
                self._build(*trials[0])
            else:
                self._autotune(trials, a.autotune_reps)
        except BaseException:
            self._release()  # the caller never gets the plan to destroy
            raise

    # -- construction ------------------------------------------------------------------

    def _config(
        self, gdims: tuple[int, int, int], pdims: tuple[int, int], backend: TransposeCommBackend | None, streams: bool | None = None
    ) -> tuple[GridDescConfig, bool]:
        """Return the grid configuration of ``gdims`` and whether the plan streams its slabs on it (``streams``: decided already)."""
        cfg = self._base.copy()
        cfg.gdims = gdims
        cfg.gdims_dist = (0, 0, 0)
        cfg.pdims = pdims
        if backend is not None:
            cfg.transpose_comm_backend = backend
        if streams is None:
            streams = _streams_slabs(cfg, FftSettings.of(self._handle), self._own_gpus)
        cfg.transpose_mem_order = _STREAMED_ORDER if streams else _MEM_ORDER[schedule_of(pdims)]
        return cfg, streams

    def _own_gpus(self) -> bool:
        """Whether every rank drives a GPU of its own (collective the first time; cached)."""
        if self._one_gpu_each is None:
            self._one_gpu_each = self._handle.one_gpu_per_rank()
        return self._one_gpu_each

    def _build(self, pdims: tuple[int, int], backend: TransposeCommBackend | None) -> None:
        self._release()
        self._schedule: Schedule = schedule_of(pdims)
        # Streamed slabs run FFTs alone (their stages are their own).
        cfg, streams = self._config(self._gdims, pdims, backend, False if self._real_to_real_axes else None)
        grid = self._handle.create_grid(cfg)
        self._grids = [grid]
        if self._kind == "r2c":
            scfg, _ = self._config(self._spectral_gdims, pdims, backend, streams)
            scfg.rank_order = grid.config.rank_order  # the resolved order: the same split of Y and Z
            try:
                self._grids.append(self._handle.create_grid(scfg))
            except BaseException:
                self._release()
                raise
        self._pdims = pdims
        self._checking = self.spectral_grid._checks_collectives
        self._slabs = _SlabStream(self.spectral_grid, self._kind == "r2c", self._out_dtype) if streams else None
        self._in_info = grid.get_pencil_info(0)
        self._out_axis = 2 if self._transposed else 0
        self._out_info = self.spectral_grid.get_pencil_info(self._out_axis)
        self._steps = {inverse: self._plan_steps(inverse) for inverse in (False, True)}

    def _autotune(self, trials: list[tuple[tuple[int, int], TransposeCommBackend | None]], reps: int) -> None:
        comm_max = self._allreduce_max
        comm_max(0.0)  # checks the communicator before any grid exists
        best: tuple[float, tuple[int, int], TransposeCommBackend | None] | None = None
        for pdims, backend in trials:
            try:
                self._build(pdims, backend)
            except NotSupportedError:
                continue
            a = self.zeros_input()
            a += 1
            times = []
            for i in range(1 + reps):  # the first call warms up
                t0 = time.perf_counter()
                self.backward(self.forward(a))
                self._sync()
                if i:
                    times.append(time.perf_counter() - t0)
            t = comm_max(float(np.median(times)))
            name = backend.name if backend is not None else TransposeCommBackend(int(self.grid.config.transpose_comm_backend)).name
            self.autotune_times[(pdims, name)] = t
            if best is None or t < best[0]:
                best = (t, pdims, backend)
        self._release()
        if best is None:
            raise NotSupportedError("autotuning: no candidate process grid and backend could be created")
        self._build(best[1], best[2])

    def _allreduce_max(self, v: float) -> float:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD if self._comm is None else self._comm
        if comm.size != self._handle.nranks:
            raise InvalidUsageError(
                f"autotuning a plan on a handle of {self._handle.nranks} ranks needs its communicator: pass comm= (or pdims)"
            )
        return float(comm.allreduce(v, op=MPI.MAX))

    def _sync(self) -> None:
        if self._local.gpu:
            import cupy

            cupy.cuda.get_current_stream().synchronize()

    def _release(self) -> None:
        """Destroy the plan's grids (collective) and forget them.

        As ``GridDesc.__exit__``: a grid already destroyed, or whose handle was finalized
        (it can no longer be destroyed), is only forgotten.
        """
        self._scratch = {}
        self._slabs = None
        grids, self._grids = self._grids, []
        for g in reversed(grids):
            g.__exit__(None, None, None)

    # -- properties --------------------------------------------------------------------

    @property
    def grid(self) -> GridDesc:
        """The real-space grid descriptor (``gdims``); its X-pencil holds ``forward``'s input."""
        self._alive()
        return self._grids[0]

    @property
    def spectral_grid(self) -> GridDesc:
        """The spectral grid descriptor: ``(X // 2 + 1, Y, Z)`` for ``r2c``, the same object as ``grid`` for ``c2c``."""
        self._alive()
        return self._grids[-1]

    @property
    def kind(self) -> Kind:
        """``"c2c"``, ``"r2c"`` or ``"r2r"``."""
        return self._kind

    @property
    def transforms(self) -> tuple[str, str, str]:
        """The transform along each global axis (X, Y, Z): ``"fft"``, ``"dct1"`` ... ``"dst4"``."""
        return self._transforms

    @property
    def norm(self) -> Norm:
        """The normalisation (``numpy.fft`` semantics)."""
        return self._norm

    @property
    def gdims(self) -> tuple[int, int, int]:
        """Global real-space grid ``(X, Y, Z)``."""
        return self._gdims

    @property
    def spectral_gdims(self) -> tuple[int, int, int]:
        """Global spectral grid: ``(X // 2 + 1, Y, Z)`` for ``r2c``, ``gdims`` for ``c2c``."""
        return self._spectral_gdims

    @property
    def pdims(self) -> tuple[int, int]:
        """The process grid ``(P_rows, P_cols)`` in use (chosen by the autotuner when asked)."""
        self._alive()
        return self._pdims

    @property
    def schedule(self) -> Schedule:
        """``"local"``, ``"slab-xy"``, ``"slab-yz"`` or ``"pencil"`` (see the `cudecomp.fft` documentation)."""
        self._alive()
        return self._schedule

    @property
    def transposed_out(self) -> bool:
        """Whether spectral data stays in the Z-pencil (``True``) or returns to the X-pencil."""
        return self._transposed

    @property
    def input_dtype(self) -> np.dtype:
        """NumPy dtype of real-space arrays (``forward`` input, ``backward`` output)."""
        return self._in_dtype

    @property
    def output_dtype(self) -> np.dtype:
        """NumPy dtype of spectral arrays (``forward`` output, ``backward`` input): complex."""
        return self._out_dtype

    @property
    def input_info(self) -> PencilInfo:
        """Describe this rank's real-space pencil: the X-pencil of ``grid`` (array ``a[z, y, x]``)."""
        self._alive()
        return self._in_info

    @property
    def output_info(self) -> PencilInfo:
        """Describe this rank's spectral pencil, where ``forward`` writes and ``backward`` reads.

        The X-pencil of ``spectral_grid`` (array ``a[kz, ky, kx]``, ``kx`` contiguous)
        without ``transposed_out``. With it, the Z-pencil of ``spectral_grid``, whose
        layout depends on the schedule: ``a[ky, kx, kz]`` (``kz`` contiguous) for
        ``pencil`` and ``slab-xy``, ``a[kx, kz, ky]`` (``ky`` contiguous) for
        ``slab-yz``, ``a[kz, ky, kx]`` for ``local`` and for ``slab-xy`` where its slabs
        stream (GPUs with ``DIRECT``, see the `cudecomp.fft` documentation). Use its ``order``, ``lo``,
        ``global_slices`` and ``to_global_axes``, or ``wavenumbers()``, rather than
        assuming one.
        """
        self._alive()
        return self._out_info

    @property
    def output_axis(self) -> int:
        """The pencil (0 = X, 2 = Z) of ``spectral_grid`` that ``output_info`` describes."""
        return self._out_axis

    @property
    def _real_to_real_axes(self) -> bool:
        """Whether some axis is a cosine or sine transform."""
        return any(t != "fft" for t in self._transforms)

    @property
    def _real_dtype(self) -> np.dtype:
        """The real type of the plan's precision (wavenumbers, coordinates)."""
        return self._in_dtype if self._kind != "c2c" else _REAL[self._in_dtype]

    def _alive(self) -> None:
        if not self._grids:
            raise InvalidUsageError("this FFT plan was destroyed")

    # -- allocation --------------------------------------------------------------------

    def empty_input(self, *, fields: int | None = None) -> Any:
        """Allocate an uninitialised real-space array (NumPy or CuPy) of shape ``input_info.array_shape``.

        ``fields``: a batch of that many fields instead, shape ``(fields, *input_info.array_shape)``.
        """
        return self.grid.empty_pencil(0, self._in_dtype, fields=fields)

    def zeros_input(self, *, fields: int | None = None) -> Any:
        """As ``empty_input``, filled with zeros."""
        return self.grid.zeros_pencil(0, self._in_dtype, fields=fields)

    def empty_output(self, *, fields: int | None = None) -> Any:
        """Allocate an uninitialised spectral array of shape ``output_info.array_shape`` (complex).

        ``fields``: a batch of that many fields instead, shape ``(fields, *output_info.array_shape)``.
        """
        return self.spectral_grid.empty_pencil(self._out_axis, self._out_dtype, fields=fields)

    def zeros_output(self, *, fields: int | None = None) -> Any:
        """As ``empty_output``, filled with zeros."""
        return self.spectral_grid.zeros_pencil(self._out_axis, self._out_dtype, fields=fields)

    def _xp(self) -> Any:
        if self._local.gpu:
            import cupy

            return cupy
        return np

    # -- transforms --------------------------------------------------------------------

    def _check(self, a: Any, info: PencilInfo, dtype: np.dtype, what: str, fields: int | None, writable: bool = False) -> int | None:
        """Check one array of a transform (see ``_args.check_array``); return its batch's field count."""
        return check_array(a, info, dtype, what, fields, writable, xp=self._xp(), gpu=self._local.gpu, kind=self._kind)

    def _call_fields(self, call: str, fields: int | None = None) -> list[tuple[str, str]]:
        """Return what the ranks agree on before ``call`` (checking mode): the plan, the call and its batch.

        The plan's own communicator already tells plans apart; its description names it in
        messages and tells it from the grid's own operations on that communicator.
        """
        plan = (
            f"{self._kind} {'/'.join(self._transforms)} {self._in_dtype} gdims={self._gdims} pdims={self._pdims} {self._schedule} "
            f"norm={self._norm} transposed_out={self._transposed}"
        )
        return [("plan", plan), ("call", call), ("fields", _form(fields))]

    def _begin(self, call: str, check: Callable[[], _Call]) -> _Call:
        """Start ``call`` (the plan's lock held): check this rank's arguments, then agree (checking mode).

        ``check`` raises for bad arguments and returns the operation's stream and batch. In
        checking mode a rank whose arguments fail joins the agreement with its error (the
        others raise ``InvalidUsageError`` naming it) and raises it; otherwise the ranks
        agree on the plan and the call (``forward`` against ``backward`` runs the same
        transposes, whose own agreement would pass). A destroyed plan joins nothing: in
        checking mode only a ``destroy()`` every rank agreed on destroys it, so no rank
        waits in a call of it.
        """
        if not (self._checking and self._grids):
            self._alive()
            return check()
        with collective(self._handle, _CALLS) as settled:
            self._alive()
            c = check()
            settled.fields += self._call_fields(call, c.fields)
        return c

    def _checked(self, name: str, a: Any, out: Any, stream: Any) -> _Call:
        """Check the arguments of transform ``name`` on this rank; return its stream handle (GPU, else None) and batch."""
        real, spectral = (self._in_info, self._in_dtype), (self._out_info, self._out_dtype)
        src, dst = (real, spectral) if name == "forward" else (spectral, real)
        fields = self._check(a, *src, f"{name} input", -1)
        if out is not None:
            self._check(out, *dst, f"{name} out", fields, writable=True)
        # Parsed before the agreement: a bad stream would otherwise fail on this rank alone.
        return _Call(_stream_ptr(stream) if self._local.gpu else None, fields)

    @contextlib.contextmanager
    def _on(self, ptr: int | None) -> Iterator[int | None]:
        """Make the operation's stream (``ptr``, GPU) CuPy's current one; yields its handle for the transposes.

        Streamed plans order the call after their previous one on the device (``_SlabStream.begin``).
        """
        if ptr is None:
            yield None
            return
        import cupy

        if int(cupy.cuda.get_current_stream().ptr) == ptr:
            s = None
        else:
            s = self._streams.get(ptr)
            if s is None:
                s = external_stream(ptr)
                if len(self._streams) < 8:
                    self._streams[ptr] = s
        with s if s is not None else contextlib.nullcontext():
            slabs = self._slabs
            if slabs is not None:
                slabs.begin()
            try:
                yield ptr
            finally:
                if slabs is not None:
                    slabs.end()

    def forward(self, a: Any, out: Any = None, *, stream: Any = None) -> Any:
        """Forward transform of this rank's real-space pencil (collective).

        Equals, on every rank, ``numpy.fft.fftn`` (``c2c``) or ``numpy.fft.rfftn``
        (``r2c``) of the global array ``A[z, y, x]`` at this rank's spectral indices:
        ``out[output_info.interior_slices]`` is
        ``fftn(A)[output_info.global_slices].transpose(output_info.to_global_axes)``
        (the transpose is the identity without ``transposed_out``).

        Args:
            a: The X-pencil of ``grid``: shape ``input_info.array_shape``, dtype
                ``input_dtype``, C-contiguous; NumPy (CPU variant) or CuPy (GPU). Not
                modified. A batch of ``k`` fields, shape ``(k, *input_info.array_shape)``,
                transforms every field with one exchange per transpose.
            out: Optional spectral array (shape ``output_info.array_shape``, dtype
                ``output_dtype``; for a batch ``(k, *output_info.array_shape)``) to write
                into; ``None`` allocates one.
            stream: GPU variant: the stream to run on (``None``: CuPy's current stream;
                an int handle, an object with ``__cuda_stream__`` or with an int
                ``ptr``). Local FFTs and transposes are ordered on it and nothing waits
                for it on the host. Ignored by the CPU variant.

        Returns:
            ``out`` or the new spectral array.

        Raises:
            TypeError: Not an array of the variant, or the wrong dtype (e.g. a complex
                array for an ``r2c`` plan); a stream of an unknown kind (GPU).
            InvalidUsageError: Wrong shape, not C-contiguous, or a destroyed plan; in
                checking mode also on every other rank (naming this one), and on every
                rank where another calls ``backward`` or ``destroy`` instead.
        """
        with self._lock:
            c = self._begin("forward", lambda: self._checked("forward", a, out, stream))
            return self._forward(a, out, c)

    def _forward(self, a: Any, out: Any, c: _Call) -> Any:
        with self._on(c.stream) as s:
            if self._slabs is not None and c.fields is None:  # a batch runs the plain schedule
                tr = self._transposed
                scale = self._local.scale(False, math.prod(self._gdims))
                c = self._slabs.forward(a, out if tr else None, not tr, scale)
                return _into(c, out) if tr else self.spectral_grid.transpose_z_to_y(c, out, stream=s)  # scaled slab by slab
            return self._run(a, out, s, False, c.fields)

    def backward(self, a: Any, out: Any = None, *, stream: Any = None) -> Any:
        """Backward (inverse) transform of this rank's spectral pencil into its real-space X-pencil (collective).

        Equals ``numpy.fft.ifftn`` (``c2c``) or ``numpy.fft.irfftn`` with
        ``s = (Z, Y, X)`` (``r2c``) of the global spectral array, with the plan's
        ``norm``. For ``r2c`` the input is taken as the half spectrum of a real field:
        the imaginary parts of the modes that must be real (``kx = 0`` and, for even
        ``X``, the Nyquist plane, at their self-conjugate points) are ignored, as
        ``irfftn`` does.

        Args:
            a: The spectral pencil: shape ``output_info.array_shape``, dtype
                ``output_dtype``, C-contiguous. Not modified. A batch of ``k`` fields
                has shape ``(k, *output_info.array_shape)``.
            out: Optional real-space array (shape ``input_info.array_shape``, dtype
                ``input_dtype``; for a batch ``(k, *input_info.array_shape)``); ``None``
                allocates one.
            stream: GPU variant: the stream to run on (as for ``forward``).

        Returns:
            ``out`` or the new real-space array.

        Raises:
            TypeError: Not an array of the variant, or the wrong dtype; a stream of an
                unknown kind (GPU).
            InvalidUsageError: Wrong shape, not C-contiguous, or a destroyed plan; in
                checking mode as for ``forward``.
        """
        with self._lock:
            c = self._begin("backward", lambda: self._checked("backward", a, out, stream))
            return self._backward(a, out, c)

    def _backward(self, a: Any, out: Any, c: _Call) -> Any:
        ptr = c.stream
        if self._slabs is None or c.fields is not None:
            with self._on(ptr) as st:
                return self._run(a, out, st, True, c.fields)
        L, r2c = self._local, self._kind == "r2c"
        X, Y, Z = self._gdims
        scale = L.scale(True, X * Y * Z)
        tr = self._transposed
        with self._on(ptr) as st:
            if self._slabs.order == "planes":

                def fft2(y: Any, o: Any) -> None:  # one slab of the last stage, scaled already
                    if r2c:
                        L.c2r(y, (1, 2), (Y, X), o, overwrite=True)
                    else:
                        L.c2c(y, (1, 2), True, o, overwrite=True)

                dst = out if out is not None else self._xp().empty(self._in_info.array_shape, self._in_dtype)
                return self._slabs.backward_planes(a, dst, tr, st, scale, fft2)
            c = self._slabs.backward(a, tr, st, scale)
            # Scaled slab by slab, beside the exchange; the slabs' buffers (kept) are
            # overwritten by the last stage but never returned.
            r = L.c2r(c, (1, 2), (Y, X), out, overwrite=True) if r2c else L.c2c(c, (1, 2), True, out)
            return _into(r, out)

    # -- lifetime ----------------------------------------------------------------------

    def destroy(self) -> None:
        """Destroy the plan's grid descriptors (collective); later use raises ``InvalidUsageError``.

        In checking mode the ranks agree on it first: where another rank calls
        ``forward`` or ``backward`` instead, every rank raises ``InvalidUsageError`` and the
        plan stays usable. After the handle's ``finalize()``, when its grids can no longer
        be destroyed, the plan is only marked destroyed; a second ``destroy()`` raises.

        Raises:
            InvalidUsageError: The plan was destroyed already; in checking mode, ranks
                that disagree.
        """
        with self._lock:
            self._alive()
            try:
                checking = self.spectral_grid._checks_collectives
            except InvalidUsageError:  # the handle was finalized, or the grid destroyed directly: nothing to agree on
                checking = False
            if checking:
                self._handle._settle(_CALLS, self._call_fields("destroy"))
            self._release()

    def __enter__(self) -> FFT:
        """Use the plan in a ``with`` block; leaving it calls ``destroy()``."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Destroy the plan (collective) unless already destroyed (after ``finalize()``: mark it destroyed); exceptions propagate."""
        if self._grids:
            self.destroy()

    def __repr__(self) -> str:
        if not hasattr(self, "_kind"):  # __init__ raised before the plan was described
            return "FFT(not created)"
        if not self._grids:
            return f"FFT({self._kind}, gdims={self._gdims}, destroyed)"
        return (
            f"FFT({self._kind}, gdims={self._gdims}, pdims={self._pdims}, schedule={self._schedule!r}, "
            f"dtype={self._in_dtype}, norm={self._norm!r}, transposed_out={self._transposed}, library={self._local.name!r})"
        )
