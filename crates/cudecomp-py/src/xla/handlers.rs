//! The FFI handlers: read the call frame (operands, results, attributes), run the core's
//! operation, and answer XLA with an FFI error carrying the core's message when it
//! fails. Nothing here unwinds into XLA: a panic becomes an internal error.

use std::ffi::{c_int, c_void, CString};

use cudecomp_core::{
    Array, Buf, DataType, Direction, Exec, HaloSpec, Steps, TransposeLayouts, TransposeOp,
    TransposeSteps,
};

use super::ffi::{self, CallFrame};
use super::{GRIDS, REDISTRIBUTIONS};
use crate::variant;

/// A handler as XLA calls it.
pub(super) type Handler = unsafe extern "C" fn(*mut CallFrame) -> *mut ffi::Error;

/// Every handler, by the target name Python registers it under.
pub(super) const ALL: [(&str, Handler); 3] = [
    ("cudecomp_transpose", transpose),
    ("cudecomp_redistribute", redistribute),
    ("cudecomp_update_halos", update_halos),
];

/// Why a call failed: an FFI error code and the message.
struct Failure(c_int, String);

fn invalid(message: String) -> Failure {
    Failure(ffi::ERROR_INVALID_ARGUMENT, message)
}

/// Runs `body` on the call frame, answering the metadata query and any failure.
///
/// # Safety
/// `frame` is XLA's call frame for this call (or null).
unsafe fn answer(
    frame: *mut CallFrame,
    body: impl FnOnce(&CallFrame) -> Result<(), Failure>,
) -> *mut ffi::Error {
    // SAFETY: XLA passes a valid call frame for the duration of the call.
    let Some(f) = (unsafe { frame.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let ext = f.extension_start;
    // SAFETY: a non-null extension is XLA's, valid for the call.
    if !ext.is_null() && unsafe { (*ext).kind } == ffi::EXTENSION_METADATA {
        // SAFETY: an extension of the metadata kind is an `XLA_FFI_Metadata_Extension`.
        return unsafe { fill_metadata(ext.cast()) };
    }
    let outcome = if f.struct_size < ffi::struct_size!(CallFrame, attrs) {
        Err(Failure(
            ffi::ERROR_INVALID_ARGUMENT,
            format!(
                "cudecomp.jax: XLA's call frame is older than this handler's ({} bytes)",
                f.struct_size
            ),
        ))
    } else if f.stage != ffi::STAGE_EXECUTE {
        Ok(())
    } else {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(f))).unwrap_or_else(|p| {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Failure(
                ffi::ERROR_INTERNAL,
                format!("cudecomp.jax: internal error: {why}"),
            ))
        })
    };
    match outcome {
        Ok(()) => std::ptr::null_mut(),
        // SAFETY: `f.api` is XLA's API table for this call.
        Err(Failure(code, message)) => unsafe { error(f.api, code, &message) },
    }
}

/// Tells XLA which FFI version this handler was written against.
///
/// # Safety
/// `ext` is XLA's metadata extension, valid for the call.
unsafe fn fill_metadata(ext: *mut ffi::MetadataExtension) -> *mut ffi::Error {
    // SAFETY: as above; the metadata it points to is XLA's, writable.
    let Some(m) = (unsafe { (*ext).metadata.as_mut() }) else {
        return std::ptr::null_mut();
    };
    m.api_version = ffi::ApiVersion {
        struct_size: ffi::struct_size!(ffi::ApiVersion, minor_version),
        extension_start: std::ptr::null_mut(),
        major_version: ffi::API_MAJOR,
        minor_version: ffi::API_MINOR,
    };
    m.traits = 0;
    if m.struct_size >= std::mem::size_of::<ffi::Metadata>() {
        m.state_type_id = ffi::TypeId { type_id: 0 };
    }
    std::ptr::null_mut()
}

