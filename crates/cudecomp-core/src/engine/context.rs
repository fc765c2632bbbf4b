//! What one operation of a grid runs with ([`Context`]): the grid's communicator, a
//! workspace slot, the GPU state, the settings, the performance report; and the frames
//! every backend's setup shares: movers, the device frame ([`Context::on_device`]) and
//! the report's timing ([`Context::reported`]).

use std::cell::Cell;
use std::sync::Arc;

use crate::comm::hooked::Hooked;
use crate::comm::{Communicator, Transport};
use crate::cuda::kernels::{DeviceMover, Kernels};
use crate::cuda::Stream;
use crate::engine::device::{lock, DeviceState};
use crate::engine::pipe::Pipe;
use crate::engine::workspace::{Slot, Workspace};
use crate::mem::{Buf, HostMover};
use crate::perf::{CallTimer, Clock, PerfReport, SampleKey};
use crate::settings::Settings;
use crate::{invalid, Error, Result};

/// What operations of one grid run with.
pub(crate) struct Context<'a> {
    /// The grid's duplicate of the handle's communicator (halo neighbours are its ranks;
    /// DIRECT maps its members; handle ranks and its ranks are the same).
    pub world: &'a dyn Communicator,
    /// This rank in `world`.
    pub rank: usize,
    /// The workspace and stream slot lent to this operation.
    pub slot: &'a Slot,
    /// The GPU state (`None` on a host handle).
    pub device: Option<&'a DeviceState>,
    /// The grid's performance report, when enabled.
    pub perf: Option<&'a PerfReport>,
    /// The handle's settings.
    pub settings: &'a Settings,
    /// Slice size of every pipeline (`None`: each exchange's own).
    pub slice_bytes: Option<i64>,
    /// Threads of host copies.
    pub host_threads: usize,
}

/// What the performance report records of one operation.
#[derive(Clone, Copy)]
pub(crate) struct PerfSample<'a> {
    /// The configuration the sample belongs to.
    pub key: &'a dyn Fn() -> SampleKey,
    /// Bytes the operation sends off-rank.
    pub bytes: f64,
}

/// How the performance report gets an operation's communication time.
#[derive(Clone, Copy)]
pub(crate) enum CommTime<'a> {
    /// Time inside each transport call (transports that complete on the host).
    PerCall,
    /// Read after the run from what it measured itself: pipelines must not be timed call
    /// by call, since each device timing waits for the stream and would serialise them.
    Own(&'a dyn Fn() -> Result<f64>),
}

/// Bytes of `elems` elements, after checking that the caller's workspace, if any, holds
/// them.
pub(crate) fn work_bytes(
    explicit: Option<Buf>,
    elems: i64,
    elem: usize,
    query: &str,
) -> Result<usize> {
    let need = usize::try_from(elems.max(0))
        .ok()
        .and_then(|n| n.checked_mul(elem))
        .ok_or_else(|| Error::InvalidUsage(format!("{query} = {elems} elements overflow")))?;
    match explicit {
        Some(w) if w.len() < need => invalid!(
            "work: expected at least {need} bytes ({query} = {elems} elements of {elem} bytes), got {} bytes",
            w.len()
        ),
        _ => Ok(need),
    }
}

/// A device operation's frame (see [`Context::on_device`]).
pub(crate) struct DeviceFrame<'a> {
    /// The GPU state.
    pub dev: &'a DeviceState,
    /// Copies on the user's stream.
    pub mover: DeviceMover<'a>,
    /// The library's second stream and its events, when asked for.
    pub pipe: Option<&'a Pipe>,
    /// The user's stream.
    pub stream: Stream,
}

impl DeviceFrame<'_> {
    /// The library's stream (InternalError when the frame was made without it).
    pub(crate) fn pipe(&self) -> Result<&Pipe> {
        self.pipe
            .ok_or_else(|| Error::Internal("no library stream".into()))
    }
}

