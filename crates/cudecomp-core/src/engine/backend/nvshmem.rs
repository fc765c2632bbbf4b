//! The NVSHMEM exchanges: slices of a transpose ([`NvshmemSlices`]) and halo faces
//! ([`NvshmemFaces`]) put into peers' copies of the symmetric workspace, each followed by a
//! signal in the peer's signal array, all ordered on streams (no host synchronisation).
//!
//! Signals (see [`crate::engine::workspace::SymmetricWork`]): a writer raises its delivery
//! slot for item `k` at the receiver after the item's data (one slot per writer and item,
//! so nothing depends on puts completing in order); the receiver waits for it, then lowers
//! it again on its own stream. At the start of every operation each rank tells its peers
//! that its workspace is free (its own stream has passed its previous operation's
//! unpacking) by raising its free slot at them; a writer waits for that, and lowers it,
//! before its first write into a peer. Every raised slot is lowered exactly once by the
//! one who waits for it, before anything could raise it again (the next raise follows a
//! free notice that comes after the lowering), so the values never change from one
//! operation to the next and a CUDA graph of the operations replays correctly.

use super::{Backend, Place, Stage};
use crate::engine::route::Capture;
use std::cell::RefCell;

use crate::cuda::nvshmem::{Nvshmem, Put};
use crate::cuda::Stream;
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::{CommTime, Context};
use crate::engine::exchange::{Exchange, FaceExchange, Piece, Profile};
use crate::engine::pipe::Pipe;
use crate::engine::route::Nvshmem as Mode;
use crate::engine::workspace::SymmetricWork;
use crate::engine::workspace::Workspace;
use crate::mem::{Buf, Mover};
use crate::plan::MAX_SLICES;
use crate::{Error, Result};

use super::peer_slots;

/// The value of a raised signal slot (lowered ones hold 0).
const RAISED: u64 = 1;

/// What both exchanges share: the runtime and this rank's symmetric buffers.
#[derive(Clone, Copy)]
struct Symmetric<'a> {
    /// The NVSHMEM runtime (PE numbers are handle ranks).
    nv: &'a Nvshmem,
    /// This rank's copy of the symmetric workspace.
    work: Buf,
    /// Symmetric address of the signal array.
    signals: u64,
    /// This rank's handle rank.
    rank: usize,
    /// Ranks of the handle (the signal array holds two slots per rank).
    nranks: usize,
}

impl Symmetric<'_> {
    /// The slot `writer` raises after its item `k` (`k` below [`MAX_SLICES`]).
    fn delivery_slot(&self, writer: usize, k: usize) -> u64 {
        self.signals + 8 * (writer * MAX_SLICES + k) as u64
    }

    fn free_slot(&self, receiver: usize) -> u64 {
        self.signals + 8 * (self.nranks * MAX_SLICES + receiver) as u64
    }

    /// Enqueues on `stream`: tells each of `peers` that this rank's workspace is free for
    /// this operation.
    fn announce_free(&self, peers: impl Iterator<Item = usize>, stream: Stream) {
        for p in peers {
            // SAFETY: the free slot is inside the symmetric signal array.
            unsafe { self.nv.signal(self.free_slot(self.rank), RAISED, p, stream) };
        }
    }

    /// Enqueues on `stream`: waits until `peer`'s workspace is free for this operation,
    /// then lowers the notice.
    fn wait_free(&self, peer: usize, stream: Stream) {
        self.consume(self.free_slot(peer), stream);
    }

    /// Enqueues on `stream`: waits until this rank's slot `sig` is raised, then lowers it.
    fn consume(&self, sig: u64, stream: Stream) {
        // SAFETY: `sig` is inside the symmetric signal array (callers compute it so).
        unsafe {
            self.nv.wait(sig, RAISED, stream);
            self.nv.signal(sig, 0, self.rank, stream);
        }
    }

    /// Enqueues on `stream`: puts `len` bytes at `src` into `to`'s workspace at byte `at`,
    /// then raises this rank's delivery slot for item `k` there.
    fn put(
        &self,
        to: usize,
        at: u64,
        src: u64,
        len: usize,
        k: usize,
        stream: Stream,
    ) -> Result<()> {
        if k >= MAX_SLICES {
            return Err(Error::Internal(format!(
                "NVSHMEM: item {k} has no signal slot"
            )));
        }
        if at + len as u64 > self.work.len() as u64 {
            return Err(Error::Internal(format!(
                "NVSHMEM: put of {at}+{len} bytes beyond the symmetric workspace of {} bytes",
                self.work.len()
            )));
        }
        let dest = self.work.ptr() as u64 + at;
        // SAFETY: the destination lies inside the symmetric workspace (checked above, and
        // of the same size on every rank); the source is a piece of the operation's buffers,
        // which stay valid until `finish` has ordered the main stream after `quiet`.
        unsafe {
            self.nv.put_signal(
                &Put {
                    dest,
                    src,
                    len,
                    sig: self.delivery_slot(self.rank, k),
                    value: RAISED,
                    pe: to,
                },
                stream,
            )
        };
        Ok(())
    }

    /// Enqueues on `stream`: waits until `from` has raised item `k`.
    fn wait_item(&self, from: usize, k: usize, stream: Stream) -> Result<()> {
        if k >= MAX_SLICES {
            return Err(Error::Internal(format!(
                "NVSHMEM: item {k} has no signal slot"
            )));
        }
        self.consume(self.delivery_slot(from, k), stream);
        Ok(())
    }

    /// Enqueues on `stream`: raises this rank's delivery slot for item `k` at `to` (the
    /// item was written there directly).
    fn signal_item(&self, to: usize, k: usize, stream: Stream) -> Result<()> {
        if k >= MAX_SLICES {
            return Err(Error::Internal(format!(
                "NVSHMEM: item {k} has no signal slot"
            )));
        }
        // SAFETY: the delivery slot is inside the symmetric signal array.
        unsafe {
            self.nv
                .signal(self.delivery_slot(self.rank, k), RAISED, to, stream)
        };
        Ok(())
    }
}

