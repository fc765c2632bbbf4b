//! What differs between the CPU variant (NumPy arrays, host engine) and the GPU variant
//! (CUDA arrays, streams, device engine): handle creation, array parsing, output
//! allocation and running the operations. Both expose the same functions.

#[cfg(cpu_only)]
pub(crate) use cpu::*;
#[cfg(not(cpu_only))]
pub(crate) use gpu::*;

#[cfg(cpu_only)]
mod cpu {
    use cudecomp_core::{DataType, Exec, GridDesc, Handle, Memory, Settings};
    use pyo3::prelude::*;

    use pyo3::exceptions::PyTypeError;
    use pyo3::sync::PyOnceLock;
    use pyo3::types::{PyDict, PyType};

    use crate::args::class;
    use crate::array::{numpy_name, parse_interface, ArrayArg};

    static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();

    /// Reads a C-contiguous 3-D NumPy array (the CPU variant's arrays). `any_dims` allows
    /// other ranks (workspace arrays).
    pub(crate) fn host_array(
        py: Python<'_>,
        v: &Bound<'_, PyAny>,
        what: &'static str,
        any_dims: bool,
    ) -> PyResult<ArrayArg> {
        if !v.is_instance(class(py, &NDARRAY, "numpy", "ndarray")?.as_any())? {
            return Err(PyTypeError::new_err(format!(
                "{what}: expected a NumPy array (this is the CPU variant of cudecomp), got {}",
                v.get_type().name()?
            )));
        }
        let iface = v.getattr("__array_interface__")?.cast_into::<PyDict>()?;
        parse_interface(py, &iface, what, any_dims)
    }

    /// True in the CPU variant.
    pub(crate) const CPU_ONLY: bool = true;

    /// Where a handle's operations run: host memory.
    pub(crate) fn memory(_py: Python<'_>, _settings: Option<&Settings>) -> PyResult<Memory> {
        Ok(Memory::Host)
    }

    /// An array argument (NumPy, C-contiguous; 3-D unless `any_dims`).
    pub(crate) fn array(
        py: Python<'_>,
        v: &Bound<'_, PyAny>,
        what: &'static str,
        any_dims: bool,
    ) -> PyResult<ArrayArg> {
        host_array(py, v, what, any_dims)
    }

    /// Where operations run: the host. Stream arguments are accepted and ignored.
    pub(crate) fn exec(
        _py: Python<'_>,
        _stream: Option<&Bound<'_, PyAny>>,
        _input: &Bound<'_, PyAny>,
    ) -> PyResult<Exec> {
        Ok(Exec::Host)
    }

    /// A new NumPy output array.
    pub(crate) fn allocate_output<'py>(
        py: Python<'py>,
        _input: &Bound<'py, PyAny>,
        shape: Vec<i64>,
        dtype: DataType,
        _stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?
            .call_method1("empty", (shape, numpy_name(dtype)))
    }

    /// `Handle.malloc`: zeroed host bytes (nothing is symmetric on the host).
    pub(crate) fn allocate_bytes<'py>(
        py: Python<'py>,
        _h: &Handle,
        _grid: &GridDesc,
        n: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?.call_method1("zeros", (n, "uint8"))
    }

    /// `Handle.free`: host buffers are released by Python's reference counting; anything
    /// but a NumPy array (or `None`) is refused, as the GPU variant refuses it.
    pub(crate) fn release_bytes(
        py: Python<'_>,
        _h: &Handle,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if buffer.is_none() || buffer.is_instance(&py.import("numpy")?.getattr("ndarray")?)? {
            return Ok(());
        }
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "buffer: expected a NumPy array returned by Handle.malloc, got {}",
            buffer.get_type().name()?
        )))
    }
}

#[cfg(not(cpu_only))]
mod gpu {
    use std::sync::Mutex;

