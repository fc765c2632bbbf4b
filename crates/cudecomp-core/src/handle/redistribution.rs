//! Redistributions: a global array moved from one decomposition to another on the same
//! handle, in one exchange. Each side is a pencil of one of the handle's grids (any
//! process grid, pencil axis, layout, halos and padding) or a box per rank (a brick
//! decomposition; gather and scatter are the layouts where one rank holds everything).
//! The plan is an exchange plan of the same kind as a transpose's, between the two sides'
//! boxes, run by the same engine over the object's own communicator.

use crate::comm::allgather_words;
use crate::config::{DataType, HaloBackend, TransposeBackend};
use crate::engine::device::lock;
use crate::engine::{self, Batch, Exec, TransposeCall};
use crate::geometry::{align, Axis, Box3, PencilInfo};
use crate::handle::grid::GridDesc;
use crate::handle::runner::{batch_query, batch_words, Array, Runner};
use crate::handle::tiling::{box_words, check_tiling, unbox_words};
use crate::handle::Handle;
use crate::perf::Heading;
use crate::plan::{Side, TransposePlan};
use crate::{invalid, Error, Fields, Result};

/// One side of a redistribution, as this rank gives it.
#[derive(Clone, Copy)]
pub enum Distribution<'a> {
    /// The `axis`-pencil of `grid` (a grid of the same handle), with these halo cells on
    /// each side and padding after the cells of each global axis (X, Y, Z).
    Pencil {
        /// The grid descriptor.
        grid: &'a GridDesc,
        /// 0 (X), 1 (Y) or 2 (Z).
        axis: Axis,
        /// Halo cells on each side, per global axis.
        halo: [i64; 3],
        /// Padding cells after the cells, per global axis.
        padding: [i64; 3],
    },
    /// This rank's box of the global grid, stored densely with X fastest (no halos);
    /// a box with no cells holds nothing (its array is empty).
    Box(Box3),
}

impl Distribution<'_> {
    /// Words for messages.
    fn describe(&self) -> String {
        match self {
            Distribution::Pencil {
                grid,
                axis,
                halo,
                padding,
            } => format!(
                "the {}-pencil of grid {} (pdims {:?}, halo_extents {halo:?}, padding {padding:?})",
                ["X", "Y", "Z"][(*axis).min(2)],
                grid.serial(),
                grid.grid().pdims
            ),
            Distribution::Box(_) => "boxes".into(),
        }
    }

    /// What every rank must pass alike (a box differs per rank: its agreement is the
    /// tiling check).
    fn fields(&self, side: &str) -> Fields {
        match self {
            Distribution::Pencil {
                grid,
                axis,
                halo,
                padding,
            } => Fields::new()
                .with(&format!("{side} grid"), grid.serial())
                .with(&format!("{side} axis"), axis)
                .with(&format!("{side} halo_extents"), halo)
                .with(&format!("{side} padding"), padding),
            Distribution::Box(_) => Fields::new().with(&format!("{side} kind"), "boxes"),
        }
    }

    /// This rank's box, checked.
    fn own_box(&self, rank: usize, which: &str) -> Result<Box3> {
        match self {
            Distribution::Pencil {
                grid,
                axis,
                halo,
                padding,
            } => {
                if *axis > 2 {
                    invalid!("{which}: expected a pencil axis 0 (X), 1 (Y) or 2 (Z), got {axis}");
                }
                Ok(grid
                    .grid()
                    .pencil_info(*axis as i64, rank, *halo, *padding)?
                    .interior())
            }
            Distribution::Box(b) => {
                if b.lo.iter().any(|&l| l < 0) {
                    invalid!("{which}: expected a box with lo >= 0, got lo {:?}", b.lo);
                }
                let ends = (0..3).all(|g| b.lo[g].checked_add(b.len[g]).is_some());
                if b.cells().is_none() || !ends {
                    invalid!(
                        "{which}: a box of lo {:?} and extents {:?}: its end or number of cells does not fit in 64 bits",
                        b.lo,
                        b.len
                    );
                }
                Ok(normalized(*b))
            }
        }
    }

    /// Every rank's array on this side, `boxes` being every rank's box.
    fn arrays(&self, boxes: &[Box3]) -> Result<Vec<PencilInfo>> {
        match self {
            Distribution::Pencil {
                grid,
                axis,
                halo,
                padding,
            } => (0..boxes.len())
                .map(|r| grid.grid().pencil_info(*axis as i64, r, *halo, *padding))
                .collect(),
            Distribution::Box(_) => Ok(boxes.iter().map(PencilInfo::of_box).collect()),
        }
    }

    /// The pencil axis, where the side is a pencil.
    fn axis(&self) -> Option<Axis> {
        match self {
            Distribution::Pencil { axis, .. } => Some(*axis),
            Distribution::Box(_) => None,
        }
    }

    /// The grid, where the side is a pencil.
    fn grid(&self) -> Option<&GridDesc> {
        match self {
            Distribution::Pencil { grid, .. } => Some(grid),
            Distribution::Box(_) => None,
        }
    }
}