impl Context<'_> {
    /// The GPU state (InternalError on a host handle).
    pub(crate) fn device(&self) -> Result<&DeviceState> {
        self.device
            .ok_or_else(|| Error::Internal("device operation on a host handle".into()))
    }

    /// Whether MPI takes device pointers on this handle.
    pub(crate) fn mpi_cuda_aware(&self) -> bool {
        self.device.is_some_and(|d| d.mpi_cuda_aware)
    }

    /// Host copies with this rank's threads.
    pub(crate) fn host_mover(&self) -> HostMover {
        HostMover::new(self.host_threads).streaming(self.settings.host_streaming)
    }

    /// Device copies of `kernels` on `stream`, using the settings' share of the SMs beside
    /// a transfer.
    pub(crate) fn device_mover<'k>(&self, kernels: &'k Kernels, stream: Stream) -> DeviceMover<'k> {
        DeviceMover::new(kernels, stream).background_share(self.settings.background_sm_percent)
    }

    /// The copy kernels of the handle's device, which is bound to this thread (inside a
    /// capture they must be loaded already).
    pub(crate) fn kernels(&self, capturing: bool) -> Result<(&DeviceState, Arc<Kernels>)> {
        let d = self.device()?;
        d.device.bind()?;
        let kernels = match capturing {
            true => Kernels::loaded(&d.device).ok_or_else(|| {
                Error::NotSupported("CUDA graph capture: the copy kernels are compiled by the first operation, which cannot happen inside a capture: run the operation once before capturing it".into())
            })?,
            false => Kernels::for_device(&d.device)?,
        };
        Ok((d, kernels))
    }

    /// Frame of every device operation: binds the device, builds the mover on `stream`,
    /// takes the library's stream when `pipe_peers` asks for one (room for that many
    /// peers) and the workspace, runs `f` and orders the next user of the workspace after
    /// this operation (`capturing`: inside a CUDA graph capture, with everything set up
    /// beforehand).
    pub(crate) fn on_device(
        &self,
        stream: Stream,
        pipe_peers: Option<usize>,
        capturing: bool,
        f: impl FnOnce(&DeviceFrame<'_>, &mut Workspace) -> Result<()>,
    ) -> Result<()> {
        let (dev, kernels) = self.kernels(capturing)?;
        let pipe = match pipe_peers {
            Some(n) => Some(self.slot.pipe(&dev.device, n, capturing)?),
            None => None,
        };
        let frame = DeviceFrame {
            dev,
            mover: self.device_mover(&kernels, stream),
            pipe: pipe.as_ref().and_then(|g| g.as_ref()),
            stream,
        };
        let mut ws = lock(&self.slot.ws);
        ws.begin(capturing);
        let result = f(&frame, &mut ws);
        ws.release(stream)?;
        result
    }

    /// Runs `f` on `transport`; with the performance report on, times it on `clock`
    /// (total, and the communication time `comm` says how to get) and records a sample.
    pub(crate) fn reported(
        &self,
        clock: &Clock,
        transport: &dyn Transport,
        sample: PerfSample<'_>,
        comm: CommTime<'_>,
        f: impl FnOnce(&dyn Transport) -> Result<()>,
    ) -> Result<()> {
        let Some(perf) = self.perf else {
            return f(transport);
        };
        let start = clock.mark()?;
        let timed = Hooked::new(
            transport,
            CallTimer {
                clock,
                comm_ms: Cell::new(0.0),
            },
        );
        let comm_ms = match comm {
            CommTime::PerCall => {
                f(&timed)?;
                timed.hook.comm_ms.get()
            }
            CommTime::Own(read) => {
                f(transport)?;
                read()?
            }
        };
        let total = clock.since(&start)?;
        // Host-timed waits of a device operation (host-staged slices) may begin while
        // earlier work still holds the stream, before the operation's first event runs:
        // communication is part of the operation, so it is capped at its time.
        perf.record((sample.key)(), total, comm_ms.min(total), sample.bytes);
        Ok(())
    }
}
