//! MPI bound at run time: no MPI at build time, and the same binary serves MPICH-ABI
//! (`int` handles: MPICH, Intel MPI, Cray MPICH) and Open MPI (pointer handles).
//!
//! Two ways in, both ending in `duplicate`, which takes an [`MpiDescription`]:
//!
//! - From Python: mpi4py describes the MPI it loaded (`python/cudecomp/_mpi.py`). Its
//!   extension module is opened with `RTLD_NOLOAD` and symbols are resolved through it,
//!   which also searches its `DT_NEEDED` libmpi.
//! - From Rust: [`MpiSession::init`] opens the MPI library itself (`CUDECOMP_MPI_LIB`, or
//!   the sonames of Open MPI and MPICH), tells the ABI family apart, initialises MPI if
//!   nobody has and finalises it when dropped; [`MpiSession::world`] describes
//!   `MPI_COMM_WORLD`.
//!
//! ```no_run
//! use cudecomp_core::{Handle, Memory, MpiSession, Settings};
//!
//! # fn main() -> cudecomp_core::Result<()> {
//! let mpi = MpiSession::init()?; // mpiexec -n 4 ./program
//! // A private duplicate of MPI_COMM_WORLD:
//! let handle = Handle::from_mpi(&mpi.world(), Memory::Host, Settings::from_env())?;
//! println!("rank {} of {}", handle.rank(), handle.nranks());
//! handle.finalize()?; // handles go before MPI_Finalize (when `mpi` drops)
//! # Ok(())
//! # }
//! ```

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use libloading::os::unix::Library;

use super::{Communicator, Request, Transport};
use crate::{Error, Result};

/// What the library needs to know about a loaded MPI, and the communicator to use: from
/// mpi4py (Python) or from [`MpiSession::world`] (Rust).
#[derive(Clone, Debug)]
pub struct MpiDescription {
    /// Path of an already loaded library that resolves the MPI symbols: the `mpi4py.MPI`
    /// extension module, or the MPI library itself.
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

// SAFETY: an MPI handle is an opaque identifier; MPI (initialised with
// MPI_THREAD_MULTIPLE by mpi4py or `MpiSession`) allows using it from any thread.
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
    Finalized: unsafe extern "C" fn(*mut c_int) -> c_int,
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
                "MPI symbol {name} not found in the loaded MPI (or mpi4py module): {e}"
            ))
        })
}

