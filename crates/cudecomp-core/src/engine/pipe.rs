//! The library's second stream of a workspace slot ([`Pipe`]) and the events that order
//! it against the user's stream: exchanges that move data beside the packing (NCCL,
//! host-staged MPI, DIRECT and NVSHMEM on GPUs) enqueue their transfers on it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda::{Event, OwnedStream, Stream};
use crate::plan::MAX_SLICES;
use crate::{Error, Result};

/// The second stream of a handle and the events that order it against the user's stream.
pub(crate) struct Pipe {
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
    pub(crate) fn new() -> Result<Pipe> {
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
    pub(crate) fn side(&self) -> Stream {
        self.side.stream()
    }

    /// True when the units of a pipeline over `npeers` peers have their events.
    pub(crate) fn has_room(&self, npeers: usize) -> bool {
        self.done.len() >= npeers * MAX_SLICES
    }

    /// Makes room for the units of a pipeline over `npeers` peers.
    pub(crate) fn reserve(&mut self, npeers: usize) -> Result<()> {
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
    pub(crate) fn span_ms(&self) -> Result<f64> {
        self.span[1].synchronize()?;
        Ok(f64::from(self.span[0].elapsed_ms(&self.span[1])?))
    }

    pub(crate) fn done(&self, u: usize) -> Result<&Event> {
        self.done
            .get(u)
            .ok_or_else(|| Error::Internal(format!("pipeline unit {u} has no event")))
    }
}