/// Transpose slices through NVSHMEM. With `direct` (NVSHMEM_SM), slices are packed by the
/// copy kernels straight into the peers' workspaces (addressed through `nvshmem_ptr`) and
/// only signalled; otherwise they are packed locally and put by the copy engine from the
/// library's stream.
///
/// Packs into peers run on the library's stream, on part of the SMs, so that this rank's
/// own cells and the unpacking of what arrives proceed on the user's stream meanwhile:
/// one stream would run the NVLink-bound packs and the memory-bound local copies one
/// after the other.
struct NvshmemSlices<'a> {
    /// Buffers, signals and operation number.
    sym: Symmetric<'a>,
    /// The side stream puts are enqueued on, and its events.
    pipe: &'a Pipe,
    /// The user's stream, on which slices are packed and unpacked.
    main: Stream,
    /// Handle rank (= PE) of each peer of the plan's sub-communicator.
    members: &'a [usize],
    /// This rank's index in `members`.
    me: usize,
    /// Byte offset, in each peer's workspace, of the slot this rank's chunk goes to.
    slots: Vec<u64>,
    /// Pack into peers' memory with the copy kernels (NVSHMEM_SM), enqueued by this
    /// mover on the library's stream; `None`: puts only.
    direct: Option<&'a dyn Mover>,
    /// Peers whose workspace was waited for (direct packing waits before the first pack).
    waited: RefCell<Vec<bool>>,
    /// One peer per unit (NVSHMEM_PL).
    per_peer: bool,
}

impl NvshmemSlices<'_> {
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.members.len()).filter(move |&p| p != self.me)
    }

    /// Whether slices for `peer` are packed straight into its memory (NVSHMEM_SM, peers
    /// this GPU can address); the others are put from the library's stream.
    fn mapped(&self, peer: usize) -> bool {
        self.direct.is_some()
            && self
                .sym
                .nv
                .peer_ptr(self.sym.work.ptr() as u64, self.members[peer])
                .is_some()
    }

    /// Enqueues the start of the operation on the user's stream (see the module doc).
    fn start(&self) -> Result<()> {
        let peers: Vec<usize> = self.others().map(|p| self.members[p]).collect();
        self.sym.announce_free(peers.into_iter(), self.main);
        if self.direct.is_some() {
            // Packs into peers start on the library's stream, after the input is written.
            self.pipe.ready(self.main)?;
        }
        Ok(())
    }
}

