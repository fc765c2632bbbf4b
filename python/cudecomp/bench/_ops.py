"""What one configuration runs: transposes, halo updates, CUDA-graph replays, FFT plans, the autotuner."""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp import HaloCommBackend, TransposeCommBackend

from ..fft import FFT, Kind
from ._baselines import fft_one_device
from ._common import DTYPES, HALO_OPS, OPS, Case, Row, config, pct_of
from ._measure import Session, off_rank_bytes


def autotune(s: Session, gdims: tuple[int, int, int], dname: str, ac: bool) -> Row:
    """Run the autotuner (process grid and transpose backend, all four transposes).

    Returns its choice as a row whose ``ms`` is the wall time of the whole search.
    """
    opts = cudecomp.GridDescAutotuneOptions()
    opts.dtype = DTYPES[dname]
    opts.autotune_transpose_backend = True
    cfg = config(gdims, (0, 0), TransposeCommBackend.MPI_P2P, ac)
    comm = s.comm
    comm.Barrier()
    t0 = time.perf_counter()
    try:
        grid = s.handle.create_grid(cfg, opts)
    except cudecomp.CudecompError as e:  # e.g. no process grid without empty pencils: refused on every rank
        return Row("tune", gdims, (0, 0), "", dname, ac, note=f"skipped: {type(e).__name__}: {e}")
    took = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    chosen = grid.config
    row = Row(
        "tune",
        gdims,
        (int(chosen.pdims[0]), int(chosen.pdims[1])),
        TransposeCommBackend(int(chosen.transpose_comm_backend)).name,
        dname,
        ac,
        ms=took * 1e3,
        note=f"autotuner chose {TransposeCommBackend(int(chosen.transpose_comm_backend)).name} on "
        f"{chosen.pdims[0]}x{chosen.pdims[1]}; search took {took:.2f} s",
    )
    grid.destroy()
    return row


def with_ratios(base: dict[str, float], seconds: float) -> dict[str, float]:
    """Baselines ``<name>_ms`` with, for each, ``ratio_vs_<name>``: our time over the baseline's."""
    return {**base, **{f"ratio_vs_{k[:-3]}": seconds * 1e3 / v for k, v in base.items() if v > 0}}


def run_config(s: Session, case: Case, ac: bool, bname: str, base: dict[str, float]) -> list[Row]:
    """Measure the transposes and halo updates of ``case`` on backend ``bname``, layout ``ac`` (collective).

    ``base``: the peer baselines of X->Y (``xy_baselines``), attached to the X->Y row.
    """
    args, comm = s.args, s.comm
    rows: list[Row] = []
    # The halo backend of the same family as the transpose backend.
    halo_of = {
        "MPI_P2P_PL": "MPI_BLOCKING",
        "NCCL": "NCCL",
        "NCCL_PL": "NCCL",
        "DIRECT": "DIRECT",
        "NVSHMEM": "NVSHMEM",
        "NVSHMEM_PL": "NVSHMEM_BLOCKING",
        "NVSHMEM_SM": "NVSHMEM",
    }
    halo_backend = HaloCommBackend[halo_of.get(bname, "MPI")]
    try:
        grid = s.handle.create_grid(config(case.gdims, case.pdims, TransposeCommBackend[bname], ac, halo_backend))
    except cudecomp.CudecompError as e:
        return [case.row("all", bname, ac, note=f"skipped: {type(e).__name__}: {e}")]
    try:
        infos = [grid.get_pencil_info(a) for a in range(3)]
        if comm.allreduce(any(i.size == 0 for i in infos), op=MPI.LOR):
            return [case.row("all", bname, ac, note=f"skipped: {empty_pencils(case)}")]
        k = args.fields
        # Only the pencils the operations move: three of the largest grids may not fit.
        used = {axis for key in args.ops if key in OPS for axis in OPS[key][1:]}
        bufs: list[Any] = [pencil_array(s, grid, a, case.np_dtype, k if k > 1 else None) if a in used else None for a in range(3)]
        for key in args.ops:
            if key not in OPS:
                continue
            name, a, b = OPS[key]
            fn = getattr(grid, name)
            inp, out = bufs[a], bufs[b]
            call = functools.partial(fn, inp, out)
            batch_base: dict[str, float] = {}
            try:
                if k > 1:
                    med, mn, batch_base = batch_timed(s, case, grid, key, bname, ac, halo_backend, call)
                else:
                    med, mn = s.time(call)
            except cudecomp.CudecompError as e:  # refused alike on every rank (checked before any exchange)
                rows.append(case.row(key, bname, ac, note=f"skipped: {type(e).__name__}: {e}"))
                continue
            off = off_rank_bytes(grid, a, b, case.itemsize)
            distributed = comm.allreduce(off > 0, op=MPI.LOR)
            # A local transpose is compared with a copy of the pencil's bytes.
            local_bytes = infos[a].size * case.itemsize * k
            row = s.measured_row(case.row(key, bname, ac), med, mn, k * off, local_bytes, distributed)
            if batch_base:
                row.baseline = with_ratios(batch_base, med)
            # The baselines are distributed X->Y transposes of the default layout: compare
            # only with the same (a local X->Y has none, see xy_baselines).
            if key == "xy" and not ac and distributed and base:
                row.baseline = with_ratios(base, med)
            if s.floor is not None and distributed:
                floor = {"copy_floor_ms": s.floor.ms(s, inp.shape, case.np_dtype)}
                row.baseline = {**row.baseline, **with_ratios(floor, med)}
            rows.append(row)
        if "halo" in args.ops and any(args.halo):
            rows += halo_rows(s, case, grid, ac, halo_backend)
        if args.jax:
            rows += jax_rows(s, grid, bufs, rows)
        del bufs
    finally:
        grid.destroy()
    if args.graph:
        cfg = config(case.gdims, case.pdims, TransposeCommBackend[bname], ac, halo_backend)
        rows += graph_rows(s, cfg, case.np_dtype, rows)
    return rows


