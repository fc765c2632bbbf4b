//! MPI (MPI_P2P, MPI_P2P_PL, MPI_A2A transposes; MPI and MPI_BLOCKING halos) on host
//! memory, and on device memory when MPI reads device pointers (CUDA-aware MPI). Chunks
//! move whole: MPI cuts messages over 1 GiB into pieces itself ([`post_pieces`]).

use super::{Backend, Place, Stage};
use crate::engine::route::{Capture, MPI_ON_HOST};
use std::cell::{Cell, RefCell};

use crate::comm::hooked::{Hook, Hooked};
use crate::comm::{post_pieces, Request, Transport, Way};
use crate::cuda::{synchronize, Stream};
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::CommTime;
use crate::engine::exchange::{Exchange, Piece, Profile};
use crate::engine::route::Messages;
use crate::engine::workspace::Workspace;
use crate::engine::Exec;
use crate::Result;

/// Chunks of one field this large or larger make a batch on host memory go field after
/// field (`TransposeRun::fields_apart`): a message of every field costs less than one per
/// field only while messages are small.
const HOST_FIELDS_APART_BYTES: i64 = 256 << 10;

/// Tag of a transpose's messages (pieces of one message take the tags after it).
const TAG_TRANSPOSE: i32 = 0;

/// A transpose's chunks through a message transport (MPI on host memory, CUDA-aware or
/// host-staged MPI on device memory): each chunk is one message, or all go in one
/// all-to-all.
pub(super) struct MessageExchange<'a> {
    transport: &'a dyn Transport,
    how: Messages,
    /// Receives posted, per unit.
    recvs: RefCell<Vec<Vec<Request>>>,
    sends: RefCell<Vec<Request>>,
    /// All-to-all: every unit's pieces, sent and received together once all are posted.
    collected: RefCell<(Vec<Piece>, Vec<Piece>)>,
    /// Peers of the group (the all-to-all's counts).
    npeers: usize,
}

impl<'a> MessageExchange<'a> {
    /// Chunks among the `npeers` members of `transport`'s group, moved as `how` says.
    pub(super) fn new(transport: &'a dyn Transport, how: Messages, npeers: usize) -> Self {
        MessageExchange {
            transport,
            how,
            recvs: RefCell::new(Vec::new()),
            sends: RefCell::new(Vec::new()),
            collected: RefCell::new((Vec::new(), Vec::new())),
            npeers,
        }
    }

    /// One `MPI_Alltoallv` over the collected pieces (counts and displacements in bytes
    /// from the lowest address of each side; the route keeps them within MPI's `int`).
    fn alltoall(&self) -> Result<()> {
        let (sends, recvs) = &*self.collected.borrow();
        // A valid address for a side with nothing to move.
        let empty = [0u8; 1];
        let base = |ps: &[Piece]| {
            ps.iter()
                .map(|p| p.ptr)
                .min()
                .unwrap_or(empty.as_ptr().cast_mut())
        };
        let (sbase, rbase) = (base(sends), base(recvs));
        let table = |ps: &[Piece], b: *mut u8| {
            let mut counts = vec![0usize; self.npeers];
            let mut displs = vec![0usize; self.npeers];
            for p in ps {
                counts[p.peer] = p.len;
                displs[p.peer] = p.ptr as usize - b as usize;
            }
            (counts, displs)
        };
        let (sc, sd) = table(sends, sbase);
        let (rc, rd) = table(recvs, rbase);
        // SAFETY: every piece lies in one of the operation's buffers (checked when it was
        // cut), all sent pieces in one and all received pieces in one, so each
        // (displacement, count) range from its base stays inside that buffer.
        unsafe { self.transport.alltoallv(sbase, &sc, &sd, rbase, &rc, &rd) }
    }
}