impl Exchange for NvshmemSlices<'_> {
    fn profile(&self) -> Profile {
        Profile {
            lands_in_output: false,
            per_peer: self.per_peer,
            ..Profile::sliced(MAX_SLICES)
        }
    }

    fn pack_into(&self, peer: usize) -> Option<Buf> {
        self.direct?;
        let pe = self.members[peer];
        let base = self.sym.nv.peer_ptr(self.sym.work.ptr() as u64, pe)?;
        let mut waited = self.waited.borrow_mut();
        if !waited[peer] {
            // The pack kernels write into the peer: after it has announced it is free.
            self.sym.wait_free(pe, self.pipe.side());
            waited[peer] = true;
        }
        // SAFETY: the peer's copy of the symmetric workspace, of this rank's size, mapped
        // into this context by NVSHMEM for the runtime's lifetime; writes are ordered after
        // the peer's free notice (above).
        Some(unsafe { Buf::new(base as usize as *mut u8, self.sym.work.len()) })
    }

    fn far_mover(&self) -> Option<&dyn Mover> {
        self.direct
    }

    fn ready(&self, u: usize) -> Result<()> {
        self.pipe.ready(self.main)?;
        if u == 0 {
            // Peers packed into directly are waited for before their first pack; the
            // others (NVSHMEM_SM too, for peers on other nodes) before the first put.
            for p in self.others().filter(|&p| !self.mapped(p)) {
                self.sym.wait_free(self.members[p], self.pipe.side());
            }
        }
        Ok(())
    }

    fn exchange(&self, _u: usize, k: usize, sends: &[Piece], _recvs: &[Piece]) -> Result<()> {
        for s in sends {
            let to = self.members[s.peer];
            if self.mapped(s.peer) {
                // Packed into the peer already: raise the signal after the pack kernels.
                self.sym.signal_item(to, k, self.pipe.side())?;
            } else {
                let at = self.slots[s.peer] + s.rel as u64;
                self.sym
                    .put(to, at, s.ptr as u64, s.len, k, self.pipe.side())?;
            }
        }
        Ok(())
    }

    fn arrived(&self, _u: usize, k: usize, recvs: &[Piece]) -> Result<()> {
        for r in recvs {
            self.sym.wait_item(self.members[r.peer], k, self.main)?;
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        // Every free notice is lowered once per operation, also where nothing was packed.
        let waited = self.waited.borrow();
        for p in self.others().filter(|&p| self.mapped(p) && !waited[p]) {
            self.sym.wait_free(self.members[p], self.main);
        }
        self.sym.nv.quiet(self.pipe.side());
        self.sym.nv.quiet(self.main);
        self.pipe.finish(self.main)
    }
}

/// Halo faces put into the neighbours' workspaces through NVSHMEM.
struct NvshmemFaces<'a> {
    /// Buffers, signals and operation number.
    sym: Symmetric<'a>,
    /// The side stream puts are enqueued on, and its events.
    pipe: &'a Pipe,
    /// The user's stream, on which faces are packed and unpacked.
    main: Stream,
    /// Handle ranks of the neighbours (left, right).
    neighbours: [Option<usize>; 2],
    /// Most slices per face (1 for NVSHMEM_BLOCKING: whole faces).
    slices: usize,
}

impl NvshmemFaces<'_> {
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        let me = self.sym.rank;
        let mut seen = Vec::new();
        self.neighbours.into_iter().flatten().filter(move |&r| {
            let fresh = r != me && !seen.contains(&r);
            seen.push(r);
            fresh
        })
    }

    /// Enqueues the start of the operation on the user's stream (see the module doc).
    fn start(&self) {
        self.sym.announce_free(self.others(), self.main);
    }
}

impl FaceExchange for NvshmemFaces<'_> {
    fn max_slices(&self) -> usize {
        self.slices
    }

    fn ready(&self, first: bool) -> Result<()> {
        self.pipe.ready(self.main)?;
        if first {
            for r in self.others() {
                self.sym.wait_free(r, self.pipe.side());
            }
        }
        Ok(())
    }

    fn deliver(&self, part: Buf, to: usize, at: i64, signal: usize) -> Result<()> {
        let at =
            u64::try_from(at).map_err(|_| Error::Internal(format!("NVSHMEM: face at {at}")))?;
        self.sym.put(
            to,
            at,
            part.ptr() as u64,
            part.len(),
            signal,
            self.pipe.side(),
        )
    }

    fn posted(&self) -> Result<()> {
        Ok(())
    }

    fn arrived(&self, from: usize, signal: usize) -> Result<()> {
        self.sym.wait_item(from, signal, self.main)
    }

    fn finish(&self) -> Result<()> {
        self.sym.nv.quiet(self.pipe.side());
        self.pipe.finish(self.main)
    }
}

