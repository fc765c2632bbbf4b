//! What the handle hands the engine: one operation, its plan, buffers and steps.

use crate::comm::Communicator;
use crate::config::{DataType, HaloBackend, TransposeBackend};
use crate::cuda::{EventRef, Stream};
use crate::engine::halo::HaloRun;
use crate::engine::pipeline::{Batch, TransposeRun};
use crate::geometry::Axis;
use crate::mem::{Buf, Mover};
use crate::plan::{HaloPlan, Layout, TransposePlan};
use crate::Result;

/// One transpose: its plan and buffers.
pub(crate) struct TransposeCall<'a> {
    /// This rank's plan of the transpose.
    pub plan: &'a TransposePlan,
    /// The grid's transpose backend.
    pub backend: TransposeBackend,
    /// The plan's sub-communicator (its ranks are the plan's peer indices).
    pub group: &'a dyn Communicator,
    /// Elements of the grid's transpose workspace (`get_transpose_workspace_size()`).
    pub workspace_elems: i64,
    /// Element type of both arrays.
    pub dtype: DataType,
    /// The input pencil; the same start address as `output` means in place.
    pub input: Buf,
    /// The output pencil.
    pub output: Buf,
    /// The caller's workspace (`None`: the handle's).
    pub work: Option<Buf>,
    /// Device operations: where the input is written, and the output wanted, in steps
    /// (none: the stream alone orders them).
    pub steps: TransposeSteps<'a>,
    /// Copy this rank's own cells (see [`crate::handle::grid::TransposeOp::own_cells`]).
    pub own_cells: bool,
    /// The fields moved together (see [`crate::handle::grid::TransposeOp::fields`]).
    pub fields: Batch,
}

/// A device transpose's array written, or wanted, in steps along an axis: input steps
/// are the caller's (after each mark's event, the input's cells of index `0..planes`
/// along `axis` are written, and the operation may move them before the rest); output
/// steps are the operation's (it records each mark's event on its stream once the
/// output's cells `0..planes` are written, so that other streams can start on them).
#[derive(Clone, Copy, Debug, Default)]
pub struct Steps<'a> {
    /// The steps, in increasing order of `planes`.
    pub marks: &'a [ReadyMark],
    /// The global axis the steps run along (`None`: the array's slowest in memory).
    pub axis: Option<Axis>,
}

impl Steps<'_> {
    /// The global axis of the steps in the array's layout `l`.
    pub fn axis_in(&self, l: &Layout) -> Axis {
        self.axis
            .unwrap_or_else(|| (0..3).max_by_key(|&g| l.strides[g]).unwrap_or(2))
    }

    /// Makes `stream` wait for every step: for routes that move the input as a whole.
    pub(crate) fn wait_all(&self, stream: Stream) -> Result<()> {
        self.marks.iter().try_for_each(|m| m.event.wait_on(stream))
    }

    /// Records every step's event on `stream`: for routes that write the output as a whole.
    pub(crate) fn record_all(&self, stream: Stream) -> Result<()> {
        self.marks.iter().try_for_each(|m| m.event.record(stream))
    }
}

/// Where a transpose's input is written in steps (`input_ready`) and where its output is
/// wanted in steps (`output_ready`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TransposeSteps<'a> {
    /// The input's steps, events the caller recorded.
    pub input: Steps<'a>,
    /// The output's steps, events the operation records.
    pub output: Steps<'a>,
}

/// One step of a transpose's input or output (see [`Steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyMark {
    /// Recorded once the step is written: by the caller (input), by the operation (output).
    pub event: EventRef,
    /// Cells `0..planes` along the steps' axis of the array (halo cells counted).
    pub planes: i64,
}

/// One halo update: its plan and buffers.
pub(crate) struct HaloCall<'a> {
    /// This rank's plan of the update.
    pub plan: &'a HaloPlan,
    /// The grid's halo backend.
    pub backend: HaloBackend,
    /// Elements of this rank's halo workspace (`get_halo_workspace_size()`).
    pub workspace_elems: i64,
    /// Element type of the array.
    pub dtype: DataType,
    /// The pencil whose halos are updated, in place.
    pub data: Buf,
    /// The caller's workspace (`None`: the handle's).
    pub work: Option<Buf>,
    /// The fields updated together (the array's batch of pencils).
    pub fields: Batch,
}

impl TransposeCall<'_> {
    /// Whether the output is written over the input.
    pub(crate) fn in_place(&self) -> bool {
        self.input.ptr() == self.output.ptr()
    }

    /// The pipeline of this call with `mover` and `work`.
    pub(crate) fn run<'a>(&'a self, mover: &'a dyn Mover, work: Buf) -> TransposeRun<'a> {
        TransposeRun {
            plan: self.plan,
            elem: self.dtype.size(),
            mover,
            input: self.input,
            output: self.output,
            work,
            own_cells: self.own_cells,
            fields: self.fields,
        }
    }
}

impl HaloCall<'_> {
    /// The pipeline of this call with `mover` and `work`.
    pub(crate) fn run<'a>(&'a self, mover: &'a dyn Mover, work: Buf) -> HaloRun<'a> {
        HaloRun {
            plan: self.plan,
            backend: self.backend,
            elem: self.dtype.size(),
            mover,
            data: self.data,
            work,
            fields: self.fields,
        }
    }
}
