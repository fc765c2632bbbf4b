//! Node-shared host memory for the DIRECT backend: each rank's workspace lives in a
//! shared-memory object (an anonymous memory file, or a named POSIX object where peers
//! cannot open memory files) that every other rank of the node maps, so packing writes each
//! chunk straight into the receiving rank's workspace with plain stores: no MPI message,
//! no system call per transfer, one pass over the data on each side.

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};

use super::registry::{self, Mapped, Registry};
use super::Buf;
use crate::comm::{allgather_bytes, Communicator};
use crate::{Error, Result};

/// Distinguishes the objects of one process (several handles, or the threads of the mock
/// communicator in tests).
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A shared mapping, unmapped on drop.
pub(crate) struct Mapping {
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

/// Maps `len` bytes of the open descriptor `fd`; `fresh` reserves the pages first (a full
/// /dev/shm or memory limit then fails here, not with SIGBUS later). Closes `fd` unless
/// `keep`.
///
/// # Safety
/// `fd` must be an open descriptor of a shared-memory object this process may map.
unsafe fn map_fd(
    fd: libc::c_int,
    len: usize,
    fresh: bool,
    what: &str,
) -> std::result::Result<Mapping, String> {
    let mut err = None;
    if fresh {
        // SAFETY: `fd` is open (caller); plain libc call.
        let rc = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        if rc != 0 {
            err = Some(format!(
                "reserving {len} bytes for {what}: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
    }
    let mut ptr = libc::MAP_FAILED;
    if err.is_none() {
        // SAFETY: a fresh shared mapping of `len` bytes of `fd`; checked below.
        ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            err = Some(os_error("mmap", what));
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(Mapping {
            ptr: ptr.cast(),
            len,
        }),
    }
}

fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: removes the name only; mappings stay valid.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

/// How a rank's workspace object is found by its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// An anonymous memory file (`memfd_create`), opened by peers through
    /// `/proc/<pid>/fd/<fd>` while its creator keeps the descriptor: it has no name in
    /// /dev/shm, so nothing is left behind when a job is killed.
    Memfd = 1,
    /// A named POSIX shared-memory object, unlinked once every peer has mapped it (the
    /// fallback where peers cannot open each other's descriptors).
    Named = 2,
}

/// This rank's own workspace object.
struct Own {
    /// Memory file or named object.
    kind: Kind,
    /// What peers compare to notice a new object (unique within the job).
    id: String,
    /// What peers open.
    path: String,
    map: Mapping,
    /// The memory file's descriptor (memfd), kept until every peer has mapped it.
    fd: Option<libc::c_int>,
    /// The name to unlink (named objects), until every peer has mapped it.
    name: Option<String>,
}

impl Own {
    fn create(kind: Kind, len: usize) -> std::result::Result<Own, String> {
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        match kind {
            Kind::Memfd => {
                // The raw system call: glibc's wrapper is newer than the oldest glibc the
                // wheels support.
                // SAFETY: memfd_create with a NUL-terminated name and MFD_CLOEXEC (1).
                let fd = unsafe {
                    libc::syscall(libc::SYS_memfd_create, c"cudecomp-workspace".as_ptr(), 1)
                } as libc::c_int;
                if fd < 0 {
                    return Err(os_error("memfd_create", "workspace"));
                }
                // SAFETY: `fd` was just created.
                match unsafe { map_fd(fd, len, true, "a memory file") } {
                    Ok(map) => Ok(Own {
                        kind,
                        id: format!("memfd:{pid}:{serial}"),
                        path: format!("/proc/{pid}/fd/{fd}"),
                        map,
                        fd: Some(fd),
                        name: None,
                    }),
                    Err(e) => {
                        // SAFETY: our descriptor.
                        unsafe { libc::close(fd) };
                        Err(e)
                    }
                }
            }
            Kind::Named => {
                let name = format!("/cudecomp-{pid}-{serial}");
                let c = CString::new(name.clone()).map_err(|e| e.to_string())?;
                // SAFETY: plain libc call on a NUL-terminated name.
                let fd = unsafe {
                    libc::shm_open(
                        c.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                        0o600,
                    )
                };
                if fd < 0 {
                    return Err(os_error("shm_open", &name));
                }
                // SAFETY: `fd` was just opened; the mapping keeps the object alive.
                let mapped = unsafe { map_fd(fd, len, true, &name) };
                // SAFETY: our descriptor.
                unsafe { libc::close(fd) };
                match mapped {
                    Ok(map) => Ok(Own {
                        kind,
                        id: format!("named:{name}"),
                        path: name.clone(),
                        map,
                        fd: None,
                        name: Some(name),
                    }),
                    Err(e) => {
                        unlink(&name);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Once every peer has mapped a named object, its name can go: the memory lives on in
    /// the mappings. A memory file's descriptor stays open while the object lives, as a
    /// peer may map it later (threads on several grids pair workspaces differently); it
    /// dies with the process, so nothing is left behind.
    fn release_name(&mut self) {
        if let Some(name) = self.name.take() {
            unlink(&name);
        }
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            // SAFETY: our descriptor; the mapping does not need it.
            unsafe { libc::close(fd) };
        }
        self.release_name();
    }
}

/// Opens and maps a peer's object of `kind` at `path` (`len` bytes).
fn map_peer(kind: Kind, path: &str, len: usize) -> std::result::Result<Mapping, String> {
    let c = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: plain libc calls on a NUL-terminated path; the descriptor is closed after
    // mapping (the mapping keeps the object alive).
    unsafe {
        let fd = match kind {
            Kind::Memfd => libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC),
            Kind::Named => libc::shm_open(c.as_ptr(), libc::O_RDWR, 0o600),
        };
        if fd < 0 {
            return Err(os_error("open", path));
        }
        let m = map_fd(fd, len, false, path);
        libc::close(fd);
        m
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
    own: Option<Own>,
    /// Peers' objects as mapped here, with their ids.
    peers: Vec<Option<(String, Mapping)>>,
    ranks: usize,
    ops: u64,
}

impl SharedWorkspaces {
    /// Collective over `comm`: makes this rank's workspace at least `bytes` long (a larger
    /// object replaces a smaller one) and maps every peer's that changed. Fails on every
    /// rank when one rank cannot get its memory. Doubles as a barrier: when it returns,
    /// every rank has finished its previous operation on these workspaces.
    ///
    /// New objects are anonymous memory files; when some peer cannot open them, every
    /// rank that made one makes a named object instead and all map again.
    pub fn exchange(&mut self, comm: &dyn Communicator, bytes: usize) -> Result<Buf> {
        self.exchange_noting(comm, bytes, &[]).map(|(b, _)| b)
    }

    /// [`SharedWorkspaces::exchange`], also handing every rank's `note` to every rank
    /// (what an operation's ranks must agree on, at no extra collective).
    pub fn exchange_noting(
        &mut self,
        comm: &dyn Communicator,
        bytes: usize,
        note: &[u8],
    ) -> Result<(Buf, Vec<Vec<u8>>)> {
        self.ranks = comm.size();
        let bytes = bytes.div_ceil(SLOT) * SLOT + self.tail();
        let grow = self.own.as_ref().is_none_or(|o| o.map.len < bytes);
        let mut kind = Kind::Memfd;
        let mut notes;
        loop {
            let mut failure = None;
            if grow {
                self.own = None;
                match Own::create(kind, bytes.max(8)) {
                    Ok(o) => self.own = Some(o),
                    Err(e) => failure = Some(e),
                }
            }
            // Record: failed, fresh, kind, operations so far, note length, note, length,
            // then "id\npath".
            let mut mine = vec![u8::from(failure.is_some()), u8::from(grow), kind as u8];
            mine.extend(self.ops.to_le_bytes());
            mine.extend((note.len() as u64).to_le_bytes());
            mine.extend(note);
            if let Some(o) = &self.own {
                mine.extend((o.map.len as u64).to_le_bytes());
                mine.extend(format!("{}\n{}", o.id, o.path).as_bytes());
            }
            let all = allgather_bytes(comm, &mine)?;
            if let Some(r) = all.iter().position(|v| v.first() != Some(&0)) {
                self.own = None;
                return Err(Error::NotSupported(format!(
                    "DIRECT backend: rank {r} could not get {bytes} bytes of node-shared memory{}; raise the memory limit (or enlarge /dev/shm, which named objects use) or choose an MPI backend",
                    failure.map(|e| format!(" ({e})")).unwrap_or_default()
                )));
            }
            // Every rank numbers this operation alike, past what any of the workspaces
            // taking part has seen (threads on several grids may pair different ones), so
            // signals of earlier operations never read as this one's.
            let word = |v: &Vec<u8>, at: usize| {
                v.get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes)
            };
            self.ops = all.iter().map(|v| word(v, 3)).max().unwrap_or(0) + 1;
            self.peers.resize_with(all.len(), || None);
            let mut mapped = Ok(());
            notes = Vec::with_capacity(all.len());
            for (r, v) in all.iter().enumerate() {
                let n = word(v, 11) as usize;
                let at = 19usize.saturating_add(n);
                notes.push(v.get(19..at).map(<[u8]>::to_vec).unwrap_or_default());
                if r == comm.rank() || v.len() < at + 8 {
                    continue;
                }
                let peer_kind = if v[2] == Kind::Named as u8 {
                    Kind::Named
                } else {
                    Kind::Memfd
                };
                let len = word(v, at) as usize;
                let text = String::from_utf8_lossy(&v[at + 8..]).into_owned();
                let (id, path) = text.split_once('\n').unwrap_or((&text, ""));
                if self.peers[r].as_ref().is_some_and(|(i, _)| i == id) {
                    continue;
                }
                self.peers[r] = None;
                match map_peer(peer_kind, path, len) {
                    Ok(m) => self.peers[r] = Some((id.to_owned(), m)),
                    Err(e) => mapped = Err(e),
                }
            }
            if !all.iter().any(|v| v.get(1) == Some(&1)) {
                break;
            }
            // Some rank published a new object: once everybody has tried to open it (this
            // gather), a name can go.
            let flags = allgather_bytes(comm, &[u8::from(mapped.is_err())])?;
            if grow {
                if let Some(o) = self.own.as_mut() {
                    o.release_name();
                }
            }
            let Some(r) = flags.iter().position(|f| f.first() != Some(&0)) else {
                break;
            };
            if kind == Kind::Named {
                return Err(Error::NotSupported(format!(
                    "DIRECT backend: rank {r} could not map a peer's shared workspace{}; all ranks must share one node",
                    mapped.err().map(|e| format!(" ({e})")).unwrap_or_default()
                )));
            }
            // Some peer cannot open memory files (e.g. /proc restrictions): the ranks that
            // made one make a named object instead, everyone again.
            kind = Kind::Named;
        }
        Ok((self.own_buf()?, notes))
    }

    /// Whether peers can open this rank's memory files (they could at the last exchange,
    /// or no exchange has told otherwise yet).
    pub fn memory_files_shared(&self) -> bool {
        self.own.as_ref().is_none_or(|o| o.kind == Kind::Memfd)
    }

    fn own_buf(&self) -> Result<Buf> {
        let m = &self
            .own
            .as_ref()
            .ok_or_else(|| Error::Internal("shared workspace missing".into()))?
            .map;
        // SAFETY: the mapping is owned here and outlives the operation holding the lock;
        // the signal slots at its end are left out.
        Ok(unsafe { Buf::new(m.ptr, m.len - self.tail()) })
    }

    /// Bytes of signal slots at the end of each workspace.
    fn tail(&self) -> usize {
        SLOT * self.ranks * AREAS
    }

    /// Number of the current operation (agreed in each `exchange`, the same on every
    /// rank and increasing in every workspace): signals carry it so that a stale value
    /// from an earlier operation never reads as a delivery.
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
            None => &self.own.as_ref()?.map,
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

/// What peers need to map a registered array: its object and where a buffer lies in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayRef {
    /// Unique within the job: what peers compare to reuse a mapping.
    pub id: String,
    /// What peers open.
    pub path: String,
    /// Memory file or named object.
    kind: Kind,
    /// Bytes of the whole object.
    pub len: usize,
    /// Byte offset of the buffer asked about inside the object.
    pub offset: usize,
}

/// Arrays of this process that peers may map.
static ARRAYS: Registry<ArrayRef> = Registry::new();

/// Node-shared memory handed to the user as an array (`GridDesc.empty_pencil` on the CPU
/// variant), registered so that DIRECT transposes can write straight into it from other
/// ranks of the node. Zero-filled; unregistered and unmapped on drop (peers that mapped it
/// keep their mapping, and the memory, until they drop it).
pub struct SharedArray {
    own: Own,
}

impl SharedArray {
    /// `len` bytes (at least one page is mapped) of node-shared memory: a memory file, or
    /// a named object where memory files cannot be made.
    pub fn new(len: usize) -> Result<SharedArray> {
        let len = len.max(1);
        let own = match Own::create(Kind::Memfd, len) {
            Ok(o) => o,
            Err(first) => match Own::create(Kind::Named, len) {
                Ok(o) => o,
                Err(e) => {
                    return Err(Error::NotSupported(format!(
                        "cannot allocate {len} bytes of node-shared memory ({first}; {e}): raise the memory limit or enlarge /dev/shm"
                    )))
                }
            },
        };
        let a = SharedArray { own };
        let entry = ArrayRef {
            id: a.own.id.clone(),
            path: a.own.path.clone(),
            kind: a.own.kind,
            len: a.own.map.len,
            offset: 0,
        };
        ARRAYS.insert(a.own.map.ptr as usize, a.own.map.len, entry);
        Ok(a)
    }

    /// Start address.
    pub fn ptr(&self) -> *mut u8 {
        self.own.map.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.own.map.len
    }

    /// True when empty (never: at least one byte is mapped).
    pub fn is_empty(&self) -> bool {
        self.own.map.len == 0
    }

    /// How peers find `buf` when it lies inside a registered array of this process.
    pub fn find(buf: Buf) -> Option<ArrayRef> {
        ARRAYS.find(buf).map(|(r, offset)| ArrayRef { offset, ..r })
    }
}

impl Drop for SharedArray {
    fn drop(&mut self) {
        ARRAYS.remove(self.own.map.ptr as usize);
    }
}

impl ArrayRef {
    /// Whether peers can map this array, given what `ws` learnt of memory files.
    pub fn mappable(&self, ws: &SharedWorkspaces) -> bool {
        self.kind == Kind::Named || ws.memory_files_shared()
    }

    /// Bytes peers receive to find this array (see [`ArrayRef::decode`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.kind as u8];
        v.extend((self.len as u64).to_le_bytes());
        v.extend((self.offset as u64).to_le_bytes());
        v.extend(format!("{}\n{}", self.id, self.path).as_bytes());
        v
    }

    /// The reference [`ArrayRef::encode`] wrote; `None` for anything else.
    pub fn decode(v: &[u8]) -> Option<ArrayRef> {
        let kind = match *v.first()? {
            k if k == Kind::Memfd as u8 => Kind::Memfd,
            k if k == Kind::Named as u8 => Kind::Named,
            _ => return None,
        };
        let word = |at: usize| -> Option<usize> {
            Some(u64::from_le_bytes(v.get(at..at + 8)?.try_into().ok()?) as usize)
        };
        let text = String::from_utf8_lossy(v.get(17..)?).into_owned();
        let (id, path) = text.split_once('\n')?;
        Some(ArrayRef {
            id: id.to_owned(),
            path: path.to_owned(),
            kind,
            len: word(1)?,
            offset: word(9)?,
        })
    }
}

impl Mapped for Mapping {
    fn base(&self) -> *mut u8 {
        self.ptr
    }
    fn bytes(&self) -> usize {
        self.len
    }
}

/// Peers' node-shared arrays mapped here.
pub(crate) type PeerArrays = registry::PeerArrays<Mapping>;

impl PeerArrays {
    /// The buffer of `bytes` that `r` (a rank of the node) described with `a`, mapped here.
    pub(crate) fn map_shared(&mut self, r: usize, a: &ArrayRef, bytes: usize) -> Result<Buf> {
        let open = || {
            map_peer(a.kind, &a.path, a.len)
                .map_err(|e| Error::Internal(format!("DIRECT: mapping rank {r}'s array: {e}")))
        };
        // Host copies are done when an operation returns: nothing to wait for.
        self.map(r, &a.id, a.offset, bytes, open, || Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;

    #[test]
    fn registered_arrays_are_found_described_and_mapped() {
        let a = SharedArray::new(8192).expect("node-shared memory");
        // SAFETY: inside the array, which outlives every use below.
        let whole = unsafe { Buf::new(a.ptr(), a.len()) };
        // SAFETY: as above.
        let part = unsafe { Buf::new(a.ptr().add(100), 200) };
        let r = SharedArray::find(part).expect("registered");
        assert_eq!((r.offset, r.len), (100, 8192));
        assert_eq!(ArrayRef::decode(&r.encode()), Some(r.clone()));
        assert_eq!(ArrayRef::decode(&[9, 1, 2]), None);
        // What a peer maps is the same memory.
        let mut peers = PeerArrays::default();
        let seen = peers.map_shared(3, &r, 200).expect("mapped");
        // SAFETY: both buffers lie inside live mappings of the same bytes.
        unsafe {
            *whole.ptr().add(150) = 42;
            assert_eq!(*seen.ptr().add(50), 42);
        }
        assert!(peers.map_shared(3, &r, 9000).is_err(), "beyond the array");
        drop(a);
        assert!(SharedArray::find(part).is_none(), "unregistered on drop");
        // SAFETY: the peer's mapping keeps the memory alive after its owner dropped it.
        assert_eq!(unsafe { *seen.ptr().add(50) }, 42);
    }

    #[test]
    fn notes_travel_with_the_workspace_exchange() {
        let results = mock::run(3, |c| -> Result<Vec<Vec<u8>>> {
            let mut ws = SharedWorkspaces::default();
            let note = vec![c.rank() as u8; c.rank() + 1];
            let (_, first) = ws.exchange_noting(c, 1024, &note)?;
            // Again without growth (no new objects), with different notes.
            let (_, second) = ws.exchange_noting(c, 512, &[7])?;
            assert_eq!(second, vec![vec![7u8]; 3]);
            Ok(first)
        });
        for r in results {
            assert_eq!(
                r.expect("exchange"),
                vec![vec![0u8], vec![1, 1], vec![2, 2, 2]]
            );
        }
    }
}