/// The NVSHMEM buffers of an operation of this rank.
fn symmetric<'n>(cx: &Context<'_>, nv: &'n Nvshmem, sym: &SymmetricWork) -> Symmetric<'n> {
    Symmetric {
        nv,
        work: sym.work,
        signals: sym.signals,
        rank: cx.rank,
        nranks: cx.world.size(),
    }
}

/// NVSHMEM on device memory.
pub(super) struct NvshmemBackend;

impl Backend for NvshmemBackend {
    type TransposeHow = (Stream, Mode);
    /// The stream, and whole faces (NVSHMEM_BLOCKING).
    type HaloHow = (Stream, bool);
    const CAPTURE: Capture = Capture::Allowed;

    /// Slices are put on the library's stream.
    fn transpose_place(c: &TransposeCall<'_>, &(stream, _): &(Stream, Mode)) -> Place {
        Place::piped(stream, c.plan.npeers())
    }

    fn halo_place(_c: &HaloCall<'_>, &(stream, _): &(Stream, bool)) -> Place {
        Place::piped(stream, 1)
    }

    /// An NVSHMEM transpose: slices put into (or, NVSHMEM_SM, packed straight into) the peers'
    /// copies of the symmetric workspace, each signalled through NVSHMEM; every wait is on a
    /// stream. Uses the handle's symmetric workspace unless every rank passes the same
    /// `Handle.malloc` buffer as `work` (see [`crate::engine::workspace::Workspace::symmetric`]).
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        (stream, mode): (Stream, Mode),
    ) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let plan = c.plan;
        let nv = f.dev.nvshmem()?;
        // SAFETY: the workspace stays locked, and not grown again, until `release`.
        let sym = unsafe { ws.symmetric(&nv, &f.dev.device, cx.world, s.need, c.work)? };
        let pipe = f.pipe()?;
        // NVSHMEM_SM's packs into peers, on the library's stream beside the user's.
        let far = cx.device_mover(f.mover.kernels, pipe.side());
        far.background(true);
        let x = NvshmemSlices {
            sym: symmetric(cx, &nv, &sym),
            pipe,
            main: stream,
            members: &plan.members,
            me: plan.me,
            slots: peer_slots(plan, c.dtype.size() as i64, c.fields.count),
            direct: (mode == Mode::Packed).then_some(&far as &dyn Mover),
            waited: RefCell::new(vec![false; plan.npeers()]),
            per_peer: mode == Mode::PerPeer,
        };
        let span = || pipe.span_ms();
        s.reported(sym.work, c.group, CommTime::Own(&span), |run, _| {
            x.start()?;
            run.run(&x, cx.slice_bytes)
        })
    }

    /// An NVSHMEM halo update: faces put into the neighbours' symmetric workspaces, each
    /// signalled through NVSHMEM (`blocking`, NVSHMEM_BLOCKING: whole faces).
    fn halo(
        s: &Stage<'_, HaloCall<'_>>,
        ws: &mut Workspace,
        (stream, blocking): (Stream, bool),
    ) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let nv = f.dev.nvshmem()?;
        // SAFETY: the workspace stays locked, and not grown again, until `release`.
        let sym = unsafe { ws.symmetric(&nv, &f.dev.device, cx.world, s.need, c.work)? };
        let pipe = f.pipe()?;
        let x = NvshmemFaces {
            sym: symmetric(cx, &nv, &sym),
            pipe,
            main: stream,
            neighbours: c.plan.neighbours,
            slices: if blocking { 1 } else { MAX_SLICES / 2 },
        };
        let span = || pipe.span_ms();
        s.reported(sym.work, cx.world, CommTime::Own(&span), |run, _| {
            x.start();
            run.direct(&x, cx.slice_bytes)
        })
    }
}
