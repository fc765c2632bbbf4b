//! CUDA through cudarc (driver API and NVRTC, loaded at run time): the device a handle
//! binds, allocations, events, the copy kernels, NCCL and the device transports.
//!
//! Nothing here is linked at build time; every entry point checks that the driver is
//! present first, so a machine without CUDA gets `Error::Cuda`, never a panic.

pub(crate) mod ipc;
pub(crate) mod kernels;
pub(crate) mod nccl;
pub(crate) mod nvshmem;
pub(crate) mod vmm;

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result as cu, sys, DriverError};

use crate::{Error, Result};

/// A handle borrowed from the caller (never destroyed by the library): a plain value
/// usable from any thread, made from the integer Python passes.
macro_rules! borrowed_handle {
    ($(#[$doc:meta])* $name:ident($raw:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(transparent)]
        pub struct $name($raw);

        // SAFETY: a CUDA handle is an opaque identifier usable from any thread.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}

        impl $name {
            /// The handle with value `v`.
            pub fn from_handle(v: u64) -> $name {
                $name(v as usize as $raw)
            }
        }
    };
}

borrowed_handle!(
    /// A borrowed CUDA stream handle, as passed by Python (0 = legacy default stream).
    Stream(sys::CUstream)
);

impl Stream {
    /// Enqueues the zeroing of `bytes` bytes of device memory at `ptr` on the stream.
    ///
    /// # Safety
    /// `ptr` must be device memory of at least `bytes` bytes that nothing else writes
    /// while the stream reaches this.
    pub unsafe fn zero_bytes(&self, ptr: u64, bytes: usize) -> Result<()> {
        if !driver_present() {
            return Err(Error::Cuda("cuMemsetD8Async: no CUDA driver".into()));
        }
        // SAFETY: the caller's promise on `ptr`; the stream is the caller's, alive for the call.
        check(
            unsafe { cu::memset_d8_async(ptr, 0, bytes, self.0) },
            "cuMemsetD8Async",
        )
    }
}

borrowed_handle!(
    /// A borrowed CUDA event handle, as passed by Python (a CuPy or PyTorch event).
    EventRef(sys::CUevent)
);

impl EventRef {
    /// Records the event on `stream`.
    pub fn record(&self, stream: Stream) -> Result<()> {
        // SAFETY: the handle comes from the caller, who keeps the event alive for the call.
        check(
            unsafe { cu::event::record(self.0, stream.0) },
            "cuEventRecord",
        )
    }

    /// Makes `stream` wait for the event's last record.
    pub fn wait_on(&self, stream: Stream) -> Result<()> {
        // SAFETY: the handle comes from the caller, who keeps the event alive for the call.
        check(
            unsafe {
                cu::stream::wait_event(
                    stream.0,
                    self.0,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            },
            "cuStreamWaitEvent",
        )
    }
}

/// Converts a driver error into `Error::Cuda` naming the failed call.
pub(crate) fn check<T>(r: std::result::Result<T, DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| {
        let name = e
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Error::Cuda(format!("{what} failed: {:?} ({name})", e.0))
    })
}

/// True when `libcuda.so` can be loaded.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library.
    unsafe { sys::is_culib_present() }
}

