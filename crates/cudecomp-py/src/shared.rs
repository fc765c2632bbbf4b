//! Memory behind pencil arrays that other ranks of the node write into
//! (`GridDesc.empty_pencil` on DIRECT grids): node-shared host memory in the CPU variant
//! (NumPy sees it through the array interface), exported device memory in the GPU variant
//! (CuPy sees it as unowned memory). DIRECT transposes find it registered and write each
//! chunk straight into it from the other ranks of the node.

use cudecomp_core::LibraryArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Node-shared bytes (``uint8``), the base object of a pencil array's NumPy view; freed,
/// and unregistered, when the last view goes.
#[pyclass(module = "cudecomp", frozen, name = "_SharedMemory")]
pub(crate) struct SharedMemory {
    inner: LibraryArray,
}

#[pymethods]
impl SharedMemory {
    /// The NumPy array interface (version 3) of the bytes.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", (self.inner.len(),))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.inner.ptr() as usize, false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}

/// Exported device bytes behind the GPU variant's pencil arrays (`GridDesc.empty_pencil`
/// on DIRECT grids): CuPy sees them as unowned memory whose owner is this object; DIRECT
/// transposes find them registered and other ranks' copies write straight into them.
#[pyclass(module = "cudecomp", frozen, name = "_DeviceMemory")]
pub(crate) struct DeviceMemory {
    inner: LibraryArray,
}

#[pymethods]
impl DeviceMemory {
    /// Device address of the first byte.
    #[getter]
    fn ptr(&self) -> u64 {
        self.inner.ptr()
    }

    /// Bytes allocated (the request rounded up to the allocation granularity).
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.len()
    }

    /// Ordinal of the device holding the bytes.
    #[getter]
    fn device(&self) -> i32 {
        self.inner.device().unwrap_or(-1)
    }
}

/// The Python owner of a library array: `_SharedMemory` for host memory, `_DeviceMemory`
/// for device memory.
pub(crate) fn owner(py: Python<'_>, a: LibraryArray) -> PyResult<Bound<'_, PyAny>> {
    Ok(match a.device() {
        None => Bound::new(py, SharedMemory { inner: a })?.into_any(),
        Some(_) => Bound::new(py, DeviceMemory { inner: a })?.into_any(),
    })
}