/// An FFI error for XLA to raise (XLA owns and frees it).
///
/// # Safety
/// `api` is XLA's API table (or null: then no message can be made).
unsafe fn error(api: *const ffi::Api, code: c_int, message: &str) -> *mut ffi::Error {
    // SAFETY: XLA's API table outlives the call.
    let Some(create) = (unsafe { api.as_ref() }).and_then(|a| a.error_create) else {
        return std::ptr::null_mut();
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = ffi::ErrorCreateArgs {
        struct_size: ffi::struct_size!(ffi::ErrorCreateArgs, errc),
        extension_start: std::ptr::null_mut(),
        message: text.as_ptr(),
        errc: code,
    };
    // SAFETY: the arguments are filled as the header says; XLA copies the message.
    unsafe { create(&mut args) }
}

/// One scalar attribute of the call, as an integer.
fn int_attr(f: &CallFrame, name: &str) -> Result<i64, Failure> {
    let a = &f.attrs;
    for i in 0..a.size.max(0) as usize {
        // SAFETY: XLA's attribute arrays have `size` entries, valid for the call.
        let (kind, span, value) = unsafe { (*a.types.add(i), &**a.names.add(i), *a.attrs.add(i)) };
        // SAFETY: a byte span XLA gives points at `len` bytes.
        let key = unsafe { std::slice::from_raw_parts(span.ptr.cast::<u8>(), span.len) };
        if key != name.as_bytes() {
            continue;
        }
        if kind != ffi::ATTR_SCALAR {
            return Err(invalid(format!(
                "cudecomp.jax: attribute {name} is not a scalar"
            )));
        }
        // SAFETY: a scalar attribute is an `XLA_FFI_Scalar` whose value has its dtype.
        let s = unsafe { &*value.cast::<ffi::Scalar>() };
        return match s.dtype {
            // SAFETY: the value of an S64 scalar is an i64.
            ffi::DTYPE_S64 => Ok(unsafe { *s.value.cast::<i64>() }),
            // SAFETY: the value of an S32 scalar is an i32.
            ffi::DTYPE_S32 => Ok(i64::from(unsafe { *s.value.cast::<i32>() })),
            d => Err(invalid(format!(
                "cudecomp.jax: attribute {name} has XLA type {d}, expected an integer"
            ))),
        };
    }
    Err(invalid(format!(
        "cudecomp.jax: the call has no attribute {name}"
    )))
}

/// The data buffers of the operands (`rets`: of the results), tokens left out.
fn buffers(f: &CallFrame, rets: bool) -> Vec<&ffi::Buffer> {
    let (size, types, items) = match rets {
        false => (f.args.size, f.args.types, f.args.args),
        true => (f.rets.size, f.rets.types, f.rets.rets),
    };
    (0..size.max(0) as usize)
        // SAFETY: XLA's operand and result arrays have `size` entries, valid for the call.
        .filter(|&i| unsafe { *types.add(i) } == ffi::BUFFER)
        // SAFETY: as above; a buffer entry is an `XLA_FFI_Buffer`.
        .map(|i| unsafe { &*(*items.add(i)).cast::<ffi::Buffer>() })
        .filter(|b| b.dtype != ffi::DTYPE_TOKEN)
        .collect()
}

fn dtype_of(b: &ffi::Buffer) -> Result<DataType, Failure> {
    match b.dtype {
        ffi::DTYPE_F32 => Ok(DataType::Float),
        ffi::DTYPE_F64 => Ok(DataType::Double),
        ffi::DTYPE_C64 => Ok(DataType::FloatComplex),
        ffi::DTYPE_C128 => Ok(DataType::DoubleComplex),
        d => Err(invalid(format!(
            "cudecomp.jax: expected float32, float64, complex64 or complex128 data, got XLA type {d}"
        ))),
    }
}

/// A buffer as the core's array: one pencil (3 axes) or a batch (4).
fn array_of(b: &ffi::Buffer, dtype: DataType, writable: bool) -> Result<Array, Failure> {
    // SAFETY: a buffer's `dims` has `rank` entries.
    let dims = unsafe { std::slice::from_raw_parts(b.dims, b.rank.max(0) as usize) };
    let (batch, pencil) = match dims {
        [k, rest @ ..] if rest.len() == 3 => (Some(*k), rest),
        all => (None, all),
    };
    let shape = <[i64; 3]>::try_from(pencil).map_err(|_| {
        invalid(format!(
            "cudecomp.jax: expected a pencil of 3 axes or a batch of 4, got shape {dims:?}"
        ))
    })?;
    let cells: i64 = dims.iter().product();
    // SAFETY: XLA's buffer holds `cells` elements of its dtype for the call; results are
    // XLA's fresh buffers, operands are only read.
    let buf = unsafe { Buf::new(b.data.cast::<u8>(), cells.max(0) as usize * dtype.size()) };
    Ok(Array {
        buf,
        shape: Some(shape),
        batch,
        read_only: (!writable).then_some("an operand of the XLA call"),
    })
}

/// The call's one operand and one result as the core's arrays, with their element type
/// (`what` names the operation in the message where the call has others).
fn operand_and_result(f: &CallFrame, what: &str) -> Result<(DataType, Array, Array), Failure> {
    let (ins, outs) = (buffers(f, false), buffers(f, true));
    let (&[input], &[output]) = (&ins[..], &outs[..]) else {
        return Err(invalid(format!(
            "cudecomp.jax: {what} takes one operand and gives one result, got {} and {}",
            ins.len(),
            outs.len()
        )));
    };
    let dtype = dtype_of(input)?;
    Ok((
        dtype,
        array_of(input, dtype, false)?,
        array_of(output, dtype, true)?,
    ))
}

/// Where the operation runs: the host (CPU variant), or XLA's stream (GPU variant).
fn exec_of(f: &CallFrame) -> Result<Exec, Failure> {
    if variant::CPU_ONLY {
        return Ok(Exec::Host);
    }
    // SAFETY: XLA's API table outlives the call.
    let get = unsafe { f.api.as_ref() }
        .filter(|a| a.struct_size > std::mem::offset_of!(ffi::Api, stream_get))
        .and_then(|a| a.stream_get)
        .ok_or_else(|| invalid("cudecomp.jax: this XLA gives its handlers no stream".into()))?;
    let mut args = ffi::StreamGetArgs {
        struct_size: ffi::struct_size!(ffi::StreamGetArgs, stream),
        extension_start: std::ptr::null_mut(),
        ctx: f.ctx,
        stream: std::ptr::null_mut::<c_void>(),
    };
    // SAFETY: the arguments are filled as the header says, `ctx` is this call's.
    let e = unsafe { get(&mut args) };
    if !e.is_null() {
        return Err(Failure(
            ffi::ERROR_INTERNAL,
            "cudecomp.jax: XLA gave no stream".into(),
        ));
    }
    Ok(Exec::Device(cudecomp_core::Stream::from_handle(
        args.stream as u64,
    )))
}

/// Three scalar attributes `{name}_x`, `{name}_y`, `{name}_z`, one per global axis.
fn int_triple(f: &CallFrame, name: &str) -> Result<[i64; 3], Failure> {
    Ok([
        int_attr(f, &format!("{name}_x"))?,
        int_attr(f, &format!("{name}_y"))?,
        int_attr(f, &format!("{name}_z"))?,
    ])
}

/// An attribute that names an axis (0-2).
fn axis_attr(f: &CallFrame, name: &str) -> Result<usize, Failure> {
    match int_attr(f, name)? {
        v @ 0..=2 => Ok(v as usize),
        v => Err(invalid(format!(
            "cudecomp.jax: attribute {name} must be 0, 1 or 2, got {v}"
        ))),
    }
}

fn direction_of(v: i64) -> Result<Direction, Failure> {
    Ok(match v {
        0 => Direction::XToY,
        1 => Direction::YToZ,
        2 => Direction::ZToY,
        3 => Direction::YToX,
        4 => Direction::XToZ,
        5 => Direction::ZToX,
        _ => {
            return Err(invalid(format!(
                "cudecomp.jax: unknown transpose direction {v}"
            )))
        }
    })
}

/// `cudecomp_transpose`: one operand (a pencil or a batch), one result; attributes
/// `grid` (its id) and `direction` (0-5, as `Direction`).
///
/// # Safety
/// Called by XLA with its call frame.
unsafe extern "C" fn transpose(frame: *mut CallFrame) -> *mut ffi::Error {
    let run = |f: &CallFrame| {
        let gd = GRIDS.get(int_attr(f, "grid")? as u64).map_err(invalid)?;
        let direction = direction_of(int_attr(f, "direction")?)?;
        let (dtype, input, output) = operand_and_result(f, "a transpose")?;
        let op = TransposeOp {
            direction,
            layouts: TransposeLayouts::default(),
            dtype,
            own_cells: true,
            fields: input.batch.unwrap_or(1),
        };
        // XLA orders the operands' writes before the call: no steps to wait for.
        let whole = || Steps {
            marks: &[],
            axis: None,
        };
        let steps = TransposeSteps {
            input: whole(),
            output: whole(),
        };
        gd.transpose_with(&op, input, output, None, exec_of(f)?, steps)
            .map_err(|e| invalid(format!("cudecomp.jax: {}", e)))
    };
    // SAFETY: forwarded.
    unsafe { answer(frame, run) }
}

/// `cudecomp_redistribute`: one operand (this rank's source array, or a batch), one
/// result (its destination array); attribute `redistribution` (its id). The result's
/// cells outside the destination's owned box (halos, padding) are zero: XLA's result
/// must be defined everywhere, and the run writes the owned cells only.
///
/// # Safety
/// Called by XLA with its call frame.
unsafe extern "C" fn redistribute(frame: *mut CallFrame) -> *mut ffi::Error {
    let run = |f: &CallFrame| {
        let r = REDISTRIBUTIONS
            .get(int_attr(f, "redistribution")? as u64)
            .map_err(invalid)?;
        let (dtype, input, output) = operand_and_result(f, "a redistribution")?;
        let exec = exec_of(f)?;
        match exec {
            // SAFETY: the result is XLA's buffer of `len` bytes, written by this call alone.
            Exec::Host => unsafe { std::ptr::write_bytes(output.buf.ptr(), 0, output.buf.len()) },
            Exec::Device(stream) => {
                // SAFETY: XLA's device buffer of `len` bytes, zeroed on its stream before the run.
                unsafe { stream.zero_bytes(output.buf.ptr() as u64, output.buf.len()) }
                    .map_err(|e| invalid(format!("cudecomp.jax: {e}")))?
            }
        }
        r.run(dtype, input, output, None, exec)
            .map_err(|e| invalid(format!("cudecomp.jax: {e}")))
    };
    // SAFETY: forwarded.
    unsafe { answer(frame, run) }
}

/// `cudecomp_update_halos`: one operand (a pencil with halos, or a batch) that is also the
/// result (Python aliases them), updated in place; attributes `grid`, `axis` (the pencil),
/// `dim`, and per global axis `halo_*`, `period_*` (0 or 1) and `padding_*`.
///
/// # Safety
/// Called by XLA with its call frame.
unsafe extern "C" fn update_halos(frame: *mut CallFrame) -> *mut ffi::Error {
    let run = |f: &CallFrame| {
        let gd = GRIDS.get(int_attr(f, "grid")? as u64).map_err(invalid)?;
        let spec = HaloSpec {
            axis: axis_attr(f, "axis")?,
            dim: axis_attr(f, "dim")?,
            halo: int_triple(f, "halo")?,
            periods: int_triple(f, "period")?.map(|p| p != 0),
            padding: int_triple(f, "padding")?,
        };
        let (dtype, input, data) = operand_and_result(f, "a halo update")?;
        if input.buf.ptr() != data.buf.ptr() {
            return Err(Failure(
                ffi::ERROR_INTERNAL,
                "cudecomp.jax: a halo update's operand must be its result (an aliased buffer)"
                    .into(),
            ));
        }
        gd.update_halos(&spec, dtype, data, None, exec_of(f)?)
            .map_err(|e| invalid(format!("cudecomp.jax: {e}")))
    };
    // SAFETY: forwarded.
    unsafe { answer(frame, run) }
}
