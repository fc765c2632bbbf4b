//! Stream-ordered slice exchanges for device transposes (see [`TransposeRun::sliced`]):
//! the user's stream packs and unpacks while a second, library-owned stream moves slices,
//! through NCCL or as copy-engine writes into peers' workspaces mapped by CUDA IPC.
//!
//! [`TransposeRun::sliced`]: crate::engine::transpose::TransposeRun::sliced

use std::sync::atomic::{AtomicBool, Ordering};

use crate::comm::{allgather_u64, post_pieces, Communicator, Transport, Way};
use crate::cuda::ipc::IpcPeers;
use crate::cuda::{copy_device, Event, EventRef, OwnedStream, Stream};
use crate::engine::exchange::FaceExchange;
use crate::engine::exchange::{ChunkSignals, Piece, SliceExchange};
use crate::mem::Buf;
use crate::plan::MAX_SLICES;
use crate::{Error, Result};

/// The second stream of a handle and the events that order it against the user's stream.
pub struct Pipe {
    side: OwnedStream,
    /// Main → side: the unit's slices are packed (re-recorded per unit; each wait is
    /// enqueued right after its record, so one event serves every unit).
    ready: Event,
    /// Side → main: every exchange of the operation is done.
    fin: Event,
    /// Side → main: unit `u` has arrived (waited on after all units are enqueued).
    done: Vec<Event>,
    /// Timing events around the exchanges of the last operation (performance report).
    span: [Event; 2],
    /// The span's start is recorded for the current operation.
    started: AtomicBool,
}

impl Pipe {
    /// Creates the stream and events in the bound context.
    pub fn new() -> Result<Pipe> {
        Ok(Pipe {
            side: OwnedStream::new()?,
            ready: Event::new(false)?,
            fin: Event::new(false)?,
            done: Vec::new(),
            span: [Event::new(true)?, Event::new(true)?],
            started: AtomicBool::new(false),
        })
    }

    /// The library's stream.
    pub fn side(&self) -> Stream {
        self.side.stream()
    }

    /// True when the units of a pipeline over `npeers` peers have their events.
    pub fn has_room(&self, npeers: usize) -> bool {
        self.done.len() >= npeers * MAX_SLICES
    }

    /// Makes room for the units of a pipeline over `npeers` peers.
    pub fn reserve(&mut self, npeers: usize) -> Result<()> {
        let n = npeers * MAX_SLICES;
        while self.done.len() < n {
            self.done.push(Event::new(false)?);
        }
        Ok(())
    }

    pub(crate) fn ready(&self, main: Stream) -> Result<()> {
        self.ready.record(main)?;
        self.ready.wait_on(self.side())?;
        if !self.started.swap(true, Ordering::Relaxed) {
            self.span[0].record(self.side())?;
        }
        Ok(())
    }

    pub(crate) fn finish(&self, main: Stream) -> Result<()> {
        if !self.started.swap(false, Ordering::Relaxed) {
            self.span[0].record(self.side())?;
        }
        self.span[1].record(self.side())?;
        self.fin.record(self.side())?;
        self.fin.wait_on(main)
    }

    /// Milliseconds the last operation's exchanges took on the library's stream, from the
    /// first slice's start to the last one's end (waits for them).
    pub fn span_ms(&self) -> Result<f64> {
        self.span[1].synchronize()?;
        Ok(f64::from(self.span[0].elapsed_ms(&self.span[1])?))
    }

    pub(crate) fn done(&self, u: usize) -> Result<&Event> {
        self.done
            .get(u)
            .ok_or_else(|| Error::Internal(format!("pipeline unit {u} has no event")))
    }
}

/// Default slice size of NCCL pipelines between unregistered and between registered
/// buffers (see [`TransportSlices::slice_bytes`]).
const NCCL_SLICE_BYTES: [i64; 2] = [256 << 20, 128 << 20];

