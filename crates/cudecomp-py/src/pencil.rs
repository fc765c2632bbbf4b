//! `cudecomp.PencilInfo`: where this rank's part of a pencil lives, as Python sees it.

use cudecomp_core as geometry;
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};

/// Where this rank's part of one pencil lives and how it is laid out in memory.
///
/// Returned by [`GridDesc.get_pencil_info`][cudecomp.GridDesc.get_pencil_info]; read-only.
/// ``shape``, ``lo``, ``hi`` and ``order`` are listed in *memory order*, fastest-varying
/// axis first, exactly as in the C structure ``cudecompPencilInfo_t``; ``halo_extents``
/// and ``padding`` echo the query in global axis order (X, Y, Z).
///
/// Arrays are C-contiguous, so their NumPy/CuPy shape lists the slowest axis first:
/// allocate them with [`array_shape`][cudecomp.PencilInfo.array_shape] (``shape``
/// reversed), e.g. ``numpy.empty(info.array_shape, numpy.float64)``, or with
/// [`GridDesc.empty_pencil`][cudecomp.GridDesc.empty_pencil].
/// [`interior_slices`][cudecomp.PencilInfo.interior_slices],
/// [`global_slices`][cudecomp.PencilInfo.global_slices] and
/// [`to_global_axes`][cudecomp.PencilInfo.to_global_axes] relate the local array to a
/// global one.
///
/// It prints its fields as tuples, compares with ``==`` and pickles (so
/// ``comm.gather(info)`` works).
#[pyclass(module = "cudecomp", frozen, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct PencilInfo {
    info: geometry::PencilInfo,
}

impl PencilInfo {
    /// The core's description.
    pub(crate) fn core(&self) -> &geometry::PencilInfo {
        &self.info
    }
}

#[pymethods]
impl PencilInfo {
    /// Stored extents in memory order (fastest axis first), halos and padding included.
    ///
    /// Along global axis ``order[i]`` the extent is ``hi[i] - lo[i] + 1`` owned cells,
    /// plus ``2 * halo_extents[order[i]]`` halo cells and ``padding[order[i]]`` padding
    /// cells.
    #[getter]
    fn shape(&self) -> (i64, i64, i64) {
        self.info.shape.into()
    }
    /// First global index of the owned interior along each memory-order axis (inclusive).
    #[getter]
    fn lo(&self) -> (i64, i64, i64) {
        self.info.lo.into()
    }
    /// Last global index of the owned interior along each memory-order axis (inclusive).
    ///
    /// ``hi[i] < lo[i]`` on a rank that owns no cells of this pencil (an empty pencil).
    #[getter]
    fn hi(&self) -> (i64, i64, i64) {
        self.info.hi.into()
    }
    /// Global axis (0 = X, 1 = Y, 2 = Z) stored at each memory position, fastest first.
    ///
    /// ``(0, 1, 2)`` by default; ``(1, 2, 0)`` for a Y-pencil with
    /// ``transpose_axis_contiguous[1]`` set.
    #[getter]
    fn order(&self) -> (usize, usize, usize) {
        self.info.order.into()
    }
    /// Halo cells on each side of each global axis (X, Y, Z), as queried.
    #[getter]
    fn halo_extents(&self) -> (i64, i64, i64) {
        self.info.halo_extents.into()
    }
    /// Padding cells after the end of each global axis (X, Y, Z), as queried.
    #[getter]
    fn padding(&self) -> (i64, i64, i64) {
        self.info.padding.into()
    }
    /// Number of elements of the stored pencil: the product of ``shape``.
    #[getter]
    fn size(&self) -> i64 {
        self.info.size
    }
    /// Shape of the C-contiguous array that holds this pencil: ``shape`` reversed.
    ///
    /// Every array handed to a transpose or halo update must have exactly this shape
    /// (for the same halos and padding); any other shape raises ``InvalidUsageError``.
    #[getter]
    fn array_shape(&self) -> (i64, i64, i64) {
        self.info.array_shape().into()
    }
    /// Slices of the local array selecting the cells this rank owns (no halos, no padding).
    ///
    /// ``local[info.interior_slices]`` is the owned part of an array of shape
    /// ``array_shape``, in local axis order.
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

    /// Slices of a global array selecting the cells this rank owns.
    ///
    /// The global array has the C shape ``(gdims[2], gdims[1], gdims[0])`` and is indexed
    /// ``g[z, y, x]``; see ``to_global_axes`` for the order of the local axes.
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

    /// The permutation that puts the local array's axes in global ``(Z, Y, X)`` order.
    ///
    /// ``g[info.global_slices]`` equals ``local[info.interior_slices].transpose(info.to_global_axes)``;
    /// ``numpy.argsort(info.to_global_axes)`` is the permutation back.
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

impl From<geometry::PencilInfo> for PencilInfo {
    fn from(info: geometry::PencilInfo) -> Self {
        PencilInfo { info }
    }
}
