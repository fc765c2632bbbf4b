//! `cudecomp.GridDesc`.

use std::sync::{Arc, Mutex};

use cudecomp_core as core;
use cudecomp_core::{Direction, Steps, TransposeSteps};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::args::{bool_arg, config_object, index_arg, int_arg, int_triple};
use crate::errors::{invalid, log_lines, IntoPy};
use crate::handle::Handle;
use crate::operation_args::{agreed, prepare_halo, prepare_transpose, HaloCall, TransposeCall};
use crate::owned;
use crate::pencil::PencilInfo;
use crate::redistribution::PencilLayout;
use crate::variant;

/// One decomposition of a 3-D grid over the ranks of a handle.
///
/// Created by [`Handle.create_grid`][cudecomp.Handle.create_grid], never directly. It
/// keeps its handle alive. Release it with ``destroy()`` on every rank (collective), or
/// use it as a context manager, which destroys it on leaving the block.
///
/// Operations (transposes and halo updates) are collective: every rank calls the same
/// operations, with the same arguments, in the same order (``CUDECOMP_CHECK_COLLECTIVES=1``
/// makes the ranks check that before each operation). In the CPU variant, operations on
/// distinct grids of one handle may run concurrently from several threads; a GPU handle
/// runs one operation at a time.
#[pyclass(module = "cudecomp", frozen)]
pub(crate) struct GridDesc {
    handle: Py<Handle>,
    state: Mutex<Option<Arc<core::GridDesc>>>,
    /// What the autotuner measured (`cudecomp.AutotuneResult`), when it ran.
    autotune: Option<Py<PyAny>>,
}

impl GridDesc {
    /// Wraps a core descriptor owned by `handle`, with the autotuner's result if it ran.
    pub(crate) fn new(
        handle: Py<Handle>,
        gd: Arc<core::GridDesc>,
        autotune: Option<Py<PyAny>>,
    ) -> Self {
        GridDesc {
            handle,
            state: Mutex::new(Some(gd)),
            autotune,
        }
    }

    /// InvalidUsageError unless `h` is the handle that created this grid.
    pub(crate) fn check_owner(&self, py: Python<'_>, h: &Bound<'_, Handle>) -> PyResult<()> {
        if !self.handle.bind(py).is(h) {
            return Err(invalid(
                py,
                "grid: expected a GridDesc created by this Handle, got one of another Handle"
                    .into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn live(&self, py: Python<'_>) -> PyResult<Arc<core::GridDesc>> {
        self.handle.get().live(py)?;
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                invalid(
                    py,
                    "the GridDesc was destroyed: expected a live GridDesc".into(),
                )
            })
    }

    fn transpose<'py>(
        &self,
        py: Python<'py>,
        direction: Direction,
        c: TransposeCall<'_, 'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let gd = self.live(py)?;
        let ready = prepare_transpose(py, &gd, direction, &c);
        let p = agreed(py, &gd, direction.method_name(), ready)?;
        let steps = TransposeSteps {
            input: Steps {
                marks: &p.input_marks,
                axis: p.input_axis,
            },
            output: Steps {
                marks: &p.output_marks,
                axis: p.output_axis,
            },
        };
        py.detach(|| gd.transpose_with(&p.op, p.input, p.output, p.work, p.exec, steps))
            .py(py)?;
        Ok(p.out_obj)
    }

    fn update_halos(&self, py: Python<'_>, axis: usize, c: HaloCall<'_, '_>) -> PyResult<()> {
        let gd = self.live(py)?;
        let what = ["update_halos_x", "update_halos_y", "update_halos_z"][axis];
        let ready = prepare_halo(py, axis, &c);
        let (spec, dtype, data, work, exec) = agreed(py, &gd, what, ready)?;
        py.detach(|| gd.update_halos(&spec, dtype, data, work, exec))
            .py(py)
    }
}

impl GridDesc {
    #[allow(clippy::too_many_arguments)]
    fn allocate_pencil<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
        halo_extents: Option<&Bound<'py, PyAny>>,
        padding: Option<&Bound<'py, PyAny>>,
        fields: Option<&Bound<'py, PyAny>>,
        zero: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let gd = self.live(py)?;
        let axis = int_arg(axis, "axis")?;
        let halo = int_triple(py, halo_extents, "halo_extents")?;
        let pad = int_triple(py, padding, "padding")?;
        let fields = fields_arg(py, fields)?;
        let info = gd.grid().pencil_info(axis, gd.rank(), halo, pad).py(py)?;
        let alloc = py.import("cudecomp._alloc")?;
        let dtype = alloc.call_method1("numpy_dtype", (dtype,))?;
        let pencil = info.array_shape();
        let shape: Vec<i64> = fields.into_iter().chain(pencil).collect();
        let cells = info.size * fields.unwrap_or(1);
        if let Some(a) = self.library_pencil(py, &gd, &shape, cells, &dtype)? {
            return Ok(a);
        }
        alloc.call_method1(
            "allocate",
            (PyTuple::new(py, &shape)?, dtype, zero, variant::CPU_ONLY),
        )
    }
}

