//! `cudecomp.Redistribution` and the two kinds of layout it moves between:
//! `cudecomp.PencilLayout` (from `GridDesc.pencil`) and `cudecomp.BoxLayout`.

use std::sync::{Arc, Mutex};

use cudecomp_core as core;
use cudecomp_core::{Box3, DataType, Distribution, Error, Exec, TransposeBackend};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

use crate::args::{class, int_triple, parse_dtype};
use crate::array::resolve_dtype;
use crate::errors::{invalid, local_error, log_lines, IntoPy};
use crate::grid::GridDesc;
use crate::handle::Handle;
use crate::operation_args::{batch_array, work_arg};
use crate::owned;
use crate::pencil::PencilInfo;
use crate::variant;

/// One side of a redistribution: a pencil of a grid, with its halos and padding.
///
/// Made by [`GridDesc.pencil`][cudecomp.GridDesc.pencil]; it keeps its grid alive.
#[pyclass(module = "cudecomp", frozen)]
pub(crate) struct PencilLayout {
    grid: Py<GridDesc>,
    axis: usize,
    halo: [i64; 3],
    padding: [i64; 3],
}

impl PencilLayout {
    /// The layout of `axis`-pencils of `grid`.
    pub(crate) fn new(grid: Py<GridDesc>, axis: usize, halo: [i64; 3], padding: [i64; 3]) -> Self {
        PencilLayout {
            grid,
            axis,
            halo,
            padding,
        }
    }
}

#[pymethods]
impl PencilLayout {
    /// The grid descriptor.
    #[getter]
    fn grid(&self, py: Python<'_>) -> Py<GridDesc> {
        self.grid.clone_ref(py)
    }

    /// The pencil axis: 0 (X), 1 (Y) or 2 (Z).
    #[getter]
    fn axis(&self) -> usize {
        self.axis
    }

    /// Halo cells on each side of each global axis (X, Y, Z).
    #[getter]
    fn halo_extents(&self) -> (i64, i64, i64) {
        (self.halo[0], self.halo[1], self.halo[2])
    }

    /// Padding cells after the end of each global axis (X, Y, Z).
    #[getter]
    fn padding(&self) -> (i64, i64, i64) {
        (self.padding[0], self.padding[1], self.padding[2])
    }

    fn __repr__(&self) -> String {
        format!(
            "<cudecomp.PencilLayout axis={} halo_extents={:?} padding={:?}>",
            self.axis, self.halo, self.padding
        )
    }
}

/// One side of a redistribution: this rank's box of the global grid.
///
/// The cells ``lo[i]..=hi[i]`` along each global axis (X, Y, Z), both ends inclusive as in
/// ``PencilInfo``, stored as a C-contiguous array of shape ``(nz, ny, nx)`` (X fastest),
/// without halos. Each rank gives its own box; together they must cover the global grid,
/// each cell once. A box with ``hi[i] < lo[i]`` along some axis holds no cells (its array
/// has shape ``(0, 0, 0)``): gathering to one rank is the layout where that rank's box is
/// the whole grid and every other rank's is empty.
///
/// Args:
///     lo: The first cell along X, Y, Z (non-negative ints).
///     hi: The last cell along X, Y, Z (inclusive).
#[pyclass(module = "cudecomp", frozen)]
pub(crate) struct BoxLayout {
    lo: [i64; 3],
    hi: [i64; 3],
    /// The core's box (lo and extents; the one empty box where it holds no cells).
    cells: Box3,
}

impl BoxLayout {
    /// The core's box (lo and extents).
    pub(crate) fn box3(&self) -> Box3 {
        self.cells
    }

    fn of_bounds(py: Python<'_>, lo: [i64; 3], hi: [i64; 3]) -> PyResult<Self> {
        let cells = Box3::from_bounds("BoxLayout", lo, hi).py(py)?;
        Ok(BoxLayout { lo, hi, cells })
    }
}

#[pymethods]
impl BoxLayout {
    #[new]
    fn new(py: Python<'_>, lo: &Bound<'_, PyAny>, hi: &Bound<'_, PyAny>) -> PyResult<Self> {
        let lo = int_triple(py, Some(lo), "lo")?;
        let hi = signed_triple(hi, "hi")?;
        BoxLayout::of_bounds(py, lo, hi)
    }

    /// Return a box with no cells (this rank holds nothing on this side).
    #[staticmethod]
    fn empty() -> Self {
        BoxLayout {
            lo: [0; 3],
            hi: [-1; 3],
            cells: Box3::default(),
        }
    }