/// True when NVRTC can be loaded.
pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the NVRTC library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The device a handle is bound to, with a retained primary context (the one CuPy and
/// PyTorch use).
pub struct Device {
    /// Device ordinal.
    pub ordinal: i32,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    /// Compute capability `(major, minor)`.
    pub arch: (i32, i32),
    /// Streaming multiprocessors.
    pub sms: i32,
}

// SAFETY: a primary context and device handle may be used from any thread once bound.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    /// Binds the calling thread's current device (device 0 when no context is current).
    pub fn current() -> Result<Arc<Device>> {
        if !driver_present() {
            return Err(Error::Cuda(
                "no CUDA driver found (libcuda.so.1): the GPU variant needs an NVIDIA GPU and driver; install the CPU variant with CUDECOMP_BUILD_CPU_ONLY=ON otherwise".into(),
            ));
        }
        check(cu::init(), "cuInit")?;
        let count = check(cu::device::get_count(), "cuDeviceGetCount")?;
        if count < 1 {
            return Err(Error::Cuda(
                "no CUDA device is visible (cuDeviceGetCount returned 0)".into(),
            ));
        }
        let dev = match check(cu::ctx::get_current(), "cuCtxGetCurrent")? {
            Some(_) => {
                let mut dev: sys::CUdevice = 0;
                check(
                    // SAFETY: a context is current; the call writes one int.
                    unsafe { sys::cuCtxGetDevice(&mut dev) }.result(),
                    "cuCtxGetDevice",
                )?;
                dev
            }
            None => check(cu::device::get(0), "cuDeviceGet")?,
        };
        // SAFETY: `dev` is a valid device; the retained context is released in Drop.
        let ctx = check(
            unsafe { cu::primary_ctx::retain(dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        // SAFETY: `ctx` was just retained.
        check(unsafe { cu::ctx::set_current(ctx) }, "cuCtxSetCurrent")?;
        let attr = |a| {
            // SAFETY: plain attribute query on a valid device.
            check(
                unsafe { cu::device::get_attribute(dev, a) },
                "cuDeviceGetAttribute",
            )
        };
        let arch = (
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(Arc::new(Device {
            ordinal: dev,
            dev,
            ctx,
            arch,
            sms,
        }))
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: the context is retained for this object's lifetime.
        check(unsafe { cu::ctx::set_current(self.ctx) }, "cuCtxSetCurrent")
    }

    /// Ordinal of the device holding `ptr` (`None` for host or unknown memory).
    pub fn pointer_device(ptr: u64) -> Option<i32> {
        let mut ordinal: i32 = -1;
        // SAFETY: the attribute query writes one int and fails cleanly on foreign pointers.
        let r = unsafe {
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr as sys::CUdeviceptr,
            )
        };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(ordinal)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `current`.
        let _ = unsafe { cu::primary_ctx::release(self.dev) };
    }
}

/// Device memory owned by the library (workspaces, `Handle.malloc`).
pub struct DeviceAlloc {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device: Arc<Device>,
}

// SAFETY: a device address may be used from any thread with the context bound.
unsafe impl Send for DeviceAlloc {}
// SAFETY: as above.
unsafe impl Sync for DeviceAlloc {}

impl DeviceAlloc {
    /// `cuMemAlloc` of `bytes` (at least 1) on `device`.
    pub fn new(device: &Arc<Device>, bytes: usize) -> Result<DeviceAlloc> {
        device.bind()?;
        // SAFETY: plain allocation in the bound context.
        let ptr = check(unsafe { cu::malloc_sync(bytes.max(1)) }, "cuMemAlloc")?;
        Ok(DeviceAlloc {
            ptr,
            bytes,
            device: device.clone(),
        })
    }

    /// Device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: allocated by cuMemAlloc in this context; the owner synchronised uses.
            let _ = unsafe { cu::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory (staging for MPI without CUDA support).
pub(crate) struct PinnedAlloc {
    ptr: *mut u8,
    bytes: usize,
    device: Arc<Device>,
}

// SAFETY: plain host memory owned by this object.
unsafe impl Send for PinnedAlloc {}
// SAFETY: as above.
unsafe impl Sync for PinnedAlloc {}

impl PinnedAlloc {
    /// `cuMemAllocHost` of `bytes`.
    pub(crate) fn new(device: &Arc<Device>, bytes: usize) -> Result<PinnedAlloc> {
        device.bind()?;
        // SAFETY: plain allocation in the bound context.
        let ptr = check(
            unsafe { cu::malloc_host(bytes.max(1), 0) },
            "cuMemAllocHost",
        )?;
        Ok(PinnedAlloc {
            ptr: ptr.cast(),
            bytes,
            device: device.clone(),
        })
    }

    /// Start address.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: allocated by cuMemAllocHost; no copy uses it any more (stream synced).
            let _ = unsafe { cu::free_host(self.ptr.cast()) };
        }
    }
}

/// A stream the library creates and owns: non-blocking (no implicit ordering with the
/// legacy default stream) and of the highest priority, so that its small communication
/// kernels get SMs while large pack kernels on the user's stream are running.
pub(crate) struct OwnedStream(Stream);

impl OwnedStream {
    /// Creates the stream in the bound context.
    pub(crate) fn new() -> Result<OwnedStream> {
        let (mut least, mut greatest) = (0, 0);
        check(
            // SAFETY: the query writes two ints, both locals that outlive the call.
            unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }.result(),
            "cuCtxGetStreamPriorityRange",
        )?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        check(
            // SAFETY: creates a stream in the current context; destroyed in Drop.
            unsafe {
                sys::cuStreamCreateWithPriority(
                    &mut s,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                    greatest,
                )
            }
            .result(),
            "cuStreamCreateWithPriority",
        )?;
        Ok(OwnedStream(Stream(s)))
    }

    /// The stream handle.
    pub(crate) fn stream(&self) -> Stream {
        self.0
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: created in `new`; pending work completes before the driver frees it.
        let _ = unsafe { sys::cuStreamDestroy_v2(self.0 .0) };
    }
}

// SAFETY: a stream handle is an opaque identifier usable from any thread.
unsafe impl Send for OwnedStream {}
// SAFETY: as above.
unsafe impl Sync for OwnedStream {}

/// A CUDA event, used to order work across streams (and, exported through CUDA IPC,
/// across processes) and, when created with timing, to time work on a stream.
pub(crate) struct Event(sys::CUevent);

// SAFETY: events may be recorded and waited on from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// A new event in the bound context. With `timing`, [`Event::elapsed_ms`] can measure
    /// between two of them; without, it is created with `CU_EVENT_DISABLE_TIMING`, which
    /// is cheaper to record and wait on and serves ordering only.
    pub(crate) fn new(timing: bool) -> Result<Event> {
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        Ok(Event(check(cu::event::create(flags), "cuEventCreate")?))
    }

    /// A new event that other processes can wait on (see [`Event::ipc_handle`]).
    pub(crate) fn new_ipc() -> Result<Event> {
        let flags = sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32
            | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        let mut e: sys::CUevent = std::ptr::null_mut();
        check(
            // SAFETY: creates an event in the current context; destroyed in Drop.
            unsafe { sys::cuEventCreate(&mut e, flags) }.result(),
            "cuEventCreate(INTERPROCESS)",
        )?;
        Ok(Event(e))
    }

    /// The 64-byte handle another process passes to [`Event::open_ipc`].
    pub(crate) fn ipc_handle(&self) -> Result<[u8; 64]> {
        let mut h = sys::CUipcEventHandle_st { reserved: [0; 64] };
        check(
            // SAFETY: valid interprocess event; writes the handle.
            unsafe { sys::cuIpcGetEventHandle(&mut h, self.0) }.result(),
            "cuIpcGetEventHandle",
        )?;
        Ok(h.reserved.map(|c| c as u8))
    }

    /// Opens an event exported by another process of this node. Waiting on it waits for
    /// the exporter's last record issued before the wait was enqueued.
    pub(crate) fn open_ipc(handle: &[u8; 64]) -> Result<Event> {
        let h = sys::CUipcEventHandle_st {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let mut e: sys::CUevent = std::ptr::null_mut();
        check(
            // SAFETY: the handle was exported by a live process for a live event.
            unsafe { sys::cuIpcOpenEventHandle(&mut e, h) }.result(),
            "cuIpcOpenEventHandle",
        )?;
        Ok(Event(e))
    }

    /// Records the event on `stream`.
    pub(crate) fn record(&self, stream: Stream) -> Result<()> {
        // SAFETY: valid event; the stream handle comes from the caller.
        check(
            unsafe { cu::event::record(self.0, stream.0) },
            "cuEventRecord",
        )
    }

    /// Makes `stream` wait for the last record.
    pub(crate) fn wait_on(&self, stream: Stream) -> Result<()> {
        EventRef(self.0).wait_on(stream)
    }

    /// Blocks until the last record completed.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: valid event.
        check(
            unsafe { cu::event::synchronize(self.0) },
            "cuEventSynchronize",
        )
    }

    /// Milliseconds between two recorded timing events.
    pub(crate) fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: both events are valid and recorded.
        check(
            unsafe { cu::event::elapsed(self.0, end.0) },
            "cuEventElapsedTime",
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { cu::event::destroy(self.0) };
    }
}

/// True when `stream` is being captured into a CUDA graph (an invalidated capture counts:
/// every call on it would fail).
pub(crate) fn capturing(stream: Stream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream handle comes from the caller; the status is a plain output.
    let rc = unsafe { sys::cuStreamIsCapturing(stream.0, &mut status) };
    check(rc.result(), "cuStreamIsCapturing")?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Blocks until `stream` is idle.
pub(crate) fn synchronize(stream: Stream) -> Result<()> {
    // SAFETY: the stream handle comes from the caller and is alive during the call.
    check(
        unsafe { cu::stream::synchronize(stream.0) },
        "cuStreamSynchronize",
    )
}

/// Asynchronous device → host copy on `stream`.
///
/// # Safety
/// `dst..dst+len` must be host memory that stays valid until the copy completes.
pub(crate) unsafe fn copy_to_host(
    dst: *mut u8,
    src: u64,
    len: usize,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    let slice = unsafe { std::slice::from_raw_parts_mut(dst, len) };
    // SAFETY: `src` is a device range of `len` bytes (checked by the caller's plan).
    check(
        unsafe { cu::memcpy_dtoh_async(slice, src, stream.0) },
        "cuMemcpyDtoHAsync",
    )
}

/// Asynchronous host → device copy on `stream`.
///
/// # Safety
/// `src..src+len` must be host memory that stays valid until the copy completes.
pub(crate) unsafe fn copy_to_device(
    dst: u64,
    src: *const u8,
    len: usize,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    let slice = unsafe { std::slice::from_raw_parts(src, len) };
    // SAFETY: `dst` is a device range of `len` bytes.
    check(
        unsafe { cu::memcpy_htod_async(dst, slice, stream.0) },
        "cuMemcpyHtoDAsync",
    )
}

/// Enqueues the copy `r` (elements of `elem` bytes, offsets from `dst` and `src`) on the
/// copy engine as `shape` says (see [`crate::plan::Rows::engine_shape`]): one pitched copy
/// of all planes, or one per plane.
///
/// # Safety
/// Every cell of `r` must lie inside device memory (or memory mapped into this context)
/// that stays valid until the copies complete, with nothing else writing the destination.
pub(crate) unsafe fn copy_rows(
    dst: u64,
    src: u64,
    elem: usize,
    r: &crate::plan::Rows,
    shape: crate::plan::EngineShape,
    stream: Stream,
) -> Result<()> {
    let e = elem as i64;
    let [a, b] = r.outer;
    let dev = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    let (s0, d0) = (
        src + (r.src_offset * e) as u64,
        dst + (r.dst_offset * e) as u64,
    );
    // One pitched copy of `depth` planes of `a.count` rows from `s`/`d`, whose planes are
    // `hs`/`hd` rows apart.
    let pitched = |s: u64, d: u64, hs: i64, hd: i64, depth: i64| -> Result<()> {
        let p = sys::CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: dev,
            srcHost: std::ptr::null(),
            srcDevice: s,
            srcArray: std::ptr::null_mut(),
            reserved0: std::ptr::null_mut(),
            srcPitch: (a.src_stride * e) as usize,
            srcHeight: hs as usize,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: dev,
            dstHost: std::ptr::null_mut(),
            dstDevice: d,
            dstArray: std::ptr::null_mut(),
            reserved1: std::ptr::null_mut(),
            dstPitch: (a.dst_stride * e) as usize,
            dstHeight: hd as usize,
            WidthInBytes: (r.width * e) as usize,
            Height: a.count as usize,
            Depth: depth as usize,
        };
        // SAFETY: the caller vouches for every cell of the copy until it completes.
        let rc = unsafe { sys::cuMemcpy3DAsync_v2(&p, stream.0) };
        check(rc.result(), "cuMemcpy3DAsync")
    };
    match shape {
        crate::plan::EngineShape::Pitched {
            src_height,
            dst_height,
        } => pitched(s0, d0, src_height, dst_height, b.count),
        crate::plan::EngineShape::Planes => (0..b.count).try_for_each(|k| {
            let (s, d) = (k * b.src_stride * e, k * b.dst_stride * e);
            pitched(s0 + s as u64, d0 + d as u64, a.count, a.count, 1)
        }),
    }
}

/// Which way a pitched copy between host and device memory goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Device rows into host memory.
    ToHost,
    /// Host rows into device memory.
    ToDevice,
}