/// A batch's field count (`fields=` of the allocators): `None` for one pencil, else at
/// least 1.
fn fields_arg(py: Python<'_>, fields: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    let Some(v) = fields.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let k = int_arg(v, "fields")?;
    if k < 1 {
        return Err(invalid(
            py,
            format!(
                "fields: expected a batch of at least 1 field, or None for one pencil, got {k}"
            ),
        ));
    }
    Ok(Some(k))
}

impl GridDesc {
    /// A pencil array of `shape` (`cells` elements of the NumPy `dtype`) over library
    /// memory when the core gives some (DIRECT grids, arrays large enough: peers'
    /// transposes write straight into it); `None` otherwise.
    fn library_pencil<'py>(
        &self,
        py: Python<'py>,
        gd: &core::GridDesc,
        shape: &[i64],
        cells: i64,
        dtype: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let nbytes = cells as usize * dtype.getattr("itemsize")?.extract::<usize>()?;
        let made = py.detach(|| gd.library_array(nbytes)).py(py)?;
        crate::errors::warn_notices(py)?;
        let Some(a) = made else {
            return Ok(None);
        };
        let view = if variant::CPU_ONLY {
            "view_of"
        } else {
            "device_view_of"
        };
        let owner = crate::shared::owner(py, a)?;
        py.import("cudecomp._alloc")?
            .call_method1(view, (owner, PyTuple::new(py, shape)?, dtype))
            .map(Some)
    }
}

