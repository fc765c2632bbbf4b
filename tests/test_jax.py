"""cudecomp.jax: the operations as JAX primitives, against the eager (NumPy) path.

Every primitive equals ``GridDesc``'s own operation bit for bit, inside ``jax.jit``, on
every process grid of the rank count; ``jax.test_util.check_grads`` passes for each
(orders 1 and 2, forward and reverse); ``vmap`` equals a loop and moves the batch in one
exchange; a jitted step traces once; and misuse raises when traced (or, for a program
compiled before its grid was destroyed, when it runs) on every rank, never a hang.
The FFI structs the handlers declare are compared with the header jaxlib ships.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import cudecomp
from cudecomp import DataType
from oracle import NUMPY_DTYPES, TRANSPOSES, factor_pairs, make

NRANKS = MPI.COMM_WORLD.size
# The rank counts where the primitives' cases run: one rank, the two process grids of
# two, and the 2x2 grid of four. Elsewhere the module is skipped before JAX is imported,
# which every rank of a job would otherwise pay for at collection.
JAX_RANKS = (1, 2, 4)
if NRANKS not in JAX_RANKS:
    pytest.skip(f"cudecomp.jax runs on {JAX_RANKS} ranks", allow_module_level=True)

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import cudecomp.jax as cj  # noqa: E402

pytestmark = [
    pytest.mark.mpi(ranks=JAX_RANKS),
]

if cudecomp.CPU_ONLY:
    xp = np
    host = np.asarray
else:  # the GPU variant's eager operations take device arrays
    import cupy as xp

    host = xp.asnumpy


def dev(x: Any) -> Any:
    """A copy of host array ``x`` where the variant's eager operations take it (host or device)."""
    return xp.array(x)


def eager(fn: Any, x: Any) -> np.ndarray:
    """``fn`` (an eager operation) of a copy of host array ``x``, as a host array."""
    return host(fn(dev(x)))


GDIMS = (7, 6, 9)
OPS = TRANSPOSES


@pytest.fixture(params=factor_pairs(NRANKS), ids=lambda p: f"{p[0]}x{p[1]}")
def grid(handle: cudecomp.Handle, request: pytest.FixtureRequest) -> Iterator[cudecomp.GridDesc]:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, request.param
    cfg.transpose_axis_contiguous = (False, True, True)
    with handle.create_grid(cfg) as g:
        yield g


def field(grid: cudecomp.GridDesc, axis: int, dtype: DataType, seed: int = 0) -> np.ndarray:
    """This rank's ``axis``-pencil of a random field (the same global field on every rank count)."""
    a = make(grid.get_pencil_info(axis), GDIMS, dtype)
    rng = np.random.default_rng(seed)
    scale = rng.standard_normal(1)[0]
    return (a * scale + seed).astype(a.dtype)


# -- JAX's multi-process model (conftest.py runs these first) --------------------------------


_DISTRIBUTED: list[bool] = []


@pytest.fixture
def distributed() -> None:
    """``jax.distributed`` over the MPI ranks: one CPU device per process, ``jax.devices()`` all of them.

    Started once per process, before JAX's backends (``conftest.py`` runs the tests that
    use it first).
    """
    import socket

    from jax._src import xla_bridge

    if _DISTRIBUTED:
        return
    if xla_bridge.backends_are_initialized():
        pytest.fail("JAX's backends started before jax.distributed: the tests that use it must run first")
    _DISTRIBUTED.append(True)
    port = None
    if MPI.COMM_WORLD.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = MPI.COMM_WORLD.bcast(port)
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=NRANKS, process_id=MPI.COMM_WORLD.rank)


SHARDED_GDIMS = (12, 12, 12)


def sharded_array(mesh: Any, local: np.ndarray, axis: int) -> Any:
    """The global array sharded as ``pencil_spec(axis)`` over ``mesh`` whose shard here is ``local`` (each rank's of one shape)."""
    from jax.sharding import NamedSharding

    spec = cj.pencil_spec(axis, local.ndim == 4)
    parts = {None: 1, **dict(mesh.shape)}
    shape = tuple(n * parts[split] for n, split in zip(local.shape, spec, strict=True))
    return jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, spec), [jax.device_put(local, jax.local_devices()[0])])


SHARDED_ONLY_CPU = pytest.mark.skipif(
    not cudecomp.CPU_ONLY, reason="the sharded model runs on the CPU variant (jax.distributed over CPU devices)"
)


