//! The part of XLA's FFI C API (`xla/ffi/api/c_api.h`, shipped in jaxlib's
//! `jax.ffi.include_dir()`) that cudecomp's handlers use: the call frame, its buffers and
//! attributes, errors, the stream, and the metadata query.
//!
//! No maintained crate exposes these structs, so they are declared here, field for field
//! in the header's order; `tests/test_jax.py` compiles the header and compares every
//! offset, size and constant with [`layout`].

use std::ffi::{c_char, c_int, c_void};

/// The header's API version this module follows (`XLA_FFI_API_MAJOR`, `_MINOR`).
pub(crate) const API_MAJOR: c_int = 0;
pub(crate) const API_MINOR: c_int = 3;

/// `XLA_FFI_Extension_Metadata`.
pub(crate) const EXTENSION_METADATA: c_int = 1;
/// `XLA_FFI_ExecutionStage_EXECUTE`.
pub(crate) const STAGE_EXECUTE: c_int = 3;
/// `XLA_FFI_ArgType_BUFFER`, `XLA_FFI_RetType_BUFFER`.
pub(crate) const BUFFER: c_int = 1;
/// `XLA_FFI_AttrType_SCALAR`.
pub(crate) const ATTR_SCALAR: c_int = 3;
/// `XLA_FFI_Error_Code_INVALID_ARGUMENT`, `_INTERNAL`.
pub(crate) const ERROR_INVALID_ARGUMENT: c_int = 3;
pub(crate) const ERROR_INTERNAL: c_int = 13;

/// `XLA_FFI_DataType` values of the element types cudecomp moves, and of the scalar
/// attributes it reads.
pub(crate) const DTYPE_S32: c_int = 4;
pub(crate) const DTYPE_S64: c_int = 5;
pub(crate) const DTYPE_F32: c_int = 11;
pub(crate) const DTYPE_F64: c_int = 12;
pub(crate) const DTYPE_C64: c_int = 15;
pub(crate) const DTYPE_C128: c_int = 18;
pub(crate) const DTYPE_TOKEN: c_int = 17;

#[repr(C)]
pub(crate) struct ExtensionBase {
    pub struct_size: usize,
    pub kind: c_int,
    pub next: *mut ExtensionBase,
}

#[repr(C)]
pub(crate) struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub major_version: c_int,
    pub minor_version: c_int,
}

#[repr(C)]
pub(crate) struct ErrorCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub message: *const c_char,
    pub errc: c_int,
}

#[repr(C)]
pub(crate) struct StreamGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut c_void,
    pub stream: *mut c_void,
}

/// An opaque `XLA_FFI_Error`.
pub(crate) type Error = c_void;

type ErrorCreate = unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut Error;
type StreamGet = unsafe extern "C" fn(*mut StreamGetArgs) -> *mut Error;
/// A function pointer of the API this module does not call.
type Unused = *const c_void;

/// `XLA_FFI_Api` up to the functions used here (XLA owns it; only read).
#[repr(C)]
pub(crate) struct Api {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api_version: ApiVersion,
    pub internal_api: *const c_void,
    pub error_create: Option<ErrorCreate>,
    pub error_get_message: Unused,
    pub error_destroy: Unused,
    pub handler_register: Unused,
    pub stream_get: Option<StreamGet>,
}

#[repr(C)]
pub(crate) struct Buffer {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub dtype: c_int,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *mut i64,
}

#[repr(C)]
pub(crate) struct ByteSpan {
    pub ptr: *const c_char,
    pub len: usize,
}

#[repr(C)]
pub(crate) struct Scalar {
    pub dtype: c_int,
    pub value: *mut c_void,
}

#[repr(C)]
pub(crate) struct Args {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut c_int,
    pub args: *mut *mut c_void,
}

#[repr(C)]
pub(crate) struct Rets {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut c_int,
    pub rets: *mut *mut c_void,
}

#[repr(C)]
pub(crate) struct Attrs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut c_int,
    pub names: *mut *mut ByteSpan,
    pub attrs: *mut *mut c_void,
}

#[repr(C)]
pub(crate) struct CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api: *const Api,
    pub ctx: *mut c_void,
    pub stage: c_int,
    pub args: Args,
    pub rets: Rets,
    pub attrs: Attrs,
    pub future: *mut c_void,
}

#[repr(C)]
pub(crate) struct TypeId {
    pub type_id: i64,
}

#[repr(C)]
pub(crate) struct Metadata {
    pub struct_size: usize,
    pub api_version: ApiVersion,
    pub traits: u32,
    pub state_type_id: TypeId,
}

#[repr(C)]
pub(crate) struct MetadataExtension {
    pub extension_base: ExtensionBase,
    pub metadata: *mut Metadata,
}

/// `XLA_FFI_STRUCT_SIZE(T, last)`: the bytes of `T` up to the end of field `last`, what
/// XLA writes in `struct_size` (and checks against the header's).
macro_rules! struct_size {
    ($t:ty, $last:ident) => {
        std::mem::offset_of!($t, $last) + $crate::xla::ffi::size_of_field(|s: &$t| &s.$last)
    };
}
pub(crate) use struct_size;

