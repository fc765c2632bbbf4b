//! Node-shared host memory behind the CPU variant's pencil arrays (`GridDesc.empty_pencil`
//! on DIRECT grids): NumPy sees it through the array interface; DIRECT transposes find it
//! registered and write each chunk straight into it from the other ranks of the node.

use cudecomp_core::mem::shm::SharedArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPy;

/// Arrays smaller than this stay ordinary NumPy memory (`CUDECOMP_SHARED_ARRAY_MIN_BYTES`
/// overrides): a single copy gains nothing on small transposes, and each shared array
/// holds a file descriptor.
const MIN_BYTES: usize = 1 << 20;

/// Whether an array of `nbytes` is allocated node-shared.
pub fn wanted(nbytes: usize) -> bool {
    let min = std::env::var("CUDECOMP_SHARED_ARRAY_MIN_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(MIN_BYTES);
    nbytes >= min
}

/// Node-shared bytes (``uint8``), the base object of a pencil array's NumPy view; freed,
/// and unregistered, when the last view goes.
#[pyclass(module = "cudecomp", frozen, name = "_SharedMemory")]
pub struct SharedMemory {
    inner: SharedArray,
    nbytes: usize,
}

#[pymethods]
impl SharedMemory {
    /// The NumPy array interface (version 3) of the bytes.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", (self.nbytes,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.inner.ptr() as usize, false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}

/// `nbytes` of zeroed node-shared memory.
pub fn allocate(py: Python<'_>, nbytes: usize) -> PyResult<Bound<'_, SharedMemory>> {
    let inner = py.detach(|| SharedArray::new(nbytes)).py(py)?;
    Bound::new(py, SharedMemory { inner, nbytes })
}
