//! The frame every backend operation runs in, set up once here for all modules: where it
//! runs ([`Place`]: the host with the handle's workspace locked, or a stream with the
//! device workspace ordered after its last use and, when asked, the library's stream),
//! the copies it makes (the host's threads or the stream's kernels), its clock, and the
//! end of every operation: its pipeline over the workspace a module chose and the
//! transport it moves through, timed when the performance report is on
//! ([`Stage::reported`]). A module only chooses its workspace and builds its exchange.

use crate::comm::Transport;
use crate::cuda::Stream;
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::{CommTime, Context, DeviceFrame, PerfSample};
use crate::engine::device::lock;
use crate::engine::halo::HaloRun;
use crate::engine::pipeline::TransposeRun;
use crate::engine::workspace::Workspace;
use crate::engine::Exec;
use crate::mem::{Buf, HostMover, Mover};
use crate::perf::Clock;
use crate::{Error, Result};

/// One operation as the dispatch hands it over, before its frame is set up.
#[derive(Clone, Copy)]
pub(super) struct Op<'a, C> {
    /// What the operation runs with.
    pub(super) cx: &'a Context<'a>,
    /// The operation.
    pub(super) call: &'a C,
    /// Workspace bytes it needs.
    pub(super) need: usize,
    /// Its stream is being captured into a CUDA graph.
    pub(super) capturing: bool,
    /// What the performance report records of it.
    pub(super) sample: PerfSample<'a>,
}

/// Where a backend module's operation runs.
#[derive(Clone, Copy, Debug)]
pub(super) enum Place {
    /// On the host, with the handle's workspace locked.
    Host,
    /// On `stream`, with the handle's workspace (the next user ordered after this
    /// operation) and, for `Some(n)` peers, the library's stream with room for them.
    Device {
        stream: Stream,
        pipe_peers: Option<usize>,
    },
    /// Copies alone, without the handle's workspace (faces that wrap onto this rank).
    Copies(Exec),
}

impl Place {
    /// On `stream`, beside the library's stream with room for `peers` peers.
    pub(super) fn piped(stream: Stream, peers: usize) -> Place {
        Place::Device {
            stream,
            pipe_peers: Some(peers),
        }
    }

    /// On the host, or on `exec`'s stream without the library's stream.
    pub(super) fn on(exec: Exec) -> Place {
        match exec {
            Exec::Host => Place::Host,
            Exec::Device(stream) => Place::Device {
                stream,
                pipe_peers: None,
            },
        }
    }
}

/// What a backend module's operation is: a transpose or a halo update.
pub(super) trait Call {
    /// Its pipeline over a mover and a workspace.
    type Run<'r>
    where
        Self: 'r;
    /// The caller's workspace, if it passed one.
    fn caller_work(&self) -> Option<Buf>;
    /// The host copies it makes with this rank's threads.
    fn host_mover(&self, cx: &Context<'_>) -> HostMover;
    /// Its pipeline with `mover` and `work`.
    fn pipeline<'r>(&'r self, mover: &'r dyn Mover, work: Buf) -> Self::Run<'r>;
}

impl Call for TransposeCall<'_> {
    type Run<'r>
        = TransposeRun<'r>
    where
        Self: 'r;

    fn caller_work(&self) -> Option<Buf> {
        self.work
    }

    /// Copies into the output stream past the caches: it is not read again here.
    fn host_mover(&self, cx: &Context<'_>) -> HostMover {
        cx.host_mover().streaming_into(self.output)
    }

    fn pipeline<'r>(&'r self, mover: &'r dyn Mover, work: Buf) -> TransposeRun<'r> {
        self.run(mover, work)
    }
}

impl Call for HaloCall<'_> {
    type Run<'r>
        = HaloRun<'r>
    where
        Self: 'r;

    fn caller_work(&self) -> Option<Buf> {
        self.work
    }

    fn host_mover(&self, cx: &Context<'_>) -> HostMover {
        cx.host_mover()
    }

    fn pipeline<'r>(&'r self, mover: &'r dyn Mover, work: Buf) -> HaloRun<'r> {
        self.run(mover, work)
    }
}

