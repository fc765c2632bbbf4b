//! NVSHMEM through the host library of NVIDIA's wheel (`libnvshmem_host.so.3`), loaded at
//! run time: one runtime per process, initialised with a unique ID that rank 0 draws and
//! every rank receives over the handle's communicator (no MPI bootstrap plugin), symmetric
//! allocations, and the on-stream puts and signals the NVSHMEM backends are built from.
//!
//! Only the exported host entry points are used (`nvshmemx_hostlib_init_attr`, not the
//! header-inline `nvshmemx_init_attr`); device-side NVSHMEM is not needed: on-stream puts
//! use the copy engine between GPUs that can address each other.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use libloading::os::unix::Library;

use super::{check, Device, Stream};
use crate::comm::{allgather_bytes, allgather_u64, Communicator};
use crate::mem::registry::Registry;
use crate::mem::Buf;
use crate::{Error, Result};

/// `NVSHMEM_SIGNAL_SET`.
pub(crate) const SIGNAL_SET: c_int = 9;
/// `NVSHMEM_CMP_GE`.
pub(crate) const CMP_GE: c_int = 5;
/// `NVSHMEMX_INIT_WITH_UNIQUEID`.
const INIT_WITH_UNIQUEID: c_uint = 1 << 3;
/// `sizeof(nvshmemx_uniqueid_t)`, `sizeof(nvshmemx_init_attr_t)`.
const UNIQUEID_BYTES: usize = 128;
const INIT_ATTR_BYTES: usize = 144;
/// Version words the structures carry (`(1 << 16) + sizeof`), at their byte offsets.
const VERSION_WORDS: [(usize, usize); 3] = [(0, 144), (16, 128), (24, 24)];

type PutSignal =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut u64, u64, c_int, c_int, Stream);

#[allow(non_snake_case)]
struct Api {
    get_uniqueid: unsafe extern "C" fn(*mut u8) -> c_int,
    set_attr_uniqueid_args: unsafe extern "C" fn(c_int, c_int, *const u8, *mut u8) -> c_int,
    hostlib_init_attr: unsafe extern "C" fn(c_uint, *mut u8) -> c_int,
    my_pe: unsafe extern "C" fn() -> c_int,
    n_pes: unsafe extern "C" fn() -> c_int,
    malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    ptr: unsafe extern "C" fn(*const c_void, c_int) -> *mut c_void,
    put_signal_nbi: PutSignal,
    signal_op: unsafe extern "C" fn(*mut u64, u64, c_int, c_int, Stream),
    signal_wait: unsafe extern "C" fn(*mut u64, c_int, u64, Stream),
    quiet: unsafe extern "C" fn(Stream),
    barrier_all: unsafe extern "C" fn(Stream),
    _lib: Library,
}

fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: every `T` used here is the prototype of `name` in NVSHMEM 3's host headers.
    unsafe { lib.get::<T>(cname.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| Error::Nvshmem(format!("NVSHMEM symbol {name} not found: {e}")))
}

