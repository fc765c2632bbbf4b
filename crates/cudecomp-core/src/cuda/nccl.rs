//! NCCL through our own loader (cudarc's cannot find `libnccl.so.2` by its soname), one
//! communicator per handle shared by its grids, and the stream-ordered transport.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use libloading::os::unix::Library;

use super::Stream;
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
    _lib: Library,
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
pub struct Nccl {
    api: Arc<Api>,
    comm: NcclComm,
    /// NCCL version as `major*10000 + minor*100 + patch`.
    pub version: i32,
}

// SAFETY: NCCL communicators may be used from any thread (one operation at a time, which
// the handle's lock guarantees).
unsafe impl Send for Nccl {}
// SAFETY: as above.
unsafe impl Sync for Nccl {}

impl Nccl {
    /// Collective over `comm`: loads NCCL from `path` and creates a communicator with the
    /// same ranks (the unique id travels over MPI). The device's context must be current.
    pub fn new(path: &str, comm: &dyn Communicator) -> Result<Nccl> {
        let api = Arc::new(Api::load(path)?);
        let mut version = 0;
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
        Ok(Nccl {
            api,
            comm: nc,
            version,
        })
    }

    /// Releases the communicator (collective, at handle finalisation).
    pub fn destroy(&self) -> Result<()> {
        // SAFETY: called once by the owner; the communicator is not used afterwards.
        self.api.check(
            unsafe { (self.api.CommDestroy)(self.comm) },
            "ncclCommDestroy",
        )
    }
}

/// One operation's view of NCCL: sends and receives to group members (`members[i]` is the
/// NCCL rank of peer `i`) batched into one group and enqueued on `stream` when waited for.
pub struct NcclTransport<'a> {
    nccl: &'a Nccl,
    stream: Stream,
    members: &'a [usize],
    group_open: Cell<bool>,
    next: Cell<u64>,
}

impl<'a> NcclTransport<'a> {
    /// A transport over `members` (NCCL ranks by peer index) on `stream`.
    pub fn new(nccl: &'a Nccl, stream: Stream, members: &'a [usize]) -> Self {
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
            // SAFETY: no arguments.
            self.nccl
                .api
                .check(unsafe { (self.nccl.api.GroupStart)() }, "ncclGroupStart")?;
            self.group_open.set(true);
        }
        Ok(())
    }

    fn close(&self) -> Result<()> {
        if self.group_open.replace(false) {
            // SAFETY: balances `open`; enqueues the group on the stream.
            self.nccl
                .api
                .check(unsafe { (self.nccl.api.GroupEnd)() }, "ncclGroupEnd")?;
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

    unsafe fn alltoallv(
        &self,
        send: *const u8,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: *mut u8,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let mut reqs = Vec::new();
        for p in 0..self.members.len() {
            // SAFETY: the caller guarantees the described device ranges.
            unsafe {
                if recv_counts[p] > 0 {
                    reqs.push(self.irecv(recv.add(recv_displs[p]), recv_counts[p], p, 0)?);
                }
                if send_counts[p] > 0 {
                    reqs.push(self.isend(send.add(send_displs[p]), send_counts[p], p, 0)?);
                }
            }
        }
        self.wait_all(&mut reqs)
    }

    fn cuda_aware(&self) -> bool {
        true
    }
}
