//! DIRECT's single copies: whether this rank offers its output, the peers' outputs every
//! member published, and the copy itself: each chunk goes once, straight from this rank's
//! input into the receiving member's output, in the order [`single_copy_steps`] makes.

use crate::engine::call::TransposeCall;
use crate::engine::context::Context;
use crate::engine::exchange::SingleCopySignals;
use crate::engine::pipeline::TransposeRun;
use crate::engine::schedule::{single_copy_steps, SingleCopyStep};
use crate::geometry::Axis;
use crate::mem::{Buf, FieldSteps, Mover};
use crate::plan::{Copy3, Landing, TransposePlan};
use crate::settings::SingleCopy;
use crate::{Error, Result};

/// Whether this rank offers its output for a DIRECT single copy: out of place, with
/// peers, and allowed by `CUDECOMP_SINGLE_COPY` (`0`: never, `1`: always; unset: where
/// `by_default` says). It then publishes where its output lies when that is a library
/// array, in the collective at the operation's start.
pub(super) fn single_copy_wanted(
    cx: &Context<'_>,
    c: &TransposeCall<'_>,
    by_default: impl FnOnce() -> bool,
) -> bool {
    let allowed = match cx.settings.single_copy {
        SingleCopy::Never => false,
        SingleCopy::Always => true,
        SingleCopy::Auto => by_default(),
    };
    allowed && !c.input.overlaps(&c.output)
}