/// Slices through a stream-ordered transport (NCCL) bound to the pipe's stream: one group
/// per unit.
pub struct TransportSlices<'a> {
    /// The stream-ordered transport (NCCL), enqueuing on the pipe's side stream.
    pub transport: &'a dyn Transport,
    /// The side stream and the events ordering it against `main`.
    pub pipe: &'a Pipe,
    /// The user's stream, on which slices are packed and unpacked.
    pub main: Stream,
    /// Slices move between buffers registered with NCCL.
    pub registered: bool,
}

impl SliceExchange for TransportSlices<'_> {
    fn lands_in_output(&self) -> bool {
        true
    }

    /// More slices measured slower: NCCL's kernels share the SMs with the packing, and
    /// every group has a fixed cost (bench/RESULTS.md).
    fn max_slices(&self) -> usize {
        8
    }

    fn shares_sms(&self) -> bool {
        true
    }

    /// Each NCCL group between unregistered buffers costs far more on top of its bytes
    /// than one between registered buffers, so unregistered slices are larger (the
    /// sizes were chosen by measurement: bench/RESULTS.md).
    fn slice_bytes(&self) -> i64 {
        NCCL_SLICE_BYTES[usize::from(self.registered)]
    }

    fn ready(&self, _u: usize) -> Result<()> {
        self.pipe.ready(self.main)
    }

    fn exchange(&self, u: usize, _k: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()> {
        let mut reqs = Vec::new();
        for (way, list) in [(Way::Receive, recvs), (Way::Send, sends)] {
            for p in list {
                // SAFETY: pieces lie in the operation's buffers, which the main stream
                // keeps until `finish` has ordered it after this exchange.
                unsafe { post_pieces(self.transport, way, p.ptr, p.len, p.peer, 0, &mut reqs)? };
            }
        }
        self.transport.wait_all(&mut reqs)?;
        self.pipe.done(u)?.record(self.pipe.side())
    }

    fn posted(&self) -> Result<()> {
        Ok(())
    }

    fn arrived(&self, u: usize, _k: usize, _recvs: &[Piece]) -> Result<()> {
        self.pipe.done(u)?.wait_on(self.main)
    }

    fn finish(&self) -> Result<()> {
        self.pipe.finish(self.main)
    }
}

/// Makes the copy stream wait until each of `ranks` has finished with its workspace
/// (their `free` records precede the operation's start barrier, so these waits see
/// them): no host synchronisation.
fn wait_peers_free(
    peers: &IpcPeers,
    pipe: &Pipe,
    ranks: impl Iterator<Item = usize>,
) -> Result<()> {
    for r in ranks {
        peers.peer_free(r)?.wait_on(pipe.side())?;
    }
    Ok(())
}

/// Copies `len` bytes at device address `src` into rank `r`'s mapped workspace at byte
/// `at` on the copy stream, then records `r`'s signal `k`.
///
/// # Safety
/// `src..src+len` must be device memory that stays valid until the operation's pipe
/// finishes (the main stream waits for the copy stream then).
unsafe fn copy_to_peer(
    peers: &IpcPeers,
    pipe: &Pipe,
    r: usize,
    at: u64,
    src: u64,
    len: usize,
    k: usize,
) -> Result<()> {
    let (base, size) = peers
        .peer(r)
        .ok_or_else(|| Error::Internal(format!("DIRECT: rank {r}'s workspace not mapped")))?;
    if at + len as u64 > size {
        return Err(Error::Internal(format!(
            "DIRECT: copy of {at}+{len} bytes beyond rank {r}'s workspace of {size} bytes"
        )));
    }
    // SAFETY: the destination lies inside rank `r`'s mapped workspace (checked above),
    // which stays mapped while the operation holds the workspace lock; the caller vouches
    // for the source.
    unsafe { copy_device(base + at, src, len, pipe.side())? };
    peers.sent(r, k)?.record(pipe.side())
}

