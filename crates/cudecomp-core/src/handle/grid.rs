//! Grid descriptors (`cudecompGridDesc_t`): one decomposition bound to a handle, with its
//! row and column communicators and cached plans. Its two operations, [`GridDesc::transpose`]
//! and [`GridDesc::update_halos`], check the caller's side of the contract (buffers large
//! enough, in-place or disjoint, the workspace apart from the data, arguments in range)
//! and hand the plan to the engine.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use crate::comm::Communicator;
use crate::config::DataType;
use crate::engine::device::lock;
use crate::engine::Exec;
use crate::engine::{self, Batch, HaloCall, Steps, TransposeCall, TransposeSteps};
use crate::geometry::{CommAxis, Grid};
use crate::handle::runner::{batch_query, batch_words, check_work, Array, Runner};
use crate::handle::Handle;
use crate::perf::Heading;
use crate::plan::{Direction, HaloPlan, HaloSpec, Layout, TransposeLayouts, TransposePlan};
use crate::{invalid, Result};

/// One transpose request: direction, halos and padding of both pencils, element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransposeOp {
    /// Which of the four transposes.
    pub direction: Direction,
    /// Halos and padding of the input and output pencils.
    pub layouts: TransposeLayouts,
    /// Element type of both arrays.
    pub dtype: DataType,
    /// Whether this rank's own cells (those that stay on it) are copied into the output;
    /// `false` leaves them to the caller, which reads them from the input (out of place
    /// only). Each rank decides for itself: peers' chunks move alike either way.
    pub own_cells: bool,
    /// Fields moved together in one exchange (at least 1): each array holds that many
    /// pencils one after another (a leading batch axis), the workspace that many times
    /// the grid's.
    pub fields: i64,
}

/// One decomposition bound to a handle.
pub struct GridDesc {
    /// The grid's communicator, report, checking mode and turn.
    runner: Runner,
    grid: Grid,
    /// Indexed by [`CommAxis`]: column then row communicator.
    subcomms: [Box<dyn Communicator>; 2],
    plans: Mutex<HashMap<(Direction, TransposeLayouts), Arc<TransposePlan>>>,
    halo_plans: Mutex<HashMap<HaloSpec, Option<Arc<HaloPlan>>>>,
}

/// The canonical text of a transpose, compared across ranks in checking mode.
fn transpose_signature(
    serial: u64,
    op: &TransposeOp,
    in_place: bool,
    explicit_work: bool,
) -> String {
    let l = &op.layouts;
    let fields = batch_words(op.fields);
    format!(
        "grid {serial}: {}({fields}dtype {}, input_halo_extents {:?}, output_halo_extents {:?}, input_padding {:?}, output_padding {:?}, {}, {} workspace)",
        op.direction.method_name(),
        op.dtype.enum_name(),
        l.input_halo,
        l.output_halo,
        l.input_padding,
        l.output_padding,
        if in_place { "in-place" } else { "out-of-place" },
        if explicit_work { "explicit" } else { "automatic" },
    )
}

/// The canonical text of a halo update, compared across ranks in checking mode.
fn halo_signature(
    serial: u64,
    spec: &HaloSpec,
    dtype: DataType,
    fields: i64,
    explicit_work: bool,
) -> String {
    let fields = batch_words(fields);
    format!(
        "grid {serial}: update_halos_{}({fields}dtype {}, halo_extents {:?}, halo_periods {:?}, dim {}, padding {:?}, {} workspace)",
        ["x", "y", "z"][spec.axis.min(2)],
        dtype.enum_name(),
        spec.halo,
        spec.periods,
        spec.dim,
        spec.padding,
        if explicit_work { "explicit" } else { "automatic" },
    )
}

/// A value from `map`, made by `make` (and kept) on first request.
fn cached<K: Hash + Eq, V: Clone>(
    map: &Mutex<HashMap<K, V>>,
    key: K,
    make: impl FnOnce() -> Result<V>,
) -> Result<V> {
    if let Some(v) = lock(map).get(&key) {
        return Ok(v.clone());
    }
    let v = make()?;
    lock(map).insert(key, v.clone());
    Ok(v)
}