def _prepare_jax(s: Session) -> None:
    """Start JAX for the ``--jax`` rows and give it room beside the eager rows' arrays.

    XLA would otherwise claim most of the GPU when it starts; the array module's unused
    cached blocks are returned to the device for XLA's allocations.
    """
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    jax.config.update("jax_enable_x64", True)
    pool = getattr(s.xp.m, "get_default_memory_pool", None)
    if pool is not None:
        pool().free_all_blocks()


def _as_jax(s: Session, a: Any) -> Any:
    """Return the eager array ``a`` as a JAX array: on the GPU the same memory (DLPack), on the CPU a copy.

    Sharing the GPU's array leaves room for the jitted call's output beside the eager
    rows' pencils (a 1024^3 complex128 X->Y on one 80 GB GPU).
    """
    import jax
    import jax.numpy as jnp

    return jax.dlpack.from_dlpack(a) if s.xp.gpu else jnp.asarray(a)


def _finished(f: Callable[[Any], Any], x: Any) -> Any:
    """Call the compiled ``f`` on ``x`` and wait for its result."""
    return f(x).block_until_ready()


def _waited(s: Session, calls: Sequence[Callable[[], object]]) -> None:
    """Make the eager ``calls`` one after another and wait for the last one's result."""
    for call in calls:
        call()
    s.xp.sync()


#: Programs per timed loop of row ``xyz-jax-loop`` (and eager steps per loop beside it).
STEPS_PER_LOOP = 10


