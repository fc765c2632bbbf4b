//! NCCL through our own loader (cudarc's cannot find `libnccl.so.2` by its soname), one
//! communicator per handle shared by its grids, and the stream-ordered transport.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use libloading::os::unix::Library;

use super::{Device, Stream};
use crate::comm::{Communicator, Request, Transport};
use crate::{Error, Result};

type NcclComm = *mut c_void;
type NcclResult = c_int;

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [c_char; 128],
}

type PointToPoint =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, NcclComm, Stream) -> NcclResult;

/// `ncclInt8`: messages are byte counts.
const NCCL_INT8: c_int = 0;

#[allow(non_snake_case)]
struct Api {
    GetVersion: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    GetUniqueId: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    CommInitRank: unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult,
    CommDestroy: unsafe extern "C" fn(NcclComm) -> NcclResult,
    GetErrorString: unsafe extern "C" fn(NcclResult) -> *const c_char,
    GroupStart: unsafe extern "C" fn() -> NcclResult,
    GroupEnd: unsafe extern "C" fn() -> NcclResult,
    /// `ncclSend` and `ncclRecv` share this shape (the send buffer is `const void*`, the
    /// same in the ABI).
    Send: PointToPoint,
    Recv: PointToPoint,
    /// Buffer registration (NCCL ≥ 2.19); absent from older libraries.
    Register: Option<Registration>,
    _lib: Library,
}

/// `ncclMemAlloc`, `ncclMemFree`, `ncclCommRegister` and `ncclCommDeregister`.
#[allow(non_snake_case)]
#[derive(Clone, Copy)]
struct Registration {
    MemAlloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> NcclResult,
    MemFree: unsafe extern "C" fn(*mut c_void) -> NcclResult,
    CommRegister:
        unsafe extern "C" fn(NcclComm, *mut c_void, usize, *mut *mut c_void) -> NcclResult,
    CommDeregister: unsafe extern "C" fn(NcclComm, *mut c_void) -> NcclResult,
}

fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: every `T` used here is the prototype of `name` in nccl.h.
    unsafe { lib.get::<T>(cname.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| Error::Nccl(format!("NCCL symbol {name} not found: {e}")))
}

impl Api {
    fn load(path: &str) -> Result<Api> {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        let lib = unsafe { Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.map_err(|e| {
            Error::Nccl(format!(
                "cannot load NCCL from {path:?} ({e}); install nvidia-nccl-cu13 or set CUDECOMP_NCCL_LIB"
            ))
        })?;
        Ok(Api {
            GetVersion: sym(&lib, "ncclGetVersion")?,
            GetUniqueId: sym(&lib, "ncclGetUniqueId")?,
            CommInitRank: sym(&lib, "ncclCommInitRank")?,
            CommDestroy: sym(&lib, "ncclCommDestroy")?,
            GetErrorString: sym(&lib, "ncclGetErrorString")?,
            GroupStart: sym(&lib, "ncclGroupStart")?,
            GroupEnd: sym(&lib, "ncclGroupEnd")?,
            Send: sym(&lib, "ncclSend")?,
            Recv: sym(&lib, "ncclRecv")?,
            Register: (|| {
                Ok::<_, Error>(Registration {
                    MemAlloc: sym(&lib, "ncclMemAlloc")?,
                    MemFree: sym(&lib, "ncclMemFree")?,
                    CommRegister: sym(&lib, "ncclCommRegister")?,
                    CommDeregister: sym(&lib, "ncclCommDeregister")?,
                })
            })()
            .ok(),
            _lib: lib,
        })
    }

    fn check(&self, rc: NcclResult, what: &str) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: returns a static string for any result code.
        let msg = unsafe { CStr::from_ptr((self.GetErrorString)(rc)) }
            .to_string_lossy()
            .into_owned();
        Err(Error::Nccl(format!("{what} failed with error {rc}: {msg}")))
    }
}

/// An NCCL communicator over all ranks of a handle.
pub(crate) struct Nccl {
    api: Arc<Api>,
    comm: NcclComm,
    /// Every rank asked for registered workspaces and its NCCL can register buffers.
    registers: bool,
}