/// Emits the six transposes and three halo updates from one template each.
///
/// Each method's Python docstring (the text of `python/cudecomp/_cudecomp.pyi`) is its
/// one-line summary (`$tdoc`, `$hdoc`) followed by the shared description and the
/// Args/Returns/Raises sections; the lines that name the pencils take the pencils'
/// letters and axes (`$from`/`$fax`, `$to`/`$tax`, `$pencil`/`$axis`).
macro_rules! grid_methods {
    (
        transposes { $( $tname:ident => $dir:expr, ($from:literal, $fax:literal) => ($to:literal, $tax:literal), $tdoc:literal; )* }
        halos { $( $hname:ident => $axis:literal, $pencil:literal, $hdoc:literal; )* }
    ) => {
        #[pymethods]
        impl GridDesc {
            $(
                #[doc = $tdoc]
                ///
                #[doc = concat!("Every owned cell of the ", $to, "-pencil receives the value the ", $from, "-pencils hold for the")]
                /// same global point, bit for bit. Only the owned interior of ``out`` is written:
                /// its halo and padding cells keep their contents, and so does the whole input
                /// (unless in place).
                ///
                /// Args:
                #[doc = concat!("    input: The ", $from, "-pencil: a C-contiguous 3-D array of shape")]
                #[doc = concat!("        ``get_pencil_info(", $fax, ", input_halo_extents, input_padding).array_shape``")]
                ///         (a native-byte-order NumPy array in the CPU variant, an object exposing
                ///         ``__cuda_array_interface__`` on the handle's device in the GPU variant).
                ///         Only its interior is read. A 4-D array of shape ``(k, *array_shape)``
                ///         is a batch of ``k`` fields moved in one exchange (one message per
                ///         peer for all of them); ``out`` is then the batch of ``k`` output
                ///         pencils, and an explicit ``work`` holds ``k`` times the workspace.
                #[doc = concat!("    out: The ", $to, "-pencil, writable, of shape")]
                #[doc = concat!("        ``get_pencil_info(", $tax, ", output_halo_extents, output_padding).array_shape``")]
                ///         (after the batch axis of a batch).
                ///         ``None`` allocates it: a NumPy array in the CPU variant; a CuPy array on
                ///         the current device, from CuPy's memory pool on the operation's stream,
                ///         in the GPU variant (only for CuPy inputs; other inputs need ``out``).
                ///         An allocated output's halo and padding cells are uninitialised.
                ///         In place: pass an ``out`` that starts at the same address as ``input``
                ///         (two views of one buffer large enough for the larger pencil); partial
                ///         overlap raises ``InvalidUsageError``.
                ///     work: Workspace. ``None`` uses the handle's automatic workspace (allocated
                ///         on first use, grown when an operation needs more, reused, never shrunk).
                ///         Otherwise a writable C-contiguous array of the variant's kind, any
                ///         shape and element type, disjoint from the data, of at least
                ///         ``get_transpose_workspace_size() * get_data_type_size(dtype)`` bytes
                ///         (times ``k`` for a batch of ``k`` fields),
                ///         for example from ``Handle.malloc``. DIRECT, and NCCL through its
                ///         registered workspace, run in the handle's own workspace and do not use
                ///         an explicit one (its size is checked all the same).
                ///     dtype: The element type, a ``cudecomp.DataType`` member; ``None`` infers it
                ///         from the arrays (float32, float64, complex64, complex128). An explicit
                ///         value must agree with the arrays and converts nothing; opaque storage
                ///         (NumPy ``V<n>``) requires one of the same element size.
                ///     input_halo_extents: Halo cells on each side of each axis (X, Y, Z) of the
                ///         input's layout; ``None`` means none.
                ///     output_halo_extents: Halo cells of the output's layout (X, Y, Z).
                ///     input_padding: Padding cells at the end of each axis (X, Y, Z) of the
                ///         input's layout.
                ///     output_padding: Padding cells of the output's layout (X, Y, Z).
                ///     stream: GPU variant: the CUDA stream to order the work on (``None``: CuPy's
                ///         current stream for CuPy inputs, else the default stream 0; an int
                ///         handle; an object with ``__cuda_stream__``; or an object with an int
                ///         ``ptr``). The CPU variant accepts and ignores it.
                ///     input_ready: GPU variant: ``(event, n)`` pairs (CuPy or PyTorch events, or
                ///         int handles), ``n`` not decreasing: the input's first ``n`` cells
                ///         along ``input_ready_axis`` (halo cells counted) are written once
                ///         ``event`` has completed. The transpose may then run on a stream that
                ///         does not wait for the writer and move each step as soon as its event
                ///         completes (DIRECT between ``empty_pencil`` arrays: each step goes to
                ///         the peers by the copy engine while the writer produces the next;
                ///         other backends wait for all the events first). Events must be
                ///         recorded before the call. ``None`` (default): the stream alone
                ///         orders the input. The CPU variant refuses events.
                ///     input_ready_axis: The global axis (0 X, 1 Y, 2 Z) the steps of
                ///         ``input_ready`` run along; ``None``: the input's slowest axis in
                ///         memory.
                ///     output_ready: GPU variant: ``(event, n)`` pairs, ``n`` not decreasing:
                ///         the transpose records each ``event`` on its stream once the
                ///         output's first ``n`` cells along ``output_ready_axis`` (halo cells
                ///         counted) are written, so that work on another stream that waits
                ///         for it can start on them while the rest lands (DIRECT between
                ///         ``empty_pencil`` arrays: the copy engine writes every peer's cells
                ///         step by step, and each event follows its step, or, with more than
                ///         15 steps, the group of steps it falls in; other backends record
                ///         every event at the end). Cells past the last ``n`` are written
                ///         when the operation is done on its stream. The CPU variant refuses
                ///         events.
                ///     output_ready_axis: The global axis the steps of ``output_ready`` run
                ///         along; ``None``: the output's slowest axis in memory.
                ///     own_cells: ``False`` leaves the cells that stay on this rank (those in
                ///         both this rank's input and output pencils) unwritten in ``out``:
                ///         only cells from other ranks land there, and the caller reads its
                ///         own from ``input`` (as ``cudecomp.fft`` does, sparing a copy of
                ///         them). Out of place only. Each rank may choose for itself.
                ///         ``None`` (the default) is ``True``: every owned cell is written.
                ///
                /// Returns:
                ///     ``out``, or the newly allocated output.
                ///
                /// Raises:
                ///     InvalidUsageError: Wrong shape, dtype, contiguity, byte order, writability,
                ///         overlap (``own_cells=False`` in place among them) or workspace size,
                ///         a released grid or handle, or MPI already
                ///         finalized. With ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when
                ///         the ranks run different operations or one rank's arguments are wrong.
                ///     NotSupportedError: A pencil of this transpose is empty on some rank.
                ///     TypeError: Arguments of the wrong Python type (a NumPy dtype as ``dtype``,
                ///         a list as an array, a host array in the GPU variant).
                #[pyo3(signature = (input, out = None, *, work = None, dtype = None, input_halo_extents = None, output_halo_extents = None, input_padding = None, output_padding = None, stream = None, input_ready = None, input_ready_axis = None, output_ready = None, output_ready_axis = None, own_cells = None))]
                #[allow(clippy::too_many_arguments)]
                fn $tname<'py>(
                    &self,
                    py: Python<'py>,
                    input: &Bound<'py, PyAny>,
                    out: Option<&Bound<'py, PyAny>>,
                    work: Option<&Bound<'py, PyAny>>,
                    dtype: Option<&Bound<'py, PyAny>>,
                    input_halo_extents: Option<&Bound<'py, PyAny>>,
                    output_halo_extents: Option<&Bound<'py, PyAny>>,
                    input_padding: Option<&Bound<'py, PyAny>>,
                    output_padding: Option<&Bound<'py, PyAny>>,
                    stream: Option<&Bound<'py, PyAny>>,
                    input_ready: Option<&Bound<'py, PyAny>>,
                    input_ready_axis: Option<&Bound<'py, PyAny>>,
                    output_ready: Option<&Bound<'py, PyAny>>,
                    output_ready_axis: Option<&Bound<'py, PyAny>>,
                    own_cells: Option<&Bound<'py, PyAny>>,
                ) -> PyResult<Bound<'py, PyAny>> {
                    self.transpose(
                        py,
                        $dir,
                        TransposeCall { input, out, work, dtype, input_halo_extents, output_halo_extents, input_padding, output_padding, stream, input_ready, input_ready_axis, output_ready, output_ready_axis, own_cells },
                    )
                }
            )*
            $(
                #[doc = $hdoc]
                ///
                /// The ``halo_extents[dim]`` owned layers next to each end of ``dim`` are copied
                /// into the neighbouring ranks' halos (or wrapped around locally when this rank is
                /// its own neighbour). Each face spans the other two dimensions including their
                /// halo cells, so updating ``dim`` 0, 1 and 2 in turn also fills edges and corners.
                /// At a non-periodic boundary of the global grid the halo is left as it was;
                /// padding cells are never touched. The array is updated in place.
                ///
                /// Args:
                #[doc = concat!("    input: The ", $pencil, "-pencil, writable, of shape")]
                #[doc = concat!("        ``get_pencil_info(", $axis, ", halo_extents, padding).array_shape`` (NumPy in")]
                ///         the CPU variant, a CUDA array on the handle's device in the GPU variant).
                ///         A 4-D array ``(k, *array_shape)`` is a batch of ``k`` fields whose
                ///         halos are updated in one exchange; an explicit ``work`` then holds
                ///         ``k`` times the workspace.
                ///     halo_extents: Halo cells on each side of each global axis (X, Y, Z). All
                ///         zeros returns at once. ``halo_extents[dim]`` may not exceed the cells
                ///         any rank that exchanges along ``dim`` owns there.
                ///     halo_periods: Per global axis (X, Y, Z), whether the grid wraps around;
                ///         ``None`` means no axis is periodic.
                ///     dim: The global dimension to update: 0 (X), 1 (Y) or 2 (Z).
                ///     padding: Padding cells after the end of each axis (X, Y, Z) of the array's
                ///         layout; ``None`` means none.
                ///     work: Workspace. ``None`` uses the handle's automatic workspace; otherwise
                ///         a writable array of the variant's kind, disjoint from ``input``, of at
                #[doc = concat!("        least ``get_halo_workspace_size(", $axis, ", halo_extents)`` elements of the dtype.")]
                ///         The DIRECT backend runs in the handle's own workspace (the size of an
                ///         explicit one is checked all the same).
                ///     dtype: The element type, a ``cudecomp.DataType`` member, or ``None`` to
                ///         infer it from the array (see the transposes).
                ///     stream: GPU variant: the CUDA stream to order the work on (same forms as for
                ///         the transposes). Ignored by the CPU variant.
                ///
                /// Raises:
                ///     InvalidUsageError: Wrong array, ``dim`` outside 0-2, ``halo_extents`` missing,
                ///         too small a workspace; on every rank, a halo wider than the cells some
                ///         exchanging rank owns along ``dim`` (and, with
                ///         ``CUDECOMP_CHECK_COLLECTIVES=1``, ranks that run different operations or
                ///         one rank's wrong arguments).
                #[doc = concat!("    NotSupportedError: The ", $pencil, "-pencil is empty on some rank.")]
                #[pyo3(signature = (input, halo_extents, halo_periods, dim, *, padding = None, work = None, dtype = None, stream = None))]
                #[allow(clippy::too_many_arguments)]
                fn $hname(
                    &self,
                    py: Python<'_>,
                    input: &Bound<'_, PyAny>,
                    halo_extents: &Bound<'_, PyAny>,
                    halo_periods: Option<&Bound<'_, PyAny>>,
                    dim: &Bound<'_, PyAny>,
                    padding: Option<&Bound<'_, PyAny>>,
                    work: Option<&Bound<'_, PyAny>>,
                    dtype: Option<&Bound<'_, PyAny>>,
                    stream: Option<&Bound<'_, PyAny>>,
                ) -> PyResult<()> {
                    self.update_halos(
                        py,
                        $axis,
                        HaloCall { input, halo_extents, halo_periods, dim, padding, work, dtype, stream },
                    )
                }
            )*
        }
    };
}

