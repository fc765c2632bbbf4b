//! `cudecomp.GridDesc` and `cudecomp.PencilInfo`.

use std::sync::{Arc, Mutex};

use cudecomp_core::config::DataType;

use cudecomp_core::engine::Exec;
use cudecomp_core::geometry;
use cudecomp_core::handle as core;
use cudecomp_core::handle::grid::TransposeOp;
use cudecomp_core::plan::{Direction, HaloSpec, TransposeLayouts};
use cudecomp_core::Error;
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};

use crate::args::{bool_triple, config_object, index_arg, int_arg, int_triple, parse_dtype};
use crate::array::{resolve_dtype, ArrayArg};
use crate::errors::{invalid, log_lines, warn_resource, IntoPy};
use crate::handle::Handle;
use crate::variant;

/// Local layout of one pencil (``cudecompPencilInfo_t``).
///
/// ``shape``, ``lo`` and ``hi`` are in local memory order (fastest axis first; ``lo``/``hi``
/// are inclusive global bounds of the owned interior); ``halo_extents`` and ``padding`` in
/// global order. Arrays holding the pencil have the C-contiguous shape ``array_shape``.
#[pyclass(module = "cudecomp", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PencilInfo {
    info: geometry::PencilInfo,
}

#[pymethods]
impl PencilInfo {
    /// Local extents in memory order, halos and padding included.
    #[getter]
    fn shape(&self) -> (i64, i64, i64) {
        self.info.shape.into()
    }
    /// Inclusive global lower bounds of the interior, in memory order.
    #[getter]
    fn lo(&self) -> (i64, i64, i64) {
        self.info.lo.into()
    }
    /// Inclusive global upper bounds of the interior, in memory order.
    #[getter]
    fn hi(&self) -> (i64, i64, i64) {
        self.info.hi.into()
    }
    /// Global axis stored at each memory position (fastest first).
    #[getter]
    fn order(&self) -> (usize, usize, usize) {
        self.info.order.into()
    }
    /// Halo extents (global order).
    #[getter]
    fn halo_extents(&self) -> (i64, i64, i64) {
        self.info.halo_extents.into()
    }
    /// Padding (global order).
    #[getter]
    fn padding(&self) -> (i64, i64, i64) {
        self.info.padding.into()
    }
    /// Number of elements (product of ``shape``).
    #[getter]
    fn size(&self) -> i64 {
        self.info.size
    }
    /// C-contiguous array shape holding this pencil: ``shape`` reversed.
    #[getter]
    fn array_shape(&self) -> (i64, i64, i64) {
        self.info.array_shape().into()
    }
    /// Slices of the local array (``array_shape``) selecting the cells this rank owns:
    /// halos and padding left out.
    #[getter]
    fn interior_slices<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let i = &self.info;
        let mut out = Vec::with_capacity(3);
        for j in 0..3 {
            let m = 2 - j; // array axis j holds memory position 2 - j
            let start = i.halo_extents[i.order[m]];
            out.push(PySlice::new(
                py,
                start as isize,
                (start + i.hi[m] - i.lo[m] + 1) as isize,
                1,
            ));
        }
        PyTuple::new(py, out)
    }

    /// Slices of a global array of C shape ``(gdims[2], gdims[1], gdims[0])`` (Z, Y, X)
    /// selecting the cells this rank owns; see ``to_global_axes``.
    #[getter]
    fn global_slices<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let i = &self.info;
        let mut out = Vec::with_capacity(3);
        for j in 0..3 {
            let g = 2 - j; // natural axis j is global axis Z, Y, X
            let m = i.position(g);
            out.push(PySlice::new(
                py,
                i.lo[m] as isize,
                (i.hi[m] + 1) as isize,
                1,
            ));
        }
        PyTuple::new(py, out)
    }

    /// The axis permutation that brings the local array's axes into the global Z, Y, X
    /// order: ``global[info.global_slices] = local[info.interior_slices].transpose(info.to_global_axes)``.
    #[getter]
    fn to_global_axes(&self) -> (usize, usize, usize) {
        let p = |j: usize| 2 - self.info.position(2 - j);
        (p(0), p(1), p(2))
    }

    fn __repr__(&self) -> String {
        let i = &self.info;
        let t = |v: [i64; 3]| format!("({}, {}, {})", v[0], v[1], v[2]);
        format!(
            "PencilInfo(shape={}, lo={}, hi={}, order=({}, {}, {}), halo_extents={}, padding={}, size={})",
            t(i.shape),
            t(i.lo),
            t(i.hi),
            i.order[0],
            i.order[1],
            i.order[2],
            t(i.halo_extents),
            t(i.padding),
            i.size
        )
    }

    /// Pickling support (``comm.gather(info)``): the fields, rebuilt by ``_restore``.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let i = &slf.get().info;
        let args = (
            i.shape,
            i.lo,
            i.hi,
            i.order,
            i.halo_extents,
            i.padding,
            i.size,
        )
            .into_pyobject(py)?;
        Ok((slf.get_type().getattr("_restore")?, args))
    }

    /// Rebuilds a pickled ``PencilInfo``.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn _restore(
        shape: [i64; 3],
        lo: [i64; 3],
        hi: [i64; 3],
        order: [usize; 3],
        halo_extents: [i64; 3],
        padding: [i64; 3],
        size: i64,
    ) -> PencilInfo {
        PencilInfo {
            info: geometry::PencilInfo {
                shape,
                lo,
                hi,
                order,
                halo_extents,
                padding,
                size,
            },
        }
    }
}

