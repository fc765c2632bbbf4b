//! Operations where nothing leaves the rank, whatever the grid's backend: a transpose
//! within a one-member group, a halo update whose only neighbour is this rank (periodic
//! wrap). Their copies alone run, on the host or on the stream; no communicator is
//! called, so on GPUs they can be captured into CUDA graphs.

use super::{Backend, Place, Stage};
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::CommTime;
use crate::engine::exchange::{Exchange, Piece, Profile};
use crate::engine::route::Capture;
use crate::engine::workspace::Workspace;
use crate::engine::Exec;
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

    /// Out of place, the rank's own chunk is copied straight into the output: the handle's
    /// workspace is not touched (a 1x1 grid's transposes then take no memory beside their
    /// arrays). In place it goes through the workspace.
    fn transpose_place(c: &TransposeCall<'_>, exec: &Exec) -> Place {
        if c.in_place() {
            Place::on(*exec)
        } else {
            Place::Copies(*exec)
        }
    }

    /// Faces that wrap onto this rank need no workspace.
    fn halo_place(_c: &HaloCall<'_>, exec: &Exec) -> Place {
        Place::Copies(*exec)
    }

    /// A transpose within one rank: the workspace, where its place has one.
    fn transpose(s: &Stage<'_, TransposeCall<'_>>, ws: &mut Workspace, _: Exec) -> Result<()> {
        s.reported(s.work(ws)?, s.call.group, CommTime::PerCall, |run, _| {
            run.run(&Nothing, s.cx.slice_bytes)
        })
    }

    /// A halo update whose faces wrap onto this rank.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, _: Exec) -> Result<()> {
        s.reported(s.work(ws)?, s.cx.world, CommTime::PerCall, |run, t| {
            run.run(t)
        })
    }
}