impl<H: MpiHandle> Api<H> {
    fn load(d: &MpiDescription) -> Result<Self> {
        // SAFETY: RTLD_NOLOAD only returns a library that is already loaded (the mpi4py
        // module or libmpi); no initialisers run.
        let lib = unsafe { Library::open(Some(&d.library), libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
            .map_err(|e| {
            Error::Mpi(format!(
                "cannot bind to MPI: expected {} to be loaded already (the mpi4py module or the MPI library), got: {}",
                d.library,
                with_source(&e)
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
            Finalized: sym(&lib, "MPI_Finalized")?,
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

    fn finalized(&self) -> bool {
        let mut done: c_int = 0;
        // SAFETY: `MPI_Finalized` may be called at any time; it writes one int, a local.
        let rc = unsafe { (self.api.Finalized)(&mut done) };
        rc != 0 || done != 0
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

/// Binds to the MPI `d` describes and returns a private duplicate of its communicator
/// (collective over it), so library traffic never matches user messages.
pub(crate) fn duplicate(d: &MpiDescription) -> Result<Box<dyn Communicator>> {
    match d.handle_bytes {
        4 => dup::<c_int>(d),
        8 => dup::<Ptr>(d),
        n => Err(Error::NotSupported(format!(
            "MPI handles of {n} bytes: expected 4 (MPICH ABI) or 8 (pointer handles)"
        ))),
    }
}

/// The two MPI ABI families [`MpiSession`] binds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpiAbi {
    /// `int` handles with fixed values (`mpi.h` of MPICH, Intel MPI, Cray MPICH;
    /// `libmpi.so.12`).
    Mpich,
    /// Pointer handles: the addresses of Open MPI's predefined objects (`libmpi.so.40`).
    OpenMpi,
}

impl MpiAbi {
    /// Words for messages.
    pub fn name(self) -> &'static str {
        match self {
            MpiAbi::Mpich => "MPICH ABI",
            MpiAbi::OpenMpi => "Open MPI",
        }
    }
}

/// MPICH-ABI handle and constant values, from MPICH's `mpi.h` (the same in Intel MPI and
/// Cray MPICH, whose ABI is MPICH's).
mod mpich {
    /// `MPI_COMM_WORLD`.
    pub(crate) const COMM_WORLD: u64 = 0x4400_0000;
    /// `MPI_BYTE`.
    pub(crate) const BYTE: u64 = 0x4c00_010d;
    /// `MPI_REQUEST_NULL`.
    pub(crate) const REQUEST_NULL: u64 = 0x2c00_0000;
    /// `sizeof(MPI_Status)`: five `int`s.
    pub(crate) const STATUS_BYTES: usize = 20;
}

/// `sizeof(MPI_Status)` in Open MPI: four `int`s and a `size_t`.
const OMPI_STATUS_BYTES: usize = 24;

/// `MPI_UNDEFINED` in both families.
const MPI_UNDEFINED: i32 = -32766;

/// `MPI_THREAD_MULTIPLE` in both families.
const MPI_THREAD_MULTIPLE: c_int = 3;

/// Environment variable naming the MPI library [`MpiSession::init`] opens.
pub(crate) const MPI_LIB_ENV: &str = "CUDECOMP_MPI_LIB";

/// Sonames tried when [`MPI_LIB_ENV`] is unset, Open MPI's first unless the process was
/// started by an MPICH-family launcher (which sets `PMI_RANK`).
fn default_libraries() -> [&'static str; 2] {
    const OMPI: &str = "libmpi.so.40";
    const MPICH: &str = "libmpi.so.12";
    if crate::settings::mpich_launcher() {
        [MPICH, OMPI]
    } else {
        [OMPI, MPICH]
    }
}

/// Entry points of MPI's set-up and tear-down.
#[allow(non_snake_case)]
struct Lifecycle {
    Initialized: unsafe extern "C" fn(*mut c_int) -> c_int,
    Finalized: unsafe extern "C" fn(*mut c_int) -> c_int,
    Init_thread: unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, *mut c_int) -> c_int,
    Finalize: unsafe extern "C" fn() -> c_int,
}

/// MPI opened by this process itself (no mpi4py): initialised when it was not, and
/// finalised when dropped if this session initialised it.
///
/// Drop (or [`MpiSession::finalize`]) it last: every communicator made from
/// [`MpiSession::world`] must be freed before (`Handle::finalize`, `GridDesc::destroy`).
pub struct MpiSession {
    lib: Library,
    path: String,
    abi: MpiAbi,
    life: Lifecycle,
    /// This session called `MPI_Init_thread`, so it calls `MPI_Finalize`.
    owns: bool,
    thread_level: c_int,
}

impl MpiSession {
    /// Opens the MPI library named by `CUDECOMP_MPI_LIB` (a path or soname), or else the
    /// first of `libmpi.so.40` (Open MPI) and `libmpi.so.12` (MPICH ABI) that loads, and
    /// initialises MPI (`MPI_THREAD_MULTIPLE` requested) unless it already is.
    pub fn init() -> Result<MpiSession> {
        match crate::settings::mpi_library() {
            Some(path) => MpiSession::init_library(&path),
            None => {
                let mut errors = Vec::new();
                for name in default_libraries() {
                    match MpiSession::init_library(name) {
                        Ok(s) => return Ok(s),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                Err(Error::Mpi(format!(
                    "no MPI library found: set {MPI_LIB_ENV} to the path of libmpi.so (tried {})",
                    errors.join("; ")
                )))
            }
        }
    }

    /// As [`MpiSession::init`], with the MPI library at `path` (a path or soname).
    pub fn init_library(path: &str) -> Result<MpiSession> {
        // SAFETY: loading libmpi runs its initialisers, which have no preconditions; it is
        // loaded globally, as Open MPI's components expect.
        let lib = unsafe { Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
            .map_err(|e| {
                Error::Mpi(format!(
                    "cannot load the MPI library {path}: {}",
                    with_source(&e)
                ))
            })?;
        let abi = detect_abi(&lib, path)?;
        let life = Lifecycle {
            Initialized: sym(&lib, "MPI_Initialized")?,
            Finalized: sym(&lib, "MPI_Finalized")?,
            Init_thread: sym(&lib, "MPI_Init_thread")?,
            Finalize: sym(&lib, "MPI_Finalize")?,
        };
        let flag = |f: unsafe extern "C" fn(*mut c_int) -> c_int, what: &str| {
            let mut v: c_int = 0;
            // SAFETY: `MPI_Initialized` and `MPI_Finalized` may be called at any time; they
            // write one int, a local.
            let rc = unsafe { f(&mut v) };
            if rc != 0 {
                return Err(Error::Mpi(format!("{what} failed with error {rc}")));
            }
            Ok(v != 0)
        };
        if flag(life.Finalized, "MPI_Finalized")? {
            return Err(Error::Mpi(
                "MPI is already finalised in this process: it cannot be initialised again".into(),
            ));
        }
        let mut thread_level: c_int = 0;
        let owns = !flag(life.Initialized, "MPI_Initialized")?;
        if owns {
            // SAFETY: MPI is neither initialised nor finalised (checked above); null
            // argc/argv are allowed; `thread_level` is a local int.
            let rc = unsafe {
                (life.Init_thread)(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    MPI_THREAD_MULTIPLE,
                    &mut thread_level,
                )
            };
            if rc != 0 {
                return Err(Error::Mpi(format!(
                    "MPI_Init_thread ({path}) failed with error {rc}"
                )));
            }
        } else {
            let query: unsafe extern "C" fn(*mut c_int) -> c_int = sym(&lib, "MPI_Query_thread")?;
            // SAFETY: MPI is initialised; the call writes one int, a local.
            let rc = unsafe { query(&mut thread_level) };
            if rc != 0 {
                return Err(Error::Mpi(format!(
                    "MPI_Query_thread failed with error {rc}"
                )));
            }
        }
        let session = MpiSession {
            lib,
            path: path.to_string(),
            abi,
            life,
            owns,
            thread_level,
        };
        session.check_byte()?;
        Ok(session)
    }

    /// The ABI family of the loaded MPI.
    pub fn abi(&self) -> MpiAbi {
        self.abi
    }

    /// The library as it was opened (path or soname).
    pub fn library(&self) -> &str {
        &self.path
    }

    /// The thread support MPI provides (`MPI_THREAD_MULTIPLE` is 3).
    pub fn thread_level(&self) -> i32 {
        self.thread_level
    }

    /// `MPI_Get_library_version`: the implementation's own description.
    pub fn version(&self) -> Result<String> {
        let f: unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int =
            sym(&self.lib, "MPI_Get_library_version")?;
        // MPI_MAX_LIBRARY_VERSION_STRING is 8192 in both families.
        let mut buf = vec![0 as c_char; 8192];
        let mut len: c_int = 0;
        // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING characters; `len` is a local.
        let rc = unsafe { f(buf.as_mut_ptr(), &mut len) };
        if rc != 0 {
            return Err(Error::Mpi(format!(
                "MPI_Get_library_version failed with error {rc}"
            )));
        }
        let bytes: Vec<u8> = buf[..len.clamp(0, 8191) as usize]
            .iter()
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).trim_end().to_string())
    }

    /// The description of `MPI_COMM_WORLD`, for `Handle::from_mpi`.
    pub fn world(&self) -> MpiDescription {
        match self.abi {
            MpiAbi::Mpich => MpiDescription {
                library: self.path.clone(),
                handle_bytes: 4,
                comm: mpich::COMM_WORLD,
                byte: mpich::BYTE,
                request_null: mpich::REQUEST_NULL,
                status_bytes: mpich::STATUS_BYTES,
                undefined: MPI_UNDEFINED,
            },
            MpiAbi::OpenMpi => MpiDescription {
                library: self.path.clone(),
                handle_bytes: 8,
                comm: self.address("ompi_mpi_comm_world"),
                byte: self.address("ompi_mpi_byte"),
                request_null: self.address("ompi_request_null"),
                status_bytes: OMPI_STATUS_BYTES,
                undefined: MPI_UNDEFINED,
            },
        }
    }

    /// Address of one of Open MPI's predefined objects (0 when absent: `detect_abi`
    /// found `ompi_mpi_comm_world`, and the others come with it).
    fn address(&self, name: &str) -> u64 {
        let cname = format!("{name}\0");
        // SAFETY: only the symbol's address is taken, never read through here.
        unsafe { self.lib.get::<*mut c_void>(cname.as_bytes()) }
            .map(|s| s.into_raw() as u64)
            .unwrap_or(0)
    }

    /// Checks the `MPI_BYTE` handle against the library (`MPI_Type_size` says 1 byte), so
    /// that a wrong family fails here with a message rather than in a transfer.
    fn check_byte(&self) -> Result<()> {
        let d = self.world();
        let mut size: c_int = 0;
        let rc = match d.handle_bytes {
            4 => {
                let f: unsafe extern "C" fn(c_int, *mut c_int) -> c_int =
                    sym(&self.lib, "MPI_Type_size")?;
                // SAFETY: MPI is initialised; the handle is MPICH's `MPI_BYTE` value.
                unsafe { f(c_int::from_bits(d.byte), &mut size) }
            }
            _ => {
                let f: unsafe extern "C" fn(Ptr, *mut c_int) -> c_int =
                    sym(&self.lib, "MPI_Type_size")?;
                // SAFETY: MPI is initialised; the handle is the address of `ompi_mpi_byte`.
                unsafe { f(Ptr::from_bits(d.byte), &mut size) }
            }
        };
        if rc != 0 || size != 1 || d.comm == 0 || d.request_null == 0 {
            return Err(Error::Mpi(format!(
                "{}: the {} handles do not fit this MPI (MPI_Type_size(MPI_BYTE) returned {rc}, size {size})",
                self.path,
                self.abi.name()
            )));
        }
        Ok(())
    }

    /// `MPI_Abort` on `MPI_COMM_WORLD` with `code`: ends every process of the job, for a
    /// failure on one rank that would leave the others waiting in a collective. Exits the
    /// process should MPI return.
    pub fn abort(&self, code: i32) -> ! {
        let world = self.world().comm;
        // Nothing to do with a failure to abort: the process exits either way.
        let _ = match self.abi {
            MpiAbi::Mpich => {
                sym::<unsafe extern "C" fn(c_int, c_int) -> c_int>(&self.lib, "MPI_Abort")
                    // SAFETY: MPI is initialised; the handle is MPICH's `MPI_COMM_WORLD` value.
                    .map(|f| unsafe { f(c_int::from_bits(world), code) })
            }
            MpiAbi::OpenMpi => {
                sym::<unsafe extern "C" fn(Ptr, c_int) -> c_int>(&self.lib, "MPI_Abort")
                    // SAFETY: MPI is initialised; the handle is the address of
                    // `ompi_mpi_comm_world`.
                    .map(|f| unsafe { f(Ptr::from_bits(world), code) })
            }
        };
        std::process::exit(code)
    }

    /// Finalises MPI now if this session initialised it, reporting a failure.
    pub fn finalize(mut self) -> Result<()> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.owns) {
            return Ok(());
        }
        let mut done: c_int = 0;
        // SAFETY: may be called at any time; writes one int, a local.
        let rc = unsafe { (self.life.Finalized)(&mut done) };
        if rc != 0 || done != 0 {
            return Ok(());
        }
        // SAFETY: this session initialised MPI and nobody finalised it (checked above);
        // the owner freed its communicators first (the type's contract).
        let rc = unsafe { (self.life.Finalize)() };
        if rc != 0 {
            return Err(Error::Mpi(format!("MPI_Finalize failed with error {rc}")));
        }
        Ok(())
    }
}

impl Drop for MpiSession {
    fn drop(&mut self) {
        // A failure cannot be reported from here; `finalize` reports it.
        let _ = self.finalize_once();
    }
}

/// A loader error with its cause (libloading keeps `dlerror`'s text there).
fn with_source(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Tells the ABI family of `lib` apart: Open MPI exports its predefined objects; an MPI
/// that reports a standard-ABI version (MPI 5, `libmpi_abi.so`) has other handle values
/// and is refused; anything else is taken for the MPICH ABI.
fn detect_abi(lib: &Library, path: &str) -> Result<MpiAbi> {
    // SAFETY: only the symbol's presence is checked.
    if unsafe { lib.get::<*mut c_void>(b"ompi_mpi_comm_world\0") }.is_ok() {
        return Ok(MpiAbi::OpenMpi);
    }
    if let Ok(f) =
        sym::<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int>(lib, "MPI_Abi_get_version")
    {
        let (mut major, mut minor) = (-1, -1);
        // SAFETY: callable before MPI_Init (MPI 5); writes two ints, locals.
        let rc = unsafe { f(&mut major, &mut minor) };
        if rc == 0 && major >= 1 {
            return Err(Error::NotSupported(format!(
                "{path} implements the MPI standard ABI (version {major}.{minor}), whose handles differ: expected an Open MPI or MPICH-ABI library (libmpi.so.40 or libmpi.so.12)"
            )));
        }
    }
    if sym::<unsafe extern "C" fn() -> c_int>(lib, "MPI_Init_thread").is_err() {
        return Err(Error::Mpi(format!("{path} is not an MPI library")));
    }
    Ok(MpiAbi::Mpich)
}