def jax_rows(s: Session, grid: cudecomp.GridDesc, bufs: list[Any], eager: list[Row]) -> list[Row]:
    """``--jax``: each eager transpose row again as a jitted ``cudecomp.jax`` operation on JAX arrays (collective).

    Rows ``op-jax`` time one call of the compiled program (its output allocated by XLA,
    as a JAX program's are) to its result, beside the eager row's time (``eager_ms``) and
    the eager call timed as the jitted one is, to its result (``eager_waited_ms``: the
    stream waited for), the two timed in turn within each repetition. Where ``xy`` and
    ``yz`` were timed, row ``xyz-jax`` times one program of both, beside the two eager
    calls' times added and the two eager calls waited for together, timed in turn with
    it (a solver's step is a program of several calls); row ``xyz-jax-loop`` times that
    program called ``STEPS_PER_LOOP`` times back to back (per call) beside the two eager
    calls made as often (``eager_loop_ms``, per step), the two loops timed in turn.
    """
    _prepare_jax(s)
    import jax

    import cudecomp.jax as cj

    out: list[Row] = []
    for row in eager:
        if row.note or row.op not in OPS:
            continue
        name, a, b = OPS[row.op]
        eager_call = functools.partial(_waited, s, [functools.partial(getattr(grid, name), bufs[a], bufs[b])])
        f = jax.jit(functools.partial(getattr(cj, name), grid))
        x = _as_jax(s, bufs[a])
        (waited, _), (med, mn) = s.time_in_turn(eager_call, functools.partial(_finished, f, x))
        base = with_ratios({"eager_ms": row.ms, "eager_waited_ms": waited * 1e3}, med)
        gbps = row.gbps_per_rank * row.ms / (med * 1e3)
        out.append(
            replace(
                row,
                op=f"{row.op}-jax",
                ms=med * 1e3,
                ms_min=mn * 1e3,
                gbps_per_rank=gbps,
                pct_of_ceiling=pct_of(gbps, row.ceiling_gbps),
                baseline=base,
            )
        )
    timed = {row.op: row for row in eager if not row.note and row.op in OPS}
    if "xy" in timed and "yz" in timed:
        xy, yz = timed["xy"], timed["yz"]
        calls = [functools.partial(grid.transpose_x_to_y, bufs[0], bufs[1]), functools.partial(grid.transpose_y_to_z, bufs[1], bufs[2])]
        f = jax.jit(lambda v: cj.transpose_y_to_z(grid, cj.transpose_x_to_y(grid, v)))
        x = _as_jax(s, bufs[0])
        (waited, _), (med, mn) = s.time_in_turn(functools.partial(_waited, s, calls), functools.partial(_finished, f, x))
        out.append(
            replace(
                xy,
                op="xyz-jax",
                ms=med * 1e3,
                ms_min=mn * 1e3,
                gbps_per_rank=math.nan,
                pct_of_ceiling=math.nan,
                ceiling="",
                baseline=with_ratios({"eager_xy_then_yz_ms": xy.ms + yz.ms, "eager_waited_ms": waited * 1e3}, med),
            )
        )

        # A solver's steps run back to back: each program is dispatched while the last one
        # still runs, as each eager call is enqueued behind the last.
        eager_steps = functools.partial(_waited, s, calls * STEPS_PER_LOOP)

        def jitted_steps() -> None:
            y = None
            for _ in range(STEPS_PER_LOOP):
                y = f(x)
            jax.block_until_ready(y)

        (eager_loop, _), (loop, loop_min) = s.time_in_turn(eager_steps, jitted_steps)
        out.append(
            replace(
                out[-1],
                op="xyz-jax-loop",
                ms=loop / STEPS_PER_LOOP * 1e3,
                ms_min=loop_min / STEPS_PER_LOOP * 1e3,
                baseline=with_ratios({"eager_loop_ms": eager_loop / STEPS_PER_LOOP * 1e3}, loop / STEPS_PER_LOOP),
            )
        )
    return out


def jax_fft_rows(s: Session, plan: FFT, eager: list[Row], waited: list[float]) -> list[Row]:
    """``--jax``: the eager forward and backward rows of ``plan`` again as jitted ``cudecomp.jax`` FFTs (collective).

    Rows ``fft-jax`` and ``ifft-jax`` (with the eager row's tag) time one call of the
    compiled transform to its result, beside the eager row's time (``eager_ms``) and the
    eager call waited for (``waited``, seconds per row: ``eager_waited_ms``).
    """
    _prepare_jax(s)
    import jax
    import jax.numpy as jnp

    import cudecomp.jax as cj

    forward, backward = (cj.fft, cj.ifft) if plan.kind == "c2c" else (cj.rfft, cj.irfft)
    f = jax.jit(functools.partial(forward, plan))
    b = jax.jit(functools.partial(backward, plan))
    x = jnp.full(tuple(plan.input_info.array_shape), 2, plan.input_dtype)
    y = _finished(f, x)
    out: list[Row] = []
    for row, fn, arg, w in zip(eager, (f, b), (x, y), waited, strict=True):
        med, mn = s.time(functools.partial(_finished, fn, arg))
        op, _, tag = row.op.partition("-")
        name = f"{op}-jax" + (f"-{tag}" if tag else "")
        base = with_ratios({"eager_ms": row.ms, "eager_waited_ms": w * 1e3}, med)
        out.append(replace(row, op=name, ms=med * 1e3, ms_min=mn * 1e3, baseline=base))
    del x, y
    return out


