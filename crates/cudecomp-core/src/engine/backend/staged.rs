//! MPI on device memory when MPI cannot read device pointers: every message goes through
//! page-locked host memory. MPI_P2P and MPI_P2P_PL transposes run one path, sliced
//! ([`StagedSlices`]): every slice goes device → host on the library's stream, through
//! MPI, and host → device on the user's stream, so that while MPI moves slice `k` the copy
//! engines bring slice `k + 1` down and put slice `k - 1` back. Slices must be numbered
//! alike on every rank, so the pipeline cannot step peer by peer, and both backends are
//! the same path (the autotuner times it once). MPI_A2A transposes and the halo updates
//! stage whole messages ([`StagedMpi`]).

use super::{Backend, Place, Stage};
use crate::engine::route::{Capture, MPI_ON_HOST};
use std::cell::{Cell, RefCell};
use std::time::Instant;

use super::mpi::{MessageExchange, StreamFence};
use crate::comm::hooked::Hook;
use crate::comm::{post_pieces, Request, Transport, Way};
use crate::cuda::{copy_to_device, copy_to_host, synchronize, Stream};
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::CommTime;
use crate::engine::exchange::{Exchange, Piece, Profile};
use crate::engine::pipe::Pipe;
use crate::engine::route::{Messages, Staging};
use crate::engine::workspace::Workspace;
use crate::engine::Exec;
use crate::plan::MAX_SLICES;
use crate::{Error, Result};

/// A slice staged in host memory, waiting for its device → host copy before it is sent.
struct Outgoing {
    host: *mut u8,
    len: usize,
    peer: usize,
}

/// A slice received into host memory, copied to `device` once it is there.
struct Incoming {
    host: *mut u8,
    device: u64,
    len: usize,
    requests: Vec<Request>,
}

/// Slices through host-staged MPI. Every rank numbers its units alike (unit `k` holds
/// slice `k` of every chunk: the pipeline must not be per peer), so a rank that has sent
/// everything up to unit `k + 1` and waits for unit `k` never waits on a peer that waits
/// for it.
struct StagedSlices<'a> {
    /// Host MPI over the plan's sub-communicator.
    mpi: &'a dyn Transport,
    pipe: &'a Pipe,
    main: Stream,
    arena: Arena,
    /// Per unit: slices copied down (or being copied) and not yet sent.
    outgoing: RefCell<Vec<Vec<Outgoing>>>,
    /// Units whose slices have been handed to MPI.
    sent_units: Cell<usize>,
    sends: RefCell<Vec<Request>>,
    /// Per unit: receives posted into the arena.
    incoming: RefCell<Vec<Vec<Incoming>>>,
    /// Milliseconds spent waiting in MPI (the report's communication time).
    waited_ms: Cell<f64>,
}

/// Tag of slice `k`: room for the pieces [`post_pieces`] cuts a slice into.
fn tag(k: usize) -> i32 {
    (k * 64) as i32
}

impl<'a> StagedSlices<'a> {
    /// Slices of one operation on `main`, staged through `arena` (the caller waits for
    /// the previous operation that used it before this one starts).
    fn new(mpi: &'a dyn Transport, pipe: &'a Pipe, main: Stream, arena: Arena) -> Self {
        StagedSlices {
            mpi,
            pipe,
            main,
            arena,
            outgoing: RefCell::new(Vec::new()),
            sent_units: Cell::new(0),
            sends: RefCell::new(Vec::new()),
            incoming: RefCell::new(Vec::new()),
            waited_ms: Cell::new(0.0),
        }
    }