/// Slices copied by the copy engine straight into peers' workspaces (DIRECT backend),
/// each followed by an interprocess event the receiver waits on.
pub struct IpcSlices<'a> {
    /// The side stream the copy engine's writes are enqueued on, and its events.
    pub pipe: &'a Pipe,
    /// The user's stream, on which slices are packed and unpacked.
    pub main: Stream,
    /// The peers' workspaces mapped through CUDA IPC, and their interprocess events.
    pub peers: &'a IpcPeers,
    /// Handle rank of each peer of the plan's sub-communicator.
    pub members: &'a [usize],
    /// This rank's index in `members`.
    pub me: usize,
    /// Byte offset, in each peer's workspace, of the slot this rank's chunk goes to.
    pub slots: Vec<u64>,
    /// The plan's sub-communicator (its barrier separates records from waits).
    pub comm: &'a dyn Communicator,
}

impl SliceExchange for IpcSlices<'_> {
    fn lands_in_output(&self) -> bool {
        false
    }

    fn max_slices(&self) -> usize {
        MAX_SLICES
    }

    fn ready(&self, u: usize) -> Result<()> {
        self.pipe.ready(self.main)?;
        if u == 0 {
            let others = self
                .members
                .iter()
                .enumerate()
                .filter(|&(p, _)| p != self.me);
            wait_peers_free(self.peers, self.pipe, others.map(|(_, &r)| r))?;
        }
        Ok(())
    }

    fn exchange(&self, _u: usize, k: usize, sends: &[Piece], _recvs: &[Piece]) -> Result<()> {
        for s in sends {
            let at = self.slots[s.peer] + s.rel as u64;
            let r = self.members[s.peer];
            // SAFETY: the piece lies inside one of the operation's buffers (checked when it
            // was cut), which outlive the operation.
            unsafe { copy_to_peer(self.peers, self.pipe, r, at, s.ptr as u64, s.len, k)? };
        }
        Ok(())
    }

    fn posted(&self) -> Result<()> {
        // Peers have enqueued their records: waits enqueued from now on see them.
        self.comm.barrier()
    }

    fn arrived(&self, _u: usize, k: usize, recvs: &[Piece]) -> Result<()> {
        for r in recvs {
            self.peers
                .landed(self.members[r.peer], k)?
                .wait_on(self.main)?;
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        self.pipe.finish(self.main)
    }
}

/// Single-copy transposes between registered device arrays (DIRECT): chunks for peers
/// are copied on the library's stream straight into their outputs, after each member's
/// `free` event (its stream is done with its output), each step of a receiver's output
/// followed by an interprocess event the receiver's stream waits for; this rank's own
/// chunk is copied on the user's stream meanwhile.
pub struct IpcChunks<'a> {
    /// The library's stream (peers' chunks) and its events.
    pub pipe: &'a Pipe,
    /// The peers' interprocess events.
    pub peers: &'a IpcPeers,
    /// The user's stream.
    pub main: Stream,
    /// Handle rank of each member of the plan's sub-communicator.
    pub members: &'a [usize],
    /// This rank's index in `members`.
    pub me: usize,
    /// The plan's sub-communicator (its barrier separates records from waits).
    pub comm: &'a dyn Communicator,
    /// The caller's events to record on the user's stream once each step of this rank's
    /// output has landed, by step (see [`crate::plan::Landing`]); empty: the output whole.
    pub wanted: Vec<Vec<EventRef>>,
}

impl IpcChunks<'_> {
    /// Orders the library's stream after the user's (the input is ready) and after every
    /// member's last use of its output.
    pub fn start(&self) -> Result<()> {
        self.pipe.ready(self.main)?;
        let others = self
            .members
            .iter()
            .enumerate()
            .filter(|&(p, _)| p != self.me);
        wait_peers_free(self.peers, self.pipe, others.map(|(_, &r)| r))
    }

    /// Where chunks for `dst` are copied: this rank's own output on the user's stream,
    /// peers' outputs on the library's.
    pub fn stream_for(&self, dst: Buf, own: Buf) -> Stream {
        if dst == own {
            self.main
        } else {
            self.pipe.side()
        }
    }
}

