//! `cudecomp.Handle`: binds MPI (through mpi4py) and owns the workspace.

use std::sync::{Arc, Mutex};

use cudecomp_core as core;
use cudecomp_core::{Fields, MpiDescription, Settings};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{autotune_options_class, grid_config, int_arg, read_autotune_options};
use crate::errors::{invalid, local_error, log_lines, warn_notices, warn_resource, IntoPy};
use crate::grid::GridDesc;
use crate::pencil::PencilInfo;
use crate::redistribution::Redistribution;
use crate::variant;

/// The library handle: one per MPI communicator, shared by every grid built on it.
///
/// Args:
///     mpi_comm: An initialised ``mpi4py.MPI.Comm``, an intracommunicator (an
///         intercommunicator, ``MPI.COMM_NULL`` or a finalized MPI raises
///         ``InvalidUsageError``); every rank of it must construct the handle
///         (collective). The handle works on a private duplicate of it; keep MPI
///         initialised until ``finalize()``: after ``MPI.Finalize()`` every method
///         raises ``InvalidUsageError``.
///
/// The GPU variant binds the CUDA device that is current when the handle is created
/// (select it first, e.g. with ``cupy.cuda.Device(local_rank).use()``) and raises
/// ``CudaError`` where no CUDA driver is found.
///
/// Use it as a context manager (``with cudecomp.Handle(comm) as handle:``) or call
/// ``finalize()`` yourself, on every rank, before MPI is finalised. Python's garbage
/// collector never runs collective cleanup: a handle collected without ``finalize()``
/// emits a ``ResourceWarning``. ``create_grid``, ``destroy`` and ``finalize`` are
/// collective on the handle's communicator: never call them from several threads at
/// once.
#[pyclass(module = "cudecomp", frozen)]
pub(crate) struct Handle {
    state: Mutex<Option<core::Handle>>,
    rank: usize,
    nranks: usize,
}

impl Handle {
    /// The live core handle, or InvalidUsageError after `finalize()` (the core refuses
    /// every operation once MPI is finalised).
    pub(crate) fn live(&self, py: Python<'_>) -> PyResult<core::Handle> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                invalid(
                    py,
                    "the Handle was finalized: expected a live Handle".into(),
                )
            })
    }

    /// True until `finalize()`.
    pub(crate) fn is_live(&self) -> bool {
        self.state.lock().map(|s| s.is_some()).unwrap_or(false)
    }
}

/// What the core needs to bind to the MPI library mpi4py loaded, from `cudecomp._mpi`.
fn describe(py: Python<'_>, comm: &Bound<'_, PyAny>) -> PyResult<MpiDescription> {
    let d = py
        .import("cudecomp._mpi")?
        .call_method1("describe", (comm,))?;
    let handle = |k: &str| -> PyResult<u64> { Ok(d.getattr(k)?.extract::<i128>()? as u64) };
    Ok(MpiDescription {
        library: d.getattr("library")?.extract()?,
        handle_bytes: d.getattr("handle_bytes")?.extract()?,
        comm: handle("comm")?,
        byte: handle("byte")?,
        request_null: handle("request_null")?,
        status_bytes: d.getattr("status_bytes")?.extract()?,
        undefined: d.getattr("undefined")?.extract()?,
    })
}

#[pymethods]
impl Handle {
    #[new]
    fn new(py: Python<'_>, mpi_comm: &Bound<'_, PyAny>) -> PyResult<Self> {
        let d = describe(py, mpi_comm)?;
        // Every CUDECOMP_* variable, read once; a bad one fails on every rank inside the
        // creation's agreement.
        let settings = Settings::from_env();
        let memory = variant::memory(py, settings.as_ref().ok())?;
        let h = py
            .detach(|| core::Handle::from_mpi(&d, memory, settings))
            .py(py)?;
        Ok(Handle {
            rank: h.rank(),
            nranks: h.nranks(),
            state: Mutex::new(Some(h)),
        })
    }

    /// Rank of this process in the handle's communicator.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the handle's communicator.
    #[getter]
    fn nranks(&self) -> usize {
        self.nranks
    }