impl GridDesc {
    /// Collective: the descriptor of `grid` on `handle` (splits the row and column
    /// communicators).
    pub(crate) fn new(handle: Handle, grid: Grid, host_threads: usize) -> Result<GridDesc> {
        let runner = Runner::new(handle, host_threads)?;
        let [row, col] = grid.coords(runner.rank);
        let comm = runner.handle.comm();
        let col_comm = comm.split(col as i32, row as i32)?;
        let row_comm = comm.split(row as i32, col as i32)?;
        Ok(GridDesc {
            runner,
            grid,
            subcomms: [col_comm, row_comm],
            plans: Mutex::new(HashMap::new()),
            halo_plans: Mutex::new(HashMap::new()),
        })
    }

    /// True when ranks agree on every operation before moving data
    /// (`CUDECOMP_CHECK_COLLECTIVES=1` at grid creation).
    pub fn checks_collectives(&self) -> bool {
        self.runner.check_collectives
    }

    /// Checking mode: the operation `what` settled among the handle's ranks (see
    /// [`Handle::settle`]); without it, just returns `local`.
    pub fn agree(&self, what: &str, local: Result<()>) -> Result<()> {
        self.runner.agree(what, local)
    }

    /// The resolved grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// Number of this grid among the handle's objects (the same on every rank).
    pub(crate) fn serial(&self) -> u64 {
        self.runner.serial
    }

    /// The owning handle.
    pub fn handle(&self) -> &Handle {
        &self.runner.handle
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.runner.rank
    }

    /// The sub-communicator along `axis` (`All`: the grid's whole communicator).
    pub(crate) fn subcomm(&self, axis: CommAxis) -> &dyn Communicator {
        match axis {
            CommAxis::All => self.runner.comm.as_ref(),
            CommAxis::Col | CommAxis::Row => self.subcomms[axis as usize].as_ref(),
        }
    }

    /// Overrides the slice size of pipelines (tests: tiny slices take the multi-slice
    /// paths). Must be equal on every rank. Only with the `testing` feature.
    #[cfg(any(test, feature = "testing"))]
    pub fn set_slice_bytes(&mut self, bytes: Option<i64>) {
        self.runner.slice_bytes = bytes;
    }

    /// The (cached) plan of one transpose.
    pub(crate) fn transpose_plan(
        &self,
        direction: Direction,
        layouts: &TransposeLayouts,
    ) -> Result<Arc<TransposePlan>> {
        cached(&self.plans, (direction, *layouts), || {
            Ok(Arc::new(TransposePlan::new(
                &self.grid,
                self.runner.rank,
                direction,
                layouts,
            )?))
        })
    }

    /// The (cached) plan of one halo update; `None` when it moves nothing.
    pub(crate) fn halo_plan(&self, spec: &HaloSpec) -> Result<Option<Arc<HaloPlan>>> {
        if spec.axis > 2 || spec.dim > 2 {
            invalid!(
                "halo update: expected axis and dim in 0 (X), 1 (Y), 2 (Z), got axis {} and dim {}",
                spec.axis,
                spec.dim
            );
        }
        cached(&self.halo_plans, *spec, || {
            Ok(HaloPlan::new(&self.grid, self.runner.rank, *spec)?.map(Arc::new))
        })
    }

    /// Collective: runs one transpose. `input` and `output` must hold their pencils and
    /// be either the same memory (in-place: same start address) or disjoint; `work`
    /// (`None`: the handle's workspace) must hold `get_transpose_workspace_size()`
    /// elements and be disjoint from both. On a GPU handle (`Exec::Device`) the work is
    /// enqueued on the stream.
    pub fn transpose(
        &self,
        op: &TransposeOp,
        input: Array,
        output: Array,
        work: Option<Array>,
        exec: Exec,
    ) -> Result<()> {
        self.transpose_with(op, input, output, work, exec, TransposeSteps::default())
    }

