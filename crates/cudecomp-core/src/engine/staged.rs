//! Sliced transposes over MPI without CUDA support (see [`TransposeRun::sliced`]): every
//! slice goes device → page-locked host memory on the library's stream, through MPI, and
//! host → device on the user's stream. Slices overlap the two copies with MPI's own: while
//! MPI moves slice `k`, the copy engines bring slice `k + 1` down and put slice `k - 1`
//! back, and the user's stream unpacks it.
//!
//! [`TransposeRun::sliced`]: crate::engine::transpose::TransposeRun::sliced

use std::cell::{Cell, RefCell};
use std::time::Instant;

use crate::comm::{post_pieces, Request, Transport, Way};
use crate::cuda::transport::Arena;
use crate::cuda::{copy_to_device, copy_to_host, Stream};
use crate::engine::exchange::{Piece, SliceExchange};
use crate::engine::streamed::Pipe;
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
pub struct StagedSlices<'a> {
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
    pub waited_ms: Cell<f64>,
}

/// Tag of slice `k`: room for the pieces [`post_pieces`] cuts a slice into.
fn tag(k: usize) -> i32 {
    (k * 64) as i32
}

impl<'a> StagedSlices<'a> {
    /// Slices of one operation on `main`, staged through `arena` (the caller waits for
    /// the previous operation that used it before this one starts).
    pub fn new(mpi: &'a dyn Transport, pipe: &'a Pipe, main: Stream, arena: Arena) -> Self {
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

impl SliceExchange for StagedSlices<'_> {
    fn lands_in_output(&self) -> bool {
        true
    }

    fn max_slices(&self) -> usize {
        MAX_SLICES
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

    fn posted(&self) -> Result<()> {
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