    /// Hands units up to `upto` (inclusive) to MPI, each once its copy to the host is done.
    fn send_through(&self, upto: usize) -> Result<()> {
        let outgoing = self.outgoing.borrow();
        let mut sends = self.sends.borrow_mut();
        while self.sent_units.get() <= upto && self.sent_units.get() < outgoing.len() {
            let u = self.sent_units.get();
            self.pipe.done(u)?.synchronize()?;
            for o in &outgoing[u] {
                // SAFETY: the arena slice holds the slice's bytes (copied down, waited for
                // above) and stays untouched until the sends complete in `finish`.
                unsafe {
                    post_pieces(
                        self.mpi,
                        Way::Send,
                        o.host,
                        o.len,
                        o.peer,
                        tag(u),
                        &mut sends,
                    )?
                };
            }
            self.sent_units.set(u + 1);
        }
        Ok(())
    }

    fn timed<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let r = f();
        self.waited_ms
            .set(self.waited_ms.get() + t.elapsed().as_secs_f64() * 1e3);
        r
    }
}

impl Exchange for StagedSlices<'_> {
    fn profile(&self) -> Profile {
        Profile::sliced(MAX_SLICES)
    }

    fn ready(&self, _u: usize) -> Result<()> {
        self.pipe.ready(self.main)
    }

    fn exchange(&self, u: usize, k: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()> {
        if u != k {
            return Err(Error::Internal(format!(
                "staged MPI slices need unit k to be slice k (unit {u}, slice {k})"
            )));
        }
        let mut incoming = Vec::with_capacity(recvs.len());
        for r in recvs {
            let host = self.arena.take(r.len)?;
            let mut requests = Vec::new();
            // SAFETY: a fresh arena slice of `r.len` bytes, valid until the operation ends.
            unsafe {
                post_pieces(
                    self.mpi,
                    Way::Receive,
                    host,
                    r.len,
                    r.peer,
                    tag(k),
                    &mut requests,
                )?
            };
            incoming.push(Incoming {
                host,
                device: r.ptr as u64,
                len: r.len,
                requests,
            });
        }
        let mut outgoing = Vec::with_capacity(sends.len());
        for s in sends {
            let host = self.arena.take(s.len)?;
            // SAFETY: a fresh arena slice; the piece is a device range of `s.len` bytes.
            unsafe { copy_to_host(host, s.ptr as u64, s.len, self.pipe.side())? };
            outgoing.push(Outgoing {
                host,
                len: s.len,
                peer: s.peer,
            });
        }
        self.pipe.done(u)?.record(self.pipe.side())?;
        self.incoming.borrow_mut().push(incoming);
        self.outgoing.borrow_mut().push(outgoing);
        Ok(())
    }

    fn arrived(&self, u: usize, _k: usize, _recvs: &[Piece]) -> Result<()> {
        // One unit ahead: its copy to the host runs while MPI moves this one.
        self.timed(|| self.send_through(u + 1))?;
        let mut incoming = self.incoming.borrow_mut();
        let unit = incoming
            .get_mut(u)
            .ok_or_else(|| Error::Internal(format!("staged MPI: no unit {u}")))?;
        for i in unit.iter_mut() {
            self.timed(|| self.mpi.wait_all(&mut i.requests))?;
            // SAFETY: the arena slice holds the received bytes and stays untouched until the
            // stream has drained (the next operation waits for it).
            unsafe { copy_to_device(i.device, i.host, i.len, self.main)? };
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        self.timed(|| {
            self.send_through(usize::MAX - 1)?;
            self.mpi.wait_all(&mut self.sends.borrow_mut())
        })?;
        self.pipe.finish(self.main)
    }
}

/// A receive landing in staging memory, copied to the device when it completes.
#[derive(Clone, Copy)]
struct StagedReceive {
    request: Request,
    device: u64,
    host: *mut u8,
    len: usize,
}

/// Page-locked staging memory handed out front to back during one operation.
struct Arena {
    base: *mut u8,
    capacity: usize,
    used: Cell<usize>,
}

impl Arena {
    /// An arena over `base..base+capacity`.
    ///
    /// # Safety
    /// The range must be page-locked host memory that nothing else uses until the
    /// operation's streams have drained.
    unsafe fn new(base: *mut u8, capacity: usize) -> Self {
        Arena {
            base,
            capacity,
            used: Cell::new(0),
        }
    }

    /// The next `len` bytes.
    fn take(&self, len: usize) -> Result<*mut u8> {
        let at = self.used.get();
        if at + len > self.capacity {
            return Err(Error::Internal(format!(
                "staging arena of {} bytes exhausted (needs {})",
                self.capacity,
                at + len
            )));
        }
        self.used.set(at + len);
        // SAFETY: inside the arena (checked above).
        Ok(unsafe { self.base.add(at) })
    }
}

/// MPI without CUDA support: every message goes through a slice of a page-locked arena
/// (device → host before the send, host → device on the stream after the receive).
struct StagedMpi<'a> {
    inner: &'a dyn Transport,
    stream: Stream,
    arena: Arena,
    /// Waits once, before the first message, for the stream.
    fence: StreamFence,
    landings: RefCell<Vec<StagedReceive>>,
}

