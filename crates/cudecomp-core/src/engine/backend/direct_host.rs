//! The DIRECT backend on host memory: workspaces live in node-shared memory (see
//! [`crate::mem::shm`]), so each rank packs every chunk straight into the receiving
//! rank's workspace and raises a signal there; the receiver unpacks each slice as soon as
//! its signal arrives. Slices are small enough to still be in cache when the receiver
//! reads them, so the two copies of an off-rank cell cost little more memory traffic than
//! one. No MPI message carries data.

use super::{Backend, Place, Stage};
use crate::engine::route::{Capture, DIRECT_BARRIER};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::CommTime;
use crate::engine::exchange::{Exchange, FaceExchange, Piece, Profile, SingleCopySignals};
use crate::engine::workspace::Workspace;
use crate::mem::shm::{ArrayRef, SharedArray, SharedWorkspaces};
use crate::mem::{Buf, Mover};
use crate::plan::TransposePlan;
use crate::{Error, Result};

use super::single_copy::{peer_outputs, single_copy_wanted};

/// Slice size of host DIRECT transposes and halos copied by one thread: slices stay in the
/// cache between the writer's stores and the reader's loads.
const HOST_SLICE_BYTES: i64 = 128 << 10;

/// Most bytes the rings of all writers take in one receiver's workspace: with many peers
/// slices shrink so that the rings stay in cache.
const HOST_RING_BYTES: i64 = 4 << 20;

/// Ranks copying with several threads cut large slices unless a receiver's rings would
/// then hold more than this many: with many peers, small single-threaded slices that stay
/// in cache win; with few peers, large threaded slices do.
const HOST_THREADED_RING_SLOTS: usize = 16;

/// Smallest host slice: below this the per-slice signalling costs more than cache misses.
const HOST_MIN_SLICE_BYTES: i64 = 32 << 10;

/// Slice bytes per thread when a rank copies with several: waking the threads must pay.
const HOST_THREAD_SLICE_BYTES: i64 = 1 << 20;

/// Most slices per chunk (signals encode the slice number below bit 20).
const HOST_MAX_SLICES: usize = 1 << 16;

/// A receiver gives up on a peer that delivers nothing for this long (the peer failed).
const WAIT_LIMIT: Duration = Duration::from_secs(300);

/// Host slices: packing writes into the peers' shared workspaces; a signal per slice in
/// the receiver's workspace says it is complete.
struct SharedSlices<'a> {
    /// The handle's node-shared workspaces (this rank's and its peers', mapped).
    workspaces: &'a SharedWorkspaces,
    /// Handle rank of each peer of the plan's sub-communicator.
    members: &'a [usize],
    /// This rank's handle rank.
    rank: usize,
    /// Threads of this rank's copies (several make slices larger).
    threads: usize,
    /// Places each chunk's slices cycle through in the receiver's workspace (see
    /// [`SliceExchange::ring`]); `None` keeps each slice at its own place.
    ring: Option<usize>,
    /// Milliseconds spent waiting for peers' slices (the report's communication time).
    waited_ms: Cell<f64>,
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
pub(crate) fn single_copies() -> u64 {
    SINGLE_COPIES.load(Ordering::Relaxed)
}

/// Single-copy host transposes between registered arrays: after writing its chunk into a
/// member's output, a rank raises its delivery slot in that member's shared workspace;
/// each member waits for all of its peers'. The operation's workspace exchange, which every
/// rank enters only after finishing its previous operation, is what lets writers start.
struct SharedChunks<'a> {
    /// The handle's node-shared workspaces (their signal slots).
    workspaces: &'a SharedWorkspaces,
    /// Handle rank of each member of the plan's sub-communicator.
    members: &'a [usize],
    /// This rank's index in `members`.
    me: usize,
    /// Milliseconds spent waiting for peers' chunks (the report's communication time).
    waited_ms: Cell<f64>,
}

impl SingleCopySignals for SharedChunks<'_> {
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