    /// Return the whole grid of ``gdims`` cells along X, Y, Z (this rank holds it all).
    #[staticmethod]
    fn whole(py: Python<'_>, gdims: &Bound<'_, PyAny>) -> PyResult<Self> {
        let g = int_triple(py, Some(gdims), "gdims")?;
        if g.iter().any(|&n| n < 1) {
            return Err(invalid(
                py,
                format!("gdims: expected positive extents along X, Y, Z, got {g:?}"),
            ));
        }
        BoxLayout::of_bounds(py, [0; 3], [g[0] - 1, g[1] - 1, g[2] - 1])
    }

    /// The first cell along X, Y, Z.
    #[getter]
    fn lo(&self) -> (i64, i64, i64) {
        (self.lo[0], self.lo[1], self.lo[2])
    }

    /// The last cell along X, Y, Z (inclusive).
    #[getter]
    fn hi(&self) -> (i64, i64, i64) {
        (self.hi[0], self.hi[1], self.hi[2])
    }

    /// Describe the box's array as a ``PencilInfo`` (X fastest, no halos).
    #[getter]
    fn info(&self) -> PencilInfo {
        PencilInfo::from(core::PencilInfo::of_box(&self.cells))
    }

    /// The C-contiguous array shape ``(nz, ny, nx)`` of the box (empty: ``(0, 0, 0)``).
    #[getter]
    fn array_shape(&self) -> (i64, i64, i64) {
        let b = self.cells;
        (b.len[2], b.len[1], b.len[0])
    }

    fn __repr__(&self) -> String {
        format!("cudecomp.BoxLayout(lo={:?}, hi={:?})", self.lo, self.hi)
    }
}

/// Three ints, any sign (`hi` of an empty box is below `lo`).
fn signed_triple(v: &Bound<'_, PyAny>, what: &str) -> PyResult<[i64; 3]> {
    let items: Vec<Bound<'_, PyAny>> = v
        .try_iter()
        .and_then(|it| it.collect::<PyResult<Vec<_>>>())
        .map_err(|_| PyTypeError::new_err(format!("{what}: expected 3 ints")))?;
    if items.len() != 3 {
        return Err(invalid(
            v.py(),
            format!("{what}: expected 3 ints, got {}", items.len()),
        ));
    }
    let mut out = [0i64; 3];
    for (o, item) in out.iter_mut().zip(&items) {
        *o = crate::args::int_arg(item, what)?;
    }
    Ok(out)
}

static TRANSPOSE_BACKEND: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `backend=` argument: `None` or a `cudecomp.TransposeCommBackend` member.
fn parse_backend(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<TransposeBackend>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let cls = class(
        py,
        &TRANSPOSE_BACKEND,
        "cudecomp._enums",
        "TransposeCommBackend",
    )?;
    if !v.is_instance(cls.as_any())? {
        return Err(PyTypeError::new_err(format!(
            "backend: expected a cudecomp.TransposeCommBackend member or None, got {} ({})",
            v.repr()?,
            v.get_type().name()?
        )));
    }
    let code: i32 = v.extract()?;
    TransposeBackend::from_i32(code).map(Some).ok_or_else(|| {
        invalid(
            py,
            format!("backend: unknown TransposeCommBackend value {code}"),
        )
    })
}

/// A side as the core takes it: the grid's live descriptor kept in `keep`.
fn side<'py>(
    py: Python<'py>,
    v: &Bound<'py, PyAny>,
    what: &str,
    handle: &Bound<'py, Handle>,
) -> PyResult<Side> {
    if let Ok(p) = v.cast::<PencilLayout>() {
        let p = p.get();
        let g = p.grid.bind(py).get();
        g.check_owner(py, handle)?;
        return Ok(Side::Pencil(g.live(py)?, p.axis, p.halo, p.padding));
    }
    if let Ok(b) = v.cast::<BoxLayout>() {
        return Ok(Side::Box(b.get().box3()));
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected a cudecomp.PencilLayout (GridDesc.pencil) or a cudecomp.BoxLayout, got {}",
        v.get_type().name()?
    )))
}

/// A parsed side, owning what the core's [`Distribution`] borrows.
enum Side {
    Pencil(Arc<core::GridDesc>, usize, [i64; 3], [i64; 3]),
    Box(Box3),
}

impl Side {
    fn distribution(&self) -> Distribution<'_> {
        match self {
            Side::Pencil(g, axis, halo, padding) => Distribution::Pencil {
                grid: g,
                axis: *axis,
                halo: *halo,
                padding: *padding,
            },
            Side::Box(b) => Distribution::Box(*b),
        }
    }
}