/// The outputs of every member of `plan`'s sub-communicator, mapped here by `map`, when
/// every member published one (`published`, by handle rank; the same answer on every
/// member: all see the same notes); `None` when some member did not, and the two-copy
/// exchange runs. Each output holds `fields` fields of the member's pencil, one after
/// another.
pub(super) fn peer_outputs<R>(
    published: impl Fn(usize) -> Option<R>,
    plan: &TransposePlan,
    elem: usize,
    fields: i64,
    mut map: impl FnMut(usize, &R, usize) -> Result<Buf>,
) -> Result<Option<Vec<Buf>>> {
    let refs: Option<Vec<R>> = plan.members.iter().map(|&r| published(r)).collect();
    let Some(refs) = refs else {
        return Ok(None);
    };
    refs.iter()
        .enumerate()
        .map(|(p, a)| {
            let bytes = (plan.peer_out_elems[p] * fields) as usize * elem;
            if p == plan.me {
                // This rank's own output is the operation's; the entry keeps indices aligned.
                return Ok(Buf::empty());
            }
            map(plan.members[p], a, bytes)
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

impl TransposeRun<'_> {
    /// Single-copy exchange, out of place: each chunk goes once, straight from this rank's
    /// input into the receiving member's output (`outs[peer]`, mapped here), peers in
    /// staggered order so that writers spread over receivers, in pieces of about
    /// `block_bytes` of input (0: whole chunks). `movers(dst)` gives the mover for a
    /// destination. Receivers that take their output in steps (`landing`, by member;
    /// empty: all whole) get their chunk step by step, each step followed by
    /// `x.delivered(peer, step)`; `x.arrived()` waits for every chunk written into this
    /// rank's output. A batch copies each field's chunk in turn, every output holding its
    /// fields one after another (a member's pencil apart).
    pub(crate) fn single_copy<'m>(
        &self,
        outs: &[Buf],
        landing: &[Landing],
        movers: &dyn Fn(Buf) -> Box<dyn Mover + 'm>,
        block_bytes: i64,
        x: &dyn SingleCopySignals,
        staged: Option<&InputSteps<'_>>,
    ) -> Result<()> {
        let plan = self.plan;
        let np = plan.npeers();
        if outs.len() != np || self.in_place() || !(landing.is_empty() || landing.len() == np) {
            return Err(Error::Internal(format!(
                "single copy with {} outputs and {} landings for {np} members (in place: {})",
                outs.len(),
                landing.len(),
                self.in_place()
            )));
        }
        let whole = Landing::default();
        let landing_of = |p: usize| landing.get(p).unwrap_or(&whole);
        // Cache blocking (see `single_copy_block`): all chunks are cut alike and the pieces
        // over the same input go to every receiver in turn.
        let src_bytes: i64 = plan.sends.iter().map(|c| c.count).sum::<i64>() * self.e();
        let pieces = match (block_bytes, staged) {
            (_, Some(_)) => 1,
            (b, None) if b <= 0 => 1,
            (b, None) => (src_bytes / b).max(1) as usize,
        };
        // Pieces are cut along the input's slowest axis where it has a cell per piece: each
        // piece then reads one contiguous stretch of input and writes long runs into every
        // output. Cut along the rows' neighbours instead (two input rows of every plane),
        // the writes come in runs of two rows, which copy measurably slower where chunks
        // are short pieces of rows. Neither the input's rows nor the outputs' are ever cut:
        // pieces along an output's fastest axis (the input's slowest in Y->X and Z->Y of
        // axis-contiguous pencils) write a few cells of every output row, and pieces along
        // the input's fastest read a few of every input row; each line then comes from
        // memory once per piece. So the cut goes along the slowest of the other axes with a
        // cell per piece, else along the longest of them (in fewer, larger pieces).
        let (in_fast, out_fast) = (
            plan.in_layout.fastest_axis(),
            plan.out_layout.fastest_axis(),
        );
        let mut cut_axes: Vec<Axis> = (0..3).filter(|&g| g != in_fast && g != out_fast).collect();
        cut_axes.sort_by_key(|&g| std::cmp::Reverse(plan.in_layout.strides[g].abs()));
        let cut = |c: &Copy3| {
            let axis = cut_axes
                .iter()
                .copied()
                .find(|&g| c.extent[g] >= pieces as i64)
                .or_else(|| cut_axes.iter().copied().max_by_key(|&g| c.extent[g]))
                .unwrap_or(2);
            c.split_along(axis, pieces)
        };
        let mut parts: Vec<CopyPart<'m>> = (1..=np)
            .map(|step| (plan.me + step) % np)
            .filter(|&p| plan.sends[p].count > 0 && (p != plan.me || self.own_cells))
            .map(|p| {
                let (dst, c, field_stride) = if p == plan.me {
                    (self.output, plan.self_copy(), self.fields.out_stride)
                } else {
                    (outs[p], plan.peer_output_copy(p), plan.peer_out_elems[p])
                };
                let cuts = cut(&c);
                CopyPart {
                    member: p,
                    dst,
                    mover: movers(dst),
                    cuts,
                    field_stride,
                }
            })
            .collect();
        if pieces > 1 {
            // Each piece's parts take neighbouring stretches of the same input rows: read
            // them in address order, so that the hardware's forward prefetch of one part
            // brings in the next. Starting at the rank's own rotation leaves the stretches
            // before it to demand misses, and the members starting mid-row copy slower.
            parts.sort_by_key(|part| part.cuts.first().map_or(i64::MAX, Copy3::src_start));
        }
        // The input's steps (the caller's events: each step's cells go out once its event
        // is waited for), or one step of the whole input.
        let (along_in, in_ends) = match staged {
            Some(st) => (
                Some(plan.in_layout.along(st.axis, plan.input.size)),
                &st.ends[..],
            ),
            None => (None, &[][..]),
        };
        let out_steps = (0..np).map(|p| landing_of(p).steps()).max().unwrap_or(1);
        for step in single_copy_steps(out_steps, in_ends.len()) {
            match step {
                SingleCopyStep::WaitInput(i) => {
                    if let Some(st) = staged {
                        (st.wait)(i)?;
                    }
                }
                SingleCopyStep::Copy { step: s, input: i } => {
                    let lo = i.checked_sub(1).and_then(|j| in_ends.get(j)).copied();
                    let lo = lo.unwrap_or(0);
                    let hi = in_ends.get(i).copied().unwrap_or(i64::MAX);
                    // Each piece of one field, copied for every field at once.
                    for j in 0..pieces {
                        for part in &parts {
                            let Some(c) = part.cuts.get(j) else { continue };
                            let c = match &along_in {
                                Some(a) => c.src_range(a, lo, hi),
                                None => Some(*c),
                            };
                            let Some(c) = c.and_then(|c| landing_of(part.member).part(&c, s))
                            else {
                                continue;
                            };
                            let fl = self.fields;
                            let fields = FieldSteps::new(fl.count, fl.in_stride, part.field_stride);
                            part.mover
                                .copy_fields(self.elem, self.input, part.dst, &c, fields)?;
                        }
                    }
                }
                SingleCopyStep::Deliver(s) => {
                    for k in 1..np {
                        let p = (plan.me + k) % np;
                        if s < landing_of(p).steps() {
                            x.delivered(p, s)?;
                        }
                    }
                }
                SingleCopyStep::Arrived => x.arrived()?,
            }
        }
        Ok(())
    }
}

/// One member's chunk of a single copy: where it goes and how, cut into pieces.
struct CopyPart<'m> {
    /// The receiving member.
    member: usize,
    /// Its output, as mapped here.
    dst: Buf,
    /// The mover of copies into it.
    mover: Box<dyn Mover + 'm>,
    /// The chunk's pieces (see `single_copy_block`).
    cuts: Vec<Copy3>,
    /// Elements from one field of its output to the next.
    field_stride: i64,
}

/// An input that becomes ready in steps (device operations with `input_ready` events).
pub(crate) struct InputSteps<'s> {
    /// The global axis the steps run along.
    pub axis: Axis,
    /// End of each step: cells `0..ends[j]` along `axis` of the input array.
    pub ends: Vec<i64>,
    /// Orders the copies of step `j`'s planes after the step's event.
    pub wait: &'s dyn Fn(usize) -> Result<()>,
}
