//! Maps core errors to the Python exception classes of `cudecomp._errors`.

use cudecomp_core::Error;
use pyo3::prelude::*;

/// The Python exception for a core error.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    if let Error::Io(msg) = &e {
        return pyo3::exceptions::PyOSError::new_err(msg.clone());
    }
    let class = match &e {
        Error::InvalidUsage(_) => "InvalidUsageError",
        Error::NotSupported(_) => "NotSupportedError",
        Error::Internal(_) => "InternalError",
        Error::Cuda(_) => "CudaError",
        Error::Mpi(_) => "MpiError",
        Error::Nccl(_) => "NcclError",
        Error::Nvshmem(_) => "NvshmemError",
        Error::Io(_) => "OSError",
    };
    raise(py, class, e.to_string())
}

/// Builds an instance of `cudecomp._errors.<class>` carrying `msg`.
pub(crate) fn raise(py: Python<'_>, class: &str, msg: String) -> PyErr {
    let made = py
        .import("cudecomp._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((msg.clone(),)));
    match made {
        Ok(v) => PyErr::from_value(v),
        Err(e) => e,
    }
}

/// This rank's Python error as the core error its collective call settles with
/// ([`cudecomp_core::Handle::settle`]): the other ranks' messages quote its class and text.
pub(crate) fn local_error(py: Python<'_>, e: &PyErr) -> Error {
    let class = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    Error::InvalidUsage(format!("{class}: {}", e.value(py)))
}

/// `InvalidUsageError(msg)`.
pub(crate) fn invalid(py: Python<'_>, msg: String) -> PyErr {
    raise(py, "InvalidUsageError", msg)
}

/// Extension for core results: `.py(py)?` converts the error.
pub(crate) trait IntoPy<T> {
    /// Converts a core error into the matching Python exception.
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for cudecomp_core::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// Emits a ResourceWarning (used when Python's GC finds an object that was never released
/// collectively); failures to warn are reported as unraisable, as during interpreter
/// shutdown. Destructors run while an exception may be propagating (a temporary grid whose
/// method just raised), and the warning machinery must neither see nor replace it: the
/// pending exception is set aside for the warning and restored afterwards, untouched (not
/// through `PyErr::take`, which would resume a pending Rust panic inside a destructor).
pub(crate) fn warn_resource(msg: &str) {
    Python::attach(|py| {
        let mut saved = [std::ptr::null_mut(); 3];
        // SAFETY: the GIL is held; PyErr_Fetch moves the (possibly absent) pending
        // exception's three references into `saved` and clears the indicator.
        unsafe { pyo3::ffi::PyErr_Fetch(&mut saved[0], &mut saved[1], &mut saved[2]) };
        if let Ok(cmsg) = std::ffi::CString::new(msg) {
            let cat = py.get_type::<pyo3::exceptions::PyResourceWarning>();
            if let Err(e) = PyErr::warn(py, &cat, &cmsg, 1) {
                e.write_unraisable(py, None);
            }
        }
        // SAFETY: the GIL is held; PyErr_Restore takes back exactly the references
        // PyErr_Fetch handed out (all null when nothing was pending).
        unsafe { pyo3::ffi::PyErr_Restore(saved[0], saved[1], saved[2]) };
    });
}

/// Emits the library's queued advice ([`cudecomp_core::take_notices`]) as `RuntimeWarning`s.
pub(crate) fn warn_notices(py: Python<'_>) -> PyResult<()> {
    for text in cudecomp_core::take_notices() {
        let msg = std::ffi::CString::new(text.replace('\0', " "))
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        PyErr::warn(
            py,
            &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
            &msg,
            1,
        )?;
    }
    Ok(())
}

/// Logs `lines` through the `cudecomp` Python logger (INFO).
pub(crate) fn log_lines(py: Python<'_>, lines: &[String]) -> PyResult<()> {
    py.import("cudecomp._log")?
        .call_method1("_emit", (lines.to_vec(),))
        .map(|_| ())
}