/// A decomposition created by ``Handle.create_grid`` (not constructible directly).
#[pyclass(module = "cudecomp", frozen)]
pub struct GridDesc {
    handle: Py<Handle>,
    state: Mutex<Option<Arc<core::GridDesc>>>,
    /// What the autotuner measured (`cudecomp.AutotuneResult`), when it ran.
    autotune: Option<Py<PyAny>>,
}

/// Array and layout arguments of one transpose.
pub struct TransposeCall<'a, 'py> {
    pub input: &'a Bound<'py, PyAny>,
    pub out: Option<&'a Bound<'py, PyAny>>,
    pub work: Option<&'a Bound<'py, PyAny>>,
    pub dtype: Option<&'a Bound<'py, PyAny>>,
    pub input_halo_extents: Option<&'a Bound<'py, PyAny>>,
    pub output_halo_extents: Option<&'a Bound<'py, PyAny>>,
    pub input_padding: Option<&'a Bound<'py, PyAny>>,
    pub output_padding: Option<&'a Bound<'py, PyAny>>,
    pub stream: Option<&'a Bound<'py, PyAny>>,
}

/// Arguments of one halo update.
pub struct HaloCall<'a, 'py> {
    pub input: &'a Bound<'py, PyAny>,
    pub halo_extents: &'a Bound<'py, PyAny>,
    pub halo_periods: Option<&'a Bound<'py, PyAny>>,
    pub dim: &'a Bound<'py, PyAny>,
    pub padding: Option<&'a Bound<'py, PyAny>>,
    pub work: Option<&'a Bound<'py, PyAny>>,
    pub dtype: Option<&'a Bound<'py, PyAny>>,
    pub stream: Option<&'a Bound<'py, PyAny>>,
}

impl GridDesc {
    /// Wraps a core descriptor owned by `handle`, with the autotuner's result if it ran.
    pub fn new(handle: Py<Handle>, gd: Arc<core::GridDesc>, autotune: Option<Py<PyAny>>) -> Self {
        GridDesc {
            handle,
            state: Mutex::new(Some(gd)),
            autotune,
        }
    }

    /// InvalidUsageError unless `h` is the handle that created this grid.
    pub fn check_owner(&self, py: Python<'_>, h: &Bound<'_, Handle>) -> PyResult<()> {
        if !self.handle.bind(py).is(h) {
            return Err(invalid(
                py,
                "grid: expected a GridDesc created by this Handle, got one of another Handle"
                    .into(),
            ));
        }
        Ok(())
    }