@SHARDED_ONLY_CPU
def test_a_sharded_array_moves_as_its_pencils(handle: cudecomp.Handle, distributed: None) -> None:
    assert jax.device_count() == NRANKS and jax.local_device_count() == 1
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = SHARDED_GDIMS, factor_pairs(NRANKS)[len(factor_pairs(NRANKS)) // 2]
    with handle.create_grid(cfg) as g:
        mesh = cj.pencil_mesh(g)

        def global_array(local: np.ndarray, axis: int) -> Any:
            return sharded_array(mesh, local, axis)

        for name, a, _ in OPS:
            x = make(g.get_pencil_info(a), SHARDED_GDIMS, DataType.DOUBLE)
            for local in (x, np.stack([x, 3 * x])):
                y = jax.jit(lambda v, name=name: getattr(cj, name)(g, v, mesh=mesh))(global_array(local, a))
                (shard,) = y.addressable_shards
                want = np.stack([eager(getattr(g, name), f) for f in local]) if local.ndim == 4 else eager(getattr(g, name), local)
                assert np.array_equal(np.asarray(shard.data), want), name
        # A mesh that is not the process grid's raises on every rank.
        wrong = jax.sharding.Mesh(mesh.devices.T, ("rows", "cols")) if NRANKS > 1 else jax.sharding.Mesh(mesh.devices, ("cols", "rows"))
        with pytest.raises(cudecomp.InvalidUsageError, match="mesh"):
            cj.transpose_x_to_y(g, global_array(make(g.get_pencil_info(0), SHARDED_GDIMS, DataType.DOUBLE), 0), mesh=wrong)
    cfg.transpose_axis_contiguous = (True, False, False)
    with handle.create_grid(cfg) as g, pytest.raises(cudecomp.NotSupportedError, match="default layout"):
        cj.pencil_mesh(g)


@SHARDED_ONLY_CPU
def test_sharded_halo_updates_and_ffts_equal_the_per_process_ones(handle: cudecomp.Handle, distributed: None) -> None:
    from cudecomp.fft import FFT

    pdims = factor_pairs(NRANKS)[len(factor_pairs(NRANKS)) // 2]
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = SHARDED_GDIMS, pdims
    with handle.create_grid(cfg) as g:
        mesh = cj.pencil_mesh(g)
        # Each shard is a pencil with its halos and padding. The mesh and the shards are
        # the pencil's whichever dimension is updated: each pencil takes another one.
        for axis, name in enumerate(HALO_OPS):
            dim = (axis + 1) % 3
            x = halo_field(g, axis, 20 * axis + dim)
            op = jax.jit(lambda v, name=name, dim=dim: getattr(cj, name)(g, v, HALO, PERIODS, dim, padding=PADDING))
            for local in (x, np.stack([x, -x])):
                got = jax.jit(lambda v, name=name, dim=dim: getattr(cj, name)(g, v, HALO, PERIODS, dim, padding=PADDING, mesh=mesh))(
                    sharded_array(mesh, local, axis)
                )
                (shard,) = got.addressable_shards
                assert np.array_equal(np.asarray(shard.data), np.asarray(op(jnp.asarray(local)))), (name, dim)
        wrong = jax.sharding.Mesh(mesh.devices, ("cols", "rows"))
        with pytest.raises(cudecomp.InvalidUsageError, match="mesh"):
            cj.update_halos_x(g, sharded_array(mesh, halo_field(g, 0, 1), 0), HALO, PERIODS, 0, padding=PADDING, mesh=wrong)
    # The spectral grid's extents the process grid divides: X/2+1 = 8 for r2c.
    gdims = (14, *SHARDED_GDIMS[1:])
    for kind, forward, backward in (("c2c", cj.fft, cj.ifft), ("r2c", cj.rfft, cj.irfft)):
        with FFT(handle, gdims, pdims, kind=kind, norm="ortho") as plan:
            mesh = cj.pencil_mesh(plan.spectral_grid)
            x = real_space(plan, 8)
            # A batch's specs are a field's with the batch axis first, whatever the kind.
            for local in (x, np.stack([x, 2 * x]))[: 2 if kind == "c2c" else 1]:
                spectrum = jax.jit(lambda v, f=forward, p=plan, m=mesh: f(p, v, mesh=m))(sharded_array(mesh, local, 0))
                (shard,) = spectrum.addressable_shards
                alone = jax.jit(lambda v, f=forward, p=plan: f(p, v))(jnp.asarray(local))
                assert np.array_equal(np.asarray(shard.data), np.asarray(alone)), kind
                back = jax.jit(lambda v, f=backward, p=plan, m=mesh: f(p, v, mesh=m))(spectrum)
                (shard,) = back.addressable_shards
                assert np.array_equal(np.asarray(shard.data), np.asarray(jax.jit(lambda v, f=backward, p=plan: f(p, v))(alone))), kind
            with pytest.raises(TypeError, match="cudecomp.fft.FFT"):
                forward(plan.spectral_grid, sharded_array(mesh, x, 0), mesh=mesh)


@SHARDED_ONLY_CPU
def test_a_sharded_redistribution_equals_the_per_process_one(handle: cudecomp.Handle, distributed: None) -> None:
    from jax.sharding import NamedSharding

    # Process grids of different shapes (2x1 -> 1x2, 2x2 -> 1x4 ...): one mesh serves both.
    pairs = factor_pairs(NRANKS)
    cfg_a, cfg_b = cudecomp.GridDescConfig(), cudecomp.GridDescConfig()
    cfg_a.gdims, cfg_a.pdims = SHARDED_GDIMS, pairs[len(pairs) // 2]
    cfg_b.gdims, cfg_b.pdims = SHARDED_GDIMS, pairs[0]
    with handle.create_grid(cfg_a) as a, handle.create_grid(cfg_b) as b:
        mesh_a, mesh_b = cj.pencil_mesh(a), cj.pencil_mesh(b)
        with cj.Redistribution(handle, a.pencil(0), b.pencil(1)) as r:
            x = make(a.get_pencil_info(0), SHARDED_GDIMS, DataType.DOUBLE)
            for local in (x, np.stack([x, -x])):
                got = jax.jit(lambda v: r.run(v, mesh=mesh_a, out_mesh=mesh_b))(sharded_array(mesh_a, local, 0))
                assert got.sharding.is_equivalent_to(NamedSharding(mesh_b, cj.pencil_spec(1, local.ndim == 4)), local.ndim)
                (shard,) = got.addressable_shards
                assert np.array_equal(np.asarray(shard.data), np.asarray(jax.jit(r.run)(jnp.asarray(local))))
            # Reverse mode: the sharded gradient's shard is the per-process one.
            w = make(b.get_pencil_info(1), SHARDED_GDIMS, DataType.DOUBLE)
            loss = jax.grad(lambda v, u: jnp.sum(r.run(v, mesh=mesh_a, out_mesh=mesh_b) * u))
            (shard,) = jax.jit(loss)(sharded_array(mesh_a, x, 0), sharded_array(mesh_b, w, 1)).addressable_shards
            alone = jax.jit(jax.grad(lambda v: jnp.sum(r.run(v) * jnp.asarray(w))))(jnp.asarray(x))
            assert np.array_equal(np.asarray(shard.data), np.asarray(alone))
            # The result moves on as the destination grid's pencil.
            back = jax.jit(lambda v: cj.transpose_y_to_x(b, v, mesh=mesh_b))(got)
            (shard,) = back.addressable_shards
            want = np.stack([eager(b.transpose_y_to_x, f) for f in np.asarray(got.addressable_shards[0].data)])
            assert np.array_equal(np.asarray(shard.data), want)
            if tuple(cfg_a.pdims) != tuple(cfg_b.pdims):
                with pytest.raises(cudecomp.InvalidUsageError, match="mesh"):
                    r.run(sharded_array(mesh_a, x, 0), mesh=mesh_a)  # out_mesh is the destination grid's
            with pytest.raises(cudecomp.InvalidUsageError, match="without mesh"):
                r.run(jnp.asarray(x), out_mesh=mesh_b)
        whole = cudecomp.BoxLayout.whole(SHARDED_GDIMS) if MPI.COMM_WORLD.rank == 0 else cudecomp.BoxLayout.empty()
        with cj.Redistribution(handle, a.pencil(0), whole) as gather, pytest.raises(cudecomp.NotSupportedError, match="BoxLayout"):
            gather.run(sharded_array(mesh_a, x, 0), mesh=mesh_a)


@pytest.mark.parametrize("dtype", list(DataType))
def test_each_transpose_equals_the_eager_one(grid: cudecomp.GridDesc, dtype: DataType) -> None:
    for name, a, _ in OPS:
        x = field(grid, a, dtype, 3)
        want = eager(getattr(grid, name), x)
        got = jax.jit(lambda v, name=name: getattr(cj, name)(grid, v))(jnp.asarray(x))
        assert got.dtype == NUMPY_DTYPES[dtype] and np.array_equal(np.asarray(got), want), name


def test_a_chain_and_a_batch_equal_the_eager_ones(grid: cudecomp.GridDesc) -> None:
    x = field(grid, 0, DataType.DOUBLE, 1)
    batch = np.stack([x, 2 * x, -x])

    @jax.jit
    def there_and_back(v: Any) -> tuple[Any, Any]:
        z = cj.transpose_y_to_z(grid, cj.transpose_x_to_y(grid, v))
        return z, cj.transpose_z_to_x(grid, z)

    z, back = there_and_back(jnp.asarray(batch))
    for f in range(3):
        assert np.array_equal(np.asarray(z)[f], eager(grid.transpose_x_to_z, batch[f]))
    assert np.array_equal(np.asarray(back), batch)


def test_independent_calls_run_in_one_order_on_every_rank(grid: cudecomp.GridDesc) -> None:
    # Two transposes of one grid that depend on nothing common: every rank must run them
    # in the same order (the primitives share an ordered effect).
    x, y = field(grid, 0, DataType.DOUBLE, 1), field(grid, 1, DataType.DOUBLE, 2)
    f = jax.jit(lambda a, b: (cj.transpose_x_to_y(grid, a), cj.transpose_y_to_z(grid, b)))
    for _ in range(3):
        p, q = f(jnp.asarray(x), jnp.asarray(y))
        assert np.array_equal(np.asarray(p), eager(grid.transpose_x_to_y, x))
        assert np.array_equal(np.asarray(q), eager(grid.transpose_y_to_z, y))


@pytest.fixture
def global_inner_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_grads`` with its inner products summed over the ranks.

    Its reverse-mode check compares ``<t, J* c>`` with ``<J t, c>``: for a map between
    distributed fields, an identity of inner products over the whole field, every rank's
    part summed (its forward-mode check compares each rank's values, which holds as it is).
    """
    from jax._src import public_test_util

    local = public_test_util.inner_prod
    monkeypatch.setattr(public_test_util, "inner_prod", lambda xs, ys: MPI.COMM_WORLD.allreduce(np.asarray(local(xs, ys)).item()))


# The derivative rules do not depend on the process grid: they are checked on one and two
# ranks; four ranks' 2x2 grid runs every transpose, batch and FFT above.
@pytest.mark.mpi(ranks=(1, 2))
@pytest.mark.parametrize("name,a,b", OPS, ids=[o[0] for o in OPS])
def test_gradients_of_every_transpose(handle: cudecomp.Handle, name: str, a: int, b: int, global_inner_products: None) -> None:
    # One process grid: the one that cuts most.
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, factor_pairs(NRANKS)[len(factor_pairs(NRANKS)) // 2]
    with handle.create_grid(cfg) as grid:
        gradients_of(grid, name, a, b)


def gradients_of(grid: cudecomp.GridDesc, name: str, a: int, b: int) -> None:
    x = jnp.asarray(field(grid, a, DataType.DOUBLE_COMPLEX, 4))
    op = getattr(cj, name)
    check_grads(lambda v: op(grid, v), (x,), order=2, modes=("fwd", "rev"))
    # A scalar loss of the field: its gradient is the inverse transpose of the cotangent.
    w = jnp.asarray(field(grid, b, DataType.DOUBLE, 5))
    g = jax.grad(lambda v: jnp.sum(w * op(grid, v.astype(w.dtype))))(x.real)
    back = {"transpose_x_to_y": "transpose_y_to_x", "transpose_y_to_z": "transpose_z_to_y", "transpose_x_to_z": "transpose_z_to_x"}
    inverse = back.get(name) or {v: k for k, v in back.items()}[name]
    assert np.array_equal(np.asarray(g), eager(getattr(grid, inverse), np.asarray(w)))


def test_vmap_equals_a_loop_and_moves_one_batch(grid: cudecomp.GridDesc) -> None:
    xs = np.stack([field(grid, 1, DataType.FLOAT, s) for s in range(4)])
    mapped = jax.jit(jax.vmap(lambda v: cj.transpose_y_to_x(grid, v)))(jnp.asarray(xs))
    for s in range(4):
        assert np.array_equal(np.asarray(mapped)[s], eager(grid.transpose_y_to_x, xs[s]))
    # A map over batches (the mapped axis second) folds into one batch of 8 fields.
    pairs = jnp.asarray(np.stack([xs, 2 * xs], axis=1))
    both = jax.vmap(lambda v: cj.transpose_y_to_x(grid, v), in_axes=1, out_axes=1)(pairs)
    assert both.shape == (4, 2, *grid.get_pencil_info(0).array_shape)
    assert np.array_equal(np.asarray(both)[:, 1], 2 * np.asarray(mapped))


def test_a_jitted_step_traces_once(grid: cudecomp.GridDesc) -> None:
    traces = []

    @jax.jit
    def step(v: Any) -> Any:
        traces.append(1)
        return cj.transpose_y_to_x(grid, cj.transpose_x_to_y(grid, v) * 2.0)

    x = jnp.asarray(field(grid, 0, DataType.DOUBLE))
    for _ in range(4):
        x = step(x)
    assert len(traces) == 1
    assert np.array_equal(np.asarray(x), 16 * field(grid, 0, DataType.DOUBLE))


def test_a_step_compiled_ahead_of_time_runs_every_time(grid: cudecomp.GridDesc) -> None:
    # JAX's C++ dispatch of a program compiled ahead of time, which it takes where the
    # program's effects are ordered ones alone, passes no ordered token: the second call
    # would fail. The calls' unordered companion effect keeps it on the Python dispatch.
    step = jax.jit(lambda v: cj.transpose_y_to_x(grid, cj.transpose_x_to_y(grid, v) * 2.0))
    x = jnp.asarray(field(grid, 0, DataType.DOUBLE))
    compiled = step.lower(x).compile()
    for _ in range(3):
        x = compiled(x)
    assert np.array_equal(np.asarray(x), 8 * field(grid, 0, DataType.DOUBLE))


def test_only_handles_of_several_ranks_order_their_calls(handle: cudecomp.Handle) -> None:
    # Calls on a handle of several ranks take the ordered effect (one order on every rank);
    # a handle of one rank's go without its token, ordered by their data alone.
    with cudecomp.Handle(MPI.COMM_SELF) as alone:
        for h in (handle, alone):
            cfg = cudecomp.GridDescConfig()
            cfg.gdims, cfg.pdims = GDIMS, (h.nranks, 1)
            with h.create_grid(cfg) as g:
                x = jnp.asarray(field(g, 0, DataType.DOUBLE))

                def step(v: Any, g: cudecomp.GridDesc = g) -> Any:
                    return cj.transpose_y_to_x(g, cj.transpose_x_to_y(g, v))

                traced = jax.make_jaxpr(step)(x)
                assert bool(traced.effects) == (h.nranks > 1), (h.nranks, traced.effects)
                assert np.array_equal(np.asarray(jax.jit(step)(x)), np.asarray(x))
                # Independent calls of one grid, which XLA may run at once where unordered.
                apart = jax.jit(lambda v, g=g: [cj.transpose_x_to_y(g, v * k) for k in range(1, 5)])
                want = np.asarray(cj.transpose_x_to_y(g, x))
                for _ in range(5):
                    for k, y in enumerate(apart(x), start=1):
                        assert np.array_equal(np.asarray(y), k * want)


@pytest.mark.skipif(NRANKS < 2, reason="programs on a handle of one rank take no token")
def test_each_program_takes_the_last_ones_token_unmoved(handle: cudecomp.Handle) -> None:
    # JAX would place the ordered token on the program's devices again before each call,
    # which on the GPU waits for the program that made it; on the one device it is in place.
    from jax._src import dispatch

    from cudecomp.jax import _targets

    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, (NRANKS, 1)
    with handle.create_grid(cfg) as g:
        u = field(g, 0, DataType.DOUBLE)
        x = jnp.asarray(u)
        step = jax.jit(lambda v: cj.transpose_x_to_y(g, v))
        want = eager(g.transpose_x_to_y, u)
        step(x).block_until_ready()
        effect = _targets.ordered()
        token = dispatch.runtime_tokens.current_tokens[effect]
        assert dispatch.runtime_tokens.get_token_input(effect, list(x.devices())) is token
        assert np.array_equal(np.asarray(step(x)), want)


def test_misuse_raises_when_traced(handle: cudecomp.Handle) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, factor_pairs(NRANKS)[-1]
    g = handle.create_grid(cfg)
    x = jnp.asarray(field(g, 0, DataType.DOUBLE))
    with pytest.raises(cudecomp.InvalidUsageError, match=r"expected shape .* \(this rank's pencil\)"):
        cj.transpose_x_to_y(g, x[..., :-1] if x.shape[-1] > 1 else jnp.zeros((1, 1, 9)))
    with pytest.raises(TypeError, match="float32, float64, complex64 or complex128"):
        cj.transpose_x_to_y(g, x.astype(jnp.int32))
    with pytest.raises(TypeError, match="GridDesc"):
        cj.transpose_x_to_y("grid", x)
    with pytest.raises(cudecomp.InvalidUsageError, match="at least 1 field"):
        cj.transpose_x_to_y(g, x[None][:0])
    compiled = jax.jit(lambda v: cj.transpose_x_to_y(g, v))
    compiled(x).block_until_ready()
    g.destroy()
    with pytest.raises(cudecomp.InvalidUsageError, match="destroyed"):
        cj.transpose_x_to_y(g, x)  # traced anew
    with pytest.raises(Exception, match="destroyed"):
        compiled(x).block_until_ready()  # compiled before: the handler says so
    cj.reset_after_failure()  # JAX would hand the failed token on to the next program
    # The handle goes on working.
    with handle.create_grid(cfg) as g2:
        y = jax.jit(lambda v: cj.transpose_x_to_y(g2, v))(jnp.asarray(field(g2, 0, DataType.DOUBLE)))
        assert np.array_equal(np.asarray(y), eager(g2.transpose_x_to_y, field(g2, 0, DataType.DOUBLE)))


@pytest.mark.skipif(cudecomp.CPU_ONLY, reason="the CPU variant's JAX has no other devices")
def test_an_array_on_a_host_device_is_refused_by_the_gpu_variant(grid: cudecomp.GridDesc) -> None:
    x = jax.device_put(jnp.asarray(field(grid, 0, DataType.DOUBLE)), jax.devices("cpu")[0])
    with pytest.raises(cudecomp.InvalidUsageError, match="CUDA devices"):
        jax.jit(lambda v: cj.transpose_x_to_y(grid, v))(x)
    # The grid goes on working on its device.
    y = jax.jit(lambda v: cj.transpose_x_to_y(grid, v))(jnp.asarray(field(grid, 0, DataType.DOUBLE)))
    assert np.array_equal(np.asarray(y), eager(grid.transpose_x_to_y, field(grid, 0, DataType.DOUBLE)))


#: The header's names, from XLA FFI minor version 4 on, of structs and members our layout names as minor 3 does.
FFI_NAMES_SINCE_MINOR_4 = {
    "XLA_FFI_Extension_Base": "XLA_FFI_InternalExtension",
    "XLA_FFI_Error_GetMessage": "XLA_FFI_Error_GetDetails",
}


@pytest.mark.mpi(ranks=(1,))
def test_the_ffi_structs_match_the_header_jaxlib_ships(tmp_path: Any) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to read the header with")
    ours = cudecomp._cudecomp._xla_ffi_layout()
    with open(os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")) as f:
        minor = int(re.search(r"#define XLA_FFI_API_MINOR (\d+)", f.read()).group(1))  # type: ignore[union-attr]
    # A newer minor version of the API keeps the layout: our handlers, written against
    # ours, declare it, and the header's names of a few of the same structs and members
    # changed (jaxlib 0.11, minor 4).
    assert minor >= ours.pop("XLA_FFI_API_MINOR")
    renamed = FFI_NAMES_SINCE_MINOR_4 if minor >= 4 else {}

    def in_header(name: str) -> str:
        return ".".join(renamed.get(part, part) for part in name.split("."))

    layout = {in_header(k): v for k, v in ours.items()}
    lines = []
    structs = {k.split(".")[0] for k in layout if "." in k} & set(layout)
    for key in layout:
        if "." in key:  # a member's offset
            struct, member = key.split(".")
            lines.append(f'printf("{key} %zu\\n", offsetof({struct}, {member}));')
        elif key in structs:  # a struct's size
            lines.append(f'printf("{key} %zu\\n", sizeof({key}));')
        else:  # a constant
            lines.append(f'printf("{key} %lld\\n", (long long)({key}));')
    src = os.path.join(str(tmp_path), "layout.c")
    with open(src, "w") as f:
        f.write('#include <stddef.h>\n#include <stdio.h>\n#include "xla/ffi/api/c_api.h"\nint main(void) {\n')
        f.write("\n".join(lines) + "\nreturn 0;\n}\n")
    exe = os.path.join(str(tmp_path), "layout")
    subprocess.run([cc, "-std=c11", "-I", jax.ffi.include_dir(), src, "-o", exe], check=True)
    header = dict(ln.split() for ln in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.splitlines())
    assert {k: int(v) for k, v in header.items()} == dict(layout)


# -- distributed FFTs ----------------------------------------------------------------------

FFT_GDIMS = (6, 7, 8)


def fft_plans(handle: cudecomp.Handle) -> Iterator[Any]:
    """Every plan kind and output layout, on every usable process grid of one and two ranks and the 2x2 grid of four.

    Four ranks' slab grids (1x4, 4x1) run the schedules of two ranks' slabs; the pencil
    grid is what four ranks add.
    """
    from cudecomp.fft import FFT
    from oracle import usable

    grids = factor_pairs(NRANKS) if NRANKS < 4 else [(2, 2)]
    for kind in ("c2c", "r2c"):
        for transposed in (False, True):
            for pdims in grids:
                if usable(FFT_GDIMS, kind, pdims):
                    with FFT(handle, FFT_GDIMS, pdims, kind=kind, transposed_out=transposed, norm="ortho") as plan:
                        yield plan


def real_space(plan: Any, seed: int) -> np.ndarray:
    from oracle import local_part, random_field

    return local_part(random_field(plan.gdims, plan.input_dtype, seed), plan.input_info)


def test_ffts_equal_the_eager_plans(handle: cudecomp.Handle) -> None:
    for plan in fft_plans(handle):
        forward, backward = (cj.fft, cj.ifft) if plan.kind == "c2c" else (cj.rfft, cj.irfft)
        x = real_space(plan, 6)
        want = eager(plan.forward, x)
        got = jax.jit(lambda v, f=forward, p=plan: f(p, v))(jnp.asarray(x))
        assert got.dtype == plan.output_dtype and got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-12 * np.abs(want).max())
        back = jax.jit(lambda v, f=backward, p=plan: f(p, v))(got)
        np.testing.assert_allclose(np.asarray(back), x, rtol=0, atol=1e-12 * np.abs(x).max())
        if plan.transposed_out:
            continue
        # A batch, and vmap, as one field after another.
        batch = jnp.asarray(np.stack([x, 2 * x]))
        direct = jax.jit(lambda v, f=forward, p=plan: f(p, v))
        mapped = jax.jit(jax.vmap(lambda v, f=forward, p=plan: f(p, v)))
        for b in (direct(batch), mapped(batch)):
            np.testing.assert_allclose(np.asarray(b)[1], 2 * np.asarray(got), rtol=0, atol=1e-11 * np.abs(want).max())


# The FFT's adjoint is its transposes' and the local transforms': those are differentiated
# on every grid above, the composition on one and two ranks.
@pytest.mark.mpi(ranks=(1, 2))
def test_fft_gradients(handle: cudecomp.Handle, global_inner_products: None) -> None:
    from cudecomp.fft import FFT

    pdims = factor_pairs(NRANKS)[len(factor_pairs(NRANKS)) // 2]
    for kind in ("c2c", "r2c"):
        with FFT(handle, FFT_GDIMS, pdims, kind=kind, norm="ortho") as plan:
            fft_gradients_of(plan)


def fft_gradients_of(plan: Any) -> None:
    x = jnp.asarray(real_space(plan, 7))
    if plan.kind == "c2c":
        check_grads(jax.jit(lambda v: cj.fft(plan, v)), (x,), order=2, modes=("fwd", "rev"))
        check_grads(jax.jit(lambda v: cj.ifft(plan, v)), (x,), order=1, modes=("fwd", "rev"))
    else:
        check_grads(jax.jit(lambda v: cj.irfft(plan, cj.rfft(plan, v))), (x,), order=2, modes=("fwd", "rev"))


def test_fft_misuse_raises_when_traced(handle: cudecomp.Handle) -> None:
    from cudecomp.fft import FFT

    with FFT(handle, FFT_GDIMS, (1, NRANKS), kind="r2c") as plan:
        x = jnp.asarray(real_space(plan, 1))
        with pytest.raises(cudecomp.InvalidUsageError, match="kind c2c"):
            cj.fft(plan, x)
        with pytest.raises(TypeError, match="dtype float64"):
            cj.rfft(plan, x.astype(jnp.float32))
        with pytest.raises(cudecomp.InvalidUsageError, match="expected shape"):
            cj.irfft(plan, x)
        with pytest.raises(TypeError, match="cudecomp.fft.FFT"):
            cj.rfft(plan.grid, x)
    with FFT(handle, FFT_GDIMS, (1, NRANKS), transforms=("fft", "dct2", "fft")) as plan, pytest.raises(cudecomp.NotSupportedError):
        cj.rfft(plan, jnp.asarray(real_space(plan, 1)))


# -- halo updates --------------------------------------------------------------------------

HALO = (1, 1, 2)
PERIODS = (True, False, True)
PADDING = (0, 1, 1)
HALO_OPS = ("update_halos_x", "update_halos_y", "update_halos_z")


def halo_field(grid: cudecomp.GridDesc, axis: int, seed: int) -> np.ndarray:
    """This rank's ``axis``-pencil with halos and padding, every cell random (halos too)."""
    shape = grid.get_pencil_info(axis, HALO, PADDING).array_shape
    return np.random.default_rng([seed, MPI.COMM_WORLD.rank]).standard_normal(shape)


def test_halo_updates_equal_the_eager_ones(grid: cudecomp.GridDesc) -> None:
    for axis, name in enumerate(HALO_OPS):
        for dim in range(3):
            x = halo_field(grid, axis, 10 * axis + dim)
            want = dev(x)
            getattr(grid, name)(want, HALO, PERIODS, dim, padding=PADDING)
            op = jax.jit(lambda v, name=name, dim=dim: getattr(cj, name)(grid, v, HALO, PERIODS, dim, padding=PADDING))
            got = op(jnp.asarray(x))
            assert np.array_equal(np.asarray(got), host(want)), (name, dim)
            if (axis, dim) != (0, 1):
                continue
            # A batch (and vmap's) moves every field in one exchange, each as alone.
            xs = np.stack([x, 2 * x + 1])
            want1 = dev(xs[1])
            getattr(grid, name)(want1, HALO, PERIODS, dim, padding=PADDING)
            for y in (op(jnp.asarray(xs)), jax.vmap(op)(jnp.asarray(xs))):
                assert np.array_equal(np.asarray(y)[0], host(want))
                assert np.array_equal(np.asarray(y)[1], host(want1))


def test_halo_gradients_are_the_accumulation_into_owners(handle: cudecomp.Handle, global_inner_products: None) -> None:
    # The process grid that cuts most; a periodic and a non-periodic dimension.
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, factor_pairs(NRANKS)[len(factor_pairs(NRANKS)) // 2]
    with handle.create_grid(cfg) as grid:
        for axis, dim in ((0, 1), (1, 2), (2, 0)):
            name = HALO_OPS[axis]

            def op(v: Any, name: str = name, dim: int = dim) -> Any:
                return getattr(cj, name)(grid, v, HALO, PERIODS, dim, padding=PADDING)

            x = jnp.asarray(halo_field(grid, axis, 3))
            if NRANKS <= 2:
                # The rules' wiring, numerically (as for the transposes, on one and two
                # ranks); the adjoint below checks every process grid, 2x2 included.
                check_grads(op, (x,), order=2, modes=("fwd", "rev"))
            # The adjoint, summed over the ranks: <H x, w> = <x, H^T w>.
            w = jnp.asarray(halo_field(grid, axis, 4))
            (ht,) = jax.vjp(op, x)[1](w)
            lhs = MPI.COMM_WORLD.allreduce(float(jnp.vdot(op(x), w)))
            rhs = MPI.COMM_WORLD.allreduce(float(jnp.vdot(x, ht)))
            assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs)), (name, dim, lhs, rhs)


def test_halo_misuse_raises_when_traced(grid: cudecomp.GridDesc) -> None:
    x = jnp.asarray(halo_field(grid, 0, 1))
    with pytest.raises(cudecomp.InvalidUsageError, match=r"expected shape .* halo_extents \(1, 1, 2\)"):
        cj.update_halos_x(grid, x, HALO, PERIODS, 0)  # without its padding
    with pytest.raises(cudecomp.InvalidUsageError, match="dim: expected 0, 1 or 2, got 3"):
        cj.update_halos_x(grid, x, HALO, PERIODS, 3, padding=PADDING)
    with pytest.raises(cudecomp.InvalidUsageError, match="halo_periods: expected 3 bools"):
        cj.update_halos_x(grid, x, HALO, (True,), 0, padding=PADDING)
    with pytest.raises(TypeError, match="float32, float64, complex64 or complex128"):
        cj.update_halos_x(grid, x.astype(jnp.int32), HALO, PERIODS, 0, padding=PADDING)


# -- redistributions -----------------------------------------------------------------------


def test_a_redistribution_equals_the_eager_one_and_differentiates(handle: cudecomp.Handle, global_inner_products: None) -> None:
    pairs = factor_pairs(NRANKS)
    cfg_a, cfg_b = cudecomp.GridDescConfig(), cudecomp.GridDescConfig()
    cfg_a.gdims, cfg_a.pdims = GDIMS, pairs[0]
    cfg_b.gdims, cfg_b.pdims = GDIMS, pairs[-1]
    cfg_b.transpose_axis_contiguous = (True, True, True)
    with handle.create_grid(cfg_a) as a, handle.create_grid(cfg_b) as b:
        src, dst = a.pencil(1, (1, 0, 1)), b.pencil(2, (0, 1, 0), (1, 0, 0))
        with cj.Redistribution(handle, src, dst) as r, handle.create_redistribution(src, dst) as eager:
            x = make(a.get_pencil_info(1, (1, 0, 1)), GDIMS, DataType.DOUBLE)
            out = xp.zeros(r.output_info.array_shape)
            eager.run(dev(x), out)
            want = host(out)
            got = jax.jit(r.run)(jnp.asarray(x))
            assert np.array_equal(np.asarray(got), want)  # halos and padding zero in both
            batch = jnp.asarray(np.stack([x, -x]))
            for y in (jax.jit(r.run)(batch), jax.vmap(r.run)(batch)):
                assert np.array_equal(np.asarray(y), np.stack([want, -want]))
            check_grads(jax.jit(r.run), (jnp.asarray(x),), order=2, modes=("fwd", "rev"))
            with pytest.raises(cudecomp.InvalidUsageError, match="source array"):
                r.run(jnp.zeros((2, 2, 2)))
        with pytest.raises(cudecomp.InvalidUsageError, match="destroyed"):
            r.run(jnp.asarray(x))


@pytest.mark.mpi(ranks=(2, 4))
def test_a_gather_to_one_rank_and_back(handle: cudecomp.Handle) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = GDIMS, factor_pairs(NRANKS)[-1]
    with handle.create_grid(cfg) as g:
        whole = cudecomp.BoxLayout.whole(GDIMS) if MPI.COMM_WORLD.rank == 0 else cudecomp.BoxLayout.empty()
        with cj.Redistribution(handle, g.pencil(0), whole) as gather:
            x = jnp.asarray(make(g.get_pencil_info(0), GDIMS, DataType.FLOAT))
            full = jax.jit(gather.run)(x)
            assert full.shape == tuple(gather.output_info.array_shape)
            # The gradient of the root's sum is one everywhere, on every rank.
            ones = jax.grad(lambda v: jnp.sum(gather.run(v)))(x)
            assert np.array_equal(np.asarray(ones), np.ones(x.shape, np.float32))


@pytest.mark.mpi(ranks=(1,))
def test_several_devices_per_process_are_refused() -> None:
    # A process of its own, whose JAX sees two CPU devices (the flag must precede JAX's start).
    import sys

    code = (
        "import jax, cudecomp, cudecomp.jax as cj\n"
        "from mpi4py import MPI\n"
        "h = cudecomp.Handle(MPI.COMM_WORLD)\n"
        "c = cudecomp.GridDescConfig(); c.gdims = (4, 4, 4); c.pdims = (1, 1)\n"
        "g = h.create_grid(c)\n"
        "try:\n"
        "    cj.pencil_mesh(g)\n"
        "except cudecomp.InvalidUsageError as e:\n"
        "    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCALNRANKS"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"  # host devices, whichever variant this is
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, check=False)
    if r.returncode != 0 and "MPI" in r.stderr and "refused" not in r.stdout:
        pytest.skip(f"MPI cannot start in a process of its own here: {r.stderr[-200:]}")
    assert "refused: pencil_mesh: expected one JAX device per process, got [2]" in r.stdout, (r.stdout, r.stderr[-2000:])