impl ChunkSignals for IpcChunks<'_> {
    fn delivered(&self, peer: usize, step: usize) -> Result<()> {
        self.peers
            .sent(self.members[peer], step)?
            .record(self.pipe.side())
    }

    fn arrived(&self) -> Result<()> {
        // Peers have enqueued their records (waits enqueued from now on see them), or
        // some rank could not write its chunks.
        if let Some(r) = self.settle(false)? {
            self.pipe.finish(self.main)?;
            return Err(Error::Internal(format!(
                "DIRECT: rank {r} could not write its chunks into the outputs (its own error says why)"
            )));
        }
        // Step by step: every writer's part of the step, then the caller's events of it
        // (the user's stream has copied this rank's own cells before).
        for step in 0..self.wanted.len().max(1) {
            for (p, &w) in self.members.iter().enumerate() {
                if p != self.me {
                    self.peers.landed(w, step)?.wait_on(self.main)?;
                }
            }
            for e in self.wanted.get(step).into_iter().flatten() {
                e.record(self.main)?;
            }
        }
        self.pipe.finish(self.main)
    }

    fn abandon(&self, why: Error) -> Result<()> {
        self.settle(true)?;
        self.pipe.finish(self.main)?;
        Err(why)
    }
}

impl IpcChunks<'_> {
    /// Collective (the barrier between records and waits): whether this rank `failed`;
    /// the first member that did, if any.
    fn settle(&self, failed: bool) -> Result<Option<usize>> {
        let all = allgather_u64(self.comm, u64::from(failed))?;
        Ok(all.iter().position(|&f| f != 0))
    }
}

/// Halo faces copied by the copy engine into neighbours' workspaces mapped through CUDA
/// IPC, each followed by an interprocess event (numbered by the sender's side).
pub struct IpcFaces<'a> {
    /// The side stream the copy engine's writes are enqueued on, and its events.
    pub pipe: &'a Pipe,
    /// The user's stream, on which faces are packed and unpacked.
    pub main: Stream,
    /// The neighbours' workspaces mapped through CUDA IPC, and their interprocess events.
    pub peers: &'a IpcPeers,
    /// Handle ranks of the neighbours (left, right).
    pub neighbours: [Option<usize>; 2],
    /// The handle's communicator (its barrier separates records from waits).
    pub comm: &'a dyn Communicator,
}

impl FaceExchange for IpcFaces<'_> {
    /// Both faces' signals share the [`MAX_SLICES`] interprocess events per writer.
    fn max_slices(&self) -> usize {
        MAX_SLICES / 2
    }

    fn ready(&self, first: bool) -> Result<()> {
        self.pipe.ready(self.main)?;
        if first {
            wait_peers_free(self.peers, self.pipe, self.neighbours.into_iter().flatten())?;
        }
        Ok(())
    }

    fn deliver(&self, part: Buf, to: usize, at: i64, signal: usize) -> Result<()> {
        let at = u64::try_from(at).map_err(|_| Error::Internal(format!("DIRECT: face at {at}")))?;
        let src = part.ptr() as u64;
        // SAFETY: `part` is a checked slice of the operation's array or workspace, which
        // outlive the operation.
        unsafe { copy_to_peer(self.peers, self.pipe, to, at, src, part.len(), signal) }
    }

    fn posted(&self) -> Result<()> {
        self.comm.barrier()
    }

    fn arrived(&self, from: usize, signal: usize) -> Result<()> {
        self.peers.landed(from, signal)?.wait_on(self.main)
    }

    fn finish(&self) -> Result<()> {
        self.pipe.finish(self.main)
    }
}
