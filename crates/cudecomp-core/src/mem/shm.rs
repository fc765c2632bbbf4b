//! Node-shared host memory for the DIRECT backend: each rank's workspace lives in a POSIX
//! shared-memory object that every other rank of the node maps, so packing writes each
//! chunk straight into the receiving rank's workspace with plain stores: no MPI message,
//! no system call per transfer, one pass over the data on each side.

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Buf;
use crate::comm::{allgather_bytes, Communicator};
use crate::{Error, Result};

/// Distinguishes the objects of one process (several handles, or the threads of the mock
/// communicator in tests).
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A shared mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a mapping is plain memory; the library's operations order every access.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped by `map` with this length; nothing uses it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn os_error(what: &str, name: &str) -> String {
    format!("{what} {name}: {}", std::io::Error::last_os_error())
}

/// Opens (creating when `create`) the object `name` of `len` bytes and maps it.
fn map(name: &str, len: usize, create: bool) -> std::result::Result<Mapping, String> {
    let c = CString::new(name).map_err(|e| e.to_string())?;
    let flags = if create {
        libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
    } else {
        libc::O_RDWR
    };
    // SAFETY: plain libc calls on a NUL-terminated name; the descriptor is closed below
    // (the mapping keeps the object alive).
    unsafe {
        let fd = libc::shm_open(c.as_ptr(), flags, 0o600);
        if fd < 0 {
            return Err(os_error("shm_open", name));
        }
        let mut err = None;
        if create {
            // Reserve the pages now: a full /dev/shm then fails here, not with SIGBUS later.
            let rc = libc::posix_fallocate(fd, 0, len as libc::off_t);
            if rc != 0 {
                err = Some(format!(
                    "reserving {len} bytes for {name}: {}",
                    std::io::Error::from_raw_os_error(rc)
                ));
            }
        }
        let ptr = if err.is_none() {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                err = Some(os_error("mmap", name));
            }
            p
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        if let Some(e) = err {
            if create {
                libc::shm_unlink(c.as_ptr());
            }
            return Err(e);
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }
}

fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: removes the name only; mappings stay valid.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

/// Bytes per signal slot (a cache line each, so writers never share one).
const SLOT: usize = 64;

/// Signal areas at the end of every workspace: deliveries, then acknowledgements.
const AREAS: usize = 2;

/// This rank's shared workspace and the mapped workspaces of its peers. Each workspace
/// ends with two areas of one signal slot per rank of the group: rank `w` stores into
/// slot `w` of a peer's first area what it has delivered there, and into slot `w` of a
/// peer's second area what it has taken from what that peer delivered.
#[derive(Default)]
pub struct SharedWorkspaces {
    own: Option<(String, Mapping)>,
    peers: Vec<Option<(String, Mapping)>>,
    ranks: usize,
    ops: u64,
}

impl SharedWorkspaces {
    /// Collective over `comm`: makes this rank's workspace at least `bytes` long (a larger
    /// object replaces a smaller one) and maps every peer's that changed. Fails on every
    /// rank when one rank cannot get its memory. Doubles as a barrier: when it returns,
    /// every rank has finished its previous operation on these workspaces.
    pub fn exchange(&mut self, comm: &dyn Communicator, bytes: usize) -> Result<Buf> {
        let mut failure = None;
        let mut fresh = false;
        self.ranks = comm.size();
        self.ops += 1;
        let bytes = bytes.div_ceil(SLOT) * SLOT + self.tail();
        if self.own.as_ref().is_none_or(|(_, m)| m.len < bytes) {
            let name = format!(
                "/cudecomp-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            match map(&name, bytes.max(8), true) {
                Ok(m) => {
                    self.own = Some((name, m));
                    fresh = true;
                }
                Err(e) => failure = Some(e),
            }
        }
        let mut mine = vec![u8::from(failure.is_some()), u8::from(fresh)];
        if let Some((name, m)) = &self.own {
            mine.extend((m.len as u64).to_le_bytes());
            mine.extend(name.as_bytes());
        }
        let all = allgather_bytes(comm, &mine)?;
        if let Some(r) = all.iter().position(|v| v.first() != Some(&0)) {
            return Err(Error::NotSupported(format!(
                "DIRECT backend: rank {r} could not get {bytes} bytes of node-shared memory{}; enlarge /dev/shm or choose an MPI backend",
                failure.map(|e| format!(" ({e})")).unwrap_or_default()
            )));
        }
        self.peers.resize_with(all.len(), || None);
        let mut mapped = Ok(());
        for (r, v) in all.iter().enumerate() {
            if r == comm.rank() || v.len() < 10 {
                continue;
            }
            let len = u64::from_le_bytes(v[2..10].try_into().unwrap_or([0; 8])) as usize;
            let name = String::from_utf8_lossy(&v[10..]).into_owned();
            if self.peers[r].as_ref().is_some_and(|(n, _)| *n == name) {
                continue;
            }
            self.peers[r] = None;
            match map(&name, len, false) {
                Ok(m) => self.peers[r] = Some((name, m)),
                Err(e) => mapped = Err(e),
            }
        }
        if all.iter().any(|v| v.get(1) == Some(&1)) {
            // Some rank published a new object. Once everybody has tried to open it (this
            // gather), its name can go: the memory lives on in the mappings.
            let flags = allgather_bytes(comm, &[u8::from(mapped.is_err())])?;
            if fresh {
                if let Some((name, _)) = &self.own {
                    unlink(name);
                }
            }
            if let Some(r) = flags.iter().position(|f| f.first() != Some(&0)) {
                return Err(Error::NotSupported(format!(
                    "DIRECT backend: rank {r} could not map a peer's shared workspace{}; all ranks must share one node",
                    mapped.err().map(|e| format!(" ({e})")).unwrap_or_default()
                )));
            }
        }
        self.own_buf()
    }

    fn own_buf(&self) -> Result<Buf> {
        let (_, m) = self
            .own
            .as_ref()
            .ok_or_else(|| Error::Internal("shared workspace missing".into()))?;
        // SAFETY: the mapping is owned here and outlives the operation holding the lock;
        // the signal slots at its end are left out.
        Ok(unsafe { Buf::new(m.ptr, m.len - self.tail()) })
    }

    /// Bytes of signal slots at the end of each workspace.
    fn tail(&self) -> usize {
        SLOT * self.ranks * AREAS
    }

    /// Number of the current operation (counts `exchange` calls, which every rank makes
    /// alike): signals carry it so that a stale value from an earlier operation never
    /// reads as a delivery.
    pub fn op(&self) -> u64 {
        self.ops
    }

    /// Slot `writer` of rank `r`'s delivery area (this rank's own when `r` is this rank).
    pub fn signal(&self, r: usize, writer: usize) -> Option<&AtomicU64> {
        self.slot(r, 0, writer)
    }

    /// Slot `reader` of rank `r`'s acknowledgement area: what `reader` has taken of the
    /// slices `r` delivered to it.
    pub fn ack(&self, r: usize, reader: usize) -> Option<&AtomicU64> {
        self.slot(r, 1, reader)
    }

    fn slot(&self, r: usize, area: usize, who: usize) -> Option<&AtomicU64> {
        let m = match self.peers.get(r).and_then(|p| p.as_ref()) {
            Some((_, m)) => m,
            None => &self.own.as_ref()?.1,
        };
        if who >= self.ranks || m.len < self.tail() {
            return None;
        }
        let at = m.len - self.tail() + SLOT * (area * self.ranks + who);
        // SAFETY: inside the mapping, 64-byte aligned (lengths are multiples of SLOT and
        // mappings page-aligned); every access to the slot is atomic.
        Some(unsafe { &*(m.ptr.add(at) as *const AtomicU64) })
    }

    /// Rank `r`'s workspace as mapped here (after `exchange`), signal slots left out.
    pub fn peer(&self, r: usize) -> Option<Buf> {
        let (_, m) = self.peers.get(r)?.as_ref()?;
        // SAFETY: the mapping lives as long as `self`; peers order their use of it with
        // the operation's barrier and signals.
        Some(unsafe { Buf::new(m.ptr, m.len.checked_sub(self.tail())?) })
    }
}
