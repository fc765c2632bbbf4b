//! Arrays handed to the user that other ranks of the node may map (node-shared host
//! memory, exported device memory): the process's registry of them, and each rank's cache
//! of its peers' arrays as mapped here. A transpose whose every output is such an array
//! lets each rank write its chunks straight into the receivers' outputs.

use std::sync::{Mutex, MutexGuard};

use super::Buf;
use crate::{Error, Result};

/// Registered arrays of one memory space: `(start address, length, description)`.
pub(crate) struct Registry<T>(Mutex<Vec<(usize, usize, T)>>);

impl<T: Clone> Default for Registry<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> Registry<T> {
    /// An empty registry (for a `static`).
    pub(crate) const fn new() -> Self {
        Registry(Mutex::new(Vec::new()))
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(usize, usize, T)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `len` bytes at `start`.
    pub(crate) fn insert(&self, start: usize, len: usize, what: T) {
        self.lock().push((start, len, what));
    }

    /// Unregisters the array starting at `start`.
    pub(crate) fn remove(&self, start: usize) {
        self.lock().retain(|(a, _, _)| *a != start);
    }

    /// The array holding all of `buf`, and `buf`'s byte offset in it.
    pub(crate) fn find(&self, buf: Buf) -> Option<(T, usize)> {
        let (start, len) = (buf.ptr() as usize, buf.len());
        self.lock()
            .iter()
            .find(|(a, n, _)| start >= *a && start.saturating_add(len) <= a + n)
            .map(|(a, _, t)| (t.clone(), start - a))
    }
}

/// A peer's array as mapped into this process (unmapped on drop; the memory lives until
/// its last mapping goes).
pub(crate) trait Mapped {
    /// Address of the first byte here.
    fn base(&self) -> *mut u8;
    /// Bytes mapped.
    fn bytes(&self) -> usize;
}

/// Peers' registered arrays as mapped here, a few per peer, most recently used first
/// (a stale one keeps its memory alive until it is pushed out).
pub(crate) struct PeerArrays<M> {
    maps: Vec<Vec<(String, M)>>,
}

impl<M> Default for PeerArrays<M> {
    fn default() -> Self {
        PeerArrays { maps: Vec::new() }
    }
}

/// Arrays of each peer kept mapped: a solver alternates among a few pencil arrays.
const PEER_ARRAYS_KEPT: usize = 6;

impl<M: Mapped> PeerArrays<M> {
    /// `bytes` at byte `offset` of rank `r`'s array `id`, mapped here by `open` unless it
    /// already is. `evict` runs before a mapping is pushed out (e.g. waiting for copies
    /// into it).
    pub(crate) fn map(
        &mut self,
        r: usize,
        id: &str,
        offset: usize,
        bytes: usize,
        open: impl FnOnce() -> Result<M>,
        evict: impl FnOnce() -> Result<()>,
    ) -> Result<Buf> {
        if self.maps.len() <= r {
            self.maps.resize_with(r + 1, Vec::new);
        }
        let kept = &mut self.maps[r];
        let at = match kept.iter().position(|(k, _)| k == id) {
            Some(i) => i,
            None => {
                let m = open()?;
                if kept.len() >= PEER_ARRAYS_KEPT {
                    evict()?;
                    kept.truncate(PEER_ARRAYS_KEPT - 1);
                }
                kept.insert(0, (id.to_owned(), m));
                0
            }
        };
        let len = kept[at].1.bytes();
        if offset.checked_add(bytes).is_none_or(|end| end > len) {
            // The peer's array is smaller than this rank's plan expects: the ranks were
            // called with different operations or dtypes, a misuse the checking mode names.
            return Err(Error::InvalidUsage(format!(
                "DIRECT: rank {r}'s array holds {len} bytes, not {bytes} at {offset}: do all ranks run the same operation with the same dtype? (CUDECOMP_CHECK_COLLECTIVES=1 compares them)"
            )));
        }
        // Most recently used first.
        kept[..=at].rotate_right(1);
        // SAFETY: inside the mapping (checked above), which lives in `self` until pushed
        // out; the operation using the buffer holds `self` borrowed.
        Ok(unsafe { Buf::new(kept[0].1.base().add(offset), bytes) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(Vec<u8>);

    impl Mapped for Fake {
        fn base(&self) -> *mut u8 {
            self.0.as_ptr().cast_mut()
        }
        fn bytes(&self) -> usize {
            self.0.len()
        }
    }

    #[test]
    fn registry_finds_containing_arrays() {
        static R: Registry<u32> = Registry::new();
        R.insert(1000, 100, 7);
        // SAFETY: never dereferenced: only the addresses are compared.
        let inside = unsafe { Buf::new(1010 as *mut u8, 90) };
        // SAFETY: as above.
        let across = unsafe { Buf::new(1010 as *mut u8, 91) };
        assert_eq!(R.find(inside), Some((7, 10)));
        assert_eq!(R.find(across), None);
        R.remove(1000);
        assert_eq!(R.find(inside), None);
    }

    #[test]
    fn peers_keep_a_few_recent_arrays_and_evict_the_oldest() {
        let mut p = PeerArrays::<Fake>::default();
        let mut opened = 0;
        let mut evicted = 0;
        for round in 0..2 {
            for i in 0..PEER_ARRAYS_KEPT {
                p.map(
                    2,
                    &format!("a{i}"),
                    0,
                    8,
                    || {
                        opened += 1;
                        Ok(Fake(vec![0; 16]))
                    },
                    || {
                        evicted += 1;
                        Ok(())
                    },
                )
                .expect("mapped");
            }
            assert_eq!((opened, evicted), (PEER_ARRAYS_KEPT, 0), "round {round}");
        }
        p.map(
            2,
            "new",
            0,
            8,
            || Ok(Fake(vec![0; 16])),
            || {
                evicted += 1;
                Ok(())
            },
        )
        .expect("mapped");
        assert_eq!(evicted, 1);
        let err = p
            .map(2, "new", 10, 8, || unreachable!(), || Ok(()))
            .expect_err("beyond");
        assert!(err.to_string().contains("holds 16 bytes"), "{err}");
    }
}