/// An empty box as the one empty box (lo and len zero), so that its array is `(0, 0, 0)`.
fn normalized(b: Box3) -> Box3 {
    if b.volume() == 0 || b.len.iter().any(|&l| l <= 0) {
        Box3::default()
    } else {
        b
    }
}

/// A global array moved between two decompositions of one handle, in one exchange.
pub struct Redistribution {
    runner: Runner,
    plan: TransposePlan,
    backend: TransposeBackend,
    gdims: [i64; 3],
    /// Workspace elements, the most any rank needs (the same on every rank).
    workspace_elems: i64,
    /// Both sides in words, for signatures and the report.
    description: String,
    /// Every rank's source and destination arrays are the same (a run only copies).
    identity: bool,
}

impl Handle {
    /// Collective: the redistribution from `src` to `dst` (every rank gives its side of
    /// both), run by `backend` (`None`: the transpose backend of the source's grid, else
    /// of the destination's, else `MPI_P2P`). The global grid is the pencils' grid, or
    /// for two box sides the smallest grid from the origin that holds every box of both. Layouts
    /// that do not cover the global grid exactly (gaps, overlaps, boxes outside it), or
    /// ranks passing different grids, axes, halos, padding or backends, raise
    /// `InvalidUsage` on every rank.
    pub fn create_redistribution(
        &self,
        src: &Distribution<'_>,
        dst: &Distribution<'_>,
        backend: Option<TransposeBackend>,
    ) -> Result<Redistribution> {
        self.check_alive()?;
        let rank = self.rank();
        let backend = backend
            .or_else(|| {
                src.grid()
                    .or(dst.grid())
                    .map(|g| g.grid().transpose_backend)
            })
            .unwrap_or(TransposeBackend::MpiP2p);
        let local = self.describe_redistribution(src, dst, rank);
        let fields = Fields::new()
            .extended(src.fields("source"))
            .extended(dst.fields("destination"))
            .with("backend", backend.enum_name());
        self.settle(
            "create_redistribution",
            &fields,
            local.as_ref().map(|_| ()).map_err(Error::clone),
        )?;
        let (src_box, dst_box) = local?;
        let mut mine = [0u64; 12];
        mine[..6].copy_from_slice(&box_words(src_box));
        mine[6..].copy_from_slice(&box_words(dst_box));
        let all = allgather_words(self.comm(), mine)?;
        let (src_boxes, dst_boxes): (Vec<Box3>, Vec<Box3>) = all
            .iter()
            .map(|w| (unbox_words(&w[..6]), unbox_words(&w[6..])))
            .unzip();
        let gdims = match src.grid().or(dst.grid()) {
            Some(g) => g.grid().gdims,
            None => std::array::from_fn(|g| {
                src_boxes
                    .iter()
                    .chain(&dst_boxes)
                    .map(|b| b.lo[g] + b.len[g])
                    .max()
                    .unwrap_or(0)
            }),
        };
        if let (Some(a), Some(b)) = (src.grid(), dst.grid()) {
            if a.grid().gdims != b.grid().gdims {
                invalid!(
                    "create_redistribution: expected grids of the same global dims, got source gdims {:?} and destination gdims {:?}",
                    a.grid().gdims,
                    b.grid().gdims
                );
            }
        }
        check_tiling("create_redistribution source", &src_boxes, gdims)?;
        check_tiling("create_redistribution destination", &dst_boxes, gdims)?;
        self.check_backends(backend, HaloBackend::Mpi)?;
        let (inputs, outputs) = (src.arrays(&src_boxes)?, dst.arrays(&dst_boxes)?);
        let workspace_elems = src_boxes
            .iter()
            .zip(&dst_boxes)
            .map(|(a, b)| align(a.volume()) + b.volume())
            .max()
            .unwrap_or(0);
        let identity = inputs == outputs;
        let host_threads = if self.is_gpu() {
            1
        } else {
            self.host_threads()?
        };
        let runner = Runner::new(self.clone(), host_threads)?;
        let plan = TransposePlan::between(
            None,
            (0..self.nranks()).collect(),
            rank,
            Side {
                pencils: &inputs,
                axis: src.axis(),
            },
            Side {
                pencils: &outputs,
                axis: dst.axis(),
            },
        );
        Ok(Redistribution {
            runner,
            plan,
            backend,
            gdims,
            workspace_elems,
            description: format!("{} to {}", src.describe(), dst.describe()),
            identity,
        })
    }