impl Api {
    fn load(path: &str) -> std::result::Result<Api, String> {
        // SAFETY: loading the library runs its initialisers, which have no preconditions;
        // RTLD_GLOBAL lets it find its bootstrap and transport plugins beside it.
        let lib = unsafe { Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
            .map_err(|e| e.to_string())?;
        let s = |e: Error| e.to_string();
        Ok(Api {
            get_uniqueid: sym(&lib, "nvshmemx_get_uniqueid").map_err(s)?,
            set_attr_uniqueid_args: sym(&lib, "nvshmemx_set_attr_uniqueid_args").map_err(s)?,
            hostlib_init_attr: sym(&lib, "nvshmemx_hostlib_init_attr").map_err(s)?,
            my_pe: sym(&lib, "nvshmem_my_pe").map_err(s)?,
            n_pes: sym(&lib, "nvshmem_n_pes").map_err(s)?,
            malloc: sym(&lib, "nvshmem_malloc").map_err(s)?,
            free: sym(&lib, "nvshmem_free").map_err(s)?,
            ptr: sym(&lib, "nvshmem_ptr").map_err(s)?,
            put_signal_nbi: sym(&lib, "nvshmemx_putmem_signal_nbi_on_stream").map_err(s)?,
            signal_op: sym(&lib, "nvshmemx_signal_op_on_stream").map_err(s)?,
            signal_wait: sym(&lib, "nvshmemx_signal_wait_until_on_stream").map_err(s)?,
            quiet: sym(&lib, "nvshmemx_quiet_on_stream").map_err(s)?,
            barrier_all: sym(&lib, "nvshmemx_barrier_all_on_stream").map_err(s)?,
            _lib: lib,
        })
    }
}

/// The process's NVSHMEM runtime (initialised; PE numbers are the ranks of the
/// communicator it was initialised over).
pub struct Nvshmem {
    api: Api,
    npes: usize,
    /// Per PE: whether it runs on this rank's node as the package sees nodes (a
    /// simulated split included), fixed at initialisation. Peers elsewhere are reached
    /// by puts only, as they would be across real nodes, even where NVSHMEM could map them.
    same_node: Vec<bool>,
}

// SAFETY: the API is a table of C entry points; NVSHMEM's host calls are made under the
// handle's lock (one operation of a GPU handle at a time).
unsafe impl Send for Nvshmem {}
// SAFETY: as above.
unsafe impl Sync for Nvshmem {}

/// The runtime, once initialised: it stays up until the process ends, as NVSHMEM cannot
/// be initialised a second time in one process (its PE mapping is fixed at the first
/// initialisation), and later handles may need it again.
static RUNTIME: Mutex<Option<Arc<Nvshmem>>> = Mutex::new(None);

fn lock_runtime() -> std::sync::MutexGuard<'static, Option<Arc<Nvshmem>>> {
    RUNTIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Collective over `comm` (the handle's communicator, on `device`): the process's runtime,
/// initialised on first use. Every rank fails alike when some rank
/// cannot load the library or the communicator is not congruent with the one the runtime
/// was initialised over (PE `r` must be rank `r`). `same_node[r]` says whether rank `r`
/// shares this rank's node (kept from the first initialisation).
pub(crate) fn acquire(
    path: &str,
    comm: &dyn Communicator,
    device: &Device,
    same_node: &[bool],
) -> Result<Arc<Nvshmem>> {
    device.bind()?;
    let mut guard = lock_runtime();
    let existing = guard.clone();
    let loaded = match &existing {
        Some(_) => Ok(None),
        None => Api::load(path).map(Some),
    };
    // Everybody learns whether everybody has the library before anyone initialises.
    let flags = allgather_u64(comm, u64::from(loaded.is_ok()))?;
    let api = match loaded {
        Err(e) => {
            return Err(Error::NotSupported(format!(
                "NVSHMEM backends need NVSHMEM's host library: cannot load {path:?} ({e}); install it with `pip install nvidia-nvshmem-cu13` or set CUDECOMP_NVSHMEM_LIB"
            )))
        }
        Ok(api) => api,
    };
    if let Some(r) = flags.iter().position(|&f| f == 0) {
        return Err(Error::NotSupported(format!(
            "NVSHMEM backends need NVSHMEM's host library on every rank; rank {r} cannot load it (pip install nvidia-nvshmem-cu13)"
        )));
    }
    let runtime = match (existing, api) {
        (Some(n), _) => n,
        (None, Some(api)) => {
            let runtime = Arc::new(init(api, comm, same_node.to_vec())?);
            if let Some(advice) = crate::notices::nvshmem_binding(crate::notices::cores_allowed()) {
                crate::notices::notice(advice);
            }
            runtime
        }
        (None, None) => return Err(Error::Internal("NVSHMEM: no library".into())),
    };
    // PE r must be handle rank r on every rank (congruent communicators).
    // SAFETY: the runtime is initialised.
    let pe = unsafe { (runtime.api.my_pe)() };
    let pes = allgather_u64(comm, pe as u64)?;
    let congruent =
        comm.size() == runtime.npes && pes.iter().enumerate().all(|(r, &p)| p == r as u64);
    if !congruent {
        return Err(Error::InvalidUsage(format!(
            "NVSHMEM backends: every handle using NVSHMEM must be created on a communicator congruent with the first one's ({} ranks, rank r being PE r); this handle's {} ranks are PEs {pes:?}",
            runtime.npes,
            comm.size()
        )));
    }
    *guard = Some(runtime.clone());
    Ok(runtime)
}

/// Initialises NVSHMEM over `comm` with a unique ID broadcast from rank 0.
fn init(api: Api, comm: &dyn Communicator, same_node: Vec<bool>) -> Result<Nvshmem> {
    let (rank, n) = (comm.rank(), comm.size());
    let mut uid = [0u8; UNIQUEID_BYTES];
    let word = |buf: &mut [u8], at: usize, size: usize| {
        buf[at..at + 4].copy_from_slice(&((1i32 << 16) + size as i32).to_le_bytes());
    };
    word(&mut uid, 0, UNIQUEID_BYTES);
    let mut drawn = 0;
    if rank == 0 {
        // SAFETY: writes one 128-byte unique ID.
        drawn = unsafe { (api.get_uniqueid)(uid.as_mut_ptr()) };
    }
    let mut mine = vec![u8::from(drawn == 0)];
    mine.extend(uid);
    let all = allgather_bytes(comm, &mine)?;
    let root = all.first().cloned().unwrap_or_default();
    if root.first() != Some(&1) || root.len() != UNIQUEID_BYTES + 1 {
        return Err(Error::Nvshmem(format!(
            "nvshmemx_get_uniqueid failed on rank 0 (error {drawn})"
        )));
    }
    uid.copy_from_slice(&root[1..]);
    let mut attr = [0u8; INIT_ATTR_BYTES];
    for (at, size) in VERSION_WORDS {
        word(&mut attr, at, size);
    }
    // SAFETY: `uid` and `attr` have the sizes of the structures these calls take; the
    // library keeps no pointer into them after initialisation.
    let rc = unsafe {
        (api.set_attr_uniqueid_args)(rank as c_int, n as c_int, uid.as_ptr(), attr.as_mut_ptr())
    };
    let rc = if rc == 0 {
        // SAFETY: as above; the device is bound (its primary context is current).
        unsafe { (api.hostlib_init_attr)(INIT_WITH_UNIQUEID, attr.as_mut_ptr()) }
    } else {
        rc
    };
    let ok = allgather_u64(comm, u64::from(rc == 0))?;
    if let Some(r) = ok.iter().position(|&f| f == 0) {
        return Err(Error::Nvshmem(format!(
            "NVSHMEM initialisation failed on rank {r} (this rank: error {rc}); on one node, NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo may help"
        )));
    }
    // SAFETY: initialised above.
    let (pe, npes) = unsafe { ((api.my_pe)(), (api.n_pes)()) };
    if pe != rank as c_int || npes != n as c_int {
        return Err(Error::Nvshmem(format!(
            "NVSHMEM numbered this rank {pe} of {npes}, expected {rank} of {n}"
        )));
    }
    Ok(Nvshmem {
        api,
        npes: n,
        same_node,
    })
}

impl Nvshmem {
    /// Number of PEs (the ranks of the communicator it was initialised over).
    pub fn npes(&self) -> usize {
        self.npes
    }

    /// Address of `pe`'s copy of the symmetric object at `addr`, where this GPU can write
    /// it directly (`None` across nodes, simulated ones included).
    pub fn peer_ptr(&self, addr: u64, pe: usize) -> Option<u64> {
        if !self.same_node.get(pe).copied().unwrap_or(false) {
            return None;
        }
        // SAFETY: a query on a symmetric address.
        let p = unsafe { (self.api.ptr)(addr as usize as *const c_void, pe as c_int) };
        (!p.is_null()).then_some(p as usize as u64)
    }

    /// Enqueues on `stream`: `p.len` bytes from device address `p.src` into PE `p.pe`'s
    /// copy of the symmetric address `p.dest`, then sets `p.pe`'s copy of the symmetric
    /// signal `p.sig` to `p.value` (after the data).
    ///
    /// # Safety
    /// `src..src+len` must stay valid until the stream passes a later `quiet`; `dest` and
    /// `sig` must be symmetric addresses with room for the bytes and one `u64`.
    pub unsafe fn put_signal(&self, p: &Put, stream: Stream) {
        // SAFETY: forwarded to the caller.
        unsafe {
            (self.api.put_signal_nbi)(
                p.dest as usize as *mut c_void,
                p.src as usize as *const c_void,
                p.len,
                p.sig as usize as *mut u64,
                p.value,
                SIGNAL_SET,
                p.pe as c_int,
                stream,
            )
        }
    }

    /// Enqueues on `stream`: sets PE `pe`'s copy of the symmetric signal `sig` to `value`.
    ///
    /// # Safety
    /// `sig` must be a symmetric address of a `u64`.
    pub unsafe fn signal(&self, sig: u64, value: u64, pe: usize, stream: Stream) {
        // SAFETY: forwarded to the caller.
        unsafe {
            (self.api.signal_op)(
                sig as usize as *mut u64,
                value,
                SIGNAL_SET,
                pe as c_int,
                stream,
            )
        }
    }

    /// Enqueues on `stream`: waits until this PE's signal `sig` is at least `value`.
    ///
    /// # Safety
    /// `sig` must be a symmetric address of a `u64`.
    pub unsafe fn wait(&self, sig: u64, value: u64, stream: Stream) {
        // SAFETY: forwarded to the caller.
        unsafe { (self.api.signal_wait)(sig as usize as *mut u64, CMP_GE, value, stream) }
    }

    /// Enqueues on `stream`: completes every put this PE issued on it.
    pub fn quiet(&self, stream: Stream) {
        // SAFETY: no arguments beyond a live stream.
        unsafe { (self.api.quiet)(stream) }
    }

    /// Enqueues on `stream` a barrier of all PEs (completing their puts).
    pub fn barrier_all(&self, stream: Stream) {
        // SAFETY: as above.
        unsafe { (self.api.barrier_all)(stream) }
    }
}

/// One put with its signal (see [`Nvshmem::put_signal`]).
#[derive(Clone, Copy, Debug)]
pub struct Put {
    /// Symmetric destination address (this PE's view; `pe`'s copy is written).
    pub dest: u64,
    /// Local device address of the bytes.
    pub src: u64,
    /// Bytes.
    pub len: usize,
    /// Symmetric address of the signal set after the data.
    pub sig: u64,
    /// Value the signal is set to.
    pub value: u64,
    /// Destination PE.
    pub pe: usize,
}

/// Symmetric device memory (`nvshmem_malloc`), zeroed; freeing it is collective.
pub(crate) struct SymmetricAlloc {
    runtime: Arc<Nvshmem>,
    ptr: u64,
    bytes: usize,
}

// SAFETY: a device address; the handle's lock serialises its users.
unsafe impl Send for SymmetricAlloc {}
// SAFETY: as above.
unsafe impl Sync for SymmetricAlloc {}

impl SymmetricAlloc {
    /// Collective: `bytes` (the same on every rank) of symmetric memory, zeroed.
    pub(crate) fn new(
        runtime: &Arc<Nvshmem>,
        device: &Device,
        bytes: usize,
    ) -> Result<SymmetricAlloc> {
        device.bind()?;
        // SAFETY: collective allocation of at least one byte.
        let p = unsafe { (runtime.api.malloc)(bytes.max(8)) };
        if p.is_null() {
            return Err(Error::Nvshmem(format!(
                "nvshmem_malloc of {bytes} bytes failed (symmetric heap exhausted? NVSHMEM_SYMMETRIC_SIZE)"
            )));
        }
        // SAFETY: zeroes the allocation just made.
        let zeroed =
            unsafe { cudarc::driver::result::memset_d8_sync(p as usize as u64, 0, bytes.max(8)) };
        check(zeroed, "cuMemsetD8")?;
        Ok(SymmetricAlloc {
            runtime: runtime.clone(),
            ptr: p as usize as u64,
            bytes,
        })
    }

    /// Symmetric address.
    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Waits for all work of the bound device (before a collective free).
fn device_idle() -> Result<()> {
    check(
        // SAFETY: plain synchronisation of the current context.
        unsafe { cudarc::driver::sys::cuCtxSynchronize() }.result(),
        "cuCtxSynchronize",
    )
}

impl Drop for SymmetricAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`; freed once, collectively (workspaces are dropped by
        // every rank at the same point: growth agreed on by all, or finalize), while the
        // runtime lives (it is never finalised).
        unsafe { (self.runtime.api.free)(self.ptr as usize as *mut c_void) };
    }
}

/// Symmetric buffers lent to the user, by address: their serial numbers.
static LENT: Registry<u64> = Registry::new();

/// Serial numbers of lent buffers: allocations are collective and in the same order on
/// every rank, so a buffer has the same number everywhere.
static NEXT_LENT: AtomicU64 = AtomicU64::new(1);

/// Symmetric memory lent to the user (`Handle.malloc` on grids with an NVSHMEM backend),
/// to pass as the `work` of NVSHMEM operations. Clones share it. Freed collectively by
/// [`SymmetricBuffer::free`], or by the handle that lent it when it finalizes (dropping
/// every clone frees nothing: that would be collective).
#[derive(Clone)]
pub struct SymmetricBuffer {
    slot: Arc<Mutex<Option<SymmetricAlloc>>>,
    serial: u64,
    ptr: u64,
    bytes: usize,
}

impl SymmetricBuffer {
    /// Collective: at least `bytes` (the most any rank asks for) of zeroed symmetric memory.
    pub fn new(
        runtime: &Arc<Nvshmem>,
        device: &Device,
        comm: &dyn Communicator,
        bytes: usize,
    ) -> Result<SymmetricBuffer> {
        let most = allgather_u64(comm, bytes as u64)?
            .into_iter()
            .max()
            .unwrap_or(0) as usize;
        let a = SymmetricAlloc::new(runtime, device, most)?;
        let serial = NEXT_LENT.fetch_add(1, Ordering::Relaxed);
        let (ptr, bytes) = (a.ptr(), a.bytes());
        LENT.insert(ptr as usize, bytes, serial);
        Ok(SymmetricBuffer {
            slot: Arc::new(Mutex::new(Some(a))),
            serial,
            ptr,
            bytes,
        })
    }

    /// Device (symmetric) address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes (the largest request of any rank).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the memory is still there.
    pub fn live(&self) -> bool {
        self.slot.lock().map(|s| s.is_some()).unwrap_or(false)
    }

    /// Collective: frees the memory once the device is idle (every rank frees the same
    /// buffer: checked, `InvalidUsage` on every rank otherwise, nothing freed). Freeing a
    /// freed buffer is `InvalidUsage` too (on every rank).
    pub fn free(&self, device: &Device, comm: &dyn Communicator) -> Result<()> {
        let mine = if self.live() { self.serial } else { 0 };
        let all = allgather_u64(comm, mine)?;
        if let Some(r) = all.iter().position(|&s| s != mine) {
            return Err(Error::InvalidUsage(format!(
                "free(): every rank must free the same Handle.malloc buffer at once (it is collective); this rank freed buffer #{mine}, rank {r} buffer #{} (#0: one already freed)",
                all[r]
            )));
        }
        if mine == 0 {
            return Err(Error::InvalidUsage(
                "free(): the buffer was already freed".into(),
            ));
        }
        self.release(device)
    }

    /// Frees the memory with `device` bound (collective; the caller makes sure every rank
    /// does it at once).
    pub(crate) fn release(&self, device: &Device) -> Result<()> {
        let taken = self.slot.lock().ok().and_then(|mut s| s.take());
        if let Some(a) = taken {
            device.bind()?;
            LENT.remove(self.ptr as usize);
            device_idle()?;
            drop(a);
        }
        Ok(())
    }

    /// `(serial, byte offset)` of the lent buffer holding all of `buf`.
    pub fn find(buf: Buf) -> Option<(u64, usize)> {
        LENT.find(buf)
    }
}