impl<'a> StagedMpi<'a> {
    /// Wraps a host MPI transport; `arena` must hold every message of the operation.
    fn new(inner: &'a dyn Transport, stream: Stream, arena: Arena) -> Self {
        StagedMpi {
            inner,
            stream,
            arena,
            fence: StreamFence::new(stream),
            landings: RefCell::new(Vec::new()),
        }
    }

    fn take(&self, len: usize) -> Result<*mut u8> {
        self.arena.take(len)
    }

    /// Copies completed receives to the device (enqueued on the stream).
    fn land(&self, done: &[Request]) -> Result<()> {
        let mut landings = self.landings.borrow_mut();
        let mut i = 0;
        while i < landings.len() {
            if done.contains(&landings[i].request) {
                let l = landings.swap_remove(i);
                // SAFETY: the staging slice holds the received bytes and stays untouched
                // until the stream drains (next operation's fence).
                unsafe { copy_to_device(l.device, l.host, l.len, self.stream)? };
            } else {
                i += 1;
            }
        }
        Ok(())
    }
}

impl Transport for StagedMpi<'_> {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        self.fence.before_post()?;
        let host = self.take(len)?;
        // SAFETY: `host` is a fresh arena slice; `buf` a device range of `len` bytes.
        unsafe { copy_to_host(host, buf as u64, len, self.stream)? };
        synchronize(self.stream)?;
        // SAFETY: the arena slice stays valid until the operation ends.
        unsafe { self.inner.isend(host, len, peer, tag) }
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        self.fence.before_post()?;
        let host = self.take(len)?;
        // SAFETY: as in `isend`.
        let request = unsafe { self.inner.irecv(host, len, peer, tag)? };
        self.landings.borrow_mut().push(StagedReceive {
            request,
            device: buf as u64,
            host,
            len,
        });
        Ok(request)
    }

    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        let before = reqs.to_vec();
        self.inner.wait_all(reqs)?;
        self.land(&before)
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        let before = reqs.to_vec();
        let done = self.inner.wait_any(reqs)?;
        if let Some(i) = done {
            self.land(&before[i..=i])?;
        }
        Ok(done)
    }

    unsafe fn alltoallv(
        &self,
        send: *const u8,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: *mut u8,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        self.fence.before_post()?;
        // Stage only the bytes between the first and the last chunk, shifting displacements.
        let range = |c: &[usize], d: &[usize]| {
            let used = c.iter().zip(d).filter(|(&c, _)| c > 0);
            let lo = used.clone().map(|(_, &d)| d).min().unwrap_or(0);
            let hi = used.map(|(&c, &d)| c + d).max().unwrap_or(0);
            (
                lo,
                hi.max(lo),
                d.iter().map(|&x| x.saturating_sub(lo)).collect::<Vec<_>>(),
            )
        };
        let (slo, shi, sd) = range(send_counts, send_displs);
        let (rlo, rhi, rd) = range(recv_counts, recv_displs);
        let (shost, rhost) = (self.take(shi - slo)?, self.take(rhi - rlo)?);
        // SAFETY: fresh arena slices mirroring the device ranges [send+slo, send+shi) and
        // [recv+rlo, recv+rhi).
        unsafe {
            copy_to_host(shost, send as u64 + slo as u64, shi - slo, self.stream)?;
            synchronize(self.stream)?;
            self.inner
                .alltoallv(shost, send_counts, &sd, rhost, recv_counts, &rd)?;
            // Only the received chunks: the gaps between them hold other data.
            for (&c, &d) in recv_counts.iter().zip(&rd) {
                if c > 0 {
                    copy_to_device(recv as u64 + (rlo + d) as u64, rhost.add(d), c, self.stream)?;
                }
            }
        }
        Ok(())
    }
}