grid_methods! {
    transposes {
        transpose_x_to_y => Direction::XToY, ("X", 0) => ("Y", 1), "Global transpose from X-pencils to Y-pencils (collective).";
        transpose_y_to_z => Direction::YToZ, ("Y", 1) => ("Z", 2), "Global transpose from Y-pencils to Z-pencils (collective).";
        transpose_z_to_y => Direction::ZToY, ("Z", 2) => ("Y", 1), "Global transpose from Z-pencils to Y-pencils (collective).";
        transpose_y_to_x => Direction::YToX, ("Y", 1) => ("X", 0), "Global transpose from Y-pencils to X-pencils (collective).";
        transpose_x_to_z => Direction::XToZ, ("X", 0) => ("Z", 2), "Global transpose from X-pencils to Z-pencils in one exchange over the whole process grid (collective; not in upstream cuDecomp).";
        transpose_z_to_x => Direction::ZToX, ("Z", 2) => ("X", 0), "Global transpose from Z-pencils to X-pencils in one exchange over the whole process grid (collective; not in upstream cuDecomp).";
    }
    halos {
        update_halos_x => 0, "X", "Fill the halo cells of an X-pencil along one global dimension (collective).";
        update_halos_y => 1, "Y", "Fill the halo cells of a Y-pencil along one global dimension (collective).";
        update_halos_z => 2, "Z", "Fill the halo cells of a Z-pencil along one global dimension (collective).";
    }
}

