//! Engines execute plans. The route (`route.rs`) decides which backend runs an operation;
//! `backend/frame.rs` sets up the frame it asks for (host or stream, workspace, mover,
//! clock); the backend module (under `backend/`) chooses its share of the workspace and
//! builds its exchange, and the frame runs the one transpose pipeline (`pipeline.rs`,
//! interpreting the order of steps `schedule.rs` makes) or the halo pipeline (`halo.rs`),
//! which pack, hand slices or faces to the exchange, and unpack.

mod backend;
mod call;
mod context;
pub(crate) mod device;
mod exchange;
mod halo;
mod pipe;
mod pipeline;
mod route;
mod schedule;
pub(crate) mod workspace;

pub(crate) use backend::{single_copies, transpose, update_halos};
pub(crate) use call::{HaloCall, TransposeCall};
pub use call::{ReadyMark, Steps, TransposeSteps};
pub(crate) use context::Context;
pub(crate) use pipeline::Batch;

use crate::cuda::Stream;

/// Where an operation runs: on host memory (synchronously), or on device memory,
/// enqueued on a CUDA stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// Host buffers; the call returns when the operation is done.
    Host,
    /// Device buffers; work is ordered on the stream (MPI routes synchronise it).
    Device(Stream),
}

impl Exec {
    /// Words for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Exec::Host => "host memory",
            Exec::Device(_) => "CUDA device memory",
        }
    }
}
