"""GPU-only parts of a plan: stream handles and the streamed slabs of slab-xy on DIRECT."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._cudecomp import GridDesc
from ._zfft import StridedFFT


@dataclass(frozen=True)
class FftSettings:
    """A handle's settings of the distributed FFTs (``CUDECOMP_FFT_*``).

    The core reads them with every other setting when the handle is created, and the
    ranks agree on them. ``backward`` is how a streamed backward transform overlaps its exchange: ``"rows"``,
    the inverse FFTs along Z in slabs of Y rows, each sent while the next is transformed,
    then the 2-D inverse FFTs; ``"planes"``, the FFT along Z whole, then the exchange
    landing in slabs of Z planes, each 2-D inverse FFT as its slab lands. Both do the same
    work; which overlaps more on two GPUs is not measured yet, so the default is the one
    measured.
    """

    stream: str
    """``"0"`` (off), ``"1"`` (on) or ``"auto"`` (where every rank has a GPU of its own)."""
    chunks: int
    """Slabs a streamed plan cuts each direction into."""
    backward: str
    """``"rows"`` or ``"planes"``."""

    @classmethod
    def of(cls, handle: Any) -> FftSettings:
        """Return the settings of ``handle``."""
        s = handle._fft_settings
        stream = {None: "auto", True: "1", False: "0"}[s["stream"]]
        return cls(stream=stream, chunks=int(s["chunks"]), backward=str(s["backward"]))


def _stream_ptr(stream: Any) -> int:
    """Return the raw handle of a stream given as None (CuPy's current), an int, ``__cuda_stream__`` or ``.ptr``."""
    if stream is None:
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    if isinstance(stream, bool):
        raise TypeError(f"stream: expected None, an int handle or a stream object, got {stream!r}")
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int((proto() if callable(proto) else proto)[1])
    ptr = getattr(stream, "ptr", None)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        return ptr
    raise TypeError(f"stream: expected None, an int handle or a stream object, got {stream!r}")


# ---------------------------------------------------------------------------------------
# Streamed slabs (GPU, slab-xy, DIRECT)


class _SlabStream:
    """The slab-xy transforms of a GPU plan on DIRECT, each local FFT streamed into the exchange beside it.

    Forward: the 2-D FFTs over (Y, X) run in slabs of Z planes on the operation's stream
    into a library array, each slab followed by an event; the Y→Z transpose runs on a
    second stream with those events as ``input_ready``, so DIRECT's copy engine sends
    each slab to the peers while the next is transformed. The FFT along Z (the slowest
    axis of the X-fastest Z-pencil: our strided kernel, ``_zfft``, or a strided cuFFT
    plan at lengths it does not take) follows once every chunk has arrived. Backward
    mirrors it (``order`` "rows"): the inverse FFT along Z runs in slabs of Y rows, each
    sent by the Z→Y transpose (``input_ready_axis=1``) while the next is transformed,
    then the 2-D inverse FFTs; or (``order`` "planes") the inverse FFT along Z runs
    whole, and the Z→Y transpose records an event as each slab of Z planes has landed
    (``output_ready``), on which that slab's 2-D inverse FFT starts. With the kernel,
    this rank's own cells never go through the exchange: the kernel reads them from
    (forward) or writes them to (backward) the Y-pencil.
    """

    def __init__(self, grid: GridDesc, r2c: bool, dtype: np.dtype) -> None:
        import cupy

        self.cupy = cupy
        self.grid = grid
        self.r2c = r2c
        self.dtype = dtype  # spectral
        self.plans: dict[tuple[Any, ...], Any] = {}
        self.bufs: dict[int, Any] = {}
        self.side: Any = None
        self.events: list[Any] = []
        self.kernel = StridedFFT()
        self.own: tuple[int, int] | None = None
        settings = FftSettings.of(grid.handle)
        self.chunks = settings.chunks
        self.order = settings.backward
        # The end of the plan's previous call and the stream it ran on (see `begin`).
        self.done: Any = None
        self.done_on: int | None = None

    def begin(self) -> None:
        """Order the call starting on the current stream after the plan's previous call.

        Every call uses the plan's buffers (and second stream); the plan's lock makes calls
        take turns on the host, and a call on another stream than the previous one waits
        for that one's end on the device too, so that they take turns there as well.
        """
        main = self.cupy.cuda.get_current_stream()
        if self.done is not None and self.done_on != int(main.ptr):
            main.wait_event(self.done)

    def end(self) -> None:
        """Record the end of the call on the current stream (after everything it enqueued there, the second stream's work included)."""
        main = self.cupy.cuda.get_current_stream()
        if self.done is None:
            self.done = self.cupy.cuda.Event(block=False, disable_timing=True)
        self.done.record(main)
        self.done_on = int(main.ptr)

    def buffer(self, axis: int) -> Any:
        """Return the plan's library array of spectral pencil ``axis`` (peers map it: DIRECT copies once, into it)."""
        b = self.bufs.get(axis)
        if b is None:
            b = self.bufs[axis] = self.grid.empty_pencil(axis, self.dtype)
        return b

    def own_cells(self, y: Any) -> tuple[int, Any]:
        """Where this rank's own cells lie: ``(z0, view)``, rows ``z0..`` of the Z-pencil being ``view`` of the Y-pencil ``y``.

        They are the cells of both pencils (Z planes of the Y-pencil, Y rows of the
        Z-pencil); ``view`` has the Z-pencil's extents past axis 0.
        """
        if self.own is None:
            # Every pencil of a streamed plan keeps X fastest: lo lists X, Y, Z.
            self.own = (self.grid.get_pencil_info(1).lo[2], self.grid.get_pencil_info(2).lo[1])
        z0, y0 = self.own
        return z0, y[:, y0 : y0 + self.buffer(2).shape[1]]

    def plan2(self, a: Any) -> Any:
        """Return a cached cuFFT plan over axes (1, 2) of arrays shaped like ``a`` (C order)."""
        value_type = "R2C" if self.r2c else "C2C"
        key = (a.shape, a.dtype.str, value_type)
        p = self.plans.get(key)
        if p is None:
            import cupyx.scipy.fft

            p = self.plans[key] = cupyx.scipy.fft.get_fft_plan(a, axes=(1, 2), value_type=value_type)
        return p

    def zfft(self, a: Any, out: Any, inverse: bool, lo: int = 0, hi: int | None = None, scale: float = 1.0) -> None:
        """Run cuFFT along axis 0 (Z) of Y rows ``lo:hi`` of ``a`` into ``out`` (may be ``a``), then ``scale``.

        For lengths our kernel does not take. Both are X-fastest Z-pencils shaped alike;
        the plan (strided along Z, batched over the rows and X at unit distance) reads and
        writes through the views' pointers.
        """
        from cupy.cuda import cufft

        nz, ny, nx = a.shape
        hi = ny if hi is None else hi
        src, dst = a[:, lo:hi], out[:, lo:hi]
        key = ("z", a.shape, a.dtype.str, hi - lo)
        p = self.plans.get(key)
        if p is None:
            t = cufft.CUFFT_Z2Z if a.dtype == np.complex128 else cufft.CUFFT_C2C
            # cufftPlanMany's arguments, as CuPy's own N-D planning passes them.
            p = self.plans[key] = cufft.PlanNd((nz,), (nz,), ny * nx, 1, (nz,), ny * nx, 1, t, (hi - lo) * nx, "C", 0, None)
        p.fft(src, dst, cufft.CUFFT_INVERSE if inverse else cufft.CUFFT_FORWARD)
        if scale != 1.0:
            dst *= scale

    def _slabs(self, n: int) -> tuple[Any, Any, list[tuple[Any, int]], Any]:
        """Cut ``n`` cells into slabs: the current stream, the second (ordered after it), ``(event, end)`` per slab, a spare event."""
        cp = self.cupy
        main = cp.cuda.get_current_stream()
        if self.side is None:
            self.side = cp.cuda.Stream(non_blocking=True)
        k = min(self.chunks, n)
        while len(self.events) < k + 1:
            self.events.append(cp.cuda.Event(block=False, disable_timing=True))
        edge = self.events[k]
        edge.record(main)
        self.side.wait_event(edge)  # earlier work on the stream: the buffers are free
        return main, self.side, [(self.events[j], n * (j + 1) // k) for j in range(k)], edge

    def streamed(self, n: int, step: Any, move: Any) -> None:
        """Run ``step(lo, hi)`` in slabs of ``n`` cells, each feeding ``move`` as it is done.

        The steps run on the current stream, each followed by an event; ``move(stream,
        marks)`` (a transpose with those ``input_ready`` marks) runs on a second stream,
        and the current stream then waits for it.
        """
        main, side, marks, edge = self._slabs(n)
        lo = 0
        for e, hi in marks:
            step(lo, hi)
            e.record(main)
            lo = hi
        move(side.ptr, marks)
        edge.record(side)
        main.wait_event(edge)

    def landing(self, n: int, move: Any, step: Any) -> None:
        """Run ``step(lo, hi)`` in slabs of ``n`` cells, each as ``move`` has written it.

        ``move(stream, marks)`` (a transpose with those ``output_ready`` marks) runs on a
        second stream, recording each slab's event once the slab has landed; the steps run
        on the current stream, each after its event, which then waits for the transpose.
        """
        main, side, marks, edge = self._slabs(n)
        move(side.ptr, marks)
        lo = 0
        for e, hi in marks:
            main.wait_event(e)
            step(lo, hi)
            lo = hi
        edge.record(side)
        main.wait_event(edge)

    def forward(self, a: Any, out: Any, in_place: bool, scale: float) -> Any:
        """Transform forward into the Z-pencil: our buffer (``in_place``), ``out``, or a new array.

        Where our kernel takes the Z length, the exchange leaves this rank's own cells in
        the Y-pencil (``own_cells=False``) and the FFT along Z reads them there, with
        ``scale`` fused; otherwise cuFFT runs along Z and ``scale`` multiplies each slab
        right after its 2-D FFT, beside the exchange of the slabs before it.
        """
        from cupy.cuda import cufft

        y, z = self.buffer(1), self.buffer(2)
        dst = z if in_place else self.cupy.empty_like(z) if out is None else out
        z0, own = self.own_cells(y)
        kernel = self.kernel.takes(z, dst, own)

        def fft2(lo: int, hi: int) -> None:
            self.plan2(a[lo:hi]).fft(a[lo:hi], y[lo:hi], cufft.CUFFT_FORWARD)
            if scale != 1.0 and not kernel:
                y[lo:hi] *= scale

        def move(st: int, marks: list[tuple[Any, int]]) -> None:
            self.grid.transpose_y_to_z(y, z, stream=st, input_ready=marks, own_cells=not kernel)

        self.streamed(y.shape[0], fft2, move)
        if kernel:
            self.kernel(z, dst, False, scale, a_rows=(z0, own))
        else:
            self.zfft(z, dst, False)
        return dst

    def backward_planes(self, a: Any, out: Any, transposed: bool, stream: int | None, scale: float, fft2: Any) -> Any:
        """Run the inverse FFT along Z, Z→Y and ``fft2(y_slab, out_slab)`` (the 2-D inverse FFTs) of ``a`` into ``out``; return ``out``.

        The FFT along Z runs whole, scaled (our kernel writes this rank's own cells into the
        Y-pencil, and the exchange leaves them alone; otherwise cuFFT, and the exchange
        copies them). The exchange then lands in slabs of Z planes of the Y-pencil, and
        each slab's 2-D FFTs start as it has landed, beside the landing of the next.
        """
        y, z = self.buffer(1), self.buffer(2)
        src = a if transposed else self.grid.transpose_y_to_z(a, z, stream=stream)
        z0, own = self.own_cells(y)
        kernel = self.kernel.takes(src, z, own)
        if kernel:
            self.kernel(src, z, True, scale, out_rows=(z0, own))
        else:
            self.zfft(src, z, True, 0, None, scale)

        def move(st: int, marks: list[tuple[Any, int]]) -> None:
            self.grid.transpose_z_to_y(z, y, stream=st, output_ready=marks, output_ready_axis=2, own_cells=not kernel)

        self.landing(y.shape[0], move, lambda lo, hi: fft2(y[lo:hi], out[lo:hi]))
        return out

    def backward(self, a: Any, transposed: bool, stream: int | None, scale: float) -> Any:
        """Run the inverse FFT along Z and Z→Y of the spectral pencil ``a``; return the Y-pencil (a buffer of ours).

        The FFT along Z runs in slabs of Y rows, each scaled as it is transformed, beside
        the exchange of the slabs before it. Where our kernel takes the Z length it writes
        this rank's own cells straight into the Y-pencil, scale fused, and the exchange
        leaves them alone (``own_cells=False``); otherwise cuFFT and a scale per slab.
        """
        y, z = self.buffer(1), self.buffer(2)
        src = a if transposed else self.grid.transpose_y_to_z(a, z, stream=stream)
        z0, own = self.own_cells(y)
        kernel = self.kernel.takes(src, z, own)

        def step(lo: int, hi: int) -> None:
            if kernel:
                self.kernel(src[:, lo:hi], z[:, lo:hi], True, scale, out_rows=(z0, own[:, lo:hi]))
            else:
                self.zfft(src, z, True, lo, hi, scale)

        def move(st: int, marks: list[tuple[Any, int]]) -> None:
            self.grid.transpose_z_to_y(z, y, stream=st, input_ready=marks, input_ready_axis=1, own_cells=not kernel)

        self.streamed(z.shape[1], step, move)
        return y