    /// The settings of the distributed FFTs (``CUDECOMP_FFT_*``).
    ///
    /// Read with every other setting when the handle was created: a dict with ``stream`` (``None``: where every
    /// rank has a GPU of its own; ``True``, ``False``), ``chunks`` (slabs a streamed plan
    /// cuts each direction into) and ``backward`` (``"rows"`` or ``"planes"``).
    #[getter]
    fn _fft_settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let h = self.live(py)?;
        let f = &h.settings().fft;
        let d = PyDict::new(py);
        d.set_item("stream", f.stream)?;
        d.set_item("chunks", f.chunks)?;
        d.set_item("backward", f.backward.name())?;
        Ok(d)
    }

    /// Write this rank's owned cells of ``array`` into the file ``path`` (local).
    ///
    /// For ``cudecomp.io``: ``info`` describes the array, ``gdims`` the field, which
    /// starts at byte ``offset`` of the existing file. The array must keep X fastest, then
    /// Y, then Z, and own whole X rows. Host arrays at once; device arrays after the work on
    /// ``stream``, piece by piece through page-locked buffers. ``OSError`` where the
    /// system refuses.
    #[pyo3(signature = (path, offset, info, gdims, array, stream = None))]
    #[allow(clippy::too_many_arguments)]
    fn _write_part(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        offset: u64,
        info: &PencilInfo,
        gdims: [i64; 3],
        array: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let h = self.live(py)?;
        let (part, buf, exec) = file_part(py, info, gdims, array, stream, false)?;
        py.detach(|| h.write_part(&path, offset, &part, buf, exec))
            .py(py)
    }

    /// Read this rank's owned cells from the file ``path`` into ``array`` (local).
    ///
    /// As ``_write_part``, the other way; the array's other cells are left alone.
    #[pyo3(signature = (path, offset, info, gdims, array, stream = None))]
    #[allow(clippy::too_many_arguments)]
    fn _read_part(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        offset: u64,
        info: &PencilInfo,
        gdims: [i64; 3],
        array: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let h = self.live(py)?;
        let (part, buf, exec) = file_part(py, info, gdims, array, stream, true)?;
        py.detach(|| h.read_part(&path, offset, &part, buf, exec))
            .py(py)
    }

    /// Every rank's owned box of one layout of the global grid ``gdims`` (collective).
    ///
    /// ``info`` describes this rank's array; returns ``[(lo, len), ...]`` in rank order
    /// (global X, Y, Z). ``InvalidUsageError`` on every rank, naming ``which``, unless the
    /// boxes cover the grid exactly once (no gap, overlap or stray box; sizes that fit in
    /// 64 bits).
    fn _gather_boxes(
        &self,
        py: Python<'_>,
        which: &str,
        gdims: [i64; 3],
        info: &PencilInfo,
    ) -> PyResult<Vec<([i64; 3], [i64; 3])>> {
        let h = self.live(py)?;
        let mine = info.core().interior();
        let boxes = py.detach(|| h.gather_boxes(which, gdims, mine)).py(py)?;
        Ok(boxes.iter().map(|b| (b.lo, b.len)).collect())
    }

    /// Rank 0's ``data`` on every rank (collective; the others' ``data`` is ignored).
    fn _share_from_rank0<'py>(
        &self,
        py: Python<'py>,
        data: Vec<u8>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let h = self.live(py)?;
        let got = py.detach(|| h.share_from_rank0(&data)).py(py)?;
        Ok(pyo3::types::PyBytes::new(py, &got))
    }

    /// Check that ``array`` is one the package's data path takes (local).
    ///
    /// As the operations convert their arrays: ``InvalidUsageError`` or ``TypeError``
    /// for an array of the wrong kind, layout or byte order, or (``writable``) a
    /// read-only one; ``stream`` is parsed as they parse it. For the package's own
    /// collective calls (``cudecomp.io``), which check every array before the ranks meet.
    #[pyo3(signature = (array, writable, stream = None))]
    fn _check_array(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        writable: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        converted(py, array, stream, writable).map(|_| ())
    }

    /// Whether every rank of the handle runs on one node (collective).
    ///
    /// Nodes as the package sees them everywhere (DIRECT, copy threads, NVSHMEM peers):
    /// the host name, or ``CUDECOMP_NODE_ID`` / ``CUDECOMP_SIMULATE_NODES`` when set.
    fn one_node(&self, py: Python<'_>) -> PyResult<bool> {
        let h = self.live(py)?;
        py.detach(|| h.one_node()).py(py)
    }

    /// Whether every rank of the handle drives a GPU of its own (collective).
    ///
    /// False where ranks share a GPU (NCCL and the NVSHMEM backends then refuse to run,
    /// and GPU FFT plans do not stream their slabs), and always in the CPU variant.
    fn one_gpu_per_rank(&self, py: Python<'_>) -> PyResult<bool> {
        let h = self.live(py)?;
        if !h.is_gpu() {
            return Ok(false);
        }
        py.detach(|| h.one_gpu_per_rank()).py(py)
    }

    /// Settle the outcome of one of the package's collective calls (collective).
    ///
    /// Every rank passes the call's name ``what``, ``fields`` (``(name, canonical text)``
    /// pairs, in the same order on every rank: the arguments that must be alike) and,
    /// where this rank failed locally, ``error`` (the text of its error, which the caller
    /// raises itself after this returns). Unless every rank is at the same call with the
    /// same fields and none failed, every other rank raises ``InvalidUsageError`` naming
    /// the failed rank and its error, both calls, or the first field that differs and
    /// both values. ``cudecomp._collective.collective`` wraps it for a block of code.
    #[pyo3(signature = (what, fields = None, error = None))]
    fn _settle(
        &self,
        py: Python<'_>,
        what: &str,
        fields: Option<Vec<(String, String)>>,
        error: Option<String>,
    ) -> PyResult<()> {
        let h = self.live(py)?;
        let mut f = Fields::new();
        for (name, text) in fields.unwrap_or_default() {
            f.push(&name, text);
        }
        let failed = error.is_some();
        let local = error.map_or(Ok(()), |e| Err(core::Error::InvalidUsage(e)));
        match py.detach(|| h.settle(what, &f, local)) {
            // This rank failed: its own error is the caller's to raise.
            Err(_) if failed => Ok(()),
            other => other.py(py),
        }
    }

    /// Release the handle and its workspaces (collective).
    ///
    /// Destroy the handle's grids first. Any later use of the handle, or a second
    /// ``finalize()``, raises ``InvalidUsageError``.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let h = state
            .clone()
            .ok_or_else(|| invalid(py, "finalize(): the Handle was already finalized".into()))?;
        py.detach(|| h.finalize()).py(py)?;
        *state = None;
        Ok(())
    }

    /// Make a redistribution from ``src`` to ``dst`` (collective).
    ///
    /// Each side is a pencil of one of this handle's grids (``GridDesc.pencil(axis,
    /// halo_extents, padding)``) or this rank's box (``BoxLayout``); the grids may differ
    /// in process grid, backends, layout and rank order, not in ``gdims``. For two box
    /// sides the global grid is the smallest from the origin that holds every box.
    ///
    /// Args:
    ///     src: The layout the data is in.
    ///     dst: The layout it is moved to.
    ///     backend: The ``TransposeCommBackend`` that moves it; ``None``: the source
    ///         grid's transpose backend, else the destination grid's, else ``MPI_P2P``.
    ///
    /// Returns:
    ///     The ``Redistribution``, to run as often as needed and destroy collectively.
    ///
    /// Raises:
    ///     InvalidUsageError: On every rank: layouts that do not cover the global grid
    ///         exactly once (a gap, an overlap, a box outside it), grids of different
    ///         ``gdims`` or of another handle, or ranks passing different grids, axes,
    ///         halos, padding or backends.
    ///     NotSupportedError: A backend this variant or machine cannot run.
    ///     TypeError: A side that is neither a ``PencilLayout`` nor a ``BoxLayout``.
    #[pyo3(signature = (src, dst, *, backend = None))]
    fn create_redistribution(
        slf: &Bound<'_, Self>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        backend: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Redistribution> {
        let made = crate::redistribution::create(slf, src, dst, backend);
        warn_notices(slf.py())?;
        made
    }

    /// Create a grid descriptor (collective).
    ///
    /// Every rank must pass the same configuration and options; a mismatch raises
    /// ``InvalidUsageError`` on every rank instead of hanging.
    ///
    /// Args:
    ///     config: The decomposition. ``pdims = (0, 0)`` asks the autotuner for the
    ///         process grid (then ``autotune_options`` is required). On return the
    ///         resolved ``pdims``, ``transpose_comm_backend``, ``halo_comm_backend``
    ///         and ``rank_order`` are written back into it, as the C API does.
    ///     autotune_options: What to search: the process grid (when ``pdims`` is
    ///         ``(0, 0)``) and/or the transpose and halo backends. ``None`` runs no
    ///         search.
    ///
    /// Returns:
    ///     The new descriptor. Call its ``destroy()`` (or use it in a ``with`` block)
    ///     on every rank before finalizing the handle.
    ///
    /// Raises:
    ///     InvalidUsageError: Invalid configuration (``pdims`` product differs from the
    ///         number of ranks, partial ``transpose_mem_order``, ``gdims_dist`` larger
    ///         than ``gdims``, ...), invalid options of a search that runs
    ///         (``n_trials < 1``, ``n_warmup_trials < 0``, ``transpose_op_weights``
    ///         not finite, negative or all zero, ``skip_threshold`` negative or not
    ///         finite, ``halo_axis`` outside 0-2, negative halos or padding), ranks
    ///         that disagree (also on ``CUDECOMP_PIPELINE_SLICE_BYTES`` and
    ///         ``CUDECOMP_CHECK_COLLECTIVES``), bad environment values, or autotuning
    ///         filters that leave no candidate. Raised on every rank.
    ///     NotSupportedError: A backend this variant or machine cannot run (NCCL or
    ///         NVSHMEM in the CPU variant; NVSHMEM with shared GPUs or without its
    ///         library; DIRECT across nodes), or no usable process grid for the
    ///         autotuner.
    ///     TypeError: ``config`` or ``autotune_options`` of the wrong class.
    #[pyo3(signature = (config, autotune_options = None))]
    fn create_grid(
        slf: &Bound<'_, Self>,
        config: &Bound<'_, PyAny>,
        autotune_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<GridDesc> {
        let py = slf.py();
        let h = slf.get().live(py)?;
        let parsed = (|| -> PyResult<_> {
            let cfg = grid_config(py, config)?;
            let opts = match autotune_options.filter(|o| !o.is_none()) {
                Some(o) if !o.is_instance(autotune_options_class(py)?.as_any())? => {
                    return Err(PyTypeError::new_err(format!(
                        "autotune_options: expected a cudecomp.GridDescAutotuneOptions or None, got {}",
                        o.get_type().name()?
                    )))
                }
                Some(o) => Some(read_autotune_options(o)?),
                None => None,
            };
            Ok((cfg, opts))
        })();
        let (cfg, options) = match parsed {
            Ok(p) => p,
            Err(e) => {
                // The other ranks are entering the creation's agreement: join it with the
                // error, so that they raise too instead of waiting for this rank.
                let local = Err(local_error(py, &e));
                let _ = py.detach(|| h.settle("create_grid", &Fields::new(), local));
                return Err(e);
            }
        };
        let created = match &options {
            Some(opts) => py.detach(|| h.create_grid_with(&cfg, opts)),
            None => py.detach(|| h.create_grid(&cfg)).map(|g| (g, None)),
        };
        warn_notices(py)?;
        let (gd, report) = created.py(py)?;
        let grid = gd.grid();
        let (pdims, tb, hb) = (
            (grid.pdims[0], grid.pdims[1]),
            grid.transpose_backend as i32,
            grid.halo_backend as i32,
        );
        config.call_method1("_apply", (pdims, tb, hb, grid.rank_order as i32))?;
        let result = match report {
            Some(r) => {
                if h.rank() == 0 {
                    log_lines(py, &r.lines)?;
                }
                let trials: Vec<_> = r
                    .trials
                    .iter()
                    .map(|t| {
                        (
                            t.mode,
                            (t.pdims[0], t.pdims[1]),
                            t.backend,
                            t.time_ms,
                            (
                                t.per_op_ms[0],
                                t.per_op_ms[1],
                                t.per_op_ms[2],
                                t.per_op_ms[3],
                            ),
                            t.skipped,
                        )
                    })
                    .collect();
                let made = py
                    .import("cudecomp._autotune")?
                    .getattr("AutotuneResult")?
                    .call_method1("_from_core", (trials, (pdims, tb, hb), r.lines))?;
                Some(made.unbind())
            }
            None => None,
        };
        Ok(GridDesc::new(slf.clone().unbind(), Arc::new(gd), result))
    }

    /// Allocate a workspace buffer for ``grid`` (collective).
    ///
    /// Args:
    ///     grid: The descriptor the buffer will serve.
    ///     nbytes: Size in bytes, greater than zero. A transpose needs
    ///         ``grid.get_transpose_workspace_size() * cudecomp.get_data_type_size(dtype)``
    ///         bytes, a halo update ``grid.get_halo_workspace_size(axis, halo_extents)``
    ///         elements of the same size.
    ///
    /// Returns:
    ///     A NumPy ``uint8`` array of ``nbytes`` zeros in the CPU variant; in the GPU
    ///     variant a device buffer of the handle's device exposing
    ///     ``__cuda_array_interface__`` (``ptr`` and ``nbytes`` attributes). Pass it as
    ///     the ``work`` argument of transposes and halo updates. When ``grid``'s
    ///     transpose or halo backend is of the NVSHMEM family the buffer is NVSHMEM
    ///     symmetric memory (``symmetric`` is true) of the largest ``nbytes`` any rank
    ///     asks for: NVSHMEM operations to which every rank passes it exchange through
    ///     it instead of the handle's own symmetric workspace. Such a buffer is freed by
    ///     ``free`` (collective) or, when left, by ``finalize``; dropping it frees
    ///     nothing.
    fn malloc<'py>(
        slf: &Bound<'py, Self>,
        grid: &Bound<'py, GridDesc>,
        nbytes: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let h = slf.get().live(py)?;
        grid.get().check_owner(py, slf)?;
        let n = int_arg(nbytes, "nbytes")?;
        if n <= 0 {
            return Err(invalid(
                py,
                format!("malloc(): expected nbytes > 0, got {n}"),
            ));
        }
        let g = grid.get().live(py)?;
        variant::allocate_bytes(py, &h, &g, n as usize)
    }

    /// Release a buffer returned by ``malloc`` (collective; ``None`` is accepted).
    ///
    /// The GPU variant synchronises the default stream before releasing the memory
    /// (finish work on other streams that uses the buffer first; symmetric buffers:
    /// the whole device); freeing a buffer twice raises ``InvalidUsageError``, freeing
    /// anything else ``TypeError``. Every rank must free the same symmetric buffer at
    /// once (checked: ``InvalidUsageError`` on every rank otherwise, nothing freed). In
    /// the CPU variant the memory goes when the last reference to the array goes:
    /// ``free`` refuses anything but a NumPy array (``TypeError``) and otherwise does
    /// nothing, so freeing twice goes unnoticed there.
    fn free(
        slf: &Bound<'_, Self>,
        grid: &Bound<'_, GridDesc>,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let py = slf.py();
        let h = slf.get().live(py)?;
        grid.get().check_owner(py, slf)?;
        variant::release_bytes(py, &h, buffer)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        if self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            self.finalize(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.state.lock().map(|s| s.is_some()).unwrap_or(false) {
            "live"
        } else {
            "finalized"
        };
        format!(
            "<cudecomp.Handle rank {} of {}, {state}>",
            self.rank, self.nranks
        )
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.state.get_mut().map(|s| s.is_some()).unwrap_or(false) {
            warn_resource("cudecomp.Handle was garbage-collected without finalize(); call finalize() collectively before MPI ends");
        }
    }
}