    /// This rank's boxes of both sides, after the checks it can make alone.
    fn describe_redistribution(
        &self,
        src: &Distribution<'_>,
        dst: &Distribution<'_>,
        rank: usize,
    ) -> Result<(Box3, Box3)> {
        for (which, d) in [("source", src), ("destination", dst)] {
            if let Some(g) = d.grid() {
                if !g.handle().same_as(self) {
                    invalid!("create_redistribution: the {which} is a pencil of a grid of another handle: expected grids of this handle");
                }
            }
        }
        Ok((
            src.own_box(rank, "source")?,
            dst.own_box(rank, "destination")?,
        ))
    }
}

impl Redistribution {
    /// This rank's source array (shape, position, halos and padding).
    pub fn input(&self) -> &PencilInfo {
        &self.plan.input
    }

    /// This rank's destination array.
    pub fn output(&self) -> &PencilInfo {
        &self.plan.output
    }

    /// Global extents along X, Y, Z.
    pub fn gdims(&self) -> [i64; 3] {
        self.gdims
    }

    /// The backend that runs it.
    pub fn backend(&self) -> TransposeBackend {
        self.backend
    }

    /// True when every rank's source and destination arrays are the same (shape,
    /// position, layout, halos and padding): a run moves nothing between ranks and only
    /// copies. The same on every rank.
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    /// Elements of workspace a run needs (`work`), the same on every rank.
    pub fn workspace_elems(&self) -> i64 {
        self.workspace_elems
    }

    /// The exchange plan of this rank.
    pub fn plan(&self) -> &TransposePlan {
        &self.plan
    }

