//! Array arguments: reading the array interface, checking dtype/shape/writability, and
//! deciding the element type of an operation.

use cudecomp_core::{Array, Buf, DataType};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::args::dtype_name;
use crate::errors::invalid;

/// What an operation needs to know about one array argument.
#[derive(Clone, Debug)]
pub(crate) struct ArrayArg {
    /// Argument name, for messages.
    pub what: &'static str,
    pub ptr: usize,
    pub shape: Vec<i64>,
    pub itemsize: usize,
    /// `None` for opaque (`V<n>`) or other storage.
    pub dtype: Option<DataType>,
    /// The typestr as given, for messages.
    pub typestr: String,
    pub readonly: bool,
    /// True for the four supported typestrs and opaque storage.
    pub usable: bool,
    /// Seen through DLPack (GPU variant): an input only.
    pub from_dlpack: bool,
}

impl ArrayArg {
    /// Size in bytes.
    pub(crate) fn nbytes(&self) -> usize {
        self.shape.iter().product::<i64>().max(0) as usize * self.itemsize
    }

    /// The byte range (host or device memory, per variant).
    ///
    /// # Safety
    /// The Python object this was read from must stay alive, and must not be resized or
    /// accessed by other code, while the buffer is in use.
    pub(crate) unsafe fn buf(&self) -> Buf {
        // SAFETY: forwarded to the caller.
        unsafe { Buf::new(self.ptr as *mut u8, self.nbytes()) }
    }

    /// The array as the core checks it: its bytes, its shape (3-D arrays, and 4-D ones as
    /// a batch of 3-D pencils along the leading axis; workspaces of other ranks pass
    /// bytes alone), and why it may not be written, if it may not.
    ///
    /// # Safety
    /// As [`ArrayArg::buf`].
    pub(crate) unsafe fn array(&self) -> Array {
        let (batch, pencil) = match self.shape.as_slice() {
            [k, rest @ ..] if rest.len() == 3 => (Some(*k), rest),
            all => (None, all),
        };
        let shape = <[i64; 3]>::try_from(pencil).ok();
        let read_only = if self.readonly {
            Some("a read-only one")
        } else if self.from_dlpack {
            Some("a DLPack export that does not say it may be written (pass an array exposing __cuda_array_interface__, or one whose DLPack 1.0 export says it is writable)")
        } else {
            None
        };
        Array {
            // SAFETY: forwarded to the caller.
            buf: unsafe { self.buf() },
            shape,
            batch,
            read_only,
        }
    }
}

/// Parses an array-interface dictionary (NumPy's `__array_interface__` or the CUDA array
/// interface, which share these keys).
pub(crate) fn parse_interface(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    what: &'static str,
    any_dims: bool,
) -> PyResult<ArrayArg> {
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| PyTypeError::new_err(format!("{what}: array interface lacks '{k}'")))
    };
    let data = get("data")?.cast_into::<PyTuple>()?;
    let ptr: usize = data.get_item(0)?.extract()?;
    let readonly: bool = data.get_item(1)?.extract()?;
    let shape: Vec<i64> = get("shape")?.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    if let Some(mask) = d.get_item("mask")? {
        if !mask.is_none() {
            return Err(invalid(
                py,
                format!(
                    "{what}: arrays with a validity mask are not supported (mask must be None)"
                ),
            ));
        }
    }
    if !any_dims && shape.len() != 3 {
        return Err(invalid(
            py,
            format!(
                "{what}: expected a 3-dimensional array, got {} dimensions",
                shape.len()
            ),
        ));
    }
    let (order, kind, size) = split_typestr(&typestr).ok_or_else(|| {
        invalid(
            py,
            format!("{what}: unsupported array dtype {typestr:?}; expected float32, float64, complex64 or complex128"),
        )
    })?;
    if order == '>' && size > 1 {
        return Err(invalid(
            py,
            format!("{what}: big-endian data ({typestr}) is not supported; expected native (little-endian) byte order"),
        ));
    }
    if let Some(strides) = d.get_item("strides")? {
        if !strides.is_none() {
            let strides: Vec<i64> = strides.extract()?;
            let mut expect = vec![0i64; shape.len()];
            let mut s = size as i64;
            for i in (0..shape.len()).rev() {
                expect[i] = s;
                s *= shape[i];
            }
            let dense = shape
                .iter()
                .zip(strides.iter().zip(&expect))
                .all(|(&n, (&a, &b))| n <= 1 || a == b);
            if !dense {
                return Err(invalid(py, format!("{what}: expected a C-contiguous array, got strides {strides:?} for shape {shape:?}")));
            }
        }
    }
    let dtype = match (kind, size) {
        ('f', 4) => Some(DataType::Float),
        ('f', 8) => Some(DataType::Double),
        ('c', 8) => Some(DataType::FloatComplex),
        ('c', 16) => Some(DataType::DoubleComplex),
        _ => None,
    };
    Ok(ArrayArg {
        what,
        ptr,
        shape,
        itemsize: size,
        dtype,
        typestr,
        readonly,
        usable: dtype.is_some() || kind == 'V',
        from_dlpack: false,
    })
}

fn split_typestr(t: &str) -> Option<(char, char, usize)> {
    let mut it = t.chars();
    let order = it.next()?;
    let kind = it.next()?;
    let size = it.as_str().parse().ok()?;
    matches!(order, '<' | '>' | '|' | '=').then_some((order, kind, size))
}

/// Decides the operation's element type from the explicit `dtype` argument and the arrays
/// (the first array supplies it when `dtype` is None), checking that all agree.
pub(crate) fn resolve_dtype(
    py: Python<'_>,
    explicit: Option<DataType>,
    arrays: &[&ArrayArg],
) -> PyResult<DataType> {
    for a in arrays {
        if !a.usable {
            return Err(invalid(
                py,
                format!(
                    "{}: unsupported array dtype {:?}; expected float32, float64, complex64 or complex128 (or opaque 'V<n>' storage with an explicit dtype)",
                    a.what, a.typestr
                ),
            ));
        }
    }
    let dtype = match explicit {
        Some(d) => d,
        None => match arrays.first().and_then(|a| a.dtype) {
            Some(d) => d,
            None => {
                let what = arrays.first().map_or("input", |a| a.what);
                return Err(invalid(
                    py,
                    format!("{what}: opaque storage needs an explicit dtype (a cudecomp.DataType of the same element size)"),
                ));
            }
        },
    };
    for a in arrays {
        let ok = match a.dtype {
            Some(d) => d == dtype,
            None => a.itemsize == dtype.size(),
        };
        if !ok {
            return Err(invalid(
                py,
                format!(
                    "{}: dtype {} expects {}-byte {} elements, got an array of {:?}; an explicit dtype must agree with the arrays and does not convert data",
                    a.what,
                    dtype_name(dtype),
                    dtype.size(),
                    numpy_name(dtype),
                    a.typestr
                ),
            ));
        }
    }
    Ok(dtype)
}

/// NumPy dtype name of a data type.
pub(crate) fn numpy_name(d: DataType) -> &'static str {
    match d {
        DataType::Float => "float32",
        DataType::Double => "float64",
        DataType::FloatComplex => "complex64",
        DataType::DoubleComplex => "complex128",
    }
}