/// `Handle.create_redistribution`.
pub(crate) fn create(
    handle: &Bound<'_, Handle>,
    src: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    backend: Option<&Bound<'_, PyAny>>,
) -> PyResult<Redistribution> {
    let py = handle.py();
    let h = handle.get().live(py)?;
    let parsed = (|| -> PyResult<_> {
        Ok((
            side(py, src, "src", handle)?,
            side(py, dst, "dst", handle)?,
            parse_backend(py, backend)?,
        ))
    })();
    let (s, d, backend) = match parsed {
        Ok(p) => p,
        Err(e) => {
            // The other ranks wait in the creation's agreement: join it with the error.
            let local = Err(local_error(py, &e));
            let _ = py.detach(|| h.settle("create_redistribution", &core::Fields::new(), local));
            return Err(e);
        }
    };
    let made = py
        .detach(|| h.create_redistribution(&s.distribution(), &d.distribution(), backend))
        .py(py)?;
    Ok(Redistribution {
        handle: handle.clone().unbind(),
        state: Mutex::new(Some(Arc::new(made))),
    })
}

/// A global array moved from one decomposition to another, in one exchange.
///
/// Made by [`Handle.create_redistribution`][cudecomp.Handle.create_redistribution]
/// (collective) once, run as often as needed. Each side is a pencil of one of the
/// handle's grids (``GridDesc.pencil(axis, halo_extents, padding)``: any process grid,
/// pencil axis, memory order, halos and padding; the grids may differ in everything but
/// ``gdims``) or a box per rank (``BoxLayout``: bricks, or gather to and scatter from one
/// rank). Every cell of the source's interior lands in the destination's, bit for bit;
/// the destination's halo and padding cells are left as they are. It runs on the engine
/// and backends of the transposes (the source grid's transpose backend unless
/// ``backend`` says otherwise), with ``stream``, ``out``, ``work`` and the checking mode
/// as they do. Release it with ``destroy()`` on every rank (or use it as a context
/// manager) before finalizing its handle.
#[pyclass(module = "cudecomp", frozen)]
pub(crate) struct Redistribution {
    handle: Py<Handle>,
    state: Mutex<Option<Arc<core::Redistribution>>>,
}

impl Redistribution {
    pub(crate) fn live(&self, py: Python<'_>) -> PyResult<Arc<core::Redistribution>> {
        self.handle.get().live(py)?;
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                invalid(
                    py,
                    "the Redistribution was destroyed: expected a live Redistribution".into(),
                )
            })
    }
}