    /// Collective: moves `input` (this rank's source array) into `output` (its
    /// destination array), which must be the same memory (in place, holding both) or
    /// disjoint; only the owned cells of the output are written. `work` (`None`: the
    /// handle's) must hold [`Redistribution::workspace_elems`] elements. On a GPU handle
    /// the work is enqueued on the stream.
    pub fn run(
        &self,
        dtype: DataType,
        input: Array,
        output: Array,
        work: Option<Array>,
        exec: Exec,
    ) -> Result<()> {
        // In place or not is each rank's own choice (a rank whose boxes are empty has no
        // memory to share), so it is not agreed.
        let fields = input.batch.unwrap_or(1);
        let batch = batch_words(fields);
        let what = format!(
            "redistribution {}: run({batch}dtype {}, {} workspace)",
            self.runner.serial,
            dtype.enum_name(),
            if work.is_some() {
                "explicit"
            } else {
                "automatic"
            },
        );
        let check = || self.check_run(dtype, input, output, work, exec);
        self.runner.operate(&what, check, |cx, ()| {
            engine::transpose(
                cx,
                &TransposeCall {
                    plan: &self.plan,
                    backend: self.backend,
                    group: self.runner.comm.as_ref(),
                    workspace_elems: self.workspace_elems,
                    dtype,
                    input: input.buf,
                    output: output.buf,
                    work: work.map(|w| w.buf),
                    steps: Default::default(),
                    own_cells: true,
                    fields: Batch {
                        count: fields,
                        in_stride: self.plan.input.size,
                        out_stride: self.plan.output.size,
                    },
                },
                exec,
            )
        })
    }

    /// Checking mode: a rank whose arguments failed before the run (`local`: that error)
    /// joins the run's agreement, so that the others raise too instead of waiting.
    pub fn refuse_run(&self, local: Result<()>) -> Result<()> {
        let _turn = lock(&self.runner.turn);
        self.runner.agree(
            &format!("redistribution {}: run", self.runner.serial),
            local,
        )
    }

    /// The caller's side of the contract of [`Redistribution::run`].
    fn check_run(
        &self,
        dtype: DataType,
        input: Array,
        output: Array,
        work: Option<Array>,
        exec: Exec,
    ) -> Result<()> {
        self.runner.check_exec(exec)?;
        let fields = input.batch.unwrap_or(1);
        let shared =
            input.buf.ptr() == output.buf.ptr() && !input.buf.is_empty() && !output.buf.is_empty();
        if fields > 1 && shared {
            invalid!("out: a batch of {fields} fields is redistributed out of place (each rank's input and output hold different cells, so a field would overwrite the next): pass a separate out");
        }
        let query = batch_query("get_workspace_size()", fields);
        self.runner.check_exchange_arrays(
            &self.plan,
            dtype.size(),
            [
                "the redistribution's input_info.array_shape",
                "the redistribution's output_info.array_shape",
            ],
            (input, output, fields),
            work,
            (self.workspace_elems * fields, &query),
            exec,
        )
    }

    /// Collective: releases the communicator. With the performance report on, returns
    /// its summary on rank 0. In checking mode the ranks first agree that every one
    /// destroys it.
    pub fn destroy(&self) -> Result<Option<String>> {
        {
            let _turn = lock(&self.runner.turn);
            self.runner.handle.check_alive()?;
            self.runner.agree(
                &format!("redistribution {}: destroy()", self.runner.serial),
                Ok(()),
            )?;
        }
        let [gx, gy, gz] = self.gdims;
        let heading = Heading {
            title: "Redistribution".into(),
            lines: vec![
                ("backend".into(), self.backend.display_name().into()),
                ("layouts".into(), self.description.clone()),
                ("global dims".into(), format!("{gx} x {gy} x {gz}")),
            ],
            file_stem: format!(
                "redistribution{}-tcomm_{}-gdims_{gx}x{gy}x{gz}",
                self.runner.serial, self.backend as i32
            ),
        };
        self.runner.release(&heading, &[])
    }

    /// True once [`Redistribution::destroy`] released it (also when it returned the
    /// error of the performance report that came last).
    pub fn is_released(&self) -> bool {
        self.runner.is_released()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(lo: [i64; 3], len: [i64; 3]) -> Box3 {
        Box3 { lo, len }
    }

    #[test]
    fn empty_boxes_are_one_box() {
        assert_eq!(normalized(b([3, 1, 2], [5, 0, 2])), Box3::default());
    }
}
