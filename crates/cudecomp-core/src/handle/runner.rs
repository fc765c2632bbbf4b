//! What every collective object of a handle (grid descriptors, redistributions) runs its
//! operations with ([`Runner`]): its own duplicate of the handle's communicator, the
//! checking mode's agreement, the performance report, the threads of host copies, the
//! turn its operations take; and the checks of the caller's arrays ([`Array`]) that
//! every operation makes before it moves data.

use std::sync::Mutex;

use crate::comm::Communicator;
use crate::cuda::Device;
use crate::engine::device::lock;
use crate::engine::workspace::Slot;
use crate::engine::{Context, Exec};
use crate::geometry::PencilInfo;
use crate::handle::Handle;
use crate::mem::Buf;
use crate::perf::{Heading, PerfReport};
use crate::plan::TransposePlan;
use crate::{invalid, Error, Fields, Result};

/// An array the caller passes to an operation: its bytes and, where the caller's array
/// library describes them, its shape and whether it may be written. The operation checks
/// both against the pencil it expects, on every rank, before it moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Array {
    /// The array's memory (host or device).
    pub buf: Buf,
    /// The C-contiguous shape, slowest axis first (`PencilInfo::array_shape`), after the
    /// batch axis if any; `None`: only the bytes are known (checked to hold the pencil).
    pub shape: Option<[i64; 3]>,
    /// The leading axis of a batch of pencils (fields one after another); `None`: one
    /// pencil, or only the bytes are known.
    pub batch: Option<i64>,
    /// `None` when the array may be written; otherwise why not (a read-only view, an
    /// export that does not say), for the message where an output or halo array must be.
    pub read_only: Option<&'static str>,
}

impl From<Buf> for Array {
    /// Bytes alone: writable, of unknown shape.
    fn from(buf: Buf) -> Array {
        Array {
            buf,
            shape: None,
            batch: None,
            read_only: None,
        }
    }
}