    /// [`GridDesc::transpose`] whose input is written, or output wanted, in steps (GPU
    /// only): `steps.input` lists events after which the input's leading cells along an
    /// axis are written, and the operation moves each step's cells once its event
    /// completed rather than waiting for the whole input; `steps.output` lists events the
    /// operation records on its stream once the output's leading cells along an axis are
    /// written, so that other streams can start on them before the rest lands. DIRECT's
    /// single copies move step by step; other routes wait for every input event first and
    /// record every output event at the end.
    pub fn transpose_with(
        &self,
        op: &TransposeOp,
        input: Array,
        output: Array,
        work: Option<Array>,
        exec: Exec,
        steps: TransposeSteps<'_>,
    ) -> Result<()> {
        let in_place = input.buf.ptr() == output.buf.ptr();
        let what = transpose_signature(self.runner.serial, op, in_place, work.is_some());
        let check = || {
            self.checked_transpose_plan(op, input, output, work, exec)
                .and_then(|p| check_steps(steps, &p, exec).map(|_| p))
        };
        self.runner.operate(&what, check, |cx, plan| {
            engine::transpose(
                cx,
                &TransposeCall {
                    plan: &plan,
                    backend: self.grid.transpose_backend,
                    group: self.subcomm(op.direction.comm()),
                    workspace_elems: self.grid.transpose_workspace_size()?,
                    dtype: op.dtype,
                    input: input.buf,
                    output: output.buf,
                    work: work.map(|w| w.buf),
                    steps,
                    own_cells: op.own_cells,
                    fields: Batch {
                        count: op.fields,
                        in_stride: plan.input.size,
                        out_stride: plan.output.size,
                    },
                },
                exec,
            )
        })
    }

    /// The plan of a transpose after the caller's side of the contract is checked.
    fn checked_transpose_plan(
        &self,
        op: &TransposeOp,
        input: Array,
        output: Array,
        work: Option<Array>,
        exec: Exec,
    ) -> Result<Arc<TransposePlan>> {
        self.runner.check_exec(exec)?;
        let plan = self.transpose_plan(op.direction, &op.layouts)?;
        let elem = op.dtype.size();
        let in_place = input.buf.ptr() == output.buf.ptr();
        if !op.own_cells && in_place {
            invalid!("own_cells=False: expected an out-of-place transpose (this rank's own cells stay in the input for the caller), got out sharing the input's memory");
        }
        if op.fields > 1 && in_place {
            self.check_batch_in_place(op, &plan)?;
        }
        let shape = "the pencil's PencilInfo.array_shape with these halos and padding";
        let query = batch_query("get_transpose_workspace_size()", op.fields);
        self.runner.check_exchange_arrays(
            &plan,
            elem,
            [shape, shape],
            (input, output, op.fields),
            work,
            (self.grid.transpose_workspace_size()? * op.fields, &query),
            exec,
        )?;
        Ok(plan)
    }

    /// InvalidUsage unless every member of `plan`'s exchange has input and output pencils
    /// of one size, where a batch in place keeps each field at its place: decided from
    /// the grid alone, so that every member doing the same call decides alike.
    fn check_batch_in_place(&self, op: &TransposeOp, plan: &TransposePlan) -> Result<()> {
        let ((a, b), l) = (op.direction.axes(), &op.layouts);
        for &r in &plan.members {
            let input = self
                .grid
                .pencil_info(a as i64, r, l.input_halo, l.input_padding)?;
            let output = self
                .grid
                .pencil_info(b as i64, r, l.output_halo, l.output_padding)?;
            if input.size != output.size {
                invalid!(
                    "out: an in-place transpose of {} fields needs input and output pencils of one size on every rank of the exchange (each field keeps its place), got {} and {} elements on rank {r}: pass a separate out",
                    op.fields,
                    input.size,
                    output.size
                );
            }
        }
        Ok(())
    }

    /// The plan of a halo update (`None`: nothing moves) after the caller's side of the
    /// contract is checked: the array is checked even where nothing moves.
    fn checked_halo_plan(
        &self,
        spec: &HaloSpec,
        dtype: DataType,
        data: Array,
        work: Option<Array>,
        exec: Exec,
    ) -> Result<Option<Arc<HaloPlan>>> {
        self.runner.check_exec(exec)?;
        let plan = self.halo_plan(spec)?;
        let info =
            self.grid
                .pencil_info(spec.axis as i64, self.runner.rank, spec.halo, spec.padding)?;
        let shape = "the pencil's PencilInfo.array_shape with these halos and padding";
        let fields = data.batch.unwrap_or(1);
        data.check_fields("input", &info, fields, dtype.size(), shape, true)?;
        let elems = self
            .grid
            .halo_workspace_size(spec.axis as i64, self.runner.rank, spec.halo)?;
        let query = batch_query("get_halo_workspace_size()", fields);
        check_work(work, &[data.buf], elems * fields, dtype.size(), &query)?;
        self.runner
            .check_on_device(exec, &[("input", data.buf)], work)?;
        Ok(plan)
    }