    fn live(&self, py: Python<'_>) -> PyResult<Arc<core::GridDesc>> {
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
        let (op, input, out, out_obj, work, exec) =
            agreed(py, &gd, direction.method_name(), ready)?;
        // SAFETY: the array objects are referenced by the caller for the whole call and
        // were checked to be C-contiguous and of the sizes recorded; device work is ordered
        // on the operation's stream, which the caller keeps alive as documented.
        let (i, o, w) = unsafe { (input.buf(), out.buf(), work.as_ref().map(|w| w.buf())) };
        py.detach(|| gd.transpose(&op, i, o, w, exec)).py(py)?;
        Ok(out_obj)
    }

    fn update_halos(&self, py: Python<'_>, axis: usize, c: HaloCall<'_, '_>) -> PyResult<()> {
        let gd = self.live(py)?;
        let what = ["update_halos_x", "update_halos_y", "update_halos_z"][axis];
        let ready = prepare_halo(py, &gd, axis, &c);
        let (spec, dtype, data, work, exec) = agreed(py, &gd, what, ready)?;
        // SAFETY: as in `transpose`.
        let (d, w) = unsafe { (data.buf(), work.as_ref().map(|w| w.buf())) };
        py.detach(|| gd.update_halos(&spec, dtype, d, w, exec))
            .py(py)
    }
}

/// In checking mode (`CUDECOMP_CHECK_COLLECTIVES=1`), an argument error found here is
/// shared with the other ranks, which wait in the operation's agreement, so that they
/// raise too instead of hanging; the error itself is returned unchanged.
fn agreed<T>(py: Python<'_>, gd: &core::GridDesc, what: &str, ready: PyResult<T>) -> PyResult<T> {
    if let Err(e) = &ready {
        if gd.checks_collectives() {
            let local = Err(Error::InvalidUsage(e.to_string()));
            // The agreement fails (this rank failed); its own error is the one to raise.
            let _ = py.detach(|| gd.agree(what, local));
        }
    }
    ready
}

type PreparedTranspose<'py> = (
    TransposeOp,
    ArrayArg,
    ArrayArg,
    Bound<'py, PyAny>,
    Option<ArrayArg>,
    Exec,
);

/// Parses and checks a transpose's arguments (allocating `out` when omitted).
fn prepare_transpose<'py>(
    py: Python<'py>,
    gd: &core::GridDesc,
    direction: Direction,
    c: &TransposeCall<'_, 'py>,
) -> PyResult<PreparedTranspose<'py>> {
    let explicit = parse_dtype(py, c.dtype)?;
    let layouts = TransposeLayouts {
        input_halo: int_triple(py, c.input_halo_extents, "input_halo_extents")?,
        input_padding: int_triple(py, c.input_padding, "input_padding")?,
        output_halo: int_triple(py, c.output_halo_extents, "output_halo_extents")?,
        output_padding: int_triple(py, c.output_padding, "output_padding")?,
    };
    let plan = gd.transpose_plan(direction, &layouts).py(py)?;
    let input = variant::array(py, gd, c.input, "input", false)?;
    let dtype: DataType = resolve_dtype(py, explicit, &[&input])?;
    input.require_shape(
        py,
        plan.input.array_shape(),
        "the input pencil's PencilInfo.array_shape with these halos and padding",
    )?;
    let exec = variant::exec(py, c.stream, c.input)?;
    let out_obj = match c.out.filter(|o| !o.is_none()) {
        Some(o) => o.clone(),
        None => variant::allocate_output(py, c.input, plan.output.array_shape(), dtype, c.stream)?,
    };
    let out = variant::array(py, gd, &out_obj, "out", false)?;
    resolve_dtype(py, Some(dtype), &[&out])?;
    out.require_writable(py)?;
    out.require_shape(
        py,
        plan.output.array_shape(),
        "the output pencil's PencilInfo.array_shape with these halos and padding",
    )?;
    let work = work_arg(py, gd, c.work)?;
    let op = TransposeOp {
        direction,
        layouts,
        dtype,
    };
    Ok((op, input, out, out_obj, work, exec))
}

