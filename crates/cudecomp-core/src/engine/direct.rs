//! The DIRECT backend on host memory: workspaces live in node-shared memory (see
//! [`crate::mem::shm`]), so each rank packs every chunk straight into the receiving
//! rank's workspace and raises a signal there; the receiver unpacks each slice as soon as
//! its signal arrives. Slices are small enough to still be in cache when the receiver
//! reads them, so the two copies of an off-rank cell cost little more memory traffic than
//! one. No MPI message carries data.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::exchange::FaceExchange;
use crate::engine::exchange::{ChunkSignals, Piece, SliceExchange};
use crate::mem::shm::SharedWorkspaces;
use crate::mem::Buf;
use crate::{Error, Result};

/// Slice size of host DIRECT transposes and halos copied by one thread: slices stay in the
/// cache between the writer's stores and the reader's loads (chosen by measurement on 16
/// ranks: bench/RESULTS.md).
const HOST_SLICE_BYTES: i64 = 128 << 10;

/// Most bytes the rings of all writers take in one receiver's workspace: with many peers
/// slices shrink so that the rings stay in cache (measured: bench/RESULTS.md).
const HOST_RING_BYTES: i64 = 4 << 20;

/// Ranks copying with several threads cut large slices unless a receiver's rings would
/// then hold more than this many: with many peers, small single-threaded slices that stay
/// in cache win; with few peers, large threaded slices do (measured: bench/RESULTS.md).
const HOST_THREADED_RING_SLOTS: usize = 16;

/// Smallest host slice: below this the per-slice signalling costs more than cache misses.
const HOST_MIN_SLICE_BYTES: i64 = 32 << 10;

/// Slice bytes per thread when a rank copies with several: waking the threads must pay
/// (measured: bench/RESULTS.md).
const HOST_THREAD_SLICE_BYTES: i64 = 1 << 20;

/// Most slices per chunk (signals encode the slice number below bit 20).
const HOST_MAX_SLICES: usize = 1 << 16;

/// A receiver gives up on a peer that delivers nothing for this long (the peer failed).
const WAIT_LIMIT: Duration = Duration::from_secs(300);

/// Host slices: packing writes into the peers' shared workspaces; a signal per slice in
/// the receiver's workspace says it is complete.
pub struct SharedSlices<'a> {
    /// The handle's node-shared workspaces (this rank's and its peers', mapped).
    pub workspaces: &'a SharedWorkspaces,
    /// Handle rank of each peer of the plan's sub-communicator.
    pub members: &'a [usize],
    /// This rank's handle rank.
    pub rank: usize,
    /// Threads of this rank's copies (several make slices larger).
    pub threads: usize,
    /// Places each chunk's slices cycle through in the receiver's workspace (see
    /// [`SliceExchange::ring`]); `None` keeps each slice at its own place.
    pub ring: Option<usize>,
    /// Milliseconds spent waiting for peers' slices (the report's communication time).
    pub waited_ms: Cell<f64>,
}

/// The signal value meaning "item `k` of the current operation is there". A writer
/// raises its items in increasing `k`, so waiting for "at least" is enough.
fn mark(ws: &SharedWorkspaces, k: usize) -> u64 {
    (ws.op() << 20) | (k as u64 + 1)
}

/// The slot rank `writer` raises in rank `r`'s workspace.
fn slot(ws: &SharedWorkspaces, r: usize, writer: usize) -> Result<&AtomicU64> {
    ws.signal(r, writer).ok_or_else(|| {
        Error::Internal(format!(
            "DIRECT: no signal slot of rank {writer} at rank {r}"
        ))
    })
}

impl SharedSlices<'_> {
    fn mark(&self, k: usize) -> u64 {
        mark(self.workspaces, k)
    }

    fn slot(&self, r: usize, writer: usize) -> Result<&AtomicU64> {
        slot(self.workspaces, r, writer)
    }

    /// The acknowledgement slot `reader` raises in rank `r`'s workspace.
    fn ack(&self, r: usize, reader: usize) -> Result<&AtomicU64> {
        self.workspaces.ack(r, reader).ok_or_else(|| {
            Error::Internal(format!(
                "DIRECT: no acknowledgement slot of rank {reader} at rank {r}"
            ))
        })
    }
}