#[pymethods]
impl GridDesc {
    /// Release the descriptor (collective).
    ///
    /// With the performance report on, its summary is logged (logger ``cudecomp``) on
    /// rank 0. Any later use of the descriptor, or a second ``destroy()``, raises
    /// ``InvalidUsageError``.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.get().live(py)?;
        let gd = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let gd =
            gd.ok_or_else(|| invalid(py, "destroy(): the GridDesc was already destroyed".into()))?;
        // Released only once every rank agreed to destroy it (checking mode).
        let summary = py.detach(|| gd.destroy());
        if gd.is_released() {
            self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        let summary = summary.py(py)?;
        if let Some(summary) = summary {
            let lines: Vec<String> = summary.lines().map(str::to_owned).collect();
            log_lines(py, &lines)?;
        }
        Ok(())
    }

    /// What the autotuner measured and chose, or ``None`` without a search.
    #[getter]
    fn autotune_result(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.autotune.as_ref().map(|r| r.clone_ref(py))
    }

    /// Whether the ranks agree on every operation before it moves data.
    ///
    /// ``CUDECOMP_CHECK_COLLECTIVES=1`` when the grid's handle was created.
    #[getter]
    fn _checks_collectives(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.live(py)?.checks_collectives())
    }

    /// A copy of the resolved configuration (process grid, backends, rank order).
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let gd = self.live(py)?;
        let g = gd.grid();
        let mut cfg = g.config.clone();
        cfg.pdims = [g.pdims[0] as i32, g.pdims[1] as i32];
        cfg.rank_order = g.rank_order as i32;
        config_object(py, &cfg)
    }

    /// The handle that created this descriptor.
    #[getter]
    fn handle(&self, py: Python<'_>) -> Py<Handle> {
        self.handle.clone_ref(py)
    }

    /// Describe this rank's part of the ``axis``-pencil (local; not collective).
    ///
    /// Args:
    ///     axis: Pencil orientation: 0 for X-pencils, 1 for Y-pencils, 2 for Z-pencils.
    ///     halo_extents: Halo cells added on *both* sides of each global axis (X, Y, Z);
    ///         ``None`` means none.
    ///     padding: Padding cells added after the *end* of each global axis (X, Y, Z);
    ///         ``None`` means none.
    ///
    /// Returns:
    ///     The pencil's layout. Arrays passed to operations with the same halos and
    ///     padding must have the shape ``array_shape`` of this result.
    ///
    /// Raises:
    ///     InvalidUsageError: ``axis`` outside 0-2, or negative halos or padding.
    #[pyo3(signature = (axis, halo_extents = None, padding = None))]
    fn get_pencil_info(
        &self,
        py: Python<'_>,
        axis: &Bound<'_, PyAny>,
        halo_extents: Option<&Bound<'_, PyAny>>,
        padding: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PencilInfo> {
        let gd = self.live(py)?;
        let axis = int_arg(axis, "axis")?;
        let halo = int_triple(py, halo_extents, "halo_extents")?;
        let pad = int_triple(py, padding, "padding")?;
        let info = gd.grid().pencil_info(axis, gd.rank(), halo, pad).py(py)?;
        Ok(PencilInfo::from(info))
    }

    /// Return the ``axis``-pencil of this grid as one side of a redistribution (local).
    ///
    /// Args:
    ///     axis: 0, 1 or 2 (X-, Y- or Z-pencil).
    ///     halo_extents: Halo cells on both sides of each global axis (``None``: none).
    ///     padding: Padding cells after each global axis (``None``: none).
    ///
    /// Returns:
    ///     A ``PencilLayout`` for
    ///     [`Handle.create_redistribution`][cudecomp.Handle.create_redistribution]: its
    ///     arrays have the shape ``get_pencil_info(axis, halo_extents, padding).array_shape``.
    ///
    /// Raises:
    ///     InvalidUsageError: ``axis`` outside 0-2, or negative halos or padding.
    #[pyo3(signature = (axis, halo_extents = None, padding = None))]
    fn pencil(
        slf: &Bound<'_, Self>,
        axis: &Bound<'_, PyAny>,
        halo_extents: Option<&Bound<'_, PyAny>>,
        padding: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PencilLayout> {
        let py = slf.py();
        let gd = slf.get().live(py)?;
        let axis = index_arg(axis, "axis")?;
        let halo = int_triple(py, halo_extents, "halo_extents")?;
        let pad = int_triple(py, padding, "padding")?;
        gd.grid()
            .pencil_info(axis as i64, gd.rank(), halo, pad)
            .py(py)?;
        Ok(PencilLayout::new(slf.clone().unbind(), axis, halo, pad))
    }

    /// Allocate an uninitialised array of this rank's ``axis``-pencil.
    ///
    /// Args:
    ///     axis: 0, 1 or 2 (X-, Y- or Z-pencil).
    ///     dtype: A ``DataType`` member or one of NumPy's ``float32``, ``float64``,
    ///         ``complex64``, ``complex128`` (unlike the operations' ``dtype``, which
    ///         takes ``DataType`` members only), or anything ``numpy.dtype()`` turns into
    ///         one of these (``"float64"``, ``complex``). Anything else raises ``TypeError``.
    ///     halo_extents: Halo cells on both sides of each global axis (``None``: none).
    ///     padding: Padding cells after each global axis (``None``: none).
    ///     fields: ``None`` for one pencil, or ``k >= 1`` for a batch of ``k`` fields
    ///         (the form the operations move in one exchange): shape
    ///         ``(k, *array_shape)``.
    ///
    /// Returns:
    ///     A C-contiguous array of shape ``get_pencil_info(axis, halo_extents,
    ///     padding).array_shape`` (with ``fields``: ``(fields, *array_shape)``): NumPy
    ///     in the CPU variant, CuPy (current device) in the GPU variant. On DIRECT
    ///     grids, arrays of 1 MiB or more live in memory the other ranks of the node
    ///     map (node-shared host memory in the CPU variant, exported device memory of
    ///     the handle's GPU in the GPU variant): when every rank's output of a
    ///     transpose is such an array, each rank writes its chunks straight into the
    ///     others' outputs (one copy instead of two, no workspace pass; on GPUs where
    ///     the copy engine carries every chunk, or with ``CUDECOMP_SINGLE_COPY=1``;
    ///     batches copy once in the CPU variant only). Such memory is zero-filled and
    ///     freed with the last view.
    #[pyo3(signature = (axis, dtype, halo_extents = None, padding = None, *, fields = None))]
    fn empty_pencil<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
        halo_extents: Option<&Bound<'py, PyAny>>,
        padding: Option<&Bound<'py, PyAny>>,
        fields: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.allocate_pencil(py, axis, dtype, halo_extents, padding, fields, false)
    }

    /// As ``empty_pencil``, filled with zeros.
    #[pyo3(signature = (axis, dtype, halo_extents = None, padding = None, *, fields = None))]
    fn zeros_pencil<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
        halo_extents: Option<&Bound<'py, PyAny>>,
        padding: Option<&Bound<'py, PyAny>>,
        fields: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.allocate_pencil(py, axis, dtype, halo_extents, padding, fields, true)
    }

    /// Workspace that transposes need, in *elements* of the operation's dtype.
    ///
    /// The same on every rank. Multiply by ``cudecomp.get_data_type_size(dtype)`` for
    /// bytes.
    fn get_transpose_workspace_size(&self, py: Python<'_>) -> PyResult<i64> {
        self.live(py)?.grid().transpose_workspace_size().py(py)
    }

    /// Workspace that halo updates of this rank's ``axis``-pencil need, in elements.
    ///
    /// Args:
    ///     axis: Pencil orientation (0 = X, 1 = Y, 2 = Z).
    ///     halo_extents: The halo extents of the updates (X, Y, Z).
    ///
    /// Returns:
    ///     Elements of the operation's dtype. Computed from this rank's pencil, so it
    ///     may differ between ranks.
    fn get_halo_workspace_size(
        &self,
        py: Python<'_>,
        axis: &Bound<'_, PyAny>,
        halo_extents: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        let gd = self.live(py)?;
        let axis = int_arg(axis, "axis")?;
        if halo_extents.is_none() {
            return Err(invalid(
                py,
                "halo_extents: expected 3 non-negative ints, got None".into(),
            ));
        }
        let halo = int_triple(py, Some(halo_extents), "halo_extents")?;
        gd.grid().halo_workspace_size(axis, gd.rank(), halo).py(py)
    }

    /// Global rank of the neighbour ``displacement`` steps away along a dimension.
    ///
    /// Args:
    ///     axis: Pencil orientation (0 = X, 1 = Y, 2 = Z) of the caller's data.
    ///     dim: Global dimension to step along (0 = X, 1 = Y, 2 = Z).
    ///     displacement: Number of ranks to step (negative: towards lower indices).
    ///     periodic: Whether to wrap around at the ends of the dimension.
    ///
    /// Returns:
    ///     The neighbour's rank in the handle's communicator, this rank when the
    ///     step lands on itself, or ``-1`` when there is no neighbour (non-periodic,
    ///     beyond the end).
    fn get_shifted_rank(
        &self,
        py: Python<'_>,
        axis: &Bound<'_, PyAny>,
        dim: &Bound<'_, PyAny>,
        displacement: &Bound<'_, PyAny>,
        periodic: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        let gd = self.live(py)?;
        let r = gd
            .grid()
            .shifted_rank(
                int_arg(axis, "axis")?,
                gd.rank(),
                int_arg(dim, "dim")?,
                int_arg(displacement, "displacement")?,
                bool_arg(periodic, "periodic")?,
            )
            .py(py)?;
        Ok(r.map_or(-1, |v| v as i64))
    }

    /// Use the descriptor in a ``with`` block; leaving it calls ``destroy()``.
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Destroy the descriptor (collective) unless already destroyed or its handle finalized.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        owned::leave(&self.state, self.handle.get().is_live(), || {
            self.destroy(py)
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.live(py) {
            Ok(gd) => {
                let g = gd.grid();
                format!(
                    "<cudecomp.GridDesc gdims={:?} pdims={:?} transpose={} halo={}>",
                    g.gdims,
                    g.pdims,
                    g.transpose_backend.enum_name(),
                    g.halo_backend.enum_name()
                )
            }
            Err(_) => "<cudecomp.GridDesc (released)>".into(),
        }
    }
}

impl Drop for GridDesc {
    fn drop(&mut self) {
        owned::warn_if_leaked(
            &self.state,
            self.handle.get().is_live(),
            "cudecomp.GridDesc",
        );
    }
}