/// Parses and checks a halo update's arguments. When nothing moves (zero extent along
/// `dim`, or no neighbour), the array may have any shape, as upstream returns before
/// looking at it; its type is still checked.
fn prepare_halo(
    py: Python<'_>,
    gd: &core::GridDesc,
    axis: usize,
    c: &HaloCall<'_, '_>,
) -> PyResult<(HaloSpec, DataType, ArrayArg, Option<ArrayArg>, Exec)> {
    let explicit = parse_dtype(py, c.dtype)?;
    if c.halo_extents.is_none() {
        return Err(invalid(
            py,
            "halo_extents: expected 3 non-negative ints, got None".into(),
        ));
    }
    let spec = HaloSpec {
        axis,
        dim: index_arg(c.dim, "dim")?,
        halo: int_triple(py, Some(c.halo_extents), "halo_extents")?,
        periods: bool_triple(py, c.halo_periods, "halo_periods")?,
        padding: int_triple(py, c.padding, "padding")?,
    };
    // Checks `dim` and the extents; `None` when nothing moves.
    let plan = gd.halo_plan(&spec).py(py)?;
    let data = variant::array(py, gd, c.input, "input", plan.is_none())?;
    let dtype = resolve_dtype(py, explicit, &[&data]).or_else(|e| match plan {
        None => Ok(explicit.unwrap_or(DataType::Double)),
        Some(_) => Err(e),
    })?;
    if let Some(plan) = &plan {
        data.require_writable(py)?;
        data.require_shape(
            py,
            plan.info.array_shape(),
            "the pencil's PencilInfo.array_shape with these halos and padding",
        )?;
    }
    let work = match plan {
        Some(_) => work_arg(py, gd, c.work)?,
        None => {
            if let Some(w) = c.work.filter(|w| !w.is_none()) {
                variant::array(py, gd, w, "work", true)?;
            }
            None
        }
    };
    let exec = variant::exec(py, c.stream, c.input)?;
    Ok((spec, dtype, data, work, exec))
}

impl GridDesc {
    fn allocate_pencil<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
        halo_extents: Option<&Bound<'py, PyAny>>,
        padding: Option<&Bound<'py, PyAny>>,
        zero: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let gd = self.live(py)?;
        let axis = int_arg(axis, "axis")?;
        let halo = int_triple(py, halo_extents, "halo_extents")?;
        let pad = int_triple(py, padding, "padding")?;
        let info = gd.grid().pencil_info(axis, gd.rank(), halo, pad).py(py)?;
        py.import("cudecomp._alloc")?.call_method1(
            "allocate",
            (info.array_shape(), dtype, zero, variant::CPU_ONLY),
        )
    }
}