// SAFETY: NCCL communicators may be used from any thread (one operation at a time, which
// the handle's lock guarantees).
unsafe impl Send for Nccl {}
// SAFETY: as above.
unsafe impl Sync for Nccl {}

impl Nccl {
    /// Collective over `comm`: loads NCCL from `path` and creates a communicator with the
    /// same ranks (the unique id travels over MPI). The device's context must be current.
    /// `register` asks for workspaces registered with the communicator (see
    /// [`RegisteredAlloc`]); they are used only when every rank asks and can.
    pub(crate) fn new(path: &str, comm: &dyn Communicator, register: bool) -> Result<Nccl> {
        let api = Arc::new(Api::load(path)?);
        let mut version = 0;
        // The first call into the library: one that cannot say its version is unusable.
        // SAFETY: writes one int.
        api.check(unsafe { (api.GetVersion)(&mut version) }, "ncclGetVersion")?;
        let mut id = UniqueId { internal: [0; 128] };
        if comm.rank() == 0 {
            // SAFETY: writes one unique id.
            api.check(unsafe { (api.GetUniqueId)(&mut id) }, "ncclGetUniqueId")?;
        }
        let mine: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        let mut all = vec![0u8; 128 * comm.size()];
        comm.allgather(&mine, &mut all)?;
        for (dst, &src) in id.internal.iter_mut().zip(&all[..128]) {
            *dst = src as c_char;
        }
        let mut nc: NcclComm = std::ptr::null_mut();
        // SAFETY: collective init with the id from rank 0; writes the communicator.
        let rc =
            unsafe { (api.CommInitRank)(&mut nc, comm.size() as c_int, id, comm.rank() as c_int) };
        api.check(rc, "ncclCommInitRank (NCCL needs one GPU per rank)")?;
        // A send from a registered buffer must meet a receive into one: all ranks or none.
        let mine = u8::from(register && api.Register.is_some());
        let mut all = vec![0u8; comm.size()];
        comm.allgather(&[mine], &mut all)?;
        Ok(Nccl {
            api,
            comm: nc,
            registers: all.iter().all(|&w| w == 1),
        })
    }

    /// True when transposes exchange through registered workspaces (agreed by all ranks).
    pub(crate) fn registers(&self) -> bool {
        self.registers
    }

    /// Releases the communicator (collective, at handle finalisation).
    pub(crate) fn destroy(&self) -> Result<()> {
        // SAFETY: called once by the owner; the communicator is not used afterwards.
        self.api.check(
            unsafe { (self.api.CommDestroy)(self.comm) },
            "ncclCommDestroy",
        )
    }
}

/// Device memory from `ncclMemAlloc`, registered with a communicator: NCCL then moves
/// point-to-point messages between registered buffers of GPUs joined by NVLink without
/// staging them through its own buffers, and with fewer SMs (measured with
/// `bench/probes/nccl_register.py`). Deregistered and freed on drop,
/// which must precede [`Nccl::destroy`].
pub(crate) struct RegisteredAlloc {
    nccl: Arc<Nccl>,
    device: Arc<Device>,
    ptr: *mut c_void,
    bytes: usize,
    handle: *mut c_void,
}

// SAFETY: a device address and a registration handle may be used from any thread; the
// handle's lock serialises their users.
unsafe impl Send for RegisteredAlloc {}
// SAFETY: as above.
unsafe impl Sync for RegisteredAlloc {}

impl RegisteredAlloc {
    /// Allocates and registers `bytes` (at least 1) on `device`. Local: callers agree with
    /// their peers on the outcome.
    pub(crate) fn new(
        nccl: &Arc<Nccl>,
        device: &Arc<Device>,
        bytes: usize,
    ) -> Result<RegisteredAlloc> {
        device.bind()?;
        let api = &nccl.api;
        let reg = api
            .Register
            .ok_or_else(|| Error::Nccl("this NCCL cannot register buffers".into()))?;
        let mut ptr = std::ptr::null_mut();
        api.check(
            // SAFETY: writes one device pointer.
            unsafe { (reg.MemAlloc)(&mut ptr, bytes.max(1)) },
            "ncclMemAlloc",
        )?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: registers the allocation just made, whole, with a live communicator.
        let rc = unsafe { (reg.CommRegister)(nccl.comm, ptr, bytes.max(1), &mut handle) };
        if let Err(e) = api.check(rc, "ncclCommRegister") {
            // SAFETY: allocated above, never used.
            unsafe { (reg.MemFree)(ptr) };
            return Err(e);
        }
        Ok(RegisteredAlloc {
            nccl: nccl.clone(),
            device: device.clone(),
            ptr,
            bytes,
            handle,
        })
    }