/// One operation inside its frame: what a backend module sets its exchange up with.
pub(super) struct Stage<'s, C> {
    /// What the operation runs with.
    pub(super) cx: &'s Context<'s>,
    /// The operation.
    pub(super) call: &'s C,
    /// Workspace bytes it needs.
    pub(super) need: usize,
    /// Its copies: the host's threads, or kernels on the user's stream.
    pub(super) mover: &'s dyn Mover,
    /// The device's frame (`None` on the host).
    frame: Option<&'s DeviceFrame<'s>>,
    /// It runs with the handle's workspace (not copies alone, [`Place::Copies`]).
    workspace: bool,
    sample: PerfSample<'s>,
    clock: Clock,
}

impl<'s, C: Call> Stage<'s, C> {
    /// The device's frame: its state, the user's stream and the library's stream.
    pub(super) fn device(&self) -> Result<&DeviceFrame<'_>> {
        self.frame
            .ok_or_else(|| Error::Internal("device operation framed on the host".into()))
    }

    /// The caller's `work`, else the handle's workspace of `need` bytes in the frame's
    /// memory; nothing where the place runs copies alone.
    pub(super) fn work(&self, ws: &mut Workspace) -> Result<Buf> {
        if !self.workspace {
            return Ok(Buf::empty());
        }
        if let Some(w) = self.call.caller_work() {
            return Ok(w);
        }
        match self.frame {
            // SAFETY: the frame keeps the workspace locked, and nothing grows it again,
            // until the operation ends.
            Some(f) => unsafe { ws.device(&f.dev.device, self.need, f.stream) },
            // SAFETY: as above.
            None => Ok(unsafe { ws.host(self.need) }),
        }
    }

    /// Runs `body` with the operation's pipeline over `work` and with `transport`; with
    /// the performance report on, times it on the frame's clock (the communication time
    /// as `comm` says) and records a sample.
    pub(super) fn reported(
        &self,
        work: Buf,
        transport: &dyn Transport,
        comm: CommTime<'_>,
        body: impl FnOnce(&C::Run<'s>, &dyn Transport) -> Result<()>,
    ) -> Result<()> {
        let (call, mover) = (self.call, self.mover);
        let run = call.pipeline(mover, work);
        self.cx
            .reported(&self.clock, transport, self.sample, comm, |t| body(&run, t))
    }
}

impl<'a, C> Op<'a, C> {
    /// The operation inside a frame with `mover`, on `clock`.
    fn staged<'s>(
        self,
        mover: &'s dyn Mover,
        frame: Option<&'s DeviceFrame<'s>>,
        workspace: bool,
        clock: Clock,
    ) -> Stage<'s, C>
    where
        'a: 's,
    {
        Stage {
            cx: self.cx,
            call: self.call,
            need: self.need,
            mover,
            frame,
            workspace,
            sample: self.sample,
            clock,
        }
    }
}

/// Sets up `op`'s frame at `place` and runs `body` in it with the workspace.
pub(super) fn framed<C: Call>(
    op: Op<'_, C>,
    place: Place,
    body: impl FnOnce(&Stage<'_, C>, &mut Workspace) -> Result<()>,
) -> Result<()> {
    let cx = op.cx;
    match place {
        Place::Host => {
            let mover = op.call.host_mover(cx);
            let mut ws = lock(&cx.slot.ws);
            body(&op.staged(&mover, None, true, Clock::Host), &mut ws)
        }
        Place::Device { stream, pipe_peers } => {
            cx.on_device(stream, pipe_peers, op.capturing, |f, ws| {
                body(
                    &op.staged(&f.mover, Some(f), true, Clock::Device(stream)),
                    ws,
                )
            })
        }
        // Nothing of the handle's workspace is touched: an empty one stands in for it.
        Place::Copies(Exec::Host) => {
            let mover = op.call.host_mover(cx);
            let stage = op.staged(&mover, None, false, Clock::Host);
            body(&stage, &mut Workspace::default())
        }
        Place::Copies(Exec::Device(stream)) => {
            let kernels = cx.kernels(op.capturing)?.1;
            let mover = cx.device_mover(&kernels, stream);
            let stage = op.staged(&mover, None, false, Clock::Device(stream));
            body(&stage, &mut Workspace::default())
        }
    }
}