/// An array argument of `cudecomp.io` as the data path takes it: its memory (checked
/// writable where `written`) and where it runs.
fn converted(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    written: bool,
) -> PyResult<(core::Buf, core::Exec)> {
    let a = variant::array(py, array, "array", true)?;
    let exec = variant::exec(py, stream, array)?;
    // SAFETY: the array object lives for the whole call, checked C-contiguous.
    let arr = unsafe { a.array() };
    match arr.read_only {
        Some(why) if written => Err(invalid(
            py,
            format!("array: expected a writable array, got {why}"),
        )),
        _ => Ok((arr.buf, exec)),
    }
}

/// The file part of an array argument described by `info`, its memory and where it runs.
fn file_part(
    py: Python<'_>,
    info: &PencilInfo,
    gdims: [i64; 3],
    array: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    written: bool,
) -> PyResult<(core::FilePart, core::Buf, core::Exec)> {
    let (buf, exec) = converted(py, array, stream, written)?;
    let elem = array
        .getattr("dtype")?
        .getattr("itemsize")?
        .extract::<usize>()?;
    let part = core::FilePart::of(info.core(), gdims, elem).ok_or_else(|| {
        invalid(
            py,
            "array: expected an array that keeps X fastest, then Y, then Z, and owns whole X rows"
                .into(),
        )
    })?;
    Ok((part, buf, exec))
}