    /// Device address.
    pub(crate) fn ptr(&self) -> u64 {
        self.ptr as u64
    }

    /// Size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for RegisteredAlloc {
    fn drop(&mut self) {
        if let (Some(reg), Ok(())) = (self.nccl.api.Register, self.device.bind()) {
            // SAFETY: registered and allocated in `new`; the owner synchronised every use,
            // and the communicator is destroyed only after this drop.
            unsafe {
                (reg.CommDeregister)(self.nccl.comm, self.handle);
                (reg.MemFree)(self.ptr);
            }
        }
    }
}

/// One operation's view of NCCL: sends and receives to group members (`members[i]` is the
/// NCCL rank of peer `i`) batched into one group and enqueued on `stream` when waited for.
pub(crate) struct NcclTransport<'a> {
    nccl: &'a Nccl,
    stream: Stream,
    members: &'a [usize],
    group_open: Cell<bool>,
    next: Cell<u64>,
}

impl<'a> NcclTransport<'a> {
    /// A transport over `members` (NCCL ranks by peer index) on `stream`.
    pub(crate) fn new(nccl: &'a Nccl, stream: Stream, members: &'a [usize]) -> Self {
        NcclTransport {
            nccl,
            stream,
            members,
            group_open: Cell::new(false),
            next: Cell::new(0),
        }
    }

    fn open(&self) -> Result<()> {
        if !self.group_open.get() {
            // SAFETY: `ncclGroupStart` takes no arguments; it only opens a group on this
            // thread, which `close` ends.
            let rc = unsafe { (self.nccl.api.GroupStart)() };
            self.nccl.api.check(rc, "ncclGroupStart")?;
            self.group_open.set(true);
        }
        Ok(())
    }

    fn close(&self) -> Result<()> {
        if self.group_open.replace(false) {
            // SAFETY: balances the `ncclGroupStart` of `open` (`group_open` was set); enqueues
            // the group's operations, whose buffers the callers keep alive, on the stream.
            let rc = unsafe { (self.nccl.api.GroupEnd)() };
            self.nccl.api.check(rc, "ncclGroupEnd")?;
        }
        Ok(())
    }

    /// Adds one send or receive to the open group.
    ///
    /// # Safety
    /// `buf..buf+len` is device memory kept alive until the stream passes the group.
    unsafe fn post(
        &self,
        f: PointToPoint,
        buf: *mut u8,
        len: usize,
        peer: usize,
        what: &str,
    ) -> Result<Request> {
        self.open()?;
        // SAFETY: forwarded to the caller; the call is enqueued on `stream`.
        let rc = unsafe {
            f(
                buf.cast(),
                len,
                NCCL_INT8,
                self.members[peer] as c_int,
                self.nccl.comm,
                self.stream,
            )
        };
        self.nccl.api.check(rc, what)?;
        self.next.set(self.next.get() + 1);
        Ok(Request::Active(self.next.get()))
    }
}

impl Transport for NcclTransport<'_> {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, _tag: i32) -> Result<Request> {
        // SAFETY: forwarded to the caller.
        unsafe { self.post(self.nccl.api.Send, buf.cast_mut(), len, peer, "ncclSend") }
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, _tag: i32) -> Result<Request> {
        // SAFETY: forwarded to the caller.
        unsafe { self.post(self.nccl.api.Recv, buf, len, peer, "ncclRecv") }
    }

    /// Stream-ordered: completing means the group is enqueued; later work on the stream
    /// sees the data.
    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        self.close()?;
        reqs.fill(Request::Null);
        Ok(())
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        self.close()?;
        let Some(i) = reqs.iter().position(|r| *r != Request::Null) else {
            return Ok(None);
        };
        reqs[i] = Request::Null;
        Ok(Some(i))
    }

    fn cuda_aware(&self) -> bool {
        true
    }
}