/// Slice size of host slices for `members` members copying with `threads` threads, the
/// chunks' slices cycling through `ring` places (see [`HOST_RING_PLACES`]).
fn slice_bytes(members: usize, threads: usize, ring: Option<usize>) -> i64 {
    let threaded = threads > 1;
    let large = HOST_THREAD_SLICE_BYTES * threads.max(1) as i64;
    match ring {
        Some(places) => {
            let slots = (members.saturating_sub(1) * places).max(1);
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

impl Exchange for SharedSlices<'_> {
    fn profile(&self) -> Profile {
        Profile {
            lands_in_output: false,
            max_slices: HOST_MAX_SLICES,
            slice_bytes: slice_bytes(self.members.len(), self.threads, self.ring),
            // Two units ahead: a peer running slightly behind does not stall this rank.
            lag: 2,
            per_peer: false,
            shares_sms: false,
            ring: self.ring,
            polls: true,
        }
    }

    fn pack_into(&self, peer: usize) -> Option<Buf> {
        self.workspaces.peer(self.members[peer])
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
const HOST_RING_PLACES: usize = 4;

/// Host halo faces: copied into the neighbours' shared workspaces, one signal each.
struct SharedFaces<'a> {
    /// The handle's node-shared workspaces (this rank's and its neighbours', mapped).
    workspaces: &'a SharedWorkspaces,
    /// This rank's handle rank.
    rank: usize,
    /// Milliseconds spent waiting for neighbours' faces.
    waited_ms: Cell<f64>,
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

/// Bytes of input per piece of a single-copy transpose of `plan` whose rank copies with
/// `threads` threads: `set` (`CUDECOMP_SINGLE_COPY_BLOCK_BYTES`) when given; else 1 MiB
/// where the chunks cut the input's rows (each chunk reads part of every row, so blocking
/// lets each stretch of input come from memory once) and the rank copies on one thread,
/// 0 (whole chunks) otherwise: blocking chunks of whole rows only breaks their long runs,
/// and with several threads each copy is already cut among them.
fn single_copy_block(plan: &TransposePlan, threads: usize, set: Option<i64>) -> i64 {
    set.unwrap_or(if cuts_rows(plan) && threads <= 1 {
        1 << 20
    } else {
        0
    })
}

/// Whether some chunk sent to a peer covers only part of the input's rows (its fastest
/// axis in memory).
fn cuts_rows(plan: &TransposePlan) -> bool {
    let fast = plan.in_layout.fastest_axis();
    let whole = plan.input.interior().len[fast];
    plan.sends
        .iter()
        .any(|c| c.count > 0 && c.region.len[fast] < whole)
}

/// DIRECT on host memory.
pub(super) struct DirectHostBackend;

impl Backend for DirectHostBackend {
    type TransposeHow = ();
    type HaloHow = ();
    const CAPTURE: Capture = Capture::Refused(DIRECT_BARRIER);

    fn transpose_place(_c: &TransposeCall<'_>, (): &()) -> Place {
        Place::Host
    }

    fn halo_place(_c: &HaloCall<'_>, (): &()) -> Place {
        Place::Host
    }

    /// A transpose through host DIRECT: single copies between library arrays where every
    /// member publishes one, else two copies through the node-shared workspaces.
    fn transpose(s: &Stage<'_, TransposeCall<'_>>, ws: &mut Workspace, (): ()) -> Result<()> {
        let (cx, c) = (s.cx, s.call);
        let plan = c.plan;
        // Always the handle's shared workspace: peers write into it. Each rank tells the
        // others, in the same collective, where its output lies when peers could write into
        // it; memory files only where peers could open this rank's workspace file.
        let note = single_copy_wanted(cx, c, || true)
            .then(|| SharedArray::find(c.output))
            .flatten()
            .filter(|a| a.mappable(&ws.shared))
            .map_or_else(Vec::new, |a| a.encode());
        let (work, notes) = ws.shared.exchange_noting(cx.world, s.need, &note)?;
        let outs = peer_outputs(
            |r| notes.get(r).and_then(|n| ArrayRef::decode(n)),
            plan,
            c.dtype.size(),
            c.fields.count,
            |r, a, bytes| ws.peer_arrays.map_shared(r, a, bytes),
        );
        let x = SharedChunks {
            workspaces: &ws.shared,
            members: &plan.members,
            me: plan.me,
            waited_ms: Cell::new(0.0),
        };
        // Every member took the single-copy path: one that cannot map a peer's output tells
        // the others rather than leaving them waiting.
        let outs = match outs {
            Err(e) => return x.abandon(e),
            Ok(o) => o,
        };
        if let Some(outs) = outs {
            let threads = cx.host_threads;
            let movers =
                |dst: Buf| -> Box<dyn Mover> { Box::new(cx.host_mover().streaming_into(dst)) };
            let waited = || Ok(x.waited_ms.get());
            count_single_copy();
            let block = single_copy_block(plan, threads, cx.settings.single_copy_block_bytes);
            return s.reported(work, c.group, CommTime::Own(&waited), |run, _| {
                run.single_copy(&outs, &[], &movers, block, &x, None)
            });
        }
        let x = SharedSlices {
            workspaces: &ws.shared,
            members: &plan.members,
            rank: cx.rank,
            threads: cx.host_threads,
            ring: Some(HOST_RING_PLACES),
            waited_ms: Cell::new(0.0),
        };
        let waited = || Ok(x.waited_ms.get());
        s.reported(work, c.group, CommTime::Own(&waited), |run, _| {
            run.run(&x, cx.slice_bytes)
        })
    }

    /// A halo update through host DIRECT.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, (): ()) -> Result<()> {
        let cx = s.cx;
        // Always the handle's shared workspace: neighbours write into it.
        let work = ws.shared.exchange(cx.world, s.need)?;
        let x = SharedFaces {
            workspaces: &ws.shared,
            rank: cx.rank,
            waited_ms: Cell::new(0.0),
        };
        let waited = || Ok(x.waited_ms.get());
        s.reported(work, cx.world, CommTime::Own(&waited), |run, _| {
            run.direct(&x, cx.slice_bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slices(members: usize, threads: usize, ring: Option<usize>) -> i64 {
        slice_bytes(members, threads, ring)
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