    use cudecomp_core::{
        CudaLibraries, DataType, DeviceBuffer as CoreBuffer, Exec, GridDesc, Handle, Memory,
        Settings, Stream,
    };
    use pyo3::exceptions::PyTypeError;
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyCapsule, PyDict, PyInt};

    use crate::array::{numpy_name, parse_interface, ArrayArg};
    use crate::errors::{invalid, IntoPy};

    /// False in the GPU variant.
    pub(crate) const CPU_ONLY: bool = false;

    /// Where a handle's operations run: the current CUDA device, with NCCL and NVSHMEM
    /// found (the settings' overrides first) and NVRTC loaded.
    pub(crate) fn memory(py: Python<'_>, settings: Option<&Settings>) -> PyResult<Memory> {
        let libs = settings.map(|s| s.libraries.clone()).unwrap_or_default();
        let found = py
            .import("cudecomp._libs")?
            .call_method1("prepare", (libs.nvrtc, libs.nccl, libs.nvshmem))?;
        Ok(Memory::Cuda(CudaLibraries {
            nccl: found.getattr("nccl")?.extract()?,
            nvshmem: found.getattr("nvshmem")?.extract()?,
        }))
    }

    /// The DLPack read-only flag of `DLManagedTensorVersioned` (DLPack 1.0).
    const DLPACK_FLAG_READ_ONLY: u64 = 1;
    /// Byte offset of `flags` in `DLManagedTensorVersioned`: after `version` (two
    /// `uint32`), `manager_ctx` and `deleter` (two pointers).
    const DLPACK_FLAGS_OFFSET: usize = 8 + 2 * std::mem::size_of::<usize>();

    /// Whether `v`'s DLPack 1.0 export says its memory may be written; `None` where it has
    /// no such export (an older producer, whose DLPack says nothing about writing).
    fn dlpack_writable(py: Python<'_>, v: &Bound<'_, PyAny>) -> Option<bool> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("max_version", (1, 0)).ok()?;
        let capsule = v.call_method("__dlpack__", (), Some(&kwargs)).ok()?;
        let capsule = capsule.cast::<PyCapsule>().ok()?;
        let name = capsule.name().ok()??;
        // SAFETY: the name pointer of a live capsule is a NUL-terminated string.
        if unsafe { name.as_cstr() }.to_bytes() != b"dltensor_versioned" {
            return None;
        }
        let ptr = capsule.pointer_checked(Some(c"dltensor_versioned")).ok()?;
        // SAFETY: a "dltensor_versioned" capsule holds a `DLManagedTensorVersioned`, whose
        // `uint64_t flags` lies at `DLPACK_FLAGS_OFFSET`; it is read, not consumed: the
        // capsule's own destructor releases it when dropped.
        let flags = unsafe {
            ptr.as_ptr()
                .cast::<u8>()
                .add(DLPACK_FLAGS_OFFSET)
                .cast::<u64>()
                .read_unaligned()
        };
        Some(flags & DLPACK_FLAG_READ_ONLY == 0)
    }

    fn device_array(
        py: Python<'_>,
        v: &Bound<'_, PyAny>,
        what: &'static str,
        any_dims: bool,
    ) -> PyResult<ArrayArg> {
        let Ok(iface) = v.getattr("__cuda_array_interface__") else {
            if on_cuda_by_dlpack(v) {
                // Seen through a zero-copy CuPy view (the caller keeps `v`, hence the
                // memory, alive). Writable where its DLPack 1.0 export says so; an older
                // export says nothing, and such arrays serve as inputs only.
                let view = py
                    .import("cudecomp._cupy")?
                    .call_method1("from_dlpack", (v,))?;
                let mut arg = device_array(py, &view, what, any_dims)?;
                match dlpack_writable(py, v) {
                    Some(writable) => arg.readonly = !writable,
                    None => arg.from_dlpack = true,
                }
                return Ok(arg);
            }
            return Err(PyTypeError::new_err(format!(
                "{what}: expected a CUDA array exposing __cuda_array_interface__ or __dlpack__ (CuPy, PyTorch, JAX, Numba, ...), got {}; the GPU variant does not accept host (NumPy) arrays",
                v.get_type().name()?
            )));
        };
        let iface = iface.cast_into::<PyDict>()?;
        let version: i64 = match iface.get_item("version")? {
            Some(v) => v.extract()?,
            None => 0,
        };
        if !(0..=3).contains(&version) {
            return Err(invalid(py, format!("{what}: __cuda_array_interface__ version {version} is not supported (expected 0 to 3)")));
        }
        // (The core checks that the memory is on the handle's device.)
        parse_interface(py, &iface, what, any_dims)
    }

    /// An array argument (`__cuda_array_interface__`, C-contiguous, on the handle's
    /// device; 3-D unless `any_dims`).
    pub(crate) fn array(
        py: Python<'_>,
        v: &Bound<'_, PyAny>,
        what: &'static str,
        any_dims: bool,
    ) -> PyResult<ArrayArg> {
        device_array(py, v, what, any_dims)
    }

    /// Where operations run: on the operation's stream (see [`parse_stream`]).
    pub(crate) fn exec(
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        input: &Bound<'_, PyAny>,
    ) -> PyResult<Exec> {
        Ok(Exec::Device(Stream::from_handle(parse_stream(
            py, stream, input,
        )?)))
    }

    /// True for an object exporting CUDA device memory through DLPack
    /// (`__dlpack_device__()` says kDLCUDA, 2, or kDLCUDAManaged, 13).
    fn on_cuda_by_dlpack(v: &Bound<'_, PyAny>) -> bool {
        v.hasattr("__dlpack__").unwrap_or(false)
            && v.call_method0("__dlpack_device__")
                .and_then(|d| d.get_item(0)?.extract::<i64>())
                .is_ok_and(|t| t == 2 || t == 13)
    }

    fn is_cupy(v: &Bound<'_, PyAny>) -> bool {
        v.get_type()
            .module()
            .map(|m| m.to_string().starts_with("cupy"))
            .unwrap_or(false)
    }

    /// The operation's stream: None → CuPy's current stream for CuPy inputs, else 0; an
    /// int; an object with `__cuda_stream__`; or an object with an int `ptr`.
    pub(crate) fn parse_stream(
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        input: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let as_handle = |v: &Bound<'_, PyAny>| -> PyResult<u64> {
            let i: i128 = v.extract()?;
            u64::try_from(i).map_err(|_| {
                invalid(
                    py,
                    format!("stream: expected a non-negative handle, got {i}"),
                )
            })
        };
        match stream.filter(|s| !s.is_none()) {
            None if is_cupy(input) => as_handle(&py.import("cupy.cuda")?.call_method0("get_current_stream")?.getattr("ptr")?),
            None => Ok(0),
            Some(s) if s.is_instance_of::<PyInt>() && !s.is_instance_of::<PyBool>() => as_handle(s),
            Some(s) if s.hasattr("__cuda_stream__")? => {
                let t = s.call_method0("__cuda_stream__")?;
                as_handle(&t.get_item(1)?)
            }
            Some(s) if s.hasattr("ptr")? && s.getattr("ptr")?.is_instance_of::<PyInt>() => as_handle(&s.getattr("ptr")?),
            Some(s) => Err(PyTypeError::new_err(format!(
                "stream: expected None, an int stream handle, an object with __cuda_stream__ or an int .ptr, got {}",
                s.get_type().name()?
            ))),
        }
    }

    /// A new CuPy output on the operation stream (TypeError unless the input is CuPy).
    pub(crate) fn allocate_output<'py>(
        py: Python<'py>,
        input: &Bound<'py, PyAny>,
        shape: Vec<i64>,
        dtype: DataType,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !is_cupy(input) {
            return Err(PyTypeError::new_err(format!(
                "out: required unless the input is a CuPy array (got {}); pass a preallocated CUDA array",
                input.get_type().name()?
            )));
        }
        let s = parse_stream(py, stream, input)?;
        py.import("cudecomp._cupy")?
            .call_method1("empty_on_stream", (shape, numpy_name(dtype), s))
    }

    /// Device memory returned by ``Handle.malloc`` in the GPU variant (``uint8`` bytes).
    #[pyclass(module = "cudecomp", frozen)]
    pub(crate) struct DeviceBuffer {
        /// The core's buffer; `None` once freed.
        alloc: Mutex<Option<CoreBuffer>>,
        ptr: u64,
        nbytes: usize,
    }

    impl DeviceBuffer {
        fn live(&self) -> bool {
            self.alloc
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(CoreBuffer::is_live)
        }
    }

    #[pymethods]
    impl DeviceBuffer {
        /// The CUDA array interface (version 3) of the bytes; ``InvalidUsageError`` once freed.
        #[getter]
        fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
            if !self.live() {
                return Err(invalid(py, "DeviceBuffer: the buffer was freed".into()));
            }
            let d = PyDict::new(py);
            d.set_item("shape", (self.nbytes,))?;
            d.set_item("typestr", "|u1")?;
            d.set_item("data", (self.ptr, false))?;
            d.set_item("version", 3)?;
            d.set_item("strides", py.None())?;
            d.set_item("stream", py.None())?;
            Ok(d)
        }

        /// Device address of the first byte.
        #[getter]
        fn ptr(&self) -> u64 {
            self.ptr
        }

        /// Size in bytes.
        #[getter]
        fn nbytes(&self) -> usize {
            self.nbytes
        }

        /// True for NVSHMEM symmetric memory (``malloc`` for a grid with an NVSHMEM backend).
        ///
        /// NVSHMEM operations exchange through it when every rank passes it as ``work``.
        #[getter]
        fn symmetric(&self) -> bool {
            self.alloc
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(CoreBuffer::is_symmetric)
        }
    }

    /// `Handle.malloc`: the core's device buffer for `grid`'s operations.
    pub(crate) fn allocate_bytes<'py>(
        py: Python<'py>,
        h: &Handle,
        grid: &GridDesc,
        n: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let b = py.detach(|| h.malloc(grid, n)).py(py)?;
        let buf = DeviceBuffer {
            ptr: b.ptr(),
            nbytes: b.len(),
            alloc: Mutex::new(Some(b)),
        };
        Ok(Bound::new(py, buf)?.into_any())
    }

    /// `Handle.free`: releases a `DeviceBuffer` (None accepted).
    pub(crate) fn release_bytes(
        py: Python<'_>,
        h: &Handle,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if buffer.is_none() {
            return Ok(());
        }
        let b = buffer.cast::<DeviceBuffer>().map_err(|_| {
            PyTypeError::new_err(format!(
                "buffer: expected a buffer returned by Handle.malloc, got {}",
                buffer
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let b = b.get();
        py.detach(|| h.free(&mut b.alloc.lock().unwrap_or_else(|e| e.into_inner())))
            .py(py)
    }
}