def pencil_array(s: Session, grid: cudecomp.GridDesc, axis: int, dtype: Any, fields: int | None) -> Any:
    """Return an ``axis``-pencil of ones (a batch of ``fields`` pencils where given), allocated as ``--alloc`` says.

    ``library``: the library's own arrays (on DIRECT grids: node-shared host memory,
    exported device memory); otherwise the array module's.
    """
    if s.args.alloc == "library":
        a = grid.empty_pencil(axis, dtype, fields=fields)
        a[...] = 1
        return a
    shape = grid.get_pencil_info(axis).array_shape
    return s.xp.m.ones(shape if fields is None else (fields, *shape), dtype)


def batch_timed(
    s: Session,
    case: Case,
    grid: cudecomp.GridDesc,
    key: str,
    bname: str,
    ac: bool,
    halo_backend: HaloCommBackend,
    batched: Callable[[], object],
) -> tuple[float, float, dict[str, float]]:
    """Time the batched call of ``--fields`` K fields in turn with what it is compared with (collective).

    K calls of one field each on ``grid``, and one call on the grid K times longer along Z
    (the same bytes in one exchange of one field: the bound). Returns the batch's (median,
    min) seconds and the baselines' medians in ms.
    """
    k, (name, a, b) = s.args.fields, OPS[key]
    ins = [pencil_array(s, grid, a, case.np_dtype, None) for _ in range(k)]
    outs = [pencil_array(s, grid, b, case.np_dtype, None) for _ in range(k)]
    fn = getattr(grid, name)

    def separate() -> None:
        for x, y in zip(ins, outs, strict=True):
            fn(x, y)

    gx, gy, gz = case.gdims
    long = s.handle.create_grid(config((gx, gy, gz * k), case.pdims, TransposeCommBackend[bname], ac, halo_backend))
    try:
        x, y = (pencil_array(s, long, p, case.np_dtype, None) for p in (a, b))
        timed = s.time_in_turn(batched, separate, functools.partial(getattr(long, name), x, y))
    finally:
        long.destroy()
    (med, mn), (sep, _), (bound, _) = timed
    return med, mn, {"separate_calls_ms": sep * 1e3, "one_exchange_bound_ms": bound * 1e3}


def empty_pencils(case: Case) -> str:
    """Why a configuration with empty pencils is skipped."""
    g, p = "x".join(map(str, case.gdims)), "x".join(map(str, case.pdims))
    return f"some rank owns no cells of a pencil ({g} over {p} ranks); transposes and halo updates need every pencil non-empty"


def graph_rows(s: Session, cfg: cudecomp.GridDescConfig, dtype: Any, eager: list[Row]) -> list[Row]:
    """``--graph N``: N operations of each eager row captured into one CUDA graph (collective).

    Each row ``op-graph`` times a replay of the graph, wall clock per operation, against
    the same N operations called eagerly back to back (``eager_wall_ms``: the host path
    and the GPU work overlapping as in a solver's loop). A fresh handle serves the
    captures, so that the frozen workspace of a captured handle (docs/graphs.md) does not
    constrain the rest of the run. With ``--fields K`` the graph holds batched operations
    of K fields, beside the replay of the same graph of one field (``single_replay_ms``).
    """
    args, comm, m = s.args, s.comm, s.xp.m
    h = tuple(args.halo)
    periods = (True, True, True)
    out: list[Row] = []
    with cudecomp.Handle(comm) as handle, handle.create_grid(cfg) as grid:
        stream = m.cuda.Stream(non_blocking=True)

        def arrays(fields: int) -> tuple[list[Any], Any]:
            lead = (fields,) if fields > 1 else ()
            bufs = [m.ones((*lead, *grid.get_pencil_info(a).array_shape), dtype) for a in range(3)]
            return bufs, m.ones((*lead, *grid.get_pencil_info(0, h).array_shape), dtype)

        batched = arrays(args.fields)
        single = arrays(1) if args.fields > 1 else batched

        def call(op: str, on: tuple[list[Any], Any]) -> Callable[[], None]:
            bufs, halo = on
            if op in OPS:
                name, a, b = OPS[op]
                return functools.partial(getattr(grid, name), bufs[a], bufs[b], stream=stream)
            dims = halo_dims(op)

            def update() -> None:
                for d in dims:
                    grid.update_halos_x(halo, h, periods, d, stream=stream)

            return update

        for row in eager:
            if row.note or not (row.op in OPS or row.op in HALO_OPS):
                continue
            timed = replay_times(comm, stream, call(row.op, batched), args.graph, args.warmup, args.reps)
            one = timed if single is batched else replay_times(comm, stream, call(row.op, single), args.graph, args.warmup, args.reps)
            if isinstance(timed, str) or isinstance(one, str):
                why = timed if isinstance(timed, str) else one
                out.append(replace(row, op=f"{row.op}-graph", note=f"graph skipped: {why}", baseline={}))
                continue
            gbps = row.gbps_per_rank * row.ms / (timed["replay"] * 1e3)
            base = {
                "eager_wall_ms": timed["eager"] * 1e3,
                "ratio_vs_eager_wall": timed["replay"] / timed["eager"],
                "eager_host_ms": timed["eager_host"] * 1e3,
                "replay_host_ms": timed["replay_host"] * 1e3,
            }
            if single is not batched:
                base["single_replay_ms"] = one["replay"] * 1e3
                base["ratio_vs_single_replay"] = timed["replay"] / one["replay"]
            ms, ms_min, pct = timed["replay"] * 1e3, timed["replay_min"] * 1e3, pct_of(gbps, row.ceiling_gbps)
            out.append(replace(row, op=f"{row.op}-graph", ms=ms, ms_min=ms_min, gbps_per_rank=gbps, pct_of_ceiling=pct, baseline=base))
    return out