/// Single-copy transposes run by this process (what tests check the path by).
static SINGLE_COPIES: AtomicU64 = AtomicU64::new(0);

/// Counts one single-copy transpose.
pub(crate) fn count_single_copy() {
    SINGLE_COPIES.fetch_add(1, Ordering::Relaxed);
}

/// Number of transposes this process ran as single copies (registered outputs on every
/// member): a testing aid.
pub fn single_copies() -> u64 {
    SINGLE_COPIES.load(Ordering::Relaxed)
}

/// Single-copy host transposes between registered arrays: after writing its chunk into a
/// member's output, a rank raises its delivery slot in that member's shared workspace;
/// each member waits for all of its peers'. The operation's workspace exchange, which every
/// rank enters only after finishing its previous operation, is what lets writers start.
pub struct SharedChunks<'a> {
    /// The handle's node-shared workspaces (their signal slots).
    pub workspaces: &'a SharedWorkspaces,
    /// Handle rank of each member of the plan's sub-communicator.
    pub members: &'a [usize],
    /// This rank's index in `members`.
    pub me: usize,
    /// Milliseconds spent waiting for peers' chunks (the report's communication time).
    pub waited_ms: Cell<f64>,
}

impl ChunkSignals for SharedChunks<'_> {
    fn delivered(&self, peer: usize, step: usize) -> Result<()> {
        if step > 0 {
            return Err(Error::Internal(format!(
                "DIRECT: host outputs are taken whole, not in steps (step {step})"
            )));
        }
        let rank = self.members[self.me];
        slot(self.workspaces, self.members[peer], rank)?
            .store(mark(self.workspaces, 0), Ordering::Release);
        Ok(())
    }

    fn arrived(&self) -> Result<()> {
        let rank = self.members[self.me];
        for (p, &from) in self.members.iter().enumerate() {
            if p != self.me {
                let flag = slot(self.workspaces, rank, from)?;
                wait_for(flag, mark(self.workspaces, 0), from, &self.waited_ms)?;
                if flag.load(Ordering::Acquire) == mark(self.workspaces, ABANDONED) {
                    return Err(Error::Internal(format!(
                        "DIRECT: rank {from} could not write its chunk into this rank's output (its own error says why)"
                    )));
                }
            }
        }
        Ok(())
    }

    fn abandon(&self, why: Error) -> Result<()> {
        let rank = self.members[self.me];
        for (p, &to) in self.members.iter().enumerate() {
            if p != self.me {
                slot(self.workspaces, to, rank)?
                    .store(mark(self.workspaces, ABANDONED), Ordering::Release);
            }
        }
        Err(why)
    }
}

/// The item number a single-copy writer raises instead of delivering (above every slice
/// number, below the operation bits).
const ABANDONED: usize = (1 << 20) - 2;