fn shape_text(v: &[i64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("({})", parts.join(", "))
}

impl Array {
    /// Checks the array against a batch of `fields` pencils `info` one after another (a
    /// leading batch axis of that length; one pencil may come without it): its shape
    /// where known, its length, and that it may be written when `write` says so.
    pub(crate) fn check_fields(
        &self,
        what: &str,
        info: &PencilInfo,
        fields: i64,
        elem: usize,
        hint: &str,
        write: bool,
    ) -> Result<()> {
        if fields < 1 {
            invalid!("{what}: expected at least one field, got a batch of {fields}");
        }
        let batch = self.batch.unwrap_or(1);
        if let Some(shape) = self.shape {
            let want = info.array_shape();
            if shape != want || batch != fields {
                let (want, got) = match (fields, self.batch) {
                    (1, None) => (shape_text(&want), shape_text(&shape)),
                    (_, None) => (
                        shape_text(&[&[fields][..], &want].concat()),
                        shape_text(&shape),
                    ),
                    (_, Some(b)) => (
                        shape_text(&[&[fields][..], &want].concat()),
                        shape_text(&[&[b][..], &shape].concat()),
                    ),
                };
                let hint = match fields {
                    1 => hint.to_string(),
                    k => format!("{k} fields, each {hint}"),
                };
                invalid!("{what}: expected shape {want} ({hint}), got {got}");
            }
        }
        check_len(what, self.buf, info.size.saturating_mul(fields), elem)?;
        match self.read_only {
            Some(why) if write => invalid!("{what}: expected a writable array, got {why}"),
            _ => Ok(()),
        }
    }
}

/// What a collective object of a handle runs its operations with.
pub(crate) struct Runner {
    pub handle: Handle,
    pub rank: usize,
    /// The object's own duplicate of the handle's communicator: halos, DIRECT, X↔Z and
    /// redistribution exchanges and the checking mode's agreements use it, so that
    /// operations on distinct objects (from several threads) never share a communicator.
    pub comm: Box<dyn Communicator>,
    pub perf: Option<PerfReport>,
    /// Slice size of pipelines set by the user (the same on every rank: checked); each
    /// exchange has its own otherwise.
    pub slice_bytes: Option<i64>,
    /// Threads of host copies (see [`Handle::host_threads`]).
    pub host_threads: usize,
    /// Number of this object among the handle's (the same on every rank).
    pub serial: u64,
    /// `CUDECOMP_CHECK_COLLECTIVES=1`: ranks agree on each operation before moving data.
    pub check_collectives: bool,
    /// Operations of one object take turns: two threads' operations would interleave
    /// their messages on its communicators (MPI aborts the job on the mismatched sizes).
    /// Taken before the handle's lease, never while holding it.
    pub turn: Mutex<()>,
    /// Set once `destroy` released the object's communicators (also when its report then
    /// failed): the object is gone whatever the error says.
    pub released: std::sync::atomic::AtomicBool,
}

impl Runner {
    /// Collective over the handle's communicator: duplicates it and numbers the object.
    pub(crate) fn new(handle: Handle, host_threads: usize) -> Result<Runner> {
        let serial = handle.next_grid_serial();
        let settings = handle.settings();
        let (perf, slice_bytes, check_collectives) = (
            settings.perf.clone().map(PerfReport::new),
            settings.pipeline_slice_bytes,
            settings.check_collectives,
        );
        let rank = handle.rank();
        let comm = handle.comm().split(0, rank as i32)?;
        Ok(Runner {
            handle,
            rank,
            comm,
            perf,
            slice_bytes,
            host_threads,
            serial,
            check_collectives,
            turn: Mutex::new(()),
            released: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Checking mode: collective over the handle's ranks. Every rank passes the text of
    /// the operation it is about to run (`what`), or the error that stops it locally;
    /// the handle settles the call ([`Handle::settle`]), in its one sequence of calls, so
    /// that a rank at another operation, of this object or any other of the handle,
    /// makes every rank fail naming both, and a rank that failed locally makes the others
    /// fail naming it, instead of hanging or moving wrong data. Without checking mode,
    /// just returns `local`.
    pub(crate) fn agree(&self, what: &str, local: Result<()>) -> Result<()> {
        if !self.check_collectives {
            return local;
        }
        self.handle.settle(what, &Fields::new(), local)
    }

    /// The front door of every data-moving operation of the object: its turn, the handle
    /// alive, the caller's side of the contract checked (`check`, whose value `run` gets),
    /// the outcome agreed as `what` in checking mode ([`Runner::agree`]), then a lease of
    /// the handle's workspace and the engine (`run`, in the operation's context).
    pub(crate) fn operate<P>(
        &self,
        what: &str,
        check: impl FnOnce() -> Result<P>,
        run: impl FnOnce(&Context<'_>, P) -> Result<()>,
    ) -> Result<()> {
        let _turn = lock(&self.turn);
        self.handle.check_alive()?;
        let checked = check();
        self.agree(what, checked.as_ref().map(|_| ()).map_err(Error::clone))?;
        let checked = checked?;
        let (_device_turn, slot) = self.handle.lease();
        run(&self.context(&slot), checked)
    }

    /// What one operation runs with, in the workspace `slot`.
    pub(crate) fn context<'a>(&'a self, slot: &'a Slot) -> Context<'a> {
        Context {
            world: self.comm.as_ref(),
            rank: self.rank,
            slot,
            device: self.handle.device().ok(),
            perf: self.perf.as_ref(),
            settings: self.handle.settings(),
            slice_bytes: self.slice_bytes,
            host_threads: self.host_threads,
        }
    }

    /// InvalidUsage unless `exec` is where this handle's data lives.
    pub(crate) fn check_exec(&self, exec: Exec) -> Result<()> {
        match (exec, self.handle.is_gpu()) {
            (Exec::Host, false) | (Exec::Device(_), true) => Ok(()),
            (e, gpu) => invalid!(
                "expected an operation on {}, as this handle's, got one on {}",
                if gpu {
                    "CUDA device memory"
                } else {
                    "host memory"
                },
                e.describe()
            ),
        }
    }

    /// InvalidUsage unless every array of a device operation is memory of the handle's
    /// device.
    pub(crate) fn check_on_device(
        &self,
        exec: Exec,
        arrays: &[(&str, Buf)],
        work: Option<Array>,
    ) -> Result<()> {
        if exec == Exec::Host {
            return Ok(());
        }
        let ordinal = self.handle.device()?.device.ordinal;
        let work = work.map(|w| ("work", w.buf));
        for (what, b) in arrays.iter().copied().chain(work) {
            if b.is_empty() {
                continue;
            }
            match Device::pointer_device(b.ptr() as u64) {
                Some(o) if o == ordinal => {}
                Some(o) => invalid!(
                    "{what}: expected memory on the handle's device {ordinal}, got memory on device {o}"
                ),
                None => invalid!(
                    "{what}: expected CUDA device memory, got a pointer CUDA does not know"
                ),
            }
        }
        Ok(())
    }

    /// The caller's arrays of one exchange of `plan` (a transpose or a redistribution):
    /// `input` and `out` of the plan's shapes (`shapes` name where the caller finds each),
    /// the same memory or disjoint, `work` (if any) holding `work_elems` elements
    /// (`query` names the size query), all on the handle's device for a device
    /// operation. Checks the caller's side of the contract only; `exec` is checked first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_exchange_arrays(
        &self,
        plan: &TransposePlan,
        elem: usize,
        shapes: [&str; 2],
        (input, output, fields): (Array, Array, i64),
        work: Option<Array>,
        (work_elems, query): (i64, &str),
        exec: Exec,
    ) -> Result<()> {
        input.check_fields("input", &plan.input, fields, elem, shapes[0], false)?;
        output.check_fields("out", &plan.output, fields, elem, shapes[1], true)?;
        let (i, o) = (input.buf, output.buf);
        if i.ptr() != o.ptr() && i.overlaps(&o) {
            invalid!("out: expected either the input's own memory (in-place, same data pointer) or memory disjoint from it, got a partial overlap");
        }
        check_work(work, &[i, o], work_elems, elem, query)?;
        self.check_on_device(exec, &[("input", i), ("out", o)], work)
    }

    /// Collective: the end of a destroy the ranks agreed on: the report's summary (see
    /// [`Runner::report`]), then `comms` and the object's own communicator freed, also
    /// when the report failed (its error is returned after).
    pub(crate) fn release(
        &self,
        heading: &Heading,
        comms: &[&dyn Communicator],
    ) -> Result<Option<String>> {
        let summary = self.report(heading);
        for c in comms.iter().copied().chain([self.comm.as_ref()]) {
            c.free()?;
        }
        self.released
            .store(true, std::sync::atomic::Ordering::Release);
        summary
    }

    /// True once [`Runner::release`] freed the object.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Collective: with the performance report on, its summary on rank 0 (and its CSV
    /// files if asked), under `heading`.
    pub(crate) fn report(&self, heading: &Heading) -> Result<Option<String>> {
        let Some(p) = &self.perf else {
            return Ok(None);
        };
        // Rank 0 writes the files: a failure there (a directory it cannot make) is every
        // rank's, or the others would go on alone.
        let summary = p.finish(heading, self.comm.as_ref());
        let local = summary.as_ref().map(|_| ()).map_err(Error::clone);
        self.handle
            .settle("the performance report", &Fields::new(), local)?;
        summary
    }
}

/// How an operation's signature names a batch of `fields` fields: nothing for one.
pub(crate) fn batch_words(fields: i64) -> String {
    match fields {
        1 => String::new(),
        k => format!("{k} fields, "),
    }
}

/// The workspace size `query` of a batch of `fields` fields, for messages.
pub(crate) fn batch_query(query: &str, fields: i64) -> String {
    match fields {
        1 => query.to_string(),
        k => format!("{query} times {k} fields"),
    }
}

/// Bytes of `cells` elements of `elem` bytes (InvalidUsage naming `what` on overflow).
pub(crate) fn bytes_of(what: &str, cells: i64, elem: usize) -> Result<usize> {
    usize::try_from(cells)
        .ok()
        .and_then(|c| c.checked_mul(elem))
        .ok_or_else(|| {
            Error::InvalidUsage(format!(
                "{what}: {cells} elements of {elem} bytes do not fit in memory"
            ))
        })
}

/// InvalidUsage unless `b` holds `cells` elements of `elem` bytes.
pub(crate) fn check_len(what: &str, b: Buf, cells: i64, elem: usize) -> Result<()> {
    let need = bytes_of(what, cells, elem)?;
    if b.len() < need {
        invalid!(
            "{what}: expected at least {need} bytes ({cells} elements of {elem} bytes), got {}",
            b.len()
        );
    }
    Ok(())
}

/// InvalidUsage unless the caller's workspace, if any, holds `elems` elements of `elem`
/// bytes (`query` names the size query) and shares no memory with the `data` arrays.
pub(crate) fn check_work(
    work: Option<Array>,
    data: &[Buf],
    elems: i64,
    elem: usize,
    query: &str,
) -> Result<()> {
    let Some(w) = work else {
        return Ok(());
    };
    if let Some(why) = w.read_only {
        invalid!("work: expected a writable array, got {why}");
    }
    if data.iter().any(|d| w.buf.overlaps(d)) {
        invalid!("work: expected memory disjoint from the data arrays");
    }
    let need = bytes_of("work", elems, elem)?;
    if w.buf.len() < need {
        invalid!(
            "work: expected at least {need} bytes ({query} = {elems} elements of {elem} bytes), got {} bytes",
            w.buf.len()
        );
    }
    Ok(())
}