def replay_times(comm: MPI.Comm, s: Any, fn: Callable[[], None], n: int, warmup: int, reps: int) -> dict[str, float] | str:
    """Seconds per operation of ``n`` calls of ``fn``, eager and as a replayed graph, or why it could not be captured.

    Keys: ``replay`` and ``replay_min`` (wall clock of a replay, launch to the stream's
    completion), ``replay_host`` (the launch call alone: the host's share), ``eager``
    and ``eager_host`` likewise for the calls made one by one; each divided by ``n``,
    the median per rank, then the slowest rank. Collective; a capture refused on any
    rank is abandoned on every rank (the captured work is never launched). The graph is
    dropped on return, before its grid and handle go.
    """

    def eager() -> None:
        for _ in range(n):
            fn()

    def timed(run: Callable[[], object]) -> tuple[float, float]:
        comm.Barrier()
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        s.synchronize()
        return (time.perf_counter() - t0) / n, (t1 - t0) / n

    def slowest(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
        walls, hosts = [t[0] for t in samples], [t[1] for t in samples]
        meds = (float(np.median(walls)), min(walls), float(np.median(hosts)))
        return tuple(comm.allreduce(v, op=MPI.MAX) for v in meds)  # type: ignore[return-value]

    for _ in range(max(warmup, 1)):  # a capture needs one eager run first
        eager()
    s.synchronize()
    e_med, _, e_host = slowest([timed(eager) for _ in range(reps)])
    why = ""
    s.begin_capture()
    try:
        eager()
    except Exception as e:  # a refused capture, or any failure: every rank must still reach the agreement
        why = f"{type(e).__name__}: {e}"
    finally:
        try:
            graph = s.end_capture()
        except Exception as e:  # an invalidated capture
            why = why or f"{type(e).__name__}: {e}"
    why = comm.allreduce([why] if why else [], op=MPI.SUM)
    if why:
        return why[0]
    graph.launch(s)  # replay warm-up (graph upload)
    s.synchronize()
    g_med, g_min, g_host = slowest([timed(functools.partial(graph.launch, s)) for _ in range(reps)])
    return {"replay": g_med, "replay_min": g_min, "replay_host": g_host, "eager": e_med, "eager_host": e_host}


def halo_dims(op: str) -> list[int]:
    """Return the dimensions a halo row updates: all three for ``halo``, one for ``hx``, ``hy``, ``hz``."""
    return [0, 1, 2] if op == "halo" else ["xyz".index(op[1])]


def halo_rows(s: Session, case: Case, grid: cudecomp.GridDesc, ac: bool, halo_backend: HaloCommBackend) -> list[Row]:
    """Time the periodic halo updates of ``grid``'s X-pencils: all three dimensions, then each (collective).

    With ``--fields K`` the update is of a batch of K pencils in one exchange, beside K
    updates of one pencil each (``separate_calls_ms``).
    """
    comm = s.comm
    h = tuple(s.args.halo)
    k = s.args.fields
    info = grid.get_pencil_info(0, h)
    data = s.xp.m.ones((k, *info.array_shape) if k > 1 else info.array_shape, case.np_dtype)
    singles = [s.xp.m.ones(info.array_shape, case.np_dtype) for _ in range(k)] if k > 1 else []
    periods = (True, True, True)
    faces = [2 * h[d] * math.prod(info.shape[p] for p in range(3) if info.order[p] != d) * case.itemsize * k for d in range(3)]
    remote = [comm.allreduce(grid.get_shifted_rank(0, d, 1, True) != comm.rank, op=MPI.LOR) for d in range(3)]

    def halo_row(op: str, dims: list[int]) -> Row:
        """Bandwidth from the faces that leave the rank, or (all local) from the faces copied."""

        def update(arrays: list[Any]) -> None:
            for a in arrays:
                for d in dims:
                    grid.update_halos_x(a, h, periods, d)

        ident = case.row(op, halo_backend.name, ac, halo=(h[0], h[1], h[2]))
        try:
            # A batch in turn with its separate updates, as batched transposes are timed.
            calls = [functools.partial(update, arrays) for arrays in ([data], singles) if arrays]
            timed = s.time_in_turn(*calls)
        except cudecomp.CudecompError as e:  # e.g. an extent beyond a rank's cells: refused alike on every rank
            return replace(ident, note=f"skipped: {type(e).__name__}: {e}")
        off = sum(faces[d] for d in dims if remote[d])
        distributed = any(remote[d] for d in dims)
        (med, mn), *separate = timed
        row = s.measured_row(ident, med, mn, off, sum(faces[d] for d in dims), distributed)
        if separate:
            row.baseline = with_ratios({"separate_calls_ms": separate[0][0] * 1e3}, med)
        return row

    ops = ["halo"] + [f"h{'xyz'[d]}" for d in range(3) if h[d] > 0]
    return [halo_row(op, halo_dims(op)) for op in ops]


def fft_kind(dname: str) -> Kind:
    """Return the FFT kind a dtype selects: real types ``r2c``, complex types ``c2c``."""
    return "r2c" if dname in ("f32", "f64") else "c2c"


def fft_rows(s: Session, case: Case, bname: str, one_device: dict[tuple[Any, ...], dict[str, float]]) -> list[Row]:
    """Time a ``cudecomp.fft`` plan's forward and backward transform (collective).

    ``f32``/``f64`` run ``r2c`` plans, ``c64``/``c128`` ``c2c`` plans, with the spectral
    output left transposed (``--fft-out transposed``, the fast path) or in the input's
    pencil (``natural``), with ``--fft-norm``'s norm. Each row carries, as baseline, the same transform of the whole
    global array on one device (rank 0: ``cupy.fft`` on its GPU, or the plan's CPU
    library), measured once per grid and dtype in the same run.
    """
    kind = fft_kind(case.dname)
    rows: list[Row] = []
    for transposed in {"transposed": [True], "natural": [False], "both": [True, False]}[s.args.fft_out]:
        tag = "" if transposed else "natural"
        try:
            backend = TransposeCommBackend[bname]
            plan = FFT(
                s.handle,
                case.gdims,
                case.pdims,
                kind=kind,
                dtype=case.np_dtype,
                norm=s.args.fft_norm,
                transposed_out=transposed,
                backend=backend,
            )
        except cudecomp.CudecompError as e:
            rows.append(case.row("fft" + (f"-{tag}" if tag else ""), bname, False, note=f"skipped: {type(e).__name__}: {e}"))
            continue
        key = (case.gdims, case.dname)
        try:
            if s.args.baselines and key not in one_device:
                one_device[key] = fft_one_device(s, plan)
            a = plan.zeros_input()
            a += 1
            spec = plan.forward(a)
            back = plan.empty_input()
            calls = (("fft", functools.partial(plan.forward, a, spec)), ("ifft", functools.partial(plan.backward, spec, back)))
            forward_ms = math.nan
            waited: list[float] = []  # ``--jax``: each call waited for, as a jitted call is
            for op, fn in calls:
                if s.args.jax:
                    waited.append(s.time(functools.partial(_waited, s, [fn]))[0])
                med, mn = s.time(fn)
                base = {k[len(op) + 1 :]: v for k, v in one_device.get(key, {}).items() if k.startswith(op + ":")}
                row = case.row(op + (f"-{tag}" if tag else ""), bname, False, ms=med * 1e3, ms_min=mn * 1e3)
                row.distributed = s.comm.size > 1
                row.baseline = with_ratios(base, med)
                rows.append(row)
                forward_ms = row.ms if op == "fft" else forward_ms
            del a, spec, back, calls, fn  # the calls hold the arrays: XLA needs their room
            if s.args.jax:
                rows += jax_fft_rows(s, plan, rows[-2:], waited)
            if s.args.fft_stages and transposed:
                rows += stage_rows(s, case, bname, plan, forward_ms)
        finally:
            plan.destroy()
    return rows


#: The stages of a transposed-output forward FFT per schedule, in order: a local FFT
#: (name, pencil, global axes transformed; ``in``: the plan's input, into the spectral
#: X-pencil) or a transpose (name, from pencil, to pencil) of the spectral grid. As in
#: ``FFT.forward``; the r2c stage halves X, the last of its axes.
FFT_STAGES: dict[str, list[tuple[str, Any, Any]]] = {
    "local": [("fft-zyx", "in", (2, 1, 0))],
    "slab-xy": [("fft-yx", "in", (1, 0)), ("yz", 1, 2), ("fft-z", 2, (2,))],
    "slab-yz": [("fft-x", "in", (0,)), ("xy", 0, 1), ("fft-zy", 1, (2, 1))],
    "pencil": [("fft-x", "in", (0,)), ("xy", 0, 1), ("fft-y", 1, (1,)), ("yz", 1, 2), ("fft-z", 2, (2,))],
}


def array_axes(info: cudecomp.PencilInfo, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Return the axes of a pencil's array (C order: slowest first) that hold the global axes ``dims``, in their order."""
    return tuple(2 - list(info.order).index(d) for d in dims)


def stage_rows(s: Session, case: Case, bname: str, plan: FFT, forward_ms: float) -> list[Row]:
    """``--fft-stages``: each stage of ``plan``'s forward transform timed alone, back to back (collective).

    Rows ``stage-<name>`` (``stage-fft-yx``, ``stage-yz``, ...) with the whole forward's
    time as baseline ``fft_ms`` (``ratio_vs_fft``: the stage's share). The stages run on
    arrays of zeros (a transform of zeros stays zero however often it runs), in place
    where the plan transforms in place; a streamed plan overlaps what these rows time one
    after the other.
    """
    G = plan.spectral_grid
    local = plan._local  # the plan's local FFT library, as its own stages use it
    m = s.xp.m
    infos = [G.get_pencil_info(a) for a in range(3)]
    pencils = [m.zeros(i.array_shape, plan.output_dtype) for i in infos]
    src = plan.zeros_input()
    r2c = plan.kind == "r2c"
    rows: list[Row] = []
    for name, frm, to in FFT_STAGES[plan.schedule]:
        distributed = False
        if frm == "in":
            axes = array_axes(plan.input_info, to)
            if r2c:
                fn: Callable[[], object] = functools.partial(local.r2c, src, axes, pencils[0])
            else:
                fn = functools.partial(local.c2c, src, axes, False, pencils[0])
        elif isinstance(to, tuple):
            axes = tuple(sorted(array_axes(infos[frm], to)))
            fn = functools.partial(local.c2c, pencils[frm], axes, False, None, True)
        else:
            fn = functools.partial(getattr(G, OPS[name][0]), pencils[frm], pencils[to])
            off = off_rank_bytes(G, frm, to, np.dtype(plan.output_dtype).itemsize)
            distributed = s.comm.allreduce(off > 0, op=MPI.LOR)
        med, mn = s.time(fn)
        row = case.row(f"stage-{name}", bname, False, ms=med * 1e3, ms_min=mn * 1e3, distributed=distributed)
        row.baseline = with_ratios({"fft_ms": forward_ms}, med)
        rows.append(row)
    del pencils, src
    return rows