/// Parses the optional `work` argument (any shape, writable).
fn work_arg(
    py: Python<'_>,
    gd: &core::GridDesc,
    w: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<ArrayArg>> {
    let Some(w) = w.filter(|w| !w.is_none()) else {
        return Ok(None);
    };
    let w = variant::array(py, gd, w, "work", true)?;
    w.require_writable(py)?;
    Ok(Some(w))
}

/// Emits the four transposes and three halo updates from one template each.
macro_rules! grid_methods {
    (
        transposes { $( $tname:ident => $dir:expr, $tdoc:literal; )* }
        halos { $( $hname:ident => $axis:expr, $hdoc:literal; )* }
    ) => {
        #[pymethods]
        impl GridDesc {
            $(
                #[doc = $tdoc]
                #[doc = ""]
                #[doc = "Collective. Returns ``out`` (allocated when omitted). In-place: pass ``out`` sharing"]
                #[doc = "``input``'s data pointer; the buffer must hold the larger pencil. ``work=None`` uses"]
                #[doc = "the handle's automatic workspace."]
                #[pyo3(signature = (input, out = None, *, work = None, dtype = None, input_halo_extents = None, output_halo_extents = None, input_padding = None, output_padding = None, stream = None))]
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
                ) -> PyResult<Bound<'py, PyAny>> {
                    self.transpose(
                        py,
                        $dir,
                        TransposeCall { input, out, work, dtype, input_halo_extents, output_halo_extents, input_padding, output_padding, stream },
                    )
                }
            )*
            $(
                #[doc = $hdoc]
                #[doc = ""]
                #[doc = "Collective; updates the halo cells along global dimension ``dim`` in place."]
                #[doc = "``halo_periods=None`` means no dimension is periodic."]
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
        transpose_x_to_y => Direction::XToY, "Global transpose from X-pencils to Y-pencils.";
        transpose_y_to_z => Direction::YToZ, "Global transpose from Y-pencils to Z-pencils.";
        transpose_z_to_y => Direction::ZToY, "Global transpose from Z-pencils to Y-pencils.";
        transpose_y_to_x => Direction::YToX, "Global transpose from Y-pencils to X-pencils.";
    }
    halos {
        update_halos_x => 0, "Halo update of an X-pencil array.";
        update_halos_y => 1, "Halo update of a Y-pencil array.";
        update_halos_z => 2, "Halo update of a Z-pencil array.";
    }
}

#[pymethods]
impl GridDesc {
    /// Collective: releases the descriptor. Any later use raises InvalidUsageError. With
    /// the performance report on, its summary is logged (logger ``cudecomp``) on rank 0.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.get().live(py)?;
        let gd = self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        let gd =
            gd.ok_or_else(|| invalid(py, "destroy(): the GridDesc was already destroyed".into()))?;
        if let Some(summary) = py.detach(|| gd.destroy()).py(py)? {
            let lines: Vec<String> = summary.lines().map(str::to_owned).collect();
            log_lines(py, &lines)?;
        }
        Ok(())
    }

    /// What the autotuner measured and chose (``cudecomp.AutotuneResult``), or ``None``
    /// when the grid was created without a search.
    #[getter]
    fn autotune_result(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.autotune.as_ref().map(|r| r.clone_ref(py))
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

    /// Local layout of this rank's ``axis``-pencil (0 = X, 1 = Y, 2 = Z).
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
        Ok(PencilInfo { info })
    }

    /// A new C-contiguous array of this rank's ``axis``-pencil with the given halos and
    /// padding (shape ``get_pencil_info(axis, halo_extents, padding).array_shape``),
    /// uninitialised: a NumPy array (CPU variant) or a CuPy array on the current device.
    /// ``dtype`` is a ``DataType`` member or one of the four NumPy dtypes.
    #[pyo3(signature = (axis, dtype, halo_extents = None, padding = None))]
    fn empty_pencil<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
        halo_extents: Option<&Bound<'py, PyAny>>,
        padding: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.allocate_pencil(py, axis, dtype, halo_extents, padding, false)
    }

    /// As ``empty_pencil``, filled with zeros.
    #[pyo3(signature = (axis, dtype, halo_extents = None, padding = None))]
    fn zeros_pencil<'py>(
        &self,
        py: Python<'py>,
        axis: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
        halo_extents: Option<&Bound<'py, PyAny>>,
        padding: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.allocate_pencil(py, axis, dtype, halo_extents, padding, true)
    }

    /// Workspace elements the transposes need (multiply by the dtype size for bytes).
    fn get_transpose_workspace_size(&self, py: Python<'_>) -> PyResult<i64> {
        self.live(py)?.grid().transpose_workspace_size().py(py)
    }

    /// Workspace elements halo updates of this rank's ``axis``-pencil need.
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

    /// Global rank ``displacement`` steps away along ``dim`` for this rank's
    /// ``axis``-pencil; -1 when there is no neighbour.
    fn get_shifted_rank(
        &self,
        py: Python<'_>,
        axis: &Bound<'_, PyAny>,
        dim: &Bound<'_, PyAny>,
        displacement: &Bound<'_, PyAny>,
        periodic: bool,
    ) -> PyResult<i64> {
        let gd = self.live(py)?;
        let r = gd
            .grid()
            .shifted_rank(
                int_arg(axis, "axis")?,
                gd.rank(),
                int_arg(dim, "dim")?,
                int_arg(displacement, "displacement")?,
                periodic,
            )
            .py(py)?;
        Ok(r.map_or(-1, |v| v as i64))
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Leaving a ``with`` block destroys the descriptor (collective) unless it was
    /// destroyed already or its handle was finalized; exceptions propagate.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let live = self.state.lock().map(|s| s.is_some()).unwrap_or(false);
        if live && self.handle.get().live(py).is_ok() {
            self.destroy(py)?;
        }
        Ok(false)
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
        if self.state.get_mut().map(|s| s.is_some()).unwrap_or(false) {
            warn_resource("cudecomp.GridDesc was garbage-collected without destroy(); call destroy() collectively");
        }
    }
}
