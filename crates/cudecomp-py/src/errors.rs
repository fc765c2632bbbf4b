//! Maps core errors to the Python exception classes of `cudecomp._errors`.

use cudecomp_core::Error;
use pyo3::prelude::*;

/// The Python exception for a core error.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::InvalidUsage(_) => "InvalidUsageError",
        Error::NotSupported(_) => "NotSupportedError",
        Error::Internal(_) => "InternalError",
        Error::Cuda(_) => "CudaError",
        Error::Mpi(_) => "MpiError",
        Error::Nccl(_) => "NcclError",
        Error::Nvshmem(_) => "NvshmemError",
    };
    raise(py, class, e.to_string())
}

/// Builds an instance of `cudecomp._errors.<class>` carrying `msg`.
pub fn raise(py: Python<'_>, class: &str, msg: String) -> PyErr {
    let made = py
        .import("cudecomp._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((msg.clone(),)));
    match made {
        Ok(v) => PyErr::from_value(v),
        Err(e) => e,
    }
}

/// `InvalidUsageError(msg)`.
pub fn invalid(py: Python<'_>, msg: String) -> PyErr {
    raise(py, "InvalidUsageError", msg)
}

/// Extension for core results: `.py(py)?` converts the error.
pub trait IntoPy<T> {
    /// Converts a core error into the matching Python exception.
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for cudecomp_core::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// Emits a ResourceWarning (used when Python's GC finds an object that was never released
/// collectively); failures to warn are ignored, as during interpreter shutdown.
pub fn warn_resource(msg: &str) {
    Python::attach(|py| {
        let Ok(cmsg) = std::ffi::CString::new(msg) else {
            return;
        };
        let cat = py.get_type::<pyo3::exceptions::PyResourceWarning>();
        if let Err(e) = PyErr::warn(py, &cat, &cmsg, 1) {
            e.write_unraisable(py, None);
        }
    });
}