/// The page-locked staging arena of `bytes` for this operation.
///
/// # Safety
/// The arena belongs to the locked workspace `ws`; the caller uses it only until the
/// operation's `release`, which the next user waits for.
unsafe fn arena(
    ws: &mut crate::engine::workspace::Workspace,
    device: &std::sync::Arc<crate::cuda::Device>,
    bytes: usize,
) -> Result<Arena> {
    let (base, cap) = ws.staging(device, bytes)?;
    // SAFETY: the caller's contract.
    Ok(unsafe { Arena::new(base, cap) })
}

/// MPI without CUDA support on device memory, through page-locked staging.
pub(super) struct StagedMpiBackend;

impl Backend for StagedMpiBackend {
    type TransposeHow = (Stream, Staging);
    type HaloHow = Stream;
    const CAPTURE: Capture = Capture::Refused(MPI_ON_HOST);

    /// Sliced staging copies on the library's stream.
    fn transpose_place(c: &TransposeCall<'_>, &(stream, staging): &(Stream, Staging)) -> Place {
        Place::Device {
            stream,
            pipe_peers: (staging == Staging::Sliced).then_some(c.plan.npeers()),
        }
    }

    fn halo_place(_c: &HaloCall<'_>, &stream: &Stream) -> Place {
        Place::on(Exec::Device(stream))
    }

    /// A transpose of device memory through host-staged MPI.
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        (stream, staging): (Stream, Staging),
    ) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let sliced = staging == Staging::Sliced;
        let fields = c.fields.count as usize;
        let staging_bytes =
            (c.plan.input.size + c.plan.output.size) as usize * fields * c.dtype.size();
        let work = s.work(ws)?;
        if sliced {
            // Receives write into the arena from the host as soon as they are posted: the
            // previous operation's copies out of it must be done.
            ws.quiesce()?;
        }
        // SAFETY: used only by this operation, before `release`.
        let arena = unsafe { arena(ws, &f.dev.device, staging_bytes)? };
        if sliced {
            let x = StagedSlices::new(c.group, f.pipe()?, stream, arena);
            let waited = || Ok(x.waited_ms.get());
            return s.reported(work, c.group, CommTime::Own(&waited), |run, _| {
                run.run(&x, cx.slice_bytes)
            });
        }
        let t = StagedMpi::new(c.group, stream, arena);
        s.reported(work, &t, CommTime::PerCall, |run, t| {
            let x = MessageExchange::new(t, Messages::AllToAll, c.plan.npeers());
            run.run(&x, cx.slice_bytes)
        })
    }

    /// A halo update of device memory through host-staged MPI.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, stream: Stream) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let staging_bytes =
            c.plan.workspace_elems() as usize * c.fields.count as usize * c.dtype.size();
        let work = s.work(ws)?;
        // SAFETY: used only by this operation, before `release`.
        let arena = unsafe { arena(ws, &f.dev.device, staging_bytes)? };
        let t = StagedMpi::new(cx.world, stream, arena);
        s.reported(work, &t, CommTime::PerCall, |run, t| run.run(t))
    }
}