impl Exchange for MessageExchange<'_> {
    fn profile(&self) -> Profile {
        Profile {
            per_peer: self.how == Messages::Pipelined,
            ..Profile::whole_chunks()
        }
    }

    fn exchange(&self, u: usize, _slice: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()> {
        if self.how == Messages::AllToAll {
            let mut c = self.collected.borrow_mut();
            c.0.extend_from_slice(sends);
            c.1.extend_from_slice(recvs);
            return Ok(());
        }
        let mut all = self.recvs.borrow_mut();
        all.resize_with(u + 1, Vec::new);
        for r in recvs {
            // SAFETY: the piece lies in the operation's output or workspace, which outlive
            // the exchange (waited for in `arrived`).
            unsafe {
                post_pieces(
                    self.transport,
                    Way::Receive,
                    r.ptr,
                    r.len,
                    r.peer,
                    TAG_TRANSPOSE,
                    &mut all[u],
                )?
            };
        }
        let mut out = self.sends.borrow_mut();
        for s in sends {
            // SAFETY: the piece lies in the operation's input or workspace, which outlive
            // the exchange (waited for in `finish`).
            unsafe {
                post_pieces(
                    self.transport,
                    Way::Send,
                    s.ptr,
                    s.len,
                    s.peer,
                    TAG_TRANSPOSE,
                    &mut out,
                )?
            };
        }
        Ok(())
    }

    fn posted(&self) -> Result<()> {
        match self.how {
            Messages::AllToAll => self.alltoall(),
            _ => Ok(()),
        }
    }

    fn arrived(&self, u: usize, _slice: usize, _recvs: &[Piece]) -> Result<()> {
        match self.recvs.borrow_mut().get_mut(u) {
            Some(reqs) => self.transport.wait_all(reqs),
            None => Ok(()),
        }
    }

    fn finish(&self) -> Result<()> {
        self.transport.wait_all(&mut self.sends.borrow_mut())
    }
}

/// Drains a stream once, before the first message of an operation: the pack kernels, and
/// anything the caller enqueued before, must be done before MPI touches the data.
pub(super) struct StreamFence {
    stream: Stream,
    fenced: Cell<bool>,
}

impl StreamFence {
    /// A fence for one operation on `stream`.
    pub(super) fn new(stream: Stream) -> Self {
        StreamFence {
            stream,
            fenced: Cell::new(false),
        }
    }
}

impl Hook for StreamFence {
    fn before_post(&self) -> Result<()> {
        if !self.fenced.replace(true) {
            synchronize(self.stream)?;
        }
        Ok(())
    }

    /// Device pointers go straight to CUDA-aware MPI.
    fn cuda_aware(&self, _inner: bool) -> bool {
        true
    }
}

/// CUDA-aware MPI for one operation on `stream`: device pointers go straight to MPI once
/// the stream is drained.
fn cuda_aware_mpi(inner: &dyn Transport, stream: Stream) -> Hooked<'_, StreamFence> {
    Hooked::new(inner, StreamFence::new(stream))
}

/// MPI on host memory.
pub(super) struct HostMpiBackend;

impl Backend for HostMpiBackend {
    type TransposeHow = Messages;
    type HaloHow = ();
    const CAPTURE: Capture = Capture::Refused(MPI_ON_HOST);

    fn transpose_place(_c: &TransposeCall<'_>, _: &Messages) -> Place {
        Place::Host
    }

    fn halo_place(_c: &HaloCall<'_>, (): &()) -> Place {
        Place::Host
    }

    /// A transpose of host memory through MPI.
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        how: Messages,
    ) -> Result<()> {
        let c = s.call;
        s.reported(s.work(ws)?, c.group, CommTime::PerCall, |run, t| {
            run.fields_apart(HOST_FIELDS_APART_BYTES, |one| {
                let x = MessageExchange::new(t, how, c.plan.npeers());
                one.run(&x, s.cx.slice_bytes)
            })
        })
    }

    /// A halo update of host memory through MPI.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, (): ()) -> Result<()> {
        s.reported(s.work(ws)?, s.cx.world, CommTime::PerCall, |run, t| {
            run.run(t)
        })
    }
}

/// CUDA-aware MPI on device memory.
pub(super) struct DeviceMpiBackend;

impl Backend for DeviceMpiBackend {
    type TransposeHow = (Stream, Messages);
    type HaloHow = Stream;
    const CAPTURE: Capture = Capture::Refused(MPI_ON_HOST);

    fn transpose_place(_c: &TransposeCall<'_>, &(stream, _): &(Stream, Messages)) -> Place {
        Place::on(Exec::Device(stream))
    }

    fn halo_place(_c: &HaloCall<'_>, &stream: &Stream) -> Place {
        Place::on(Exec::Device(stream))
    }

    /// A transpose of device memory through a CUDA-aware MPI.
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        (stream, how): (Stream, Messages),
    ) -> Result<()> {
        let c = s.call;
        let t = cuda_aware_mpi(c.group, stream);
        s.reported(s.work(ws)?, &t, CommTime::PerCall, |run, t| {
            let x = MessageExchange::new(t, how, c.plan.npeers());
            run.run(&x, s.cx.slice_bytes)
        })
    }

    /// A halo update of device memory through a CUDA-aware MPI.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, stream: Stream) -> Result<()> {
        let t = cuda_aware_mpi(s.cx.world, stream);
        s.reported(s.work(ws)?, &t, CommTime::PerCall, |run, t| run.run(t))
    }
}