/// Spins (then yields, for oversubscribed nodes) until `flag` reaches `target`; adds the
/// milliseconds waited to `waited`.
fn wait_for(flag: &AtomicU64, target: u64, from: usize, waited: &Cell<f64>) -> Result<()> {
    let start = Instant::now();
    let mut spins = 0u64;
    while flag.load(Ordering::Acquire) < target {
        spins += 1;
        if spins < 128 {
            std::hint::spin_loop();
            continue;
        }
        std::thread::yield_now();
        if spins % 4096 == 0 && start.elapsed() > WAIT_LIMIT {
            return Err(Error::Internal(format!(
                "DIRECT: rank {from} delivered nothing for {} s (did it fail?)",
                WAIT_LIMIT.as_secs()
            )));
        }
    }
    waited.set(waited.get() + start.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

impl SliceExchange for SharedSlices<'_> {
    fn lands_in_output(&self) -> bool {
        false
    }

    fn pack_into(&self, peer: usize) -> Option<Buf> {
        self.workspaces.peer(self.members[peer])
    }

    /// Two units ahead: a peer running slightly behind does not stall this rank.
    fn lag(&self) -> usize {
        2
    }

    fn max_slices(&self) -> usize {
        HOST_MAX_SLICES
    }

    fn slice_bytes(&self) -> i64 {
        let threaded = self.threads > 1;
        let large = HOST_THREAD_SLICE_BYTES * self.threads.max(1) as i64;
        match self.ring {
            Some(places) => {
                let slots = (self.members.len().saturating_sub(1) * places).max(1);
                if threaded && slots <= HOST_THREADED_RING_SLOTS {
                    large
                } else {
                    (HOST_RING_BYTES / slots as i64).clamp(HOST_MIN_SLICE_BYTES, HOST_SLICE_BYTES)
                }
            }
            None if threaded => large,
            None => HOST_SLICE_BYTES,
        }
    }

    fn ready(&self, _u: usize) -> Result<()> {
        Ok(())
    }

    fn exchange(&self, _u: usize, k: usize, sends: &[Piece], _recvs: &[Piece]) -> Result<()> {
        for s in sends {
            let r = self.members[s.peer];
            if self.workspaces.peer(r).is_none() {
                return Err(Error::Internal(format!(
                    "DIRECT: rank {r} has no mapped shared workspace"
                )));
            }
            // Release: the packed slice is visible before the signal.
            self.slot(r, self.rank)?
                .store(self.mark(k), Ordering::Release);
        }
        Ok(())
    }

    fn posted(&self) -> Result<()> {
        Ok(())
    }

    fn arrived(&self, _u: usize, k: usize, recvs: &[Piece]) -> Result<()> {
        for r in recvs {
            let from = self.members[r.peer];
            wait_for(
                self.slot(self.rank, from)?,
                self.mark(k),
                from,
                &self.waited_ms,
            )?;
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }

    fn ring(&self) -> Option<usize> {
        self.ring
    }

    fn polls(&self) -> bool {
        true
    }

    fn landed(&self, _u: usize, k: usize, recvs: &[Piece]) -> Result<bool> {
        for r in recvs {
            let from = self.members[r.peer];
            if self.slot(self.rank, from)?.load(Ordering::Acquire) < self.mark(k) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn place_free(&self, peer: usize, k: usize) -> Result<()> {
        let places = self.ring.unwrap_or(0);
        let Some(before) = k.checked_sub(places) else {
            return Ok(());
        };
        let reader = self.members[peer];
        wait_for(
            self.ack(self.rank, reader)?,
            self.mark(before),
            reader,
            &self.waited_ms,
        )
    }

    fn unpacked(&self, peer: usize, k: usize) -> Result<()> {
        // Release: this rank's reads of the slice are done before the writer reuses it.
        self.ack(self.members[peer], self.rank)?
            .store(self.mark(k), Ordering::Release);
        Ok(())
    }
}

/// Places a chunk's slices cycle through in the receiving rank's workspace: with two units
/// packed ahead of the first wait, four places never make a writer wait for long, and the
/// places stay in cache between the writer's stores and the reader's loads.
pub const HOST_RING_PLACES: usize = 4;

/// Host halo faces: copied into the neighbours' shared workspaces, one signal each.
pub struct SharedFaces<'a> {
    /// The handle's node-shared workspaces (this rank's and its neighbours', mapped).
    pub workspaces: &'a SharedWorkspaces,
    /// This rank's handle rank.
    pub rank: usize,
    /// Milliseconds spent waiting for neighbours' faces.
    pub waited_ms: Cell<f64>,
}

impl FaceExchange for SharedFaces<'_> {
    fn max_slices(&self) -> usize {
        HOST_MAX_SLICES / 2
    }

    fn slice_bytes(&self) -> i64 {
        HOST_SLICE_BYTES
    }

    fn ready(&self, _first: bool) -> Result<()> {
        Ok(())
    }

    fn deliver(&self, part: Buf, to: usize, at: i64, signal: usize) -> Result<()> {
        let peer = self.workspaces.peer(to).ok_or_else(|| {
            Error::Internal(format!("DIRECT: rank {to} has no mapped shared workspace"))
        })?;
        let dst = peer.range(at, part.len() as i64)?;
        // SAFETY: `part` lies in this rank's array or workspace; `dst` inside the
        // neighbour's workspace, at a slot only this rank writes during the operation.
        unsafe { std::ptr::copy_nonoverlapping(part.ptr(), dst, part.len()) };
        // Release: the slice is visible before the signal.
        slot(self.workspaces, to, self.rank)?
            .store(mark(self.workspaces, signal), Ordering::Release);
        Ok(())
    }

    fn posted(&self) -> Result<()> {
        Ok(())
    }

    fn arrived(&self, from: usize, signal: usize) -> Result<()> {
        let target = mark(self.workspaces, signal);
        wait_for(
            slot(self.workspaces, self.rank, from)?,
            target,
            from,
            &self.waited_ms,
        )
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slices(members: usize, threads: usize, ring: Option<usize>) -> i64 {
        let ws = SharedWorkspaces::default();
        let m: Vec<usize> = (0..members).collect();
        SharedSlices {
            workspaces: &ws,
            members: &m,
            rank: 0,
            threads,
            ring,
            waited_ms: Cell::new(0.0),
        }
        .slice_bytes()
    }

    #[test]
    fn slices_keep_rings_in_cache() {
        let ring = Some(HOST_RING_PLACES);
        // One thread: rings of all writers within HOST_RING_BYTES, within bounds.
        assert_eq!(slices(2, 1, ring), HOST_SLICE_BYTES);
        assert_eq!(slices(16, 1, ring), HOST_RING_BYTES / 60);
        assert_eq!(slices(1000, 1, ring), HOST_MIN_SLICE_BYTES);
        // Several threads: large slices for few peers, cached ones for many.
        assert_eq!(slices(4, 4, ring), 4 * HOST_THREAD_SLICE_BYTES);
        assert_eq!(slices(16, 2, ring), HOST_RING_BYTES / 60);
        assert_eq!(slices(16, 2, None), 2 * HOST_THREAD_SLICE_BYTES);
        assert_eq!(slices(16, 1, None), HOST_SLICE_BYTES);
    }

    #[test]
    fn an_abandoning_writer_fails_its_receivers_instead_of_stalling_them() {
        use crate::comm::mock;
        let results = mock::run(3, |c| -> Result<Option<String>> {
            let members: Vec<usize> = (0..3).collect();
            let me = c.rank();
            let mut ws = SharedWorkspaces::default();
            let round = |ws: &SharedWorkspaces, abandon: bool| {
                let x = SharedChunks {
                    workspaces: ws,
                    members: &members,
                    me,
                    waited_ms: Cell::new(0.0),
                };
                if abandon {
                    return x.abandon(Error::Internal("cannot map rank 1's output".into()));
                }
                for p in (0..3).filter(|&p| p != me) {
                    x.delivered(p, 0)?;
                }
                x.arrived()
            };
            ws.exchange(c, 1024)?;
            let first = round(&ws, me == 0);
            // The next operation runs normally on every rank.
            ws.exchange(c, 1024)?;
            round(&ws, false)?;
            Ok(first.err().map(|e| e.to_string()))
        });
        let said: Vec<Option<String>> = results.into_iter().map(|r| r.expect("ran")).collect();
        assert!(
            said[0].as_deref().is_some_and(|e| e.contains("cannot map")),
            "{said:?}"
        );
        for e in &said[1..] {
            assert!(
                e.as_deref()
                    .is_some_and(|e| e.contains("rank 0 could not write")),
                "{said:?}"
            );
        }
    }
}