#[pymethods]
impl Redistribution {
    /// Move ``input`` (this rank's source array) into the destination layout (collective).
    ///
    /// Args:
    ///     input: This rank's source array: C-contiguous, of shape
    ///         ``input_info.array_shape`` (NumPy in the CPU variant, a CUDA array on the
    ///         handle's device in the GPU variant). Only its interior is read. A 4-D
    ///         array ``(k, *input_info.array_shape)`` is a batch of ``k`` fields moved in
    ///         one exchange (out of place; ``out`` is then the batch of ``k`` outputs and
    ///         an explicit ``work`` holds ``k`` times the workspace).
    ///     out: The destination array, writable, of shape ``output_info.array_shape``;
    ///         ``None`` allocates it (as the transposes do). In place: an ``out`` that
    ///         starts at the address of ``input`` and holds both arrays.
    ///     work: Workspace: ``None`` (the handle's), or a writable array of at least
    ///         ``get_workspace_size() * get_data_type_size(dtype)`` bytes, disjoint from
    ///         the data.
    ///     dtype: A ``cudecomp.DataType`` member, or ``None`` to infer it from the arrays.
    ///     stream: GPU variant: the CUDA stream (same forms as for the transposes);
    ///         ignored by the CPU variant.
    ///
    /// Returns:
    ///     ``out``, or the newly allocated output.
    ///
    /// Raises:
    ///     InvalidUsageError: Wrong shape, dtype, contiguity, writability, overlap or
    ///         workspace size, a destroyed object or finalized handle; with
    ///         ``CUDECOMP_CHECK_COLLECTIVES=1``, also on every rank when one rank's
    ///         arguments are wrong.
    ///     TypeError: Arguments of the wrong Python type.
    #[pyo3(signature = (input, out = None, *, work = None, dtype = None, stream = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        input: &Bound<'py, PyAny>,
        out: Option<&Bound<'py, PyAny>>,
        work: Option<&Bound<'py, PyAny>>,
        dtype: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let r = self.live(py)?;
        let prepared = prepare_run(py, &r, input, out, work, dtype, stream);
        if let Err(e) = &prepared {
            // Checking mode: the other ranks wait in the run's agreement.
            let local = Err(Error::InvalidUsage(e.to_string()));
            let _ = py.detach(|| r.refuse_run(local));
        }
        let (dtype, input, output, out_obj, work, exec) = prepared?;
        py.detach(|| r.run(dtype, input, output, work, exec))
            .py(py)?;
        Ok(out_obj)
    }

    /// The source array of this rank: shape, position, halos and padding.
    #[getter]
    fn input_info(&self, py: Python<'_>) -> PyResult<PencilInfo> {
        Ok(PencilInfo::from(*self.live(py)?.input()))
    }

    /// The destination array of this rank.
    #[getter]
    fn output_info(&self, py: Python<'_>) -> PyResult<PencilInfo> {
        Ok(PencilInfo::from(*self.live(py)?.output()))
    }

    /// Global extents along X, Y, Z.
    #[getter]
    fn gdims(&self, py: Python<'_>) -> PyResult<(i64, i64, i64)> {
        let g = self.live(py)?.gdims();
        Ok((g[0], g[1], g[2]))
    }

    /// The transpose backend that runs it (a ``TransposeCommBackend`` value).
    #[getter]
    fn backend(&self, py: Python<'_>) -> PyResult<i32> {
        Ok(self.live(py)?.backend() as i32)
    }

    /// Whether every rank's source and destination arrays are the same.
    ///
    /// The same on every rank: a run then only copies, and the source array may stand for
    /// the destination.
    #[getter]
    fn is_identity(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.live(py)?.is_identity())
    }

    /// Workspace a run needs, in elements of its dtype (the same on every rank).
    fn get_workspace_size(&self, py: Python<'_>) -> PyResult<i64> {
        Ok(self.live(py)?.workspace_elems())
    }

    /// Release it (collective). Any later use raises ``InvalidUsageError``.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.live(py)?;
        let summary = py.detach(|| r.destroy());
        if r.is_released() {
            self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        let summary = summary.py(py)?;
        if let Some(summary) = summary {
            let lines: Vec<String> = summary.lines().map(str::to_owned).collect();
            log_lines(py, &lines)?;
        }
        Ok(())
    }

    /// Use it in a ``with`` block; leaving it calls ``destroy()``.
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Destroy it (collective) unless already destroyed or its handle finalized.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        owned::leave(&self.state, self.handle.get().is_live(), || {
            self.destroy(py)
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.live(py) {
            Ok(r) => format!(
                "<cudecomp.Redistribution gdims={:?} backend={}>",
                r.gdims(),
                r.backend().enum_name()
            ),
            Err(_) => "<cudecomp.Redistribution (released)>".into(),
        }
    }
}

impl Drop for Redistribution {
    fn drop(&mut self) {
        owned::warn_if_leaked(
            &self.state,
            self.handle.get().is_live(),
            "cudecomp.Redistribution",
        );
    }
}

/// A run's arguments, parsed: dtype, arrays, the output object, workspace, where it runs.
type PreparedRun<'py> = (
    DataType,
    core::Array,
    core::Array,
    Bound<'py, PyAny>,
    Option<core::Array>,
    Exec,
);

/// Parses a run's arguments (allocating `out` when omitted); the core checks them.
fn prepare_run<'py>(
    py: Python<'py>,
    r: &core::Redistribution,
    input: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    work: Option<&Bound<'py, PyAny>>,
    dtype: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<PreparedRun<'py>> {
    let explicit = parse_dtype(py, dtype)?;
    let inp = batch_array(py, input, "input")?;
    let dtype = resolve_dtype(py, explicit, &[&inp])?;
    let exec = variant::exec(py, stream, input)?;
    let out_obj = match out.filter(|o| !o.is_none()) {
        Some(o) => o.clone(),
        None => {
            let shape = r.output().array_shape();
            let shape = match inp.shape.as_slice() {
                [k, _, _, _] => [&[*k][..], &shape].concat(),
                _ => shape.to_vec(),
            };
            variant::allocate_output(py, input, shape, dtype, stream)?
        }
    };
    let o = batch_array(py, &out_obj, "out")?;
    resolve_dtype(py, Some(dtype), &[&o])?;
    let work = work_arg(py, work)?;
    // SAFETY: as in the transposes: the objects live for the whole call, were checked to
    // be C-contiguous, and device work is ordered on the call's stream.
    let (input, output, work) = unsafe { (inp.array(), o.array(), work.map(|w| w.array())) };
    Ok((dtype, input, output, out_obj, work, exec))
}