/// Size of the field a projection returns (for [`struct_size`]).
pub(crate) const fn size_of_field<T, F>(_: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// What [`layout`] lists: a name (`struct.field` for an offset, `struct` for a size,
/// `constant` for a value) and its number.
type Entry = (&'static str, i64);

/// Every offset, size and constant declared here, by the header's names, for the test
/// that compiles the header and compares.
pub(crate) fn layout() -> Vec<Entry> {
    use std::mem::{offset_of, size_of};
    macro_rules! fields {
        ($out:ident, $t:ty, $c:literal, [$($f:ident => $cf:literal),*]) => {
            $out.push(($c, size_of::<$t>() as i64));
            offsets!($out, $t, $c, [$($f => $cf),*]);
        };
    }
    // Structs declared only up to the members used here: their offsets, not their size.
    macro_rules! offsets {
        ($out:ident, $t:ty, $c:literal, [$($f:ident => $cf:literal),*]) => {
            $( $out.push((concat!($c, ".", $cf), offset_of!($t, $f) as i64)); )*
        };
    }
    let mut v: Vec<Entry> = Vec::new();
    fields!(v, ExtensionBase, "XLA_FFI_Extension_Base", [struct_size => "struct_size", kind => "type", next => "next"]);
    fields!(v, ApiVersion, "XLA_FFI_Api_Version", [extension_start => "extension_start", major_version => "major_version", minor_version => "minor_version"]);
    fields!(v, ErrorCreateArgs, "XLA_FFI_Error_Create_Args", [message => "message", errc => "errc"]);
    fields!(v, StreamGetArgs, "XLA_FFI_Stream_Get_Args", [ctx => "ctx", stream => "stream"]);
    fields!(v, Buffer, "XLA_FFI_Buffer", [dtype => "dtype", data => "data", rank => "rank", dims => "dims"]);
    fields!(v, ByteSpan, "XLA_FFI_ByteSpan", [ptr => "ptr", len => "len"]);
    fields!(v, Scalar, "XLA_FFI_Scalar", [dtype => "dtype", value => "value"]);
    fields!(v, Args, "XLA_FFI_Args", [size => "size", types => "types", args => "args"]);
    fields!(v, Rets, "XLA_FFI_Rets", [size => "size", types => "types", rets => "rets"]);
    fields!(v, Attrs, "XLA_FFI_Attrs", [size => "size", types => "types", names => "names", attrs => "attrs"]);
    fields!(v, CallFrame, "XLA_FFI_CallFrame", [api => "api", ctx => "ctx", stage => "stage", args => "args", rets => "rets", attrs => "attrs", future => "future"]);
    fields!(v, Metadata, "XLA_FFI_Metadata", [api_version => "api_version", traits => "traits", state_type_id => "state_type_id"]);
    fields!(v, MetadataExtension, "XLA_FFI_Metadata_Extension", [extension_base => "extension_base", metadata => "metadata"]);
    offsets!(v, Api, "XLA_FFI_Api", [api_version => "api_version", internal_api => "internal_api", error_create => "XLA_FFI_Error_Create", error_get_message => "XLA_FFI_Error_GetMessage", error_destroy => "XLA_FFI_Error_Destroy", handler_register => "XLA_FFI_Handler_Register", stream_get => "XLA_FFI_Stream_Get"]);
    for (name, value) in [
        ("XLA_FFI_API_MAJOR", API_MAJOR),
        ("XLA_FFI_API_MINOR", API_MINOR),
        ("XLA_FFI_Extension_Metadata", EXTENSION_METADATA),
        ("XLA_FFI_ExecutionStage_EXECUTE", STAGE_EXECUTE),
        ("XLA_FFI_ArgType_BUFFER", BUFFER),
        ("XLA_FFI_RetType_BUFFER", BUFFER),
        ("XLA_FFI_AttrType_SCALAR", ATTR_SCALAR),
        (
            "XLA_FFI_Error_Code_INVALID_ARGUMENT",
            ERROR_INVALID_ARGUMENT,
        ),
        ("XLA_FFI_Error_Code_INTERNAL", ERROR_INTERNAL),
        ("XLA_FFI_DataType_S32", DTYPE_S32),
        ("XLA_FFI_DataType_S64", DTYPE_S64),
        ("XLA_FFI_DataType_F32", DTYPE_F32),
        ("XLA_FFI_DataType_F64", DTYPE_F64),
        ("XLA_FFI_DataType_C64", DTYPE_C64),
        ("XLA_FFI_DataType_C128", DTYPE_C128),
        ("XLA_FFI_DataType_TOKEN", DTYPE_TOKEN),
    ] {
        v.push((name, value as i64));
    }
    for (name, size) in [
        (
            "XLA_FFI_CallFrame_STRUCT_SIZE",
            struct_size!(CallFrame, attrs),
        ),
        (
            "XLA_FFI_Metadata_STRUCT_SIZE",
            struct_size!(Metadata, traits),
        ),
        (
            "XLA_FFI_Metadata_Extension_STRUCT_SIZE",
            struct_size!(MetadataExtension, metadata),
        ),
        (
            "XLA_FFI_Api_Version_STRUCT_SIZE",
            struct_size!(ApiVersion, minor_version),
        ),
        (
            "XLA_FFI_Error_Create_Args_STRUCT_SIZE",
            struct_size!(ErrorCreateArgs, errc),
        ),
        (
            "XLA_FFI_Stream_Get_Args_STRUCT_SIZE",
            struct_size!(StreamGetArgs, stream),
        ),
    ] {
        v.push((name, size as i64));
    }
    v
}
