//! MPI bound at run time to the library mpi4py already loaded.
//!
//! The mpi4py extension module is opened with `RTLD_NOLOAD` and symbols are resolved
//! through it, which also searches its `DT_NEEDED` libmpi: no MPI at build time, and the
//! same binary serves MPICH-ABI (`int` handles) and Open MPI / MPI-5-ABI (pointer handles).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use libloading::os::unix::Library;

use super::{Communicator, Request, Transport};
use crate::{Error, Result};

/// What mpi4py tells us about the MPI it loaded, and the communicator to use.
#[derive(Clone, Debug)]
pub struct MpiDescription {
    /// Path of the loaded `mpi4py.MPI` extension module.
    pub library: String,
    /// `sizeof(MPI_Comm)`: 4 for MPICH-ABI handles, 8 for pointer handles.
    pub handle_bytes: usize,
    /// The user's communicator handle.
    pub comm: u64,
    /// `MPI_BYTE` handle.
    pub byte: u64,
    /// `MPI_REQUEST_NULL` handle.
    pub request_null: u64,
    /// `sizeof(MPI_Status)`.
    pub status_bytes: usize,
    /// `MPI_UNDEFINED`.
    pub undefined: i32,
}

/// An MPI handle type: `int` (MPICH ABI) or a pointer (Open MPI, MPI-5 ABI).
trait MpiHandle: Copy + PartialEq + Send + Sync + 'static {
    fn from_bits(v: u64) -> Self;
    fn bits(self) -> u64;
}