    /// Collective: one halo update of this rank's `spec.axis`-pencil in `data`, along
    /// `spec.dim`. `work` as for [`GridDesc::transpose`], with
    /// `get_halo_workspace_size()` elements.
    pub fn update_halos(
        &self,
        spec: &HaloSpec,
        dtype: DataType,
        data: Array,
        work: Option<Array>,
        exec: Exec,
    ) -> Result<()> {
        let fields = data.batch.unwrap_or(1);
        let what = halo_signature(self.runner.serial, spec, dtype, fields, work.is_some());
        let check = || self.checked_halo_plan(spec, dtype, data, work, exec);
        self.runner.operate(&what, check, |cx, plan| {
            let Some(plan) = plan else {
                return Ok(());
            };
            engine::update_halos(
                cx,
                &HaloCall {
                    plan: &plan,
                    backend: self.grid.halo_backend,
                    workspace_elems: self.grid.halo_workspace_size(
                        spec.axis as i64,
                        self.runner.rank,
                        spec.halo,
                    )?,
                    dtype,
                    data: data.buf,
                    work: work.map(|w| w.buf),
                    fields: Batch {
                        count: fields,
                        in_stride: plan.info.size,
                        out_stride: plan.info.size,
                    },
                },
                exec,
            )
        })
    }

    /// Collective: releases the row and column communicators. With the performance
    /// report on, returns its summary on rank 0 (and writes its CSV files if asked). In
    /// checking mode the ranks first agree that every one destroys the grid: a rank that
    /// runs an operation instead makes every rank fail, the grid still alive everywhere.
    pub fn destroy(&self) -> Result<Option<String>> {
        {
            let _grid_turn = lock(&self.runner.turn);
            self.handle().check_alive()?;
            self.agree(&format!("grid {}: destroy()", self.runner.serial), Ok(()))?;
        }
        let subcomms: Vec<&dyn Communicator> = self.subcomms.iter().map(|c| c.as_ref()).collect();
        self.runner
            .release(&Heading::of_grid(&self.grid), &subcomms)
    }

    /// True once [`GridDesc::destroy`] released the grid (also when it returned the
    /// error of the performance report that came last).
    pub fn is_released(&self) -> bool {
        self.runner.is_released()
    }
}

/// InvalidUsage unless the steps of both arrays are for a device operation, along an
/// axis, and their ends do not decrease and stay within the array along that axis.
fn check_steps(steps: TransposeSteps<'_>, plan: &TransposePlan, exec: Exec) -> Result<()> {
    check_array_steps(steps.input, "input", &plan.in_layout, plan.input.size, exec)?;
    check_array_steps(
        steps.output,
        "output",
        &plan.out_layout,
        plan.output.size,
        exec,
    )
}

/// [`check_steps`] for one array (`which`: "input" or "output"), of `size` elements in
/// `layout`.
fn check_array_steps(
    s: Steps<'_>,
    which: &str,
    layout: &Layout,
    size: i64,
    exec: Exec,
) -> Result<()> {
    if s.marks.is_empty() {
        return Ok(());
    }
    if exec == Exec::Host {
        invalid!(
            "{which}_ready: expected no events for an operation on host memory, got {}",
            s.marks.len()
        );
    }
    if let Some(a) = s.axis.filter(|&a| a > 2) {
        invalid!("{which}_ready_axis: expected 0 (X), 1 (Y) or 2 (Z), got {a}");
    }
    let axis = s.axis_in(layout);
    let cells = layout.along(axis, size).count;
    let mut last = 0;
    for (j, m) in s.marks.iter().enumerate() {
        if m.planes < last || m.planes > cells {
            invalid!(
                "{which}_ready[{j}]: expected an end in {last}..={cells} (not decreasing, at most the {which}'s {cells} cells along axis {axis}), got {}",
                m.planes
            );
        }
        last = m.planes;
    }
    Ok(())
}
