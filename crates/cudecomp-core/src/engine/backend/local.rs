//! Operations where nothing leaves the rank, whatever the grid's backend: a transpose
//! within a one-member group, a halo update whose only neighbour is this rank (periodic
//! wrap). Their copies alone run, on the host or on the stream; no communicator is
//! called, so on GPUs they can be captured into CUDA graphs.

use super::{Backend, Op};
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::CommTime;
use crate::engine::device::lock;
use crate::engine::exchange::{Exchange, Piece, Profile};
use crate::engine::route::Capture;
use crate::engine::Exec;
use crate::mem::{Buf, Mover};
use crate::perf::Clock;
use crate::{Error, Result};

/// The exchange of a pipeline with no peers: it is never asked to move anything.
struct Nothing;

impl Exchange for Nothing {
    fn profile(&self) -> Profile {
        Profile::whole_chunks()
    }

    fn exchange(&self, u: usize, _slice: usize, _sends: &[Piece], _recvs: &[Piece]) -> Result<()> {
        Err(Error::Internal(format!(
            "a transpose within one rank asked to exchange unit {u}"
        )))
    }

    fn arrived(&self, _u: usize, _slice: usize, _recvs: &[Piece]) -> Result<()> {
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }
}

/// Operations whose data stays on this rank.
pub(super) struct LocalBackend;

impl Backend for LocalBackend {
    type TransposeHow = Exec;
    type HaloHow = Exec;
    const CAPTURE: Capture = Capture::Allowed;

    /// A transpose within one rank (in place, its own chunk goes through the workspace).
    fn transpose(op: Op<'_, TransposeCall<'_>>, exec: Exec) -> Result<()> {
        let Op {
            cx,
            call: c,
            need,
            capturing,
            sample,
        } = op;
        match exec {
            Exec::Host => {
                let mut ws = lock(&cx.slot.ws);
                // SAFETY: the workspace stays locked, and not grown again, until the end.
                let work = c.work.unwrap_or_else(|| unsafe { ws.host(need) });
                let mover = cx.host_mover().streaming_into(c.output);
                let run = c.run(&mover, work);
                cx.reported(&Clock::Host, c.group, sample, CommTime::PerCall, |_| {
                    run.run(&Nothing, cx.slice_bytes)
                })
            }
            Exec::Device(stream) => cx.on_device(stream, None, capturing, |f, ws| {
                let work = match c.work {
                    Some(w) => w,
                    // SAFETY: the workspace stays locked, and not grown again, until `release`.
                    None => unsafe { ws.device(&f.dev.device, need, stream)? },
                };
                let run = c.run(&f.mover, work);
                let clock = Clock::Device(stream);
                cx.reported(&clock, c.group, sample, CommTime::PerCall, |_| {
                    run.run(&Nothing, cx.slice_bytes)
                })
            }),
        }
    }

    /// A halo update whose faces wrap onto this rank: no workspace.
    fn halo(op: Op<'_, HaloCall<'_>>, exec: Exec) -> Result<()> {
        let Op {
            cx,
            call: c,
            capturing,
            sample,
            ..
        } = op;
        let kernels;
        let (mover, clock): (Box<dyn Mover>, Clock) = match exec {
            Exec::Host => (Box::new(cx.host_mover()), Clock::Host),
            Exec::Device(stream) => {
                kernels = cx.kernels(capturing)?.1;
                (
                    Box::new(cx.device_mover(&kernels, stream)),
                    Clock::Device(stream),
                )
            }
        };
        let run = c.run(mover.as_ref(), Buf::empty());
        cx.reported(&clock, cx.world, sample, CommTime::PerCall, |t| run.run(t))
    }
}
