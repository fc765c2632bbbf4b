//! The DIRECT backend on host memory: workspaces live in node-shared memory (see
//! [`crate::mem::shm`]), so each rank packs every chunk straight into the receiving
//! rank's workspace and raises a signal there; the receiver unpacks each slice as soon as
//! its signal arrives. Slices are small enough to still be in cache when the receiver
//! reads them, so the two copies of an off-rank cell cost little more memory traffic than
//! one. No MPI message carries data.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::transpose::{Piece, SliceExchange};
use crate::mem::shm::SharedWorkspaces;
use crate::mem::Buf;
use crate::{Error, Result};

/// Slice size of host DIRECT transposes: a few hundred KiB stay in the shared cache
/// between the writer's stores and the reader's loads.
pub const HOST_SLICE_BYTES: i64 = 256 << 10;

/// Most slices per chunk (signals encode the slice number below bit 20).
const HOST_MAX_SLICES: usize = 1 << 16;

/// A receiver gives up on a peer that delivers nothing for this long (the peer failed).
const WAIT_LIMIT: Duration = Duration::from_secs(300);

/// Host slices: packing writes into the peers' shared workspaces; a signal per slice in
/// the receiver's workspace says it is complete.
pub struct SharedSlices<'a> {
    pub workspaces: &'a SharedWorkspaces,
    /// Handle rank of each peer of the plan's sub-communicator.
    pub members: &'a [usize],
    /// This rank's handle rank.
    pub rank: usize,
    /// Milliseconds spent waiting for peers' slices (the report's communication time).
    pub waited_ms: Cell<f64>,
}

impl SharedSlices<'_> {
    /// The signal value meaning "slice `k` of this operation is there".
    fn mark(&self, k: usize) -> u64 {
        (self.workspaces.op() << 20) | (k as u64 + 1)
    }

    fn slot(&self, r: usize, writer: usize) -> Result<&AtomicU64> {
        self.workspaces.signal(r, writer).ok_or_else(|| {
            Error::Internal(format!(
                "DIRECT: no signal slot of rank {writer} at rank {r}"
            ))
        })
    }
}

/// Spins (then yields, for oversubscribed nodes) until `flag` reaches `target`.
fn wait_for(flag: &AtomicU64, target: u64, from: usize) -> Result<()> {
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
        let start = Instant::now();
        for r in recvs {
            let from = self.members[r.peer];
            wait_for(self.slot(self.rank, from)?, self.mark(k), from)?;
        }
        let waited = start.elapsed().as_secs_f64() * 1e3;
        self.waited_ms.set(self.waited_ms.get() + waited);
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }
}