/// Copies `height` rows of `width` bytes between host memory (rows `host_pitch` bytes
/// apart) and device memory (rows `device_pitch` bytes apart), asynchronously on `stream`.
///
/// # Safety
/// Both ranges (every row) must stay valid until the copy completes, the host one
/// page-locked or otherwise safe for the driver to read or write, with nothing else
/// writing the destination meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn copy_pitched(
    host: *mut u8,
    host_pitch: usize,
    device: u64,
    device_pitch: usize,
    width: usize,
    height: usize,
    way: Way,
    stream: Stream,
) -> Result<()> {
    let (h, d) = (
        sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
    );
    let (src_type, dst_type, src_pitch, dst_pitch) = match way {
        Way::ToHost => (d, h, device_pitch, host_pitch),
        Way::ToDevice => (h, d, host_pitch, device_pitch),
    };
    let p = sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: host.cast_const().cast(),
        srcDevice: device,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: src_pitch,
        srcHeight: height,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: host.cast(),
        dstDevice: device,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: dst_pitch,
        dstHeight: height,
        WidthInBytes: width,
        Height: height,
        Depth: 1,
    };
    // SAFETY: the caller vouches for every row of both sides until the copy completes.
    let rc = unsafe { sys::cuMemcpy3DAsync_v2(&p, stream.0) };
    check(rc.result(), "cuMemcpy3DAsync")
}

/// Device-to-device copy on `stream`.
///
/// # Safety
/// `src..src+len` and `dst..dst+len` must be device memory (or memory mapped into this
/// context) that stays valid until the copy completes, with nothing else writing `dst`
/// or `src` meanwhile.
pub(crate) unsafe fn copy_device(dst: u64, src: u64, len: usize, stream: Stream) -> Result<()> {
    // SAFETY: the caller vouches for both ranges until the copy completes.
    check(
        unsafe { cu::memcpy_dtod_async(dst, src, len, stream.0) },
        "cuMemcpyDtoDAsync",
    )
}