impl MpiHandle for c_int {
    fn from_bits(v: u64) -> Self {
        v as u32 as c_int
    }
    fn bits(self) -> u64 {
        self as u32 as u64
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
struct Ptr(*mut c_void);

// SAFETY: an MPI handle is an opaque identifier; MPI (initialised thread-multiple by
// mpi4py) allows using it from any thread.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

impl MpiHandle for Ptr {
    fn from_bits(v: u64) -> Self {
        Ptr(v as usize as *mut c_void)
    }
    fn bits(self) -> u64 {
        self.0 as usize as u64
    }
}

#[allow(non_snake_case)]
struct Api<H: MpiHandle> {
    Comm_rank: unsafe extern "C" fn(H, *mut c_int) -> c_int,
    Comm_size: unsafe extern "C" fn(H, *mut c_int) -> c_int,
    Comm_dup: unsafe extern "C" fn(H, *mut H) -> c_int,
    Comm_split: unsafe extern "C" fn(H, c_int, c_int, *mut H) -> c_int,
    Comm_free: unsafe extern "C" fn(*mut H) -> c_int,
    Barrier: unsafe extern "C" fn(H) -> c_int,
    Allgather: unsafe extern "C" fn(*const c_void, c_int, H, *mut c_void, c_int, H, H) -> c_int,
    Isend: unsafe extern "C" fn(*const c_void, c_int, H, c_int, c_int, H, *mut H) -> c_int,
    Irecv: unsafe extern "C" fn(*mut c_void, c_int, H, c_int, c_int, H, *mut H) -> c_int,
    Waitall: unsafe extern "C" fn(c_int, *mut H, *mut c_void) -> c_int,
    Waitany: unsafe extern "C" fn(c_int, *mut H, *mut c_int, *mut c_void) -> c_int,
    Alltoallv: unsafe extern "C" fn(
        *const c_void,
        *const c_int,
        *const c_int,
        H,
        *mut c_void,
        *const c_int,
        *const c_int,
        H,
        H,
    ) -> c_int,
    Get_processor_name: unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int,
    Error_string: unsafe extern "C" fn(c_int, *mut c_char, *mut c_int) -> c_int,
    cuda_aware: bool,
    byte: H,
    request_null: H,
    undefined: c_int,
    status_bytes: usize,
    _lib: Library,
}

/// Resolves `name` from `lib` as a value of type `T` (a function pointer).
fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: every `T` used here is the C prototype of `name` from the MPI standard.
    unsafe { lib.get::<T>(cname.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| {
            Error::Mpi(format!(
                "MPI symbol {name} not found in the library mpi4py loaded: {e}"
            ))
        })
}

impl<H: MpiHandle> Api<H> {
    fn load(d: &MpiDescription) -> Result<Self> {
        // SAFETY: RTLD_NOLOAD only returns the module mpi4py already loaded; no
        // initialisers run.
        let lib = unsafe { Library::open(Some(&d.library), libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
            .map_err(|e| {
            Error::Mpi(format!(
                "cannot bind to MPI: expected the loaded mpi4py module {}, got: {e}",
                d.library
            ))
        })?;
        let cuda_aware =
            match sym::<unsafe extern "C" fn() -> c_int>(&lib, "MPIX_Query_cuda_support") {
                // SAFETY: argument-less query defined by Open MPI and MPICH.
                Ok(f) => (unsafe { f() }) == 1,
                Err(_) => false,
            };
        Ok(Api {
            Comm_rank: sym(&lib, "MPI_Comm_rank")?,
            Comm_size: sym(&lib, "MPI_Comm_size")?,
            Comm_dup: sym(&lib, "MPI_Comm_dup")?,
            Comm_split: sym(&lib, "MPI_Comm_split")?,
            Comm_free: sym(&lib, "MPI_Comm_free")?,
            Barrier: sym(&lib, "MPI_Barrier")?,
            Allgather: sym(&lib, "MPI_Allgather")?,
            Isend: sym(&lib, "MPI_Isend")?,
            Irecv: sym(&lib, "MPI_Irecv")?,
            Waitall: sym(&lib, "MPI_Waitall")?,
            Waitany: sym(&lib, "MPI_Waitany")?,
            Alltoallv: sym(&lib, "MPI_Alltoallv")?,
            Get_processor_name: sym(&lib, "MPI_Get_processor_name")?,
            Error_string: sym(&lib, "MPI_Error_string")?,
            cuda_aware,
            byte: H::from_bits(d.byte),
            request_null: H::from_bits(d.request_null),
            undefined: d.undefined,
            status_bytes: d.status_bytes.max(8),
            _lib: lib,
        })
    }

    fn check(&self, rc: c_int, what: &str) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let mut buf = [0 as c_char; 512];
        let mut len: c_int = 0;
        // SAFETY: MPI_Error_string writes at most MPI_MAX_ERROR_STRING (<= 512) bytes.
        let msg = if unsafe { (self.Error_string)(rc, buf.as_mut_ptr(), &mut len) } == 0 {
            let bytes: Vec<u8> = buf[..len.clamp(0, 511) as usize]
                .iter()
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            String::from("unknown MPI error")
        };
        Err(Error::Mpi(format!("{what} failed with error {rc}: {msg}")))
    }

    /// A zeroed buffer able to hold `n` statuses (never read).
    fn statuses(&self, n: usize) -> Vec<u64> {
        vec![0u64; (n * self.status_bytes).div_ceil(8).max(1)]
    }
}

/// A communicator owned by the library (a duplicate or split of the user's).
struct MpiComm<H: MpiHandle> {
    api: Arc<Api<H>>,
    comm: H,
    rank: usize,
    size: usize,
}

fn count(len: usize, what: &str) -> Result<c_int> {
    c_int::try_from(len)
        .map_err(|_| Error::NotSupported(format!("{what}: {len} bytes exceed one MPI message")))
}

impl<H: MpiHandle> MpiComm<H> {
    fn wrap(api: Arc<Api<H>>, comm: H) -> Result<Self> {
        let (mut r, mut s) = (0, 0);
        // SAFETY: `comm` is a valid communicator handle; outputs are plain ints.
        api.check(unsafe { (api.Comm_rank)(comm, &mut r) }, "MPI_Comm_rank")?;
        // SAFETY: as above.
        api.check(unsafe { (api.Comm_size)(comm, &mut s) }, "MPI_Comm_size")?;
        Ok(MpiComm {
            api,
            comm,
            rank: r as usize,
            size: s as usize,
        })
    }

    fn to_handles(&self, reqs: &[Request]) -> Vec<H> {
        reqs.iter()
            .map(|r| match r {
                Request::Null => self.api.request_null,
                Request::Active(b) => H::from_bits(*b),
            })
            .collect()
    }
}

impl<H: MpiHandle> Communicator for MpiComm<H> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn split(&self, color: i32, key: i32) -> Result<Box<dyn Communicator>> {
        let mut out = self.api.request_null;
        // SAFETY: collective on a valid communicator; `out` receives the new handle.
        let rc = unsafe { (self.api.Comm_split)(self.comm, color, key, &mut out) };
        self.api.check(rc, "MPI_Comm_split")?;
        Ok(Box::new(MpiComm::wrap(self.api.clone(), out)?))
    }

    fn free(&self) -> Result<()> {
        let mut c = self.comm;
        // SAFETY: the owner calls this once, collectively, and never uses `comm` again.
        let rc = unsafe { (self.api.Comm_free)(&mut c) };
        self.api.check(rc, "MPI_Comm_free")
    }

    fn barrier(&self) -> Result<()> {
        // SAFETY: collective on a valid communicator.
        let rc = unsafe { (self.api.Barrier)(self.comm) };
        self.api.check(rc, "MPI_Barrier")
    }

    fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        if recv.len() != send.len() * self.size {
            return Err(Error::Internal("allgather buffer size".into()));
        }
        let n = count(send.len(), "MPI_Allgather")?;
        // SAFETY: buffers sized as checked above.
        let rc = unsafe {
            (self.api.Allgather)(
                send.as_ptr().cast(),
                n,
                self.api.byte,
                recv.as_mut_ptr().cast(),
                n,
                self.api.byte,
                self.comm,
            )
        };
        self.api.check(rc, "MPI_Allgather")
    }

    fn host_name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 1024];
        let mut len: c_int = 0;
        // SAFETY: MPI_MAX_PROCESSOR_NAME is at most 256 in every implementation.
        let rc = unsafe { (self.api.Get_processor_name)(buf.as_mut_ptr(), &mut len) };
        self.api.check(rc, "MPI_Get_processor_name")?;
        let bytes: Vec<u8> = buf[..len.clamp(0, 1023) as usize]
            .iter()
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

impl<H: MpiHandle> Transport for MpiComm<H> {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        let n = count(len, "MPI_Isend")?;
        let mut req = self.api.request_null;
        // SAFETY: the caller keeps the buffer alive until completion.
        let rc = unsafe {
            (self.api.Isend)(
                buf.cast(),
                n,
                self.api.byte,
                peer as c_int,
                tag,
                self.comm,
                &mut req,
            )
        };
        self.api.check(rc, "MPI_Isend")?;
        Ok(Request::Active(req.bits()))
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        let n = count(len, "MPI_Irecv")?;
        let mut req = self.api.request_null;
        // SAFETY: the caller keeps the buffer alive until completion.
        let rc = unsafe {
            (self.api.Irecv)(
                buf.cast(),
                n,
                self.api.byte,
                peer as c_int,
                tag,
                self.comm,
                &mut req,
            )
        };
        self.api.check(rc, "MPI_Irecv")?;
        Ok(Request::Active(req.bits()))
    }

    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        let mut h = self.to_handles(reqs);
        let mut st = self.api.statuses(h.len());
        // SAFETY: `h` holds valid request handles; `st` is large enough for their statuses.
        let rc =
            unsafe { (self.api.Waitall)(h.len() as c_int, h.as_mut_ptr(), st.as_mut_ptr().cast()) };
        reqs.fill(Request::Null);
        self.api.check(rc, "MPI_Waitall")
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        if reqs.iter().all(|r| *r == Request::Null) {
            return Ok(None);
        }
        let mut h = self.to_handles(reqs);
        let mut st = self.api.statuses(1);
        let mut idx: c_int = 0;
        // SAFETY: as in `wait_all`.
        let rc = unsafe {
            (self.api.Waitany)(
                h.len() as c_int,
                h.as_mut_ptr(),
                &mut idx,
                st.as_mut_ptr().cast(),
            )
        };
        self.api.check(rc, "MPI_Waitany")?;
        if idx == self.api.undefined || idx < 0 {
            return Ok(None);
        }
        reqs[idx as usize] = Request::Null;
        Ok(Some(idx as usize))
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
        let conv = |v: &[usize]| -> Result<Vec<c_int>> {
            v.iter().map(|&x| count(x, "MPI_Alltoallv")).collect()
        };
        let (sc, sd, rc_, rd) = (
            conv(send_counts)?,
            conv(send_displs)?,
            conv(recv_counts)?,
            conv(recv_displs)?,
        );
        // SAFETY: the caller guarantees every described region.
        let rc = unsafe {
            (self.api.Alltoallv)(
                send.cast(),
                sc.as_ptr(),
                sd.as_ptr(),
                self.api.byte,
                recv.cast(),
                rc_.as_ptr(),
                rd.as_ptr(),
                self.api.byte,
                self.comm,
            )
        };
        self.api.check(rc, "MPI_Alltoallv")
    }

    fn cuda_aware(&self) -> bool {
        self.api.cuda_aware
    }
}

fn dup<H: MpiHandle>(d: &MpiDescription) -> Result<Box<dyn Communicator>> {
    let api = Arc::new(Api::<H>::load(d)?);
    let mut out = api.request_null;
    // SAFETY: `d.comm` is the user's live communicator handle, from mpi4py.
    let rc = unsafe { (api.Comm_dup)(H::from_bits(d.comm), &mut out) };
    api.check(rc, "MPI_Comm_dup")?;
    Ok(Box::new(MpiComm::wrap(api, out)?))
}

/// Binds to the MPI mpi4py loaded and returns a private duplicate of the user's
/// communicator (collective over it), so library traffic never matches user messages.
pub fn duplicate(d: &MpiDescription) -> Result<Box<dyn Communicator>> {
    match d.handle_bytes {
        4 => dup::<c_int>(d),
        8 => dup::<Ptr>(d),
        n => Err(Error::NotSupported(format!(
            "MPI handles of {n} bytes: expected 4 (MPICH ABI) or 8 (pointer handles)"
        ))),
    }
}
