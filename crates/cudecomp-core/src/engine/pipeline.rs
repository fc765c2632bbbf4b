//! The transpose pipeline: the one way every backend runs a transpose plan. Each peer's
//! chunk is cut into slices (one slice per chunk for exchanges that move chunks whole);
//! slice after slice is packed through a mover (host or device) and handed to the
//! backend's [`Exchange`], and arrived slices are unpacked in order; the order of that
//! work is data ([`super::schedule`]), which [`TransposeRun::run`] interprets. DIRECT between
//! library arrays copies each chunk once instead, straight into the receiving member's
//! output (`backend/single_copy.rs`).
//!
//! Workspace layout (elements): packed send chunks from 0, packed receive chunks from
//! `plan.recv_base`. Chunks are sent straight from the input / received straight into
//! the output when the plan says they are dense there and aliasing allows it.

use crate::comm::Way;
use crate::engine::exchange::{Exchange, Piece};
use crate::engine::schedule::{lag_of, ring_places, transpose_steps, PipelineStep, RunShape};
use crate::geometry::Box3;
use crate::mem::{Buf, FieldSteps, Mover};
use crate::plan::{Copy3, Slicing, TransposePlan};
use crate::{Error, Result};

/// Pieces this rank's own cells are cut into when the exchange polls: each fills part of
/// a wait for a peer's slice.
const OWN_PIECES: usize = 16;

/// The fields one run moves together (a batch): field `f` of the input starts
/// `f * in_stride` elements after the first, of the output `f * out_stride`; in the
/// workspace each chunk holds its fields one after another, so that one piece carries
/// a whole chunk of every field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Batch {
    /// Fields moved (at least one).
    pub count: i64,
    /// Elements from one field of the input to the next.
    pub in_stride: i64,
    /// Elements from one field of the output to the next.
    pub out_stride: i64,
}

impl Batch {
    /// One field: an unbatched run.
    pub(crate) const ONE: Batch = Batch {
        count: 1,
        in_stride: 0,
        out_stride: 0,
    };
}

/// One slice of a chunk: its cells of fields `fields.0..fields.1` (more than one field
/// only for a whole chunk).
#[derive(Clone, Copy, Debug)]
struct Part {
    fields: (i64, i64),
    cells: Box3,
}

impl Part {
    fn volume(&self) -> i64 {
        (self.fields.1 - self.fields.0) * self.cells.volume()
    }
}

/// The parts of one chunk: its slices; with several fields, the whole chunk of every
/// field in one part when it was not cut, else each field's slices in turn.
struct Parts {
    slices: Vec<Box3>,
    region: Box3,
    fields: i64,
}

impl Parts {
    /// The slices are kept as cut: parts are made as they are asked for.
    fn single(&self) -> bool {
        self.fields == 1 || self.slices.len() > 1
    }

    fn len(&self) -> usize {
        match self.single() {
            true => self.slices.len() * self.fields as usize,
            false => usize::from(!self.slices.is_empty()),
        }
    }

    fn get(&self, j: usize) -> Option<Part> {
        if !self.single() {
            return (j == 0 && !self.slices.is_empty()).then_some(Part {
                fields: (0, self.fields),
                cells: self.region,
            });
        }
        let n = self.slices.len().max(1);
        let f = (j / n) as i64;
        let cells = *self.slices.get(j % n)?;
        (f < self.fields).then_some(Part {
            fields: (f, f + 1),
            cells,
        })
    }

    fn iter(&self) -> impl Iterator<Item = Part> + '_ {
        (0..self.len()).filter_map(|j| self.get(j))
    }
}

/// Slices of one chunk cycling through `places` reused places of `len` elements in the
/// receiver's workspace (see [`SliceExchange::ring`]).
#[derive(Clone, Copy, Debug)]
struct Ring {
    places: usize,
    len: i64,
}

impl Ring {
    /// The ring of a chunk of `count` elements cut into `parts`; `None` when it has too few
    /// slices to reuse a place or the places would not fit in the chunk's own room.
    fn of(places: Option<usize>, parts: &Parts, count: i64) -> Option<Ring> {
        let places = places.filter(|&p| p > 0)?;
        let len = parts.iter().map(|p| p.volume()).max()?;
        (parts.len() > places && places as i64 * len <= count).then_some(Ring { places, len })
    }

    /// Element offset, inside the chunk's room, of slice `k`.
    fn place(&self, k: usize) -> i64 {
        (k % self.places) as i64 * self.len
    }
}

/// Buffers and means of one transpose. `input == output` (same start address) means in-place.
#[derive(Clone, Copy)]
pub(crate) struct TransposeRun<'a> {
    /// What to pack, exchange and unpack.
    pub plan: &'a TransposePlan,
    /// Bytes per element.
    pub elem: usize,
    /// Packs and unpacks (host or device).
    pub mover: &'a dyn Mover,
    /// The user's input pencil.
    pub input: Buf,
    /// The user's output pencil (the input's memory when in place).
    pub output: Buf,
    /// Workspace: packed send chunks from 0, packed receive chunks from `plan.recv_base`.
    pub work: Buf,
    /// Copy this rank's own cells into the output; `false` (out of place only) leaves them
    /// in the input for the caller.
    pub own_cells: bool,
    /// The fields moved together.
    pub fields: Batch,
}

impl TransposeRun<'_> {
    pub(in crate::engine) fn e(&self) -> i64 {
        self.elem as i64
    }

    /// `c` moved `f` times `src` elements further in its source and `f` times `dst` in
    /// its destination: the copy of field `f`.
    pub(in crate::engine) fn of_field(&self, mut c: Copy3, f: i64, src: i64, dst: i64) -> Copy3 {
        c.src_offset += f * src;
        c.dst_offset += f * dst;
        c
    }

    /// Where a chunk at `offset` of an unbatched workspace starts in this run's.
    fn chunk_start(&self, offset: i64) -> i64 {
        offset * self.fields.count
    }

    pub(in crate::engine) fn in_place(&self) -> bool {
        self.input.ptr() == self.output.ptr()
    }

    /// Chunks leave straight from the input, unpacked (dense there, and not in place).
    fn sends_from_input(&self) -> bool {
        self.plan.send_from_input && !self.in_place() && self.fields.count == 1
    }

    /// In-place runs stage this rank's own chunk through the send region (packed before
    /// anything lands in the shared buffer); out-of-place runs copy it directly.
    fn self_before(&self) -> Result<()> {
        let (plan, fl) = (self.plan, self.fields);
        let own = &plan.sends[plan.me];
        if self.in_place() {
            if own.count > 0 {
                let shift = self.chunk_start(own.offset) - own.offset;
                let c = self.of_field(plan.pack(plan.me), 1, 0, shift);
                let fields = FieldSteps::new(fl.count, fl.in_stride, own.count);
                self.mover
                    .copy_fields(self.elem, self.input, self.work, &c, fields)?;
            }
        } else if self.own_cells {
            let fields = FieldSteps::new(fl.count, fl.in_stride, fl.out_stride);
            self.mover.copy_fields(
                self.elem,
                self.input,
                self.output,
                &plan.self_copy(),
                fields,
            )?;
        }
        Ok(())
    }

    fn self_after(&self) -> Result<()> {
        if !self.in_place() {
            return Ok(());
        }
        let (plan, fl) = (self.plan, self.fields);
        let own = &plan.sends[plan.me];
        let shift = self.chunk_start(own.offset) - own.offset;
        let c = self.of_field(plan.unpack_self_packed(), 1, shift, 0);
        let fields = FieldSteps::new(fl.count, own.count, fl.out_stride);
        self.mover
            .copy_fields(self.elem, self.work, self.output, &c, fields)
    }

    /// The unit list of a sliced pipeline: `(pairs, slice)` with every schedule pair in
    /// each unit, or one pair per unit when `per_peer` (upstream's per-peer pipelining).
    fn units(
        &self,
        per_peer: bool,
        sends: &[Parts],
        recvs: &[Parts],
    ) -> Vec<(Vec<(usize, usize)>, usize)> {
        let steps: Vec<Vec<(usize, usize)>> = if per_peer {
            self.plan.schedule.iter().map(|&p| vec![p]).collect()
        } else {
            vec![self.plan.schedule.clone()]
        };
        let mut units = Vec::new();
        for pairs in steps {
            let n = pairs
                .iter()
                .map(|&(to, from)| sends[to].len().max(recvs[from].len()))
                .max()
                .unwrap_or(0);
            units.extend((0..n).map(|k| (pairs.clone(), k)));
        }
        units
    }

    /// The piece of slice `part` of `peer`'s chunk, sent (`Way::Send`) or received; with
    /// `unpacked` it lies in the input (sent) or output (received) rather than the
    /// workspace. `at` overrides its element offset inside the chunk (a ring's place).
    fn piece(
        &self,
        way: Way,
        peer: usize,
        part: &Part,
        unpacked: bool,
        at: Option<i64>,
    ) -> Result<Piece> {
        let plan = self.plan;
        let e = self.e();
        let (chunk, (buf, base)) = match (way, unpacked) {
            (Way::Send, true) => (
                &plan.sends[peer],
                (self.input, plan.send_offset_in_input(peer)),
            ),
            (Way::Send, false) => (
                &plan.sends[peer],
                (self.work, self.chunk_start(plan.sends[peer].offset)),
            ),
            (Way::Receive, true) => (
                &plan.recvs[peer],
                (self.output, plan.recv_offset_in_output(peer)),
            ),
            (Way::Receive, false) => (
                &plan.recvs[peer],
                (
                    self.work,
                    self.chunk_start(plan.recv_base + plan.recvs[peer].offset),
                ),
            ),
        };
        let rel = at.unwrap_or_else(|| {
            part.fields.0 * chunk.count + plan.packed_offset(&chunk.region, &part.cells)
        });
        let len = part.volume() * e;
        Ok(Piece {
            peer,
            ptr: buf.range((base + rel) * e, len)?,
            len: len as usize,
            rel: (rel * e) as usize,
        })
    }

    /// Runs `one` on this run, or, for a batch whose chunks of one field have about
    /// `apart_bytes` bytes or more, on one run per field after another. Field after field,
    /// every field's exchange reuses the same packed chunks, which stay in cache as they
    /// do across separate calls; past that size one message of every field gains nothing
    /// on a message per field and its larger workspace falls out of cache.
    pub(crate) fn fields_apart(
        &self,
        apart_bytes: i64,
        mut one: impl FnMut(&TransposeRun<'_>) -> Result<()>,
    ) -> Result<()> {
        let (plan, fl, e) = (self.plan, self.fields, self.e());
        // Every member must go field after field or none (their messages must match):
        // the size is one all take alike, the largest member's workspace of one field
        // (its input's and its output's cells) over the chunks it holds.
        let field_bytes = plan.max_member_elems * e / (2 * plan.npeers() as i64);
        if fl.count == 1 || field_bytes < apart_bytes {
            return one(self);
        }
        let field = |b: Buf, stride: i64, f: i64| {
            let at = f * stride * e;
            b.slice(at, b.len() as i64 - at)
        };
        (0..fl.count).try_for_each(|f| {
            one(&TransposeRun {
                input: field(self.input, fl.in_stride, f)?,
                output: field(self.output, fl.out_stride, f)?,
                fields: Batch::ONE,
                ..*self
            })
        })
    }

    /// Runs the transpose through `x`: each chunk is cut into slices of about
    /// `slice_bytes` (the exchange's own size when `None`), at most the profile's number
    /// per chunk; slice after slice is packed (into the workspace, or straight into the
    /// peer's when the exchange can address it) and handed to `x`; this rank's own cells
    /// are copied just before the first wait for an arrival; arrived slices are unpacked
    /// in order, starting once the profile's `lag` units are ahead. In-place runs pack
    /// everything (their own chunk included) before anything is unpacked into the shared
    /// buffer.
    pub(crate) fn run(&self, x: &dyn Exchange, slice_bytes: Option<i64>) -> Result<()> {
        let plan = self.plan;
        let profile = x.profile();
        let in_place = self.in_place();
        if in_place && plan.npeers() == 1 && plan.is_identity_in_place() {
            return Ok(());
        }
        if self.fields.count < 1 {
            return Err(Error::Internal(format!(
                "a run of {} fields",
                self.fields.count
            )));
        }
        let batched = self.fields.count > 1;
        // A batch's fields travel in turn through the slices of each chunk: together they
        // may use no more slice signals than the exchange has (one field's share each; a
        // share below two sends every field's chunk whole, in one part).
        let cut = Slicing {
            bytes: slice_bytes.unwrap_or(profile.slice_bytes),
            max: profile.max_slices / self.fields.count as usize,
        };
        let sends_from_input = self.sends_from_input();
        let np = plan.npeers();
        let parts = |region: Box3, slices| Parts {
            slices,
            region,
            fields: self.fields.count,
        };
        let send_parts: Vec<Parts> = (0..np)
            .map(|p| parts(plan.sends[p].region, plan.send_slices(p, self.elem, &cut)))
            .collect();
        let recv_parts: Vec<Parts> = (0..np)
            .map(|p| parts(plan.recvs[p].region, plan.recv_slices(p, self.elem, &cut)))
            .collect();
        let units = self.units(profile.per_peer, &send_parts, &recv_parts);
        // In place, receives may land in the output only when one unit carries every
        // chunk: it is exchanged after all the input is packed.
        let lands_in_output = plan.recv_into_output
            && profile.lands_in_output
            && (!in_place || units.len() <= 1)
            && !batched;
        let lag = lag_of(profile.lag, in_place);
        // A batch's ring cycles through the room of all its fields' chunks.
        let places = ring_places(profile.ring, lag, lands_in_output);
        let room = |count: i64| count * self.fields.count;
        let send_rings: Vec<Option<Ring>> = (0..np)
            .map(|p| Ring::of(places, &send_parts[p], room(plan.sends[p].count)))
            .collect();
        let recv_rings: Vec<Option<Ring>> = (0..np)
            .map(|p| Ring::of(places, &recv_parts[p], room(plan.recvs[p].count)))
            .collect();
        // What arrives in each unit.
        let incoming = units
            .iter()
            .map(|(pairs, k)| {
                pairs
                    .iter()
                    .filter_map(|&(_, from)| recv_parts[from].get(*k).map(|b| (from, b)))
                    .map(|(from, b)| {
                        let at = recv_rings[from].map(|r| r.place(*k));
                        self.piece(Way::Receive, from, &b, lands_in_output, at)
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let shape = RunShape {
            units: units.len(),
            lag,
            in_place,
            shares_sms: profile.shares_sms,
        };
        // Stream-ordered exchanges (everything packed first) copy this rank's own cells
        // while the slices travel; host ones copy them piece by piece whenever a slice has
        // not arrived yet, and what is left after the last unpacking. Pieces are of one
        // field each, as many in a batch as in one field's run (each field's copy in a
        // share of them: more would add a copy's fixed cost without filling more waits);
        // unpolled, the whole copy of every field is one.
        let fl = self.fields;
        let every_field = FieldSteps::new(fl.count, fl.in_stride, fl.out_stride);
        let mut own: Vec<(Copy3, FieldSteps)> = if shape.own_first() || in_place || !self.own_cells
        {
            Vec::new()
        } else if profile.polls {
            let whole = self
                .plan
                .self_copy()
                .split(OWN_PIECES.div_ceil(fl.count as usize));
            (0..fl.count)
                .flat_map(|f| {
                    whole.iter().map(move |&c| {
                        (
                            self.of_field(c, f, fl.in_stride, fl.out_stride),
                            FieldSteps::ONE,
                        )
                    })
                })
                .rev()
                .collect()
        } else {
            vec![(self.plan.self_copy(), every_field)]
        };
        let copy_own = |(c, fields): (Copy3, FieldSteps)| {
            self.mover
                .copy_fields(self.elem, self.input, self.output, &c, fields)
        };
        let mut step = |s: PipelineStep| -> Result<()> {
            match s {
                PipelineStep::OwnBefore => self.self_before(),
                PipelineStep::Posted => x.posted(),
                PipelineStep::Send(u) => {
                    let (pairs, k) = &units[u];
                    let mut sends = Vec::new();
                    for &(to, _) in pairs {
                        if let Some(b) = send_parts[to].get(*k) {
                            let ring = send_rings[to];
                            sends.push(self.pack_slice(x, to, &b, sends_from_input, ring, *k)?);
                        }
                    }
                    x.ready(u)?;
                    x.exchange(u, *k, &sends, &incoming[u])
                }
                PipelineStep::Background(on) => {
                    self.mover.background(on);
                    Ok(())
                }
                PipelineStep::Receive { unit, last } => {
                    let k = units[unit].1;
                    let recvs = &incoming[unit];
                    while profile.polls && !own.is_empty() && !x.landed(unit, k, recvs)? {
                        if let Some(c) = own.pop() {
                            copy_own(c)?;
                        }
                    }
                    x.arrived(unit, k, recvs)?;
                    if last {
                        // Nothing travels beside the last unpacking.
                        self.mover.background(false);
                    }
                    if !lands_in_output {
                        for r in recvs {
                            let Some(part) = recv_parts[r.peer].get(k) else {
                                continue;
                            };
                            let chunk = &plan.recvs[r.peer];
                            let start = plan.recv_base + chunk.offset;
                            let mut c = plan.unpack_part(r.peer, plan.recv_base, &part.cells);
                            if let Some(ring) = recv_rings[r.peer] {
                                // The place stands for the field's offset too (a ring's
                                // parts are single fields: the loop below adds it back).
                                let natural = plan.packed_offset(&chunk.region, &part.cells);
                                c.src_offset +=
                                    ring.place(k) - natural - part.fields.0 * chunk.count;
                            }
                            c.src_offset += self.chunk_start(start) - start;
                            let (first, count) = (part.fields.0, part.fields.1 - part.fields.0);
                            let out = self.fields.out_stride;
                            let c = self.of_field(c, first, chunk.count, out);
                            let fields = FieldSteps::new(count, chunk.count, out);
                            self.mover.copy_fields(
                                self.elem,
                                self.work,
                                self.output,
                                &c,
                                fields,
                            )?;
                            if recv_rings[r.peer].is_some() {
                                x.unpacked(r.peer, k)?;
                            }
                        }
                    }
                    Ok(())
                }
                PipelineStep::Finish => x.finish(),
                PipelineStep::OwnAfter => {
                    while let Some(c) = own.pop() {
                        copy_own(c)?;
                    }
                    self.self_after()
                }
            }
        };
        let ran = transpose_steps(shape).into_iter().try_for_each(&mut step);
        if ran.is_err() {
            // Copies of a failed run never stay in the background mode.
            self.mover.background(false);
        }
        ran
    }

    /// Packs slice `part` of `peer`'s chunk (straight into the peer's workspace when the
    /// exchange can address it, else into this rank's unless sent from the input) and
    /// returns the piece that leaves this rank.
    fn pack_slice(
        &self,
        x: &dyn Exchange,
        peer: usize,
        part: &Part,
        sends_from_input: bool,
        ring: Option<Ring>,
        k: usize,
    ) -> Result<Piece> {
        let plan = self.plan;
        if let Some(far) = x.pack_into(peer) {
            // Into this rank's receive slot of the peer's workspace: its fields one after
            // another from where the unbatched chunk would start times the fields.
            let (chunk, fl) = (&plan.sends[peer], self.fields);
            let slot = plan.peer_recv_offsets[peer];
            let natural = plan.packed_offset(&chunk.region, &part.cells);
            let c = plan.pack_into_peer(peer, &part.cells);
            let rel = match ring {
                Some(r) => {
                    if k >= r.places {
                        x.place_free(peer, k)?;
                    }
                    r.place(k)
                }
                None => part.fields.0 * chunk.count + natural,
            };
            let first = self.chunk_start(slot) - slot + rel - natural;
            let c = self.of_field(c, 1, 0, first - part.fields.0 * chunk.count);
            let mover = x.far_mover().unwrap_or(self.mover);
            let c = self.of_field(c, part.fields.0, fl.in_stride, chunk.count);
            let fields = FieldSteps::new(part.fields.1 - part.fields.0, fl.in_stride, chunk.count);
            mover.copy_fields(self.elem, self.input, far, &c, fields)?;
            let len = part.volume() * self.e();
            let at = (self.chunk_start(slot) + rel) * self.e();
            return Ok(Piece {
                peer,
                ptr: far.range(at, len)?,
                len: len as usize,
                rel: (rel * self.e()) as usize,
            });
        }
        if !sends_from_input {
            let (chunk, fl) = (&plan.sends[peer], self.fields);
            let c = plan.pack_part(peer, &part.cells);
            let c = self.of_field(c, 1, 0, self.chunk_start(chunk.offset) - chunk.offset);
            let c = self.of_field(c, part.fields.0, fl.in_stride, chunk.count);
            let fields = FieldSteps::new(part.fields.1 - part.fields.0, fl.in_stride, chunk.count);
            self.mover
                .copy_fields(self.elem, self.input, self.work, &c, fields)?;
        }
        self.piece(Way::Send, peer, part, sends_from_input, None)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::comm::{mock, Communicator};
    use crate::comm::{post_pieces, Request, Transport};
    use crate::config::GridConfig;
    use crate::engine::backend::single_copy::InputSteps;
    use crate::engine::exchange::Profile;
    use crate::engine::exchange::SingleCopySignals;
    use crate::geometry::Axis;
    use crate::geometry::Grid;
    use crate::mem::HostMover;
    use crate::plan::AxisCells;
    use crate::plan::Landing;
    use crate::plan::{Direction, TransposeLayouts, MAX_SLICES};
    use crate::testing::oracle;
    use crate::Error;

    /// Slices over a blocking transport: every unit is posted up front and completed in
    /// arrival order, as a stream-ordered exchange would deliver them.
    struct Posted<'a> {
        t: &'a dyn Transport,
        reqs: RefCell<Vec<Vec<Request>>>,
        profile: Profile,
    }

    impl Exchange for Posted<'_> {
        fn profile(&self) -> Profile {
            self.profile
        }
        fn exchange(&self, u: usize, k: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()> {
            // Backends hold one signal per slice index: a run may not go past them.
            assert!(
                k < self.profile.max_slices.max(1),
                "slice {k} of {}",
                self.profile.max_slices
            );
            let mut all = self.reqs.borrow_mut();
            all.resize_with(u + 1, Vec::new);
            for (way, list) in [(Way::Receive, recvs), (Way::Send, sends)] {
                for p in list {
                    // SAFETY: the pieces lie in buffers that outlive the transpose.
                    unsafe {
                        post_pieces(self.t, way, p.ptr, p.len, p.peer, 7 + u as i32, &mut all[u])?
                    };
                }
            }
            Ok(())
        }
        fn arrived(&self, u: usize, _k: usize, _recvs: &[Piece]) -> Result<()> {
            self.t.wait_all(&mut self.reqs.borrow_mut()[u])
        }
        fn finish(&self) -> Result<()> {
            for r in self.reqs.borrow_mut().iter_mut() {
                self.t.wait_all(r)?;
            }
            Ok(())
        }
    }

    fn bytes(v: &mut [u64]) -> Buf {
        // SAFETY: the vector outlives the transpose that uses this view.
        unsafe { Buf::new(v.as_mut_ptr().cast(), v.len() * 8) }
    }

    /// The 9×10×11 grid of these tests on `pdims`, and its number of ranks.
    fn test_grid(pdims: [i32; 2], contiguous: bool) -> (Grid, usize) {
        let n = (pdims[0] * pdims[1]) as usize;
        let cfg = GridConfig {
            gdims: [9, 10, 11],
            pdims,
            transpose_axis_contiguous: [contiguous; 3],
            ..Default::default()
        };
        (Grid::new(&cfg, n, false).unwrap(), n)
    }

    /// An input halo and output padding, so that neither array is its bare pencil.
    fn halo_and_padding() -> TransposeLayouts {
        TransposeLayouts {
            input_halo: [1, 0, 1],
            output_padding: [0, 1, 0],
            ..Default::default()
        }
    }

    /// `K` fields transposed in one run (one field: an unbatched run; field after field
    /// from chunks of `apart_bytes`) equal `K` transposes of each field: field `f` holds
    /// the oracle's values with bit 40 + `f` flipped, padding and halos untouched.
    fn batched_case<const K: usize>(
        pdims: [i32; 2],
        contiguous: bool,
        in_place: bool,
        profile: Profile,
        apart_bytes: i64,
    ) {
        let (g, n) = test_grid(pdims, contiguous);
        let mark = |v: u64, f: usize| v ^ (1u64 << (40 + f));
        mock::run(n, |c: &dyn Communicator| {
            let gd = g.gdims;
            for d in Direction::ALL {
                let lay = if in_place {
                    TransposeLayouts::default()
                } else {
                    halo_and_padding()
                };
                let plan = TransposePlan::new(&g, c.rank(), d, &lay).unwrap();
                let sub = c.split(plan.members[0] as i32, plan.me as i32).unwrap();
                let (ni, no) = (plan.input.size as usize, plan.output.size as usize);
                let (si, so) = if in_place {
                    (ni.max(no), ni.max(no))
                } else {
                    (ni, no)
                };
                let one = oracle(&plan.input, gd, u64::MAX);
                let mut input = vec![0u64; K * si];
                for f in 0..K {
                    for (i, v) in one.iter().enumerate() {
                        input[f * si + i] = mark(*v, f);
                    }
                }
                let (e5, e6) = (oracle(&plan.output, gd, 5), oracle(&plan.output, gd, 6));
                let mut work = vec![0u64; K * g.transpose_workspace_size().unwrap() as usize];
                let mut output = vec![5u64; K * so];
                let inp = bytes(&mut input);
                let run = TransposeRun {
                    plan: &plan,
                    elem: 8,
                    mover: &HostMover::default(),
                    input: inp,
                    output: if in_place { inp } else { bytes(&mut output) },
                    work: bytes(&mut work),
                    own_cells: true,
                    fields: Batch {
                        count: K as i64,
                        in_stride: si as i64,
                        out_stride: so as i64,
                    },
                };
                run.fields_apart(apart_bytes, |one| {
                    let x = Posted {
                        t: sub.as_ref(),
                        reqs: RefCell::new(Vec::new()),
                        profile,
                    };
                    one.run(&x, Some(24))
                })
                .unwrap();
                let got = if in_place { &input } else { &output };
                for f in 0..K {
                    let want: Vec<u64> = (0..no)
                        .map(|i| if e5[i] == e6[i] { mark(e5[i], f) } else { 5 })
                        .collect();
                    if in_place {
                        // In place, padding cells hold what the input left there.
                        for i in (0..no).filter(|&i| e5[i] == e6[i]) {
                            assert_eq!(got[f * so + i], want[i], "{d:?} field {f} cell {i}");
                        }
                    } else {
                        assert_eq!(&got[f * so..f * so + no], &want[..], "{d:?} field {f}");
                    }
                }
                sub.free().unwrap();
            }
        });
    }

    #[test]
    fn batched_pipeline_equals_one_run_per_field() {
        for pdims in [[2, 2], [3, 1], [1, 2], [1, 1]] {
            for contiguous in [false, true] {
                for in_place in [false, true] {
                    for max_slices in [1, MAX_SLICES] {
                        let profile = Profile {
                            lag: 2,
                            ..Profile::sliced(max_slices)
                        };
                        batched_case::<3>(pdims, contiguous, in_place, profile, i64::MAX);
                        let whole = Profile::whole_chunks();
                        batched_case::<3>(pdims, contiguous, in_place, whole, i64::MAX);
                        // Field after field (every chunk of the test grid is larger).
                        batched_case::<3>(pdims, contiguous, in_place, whole, 1);
                    }
                }
            }
        }
    }

    #[test]
    fn sliced_pipeline_matches_the_oracle() {
        for pdims in [[2, 2], [3, 1], [1, 2], [1, 1]] {
            for contiguous in [false, true] {
                for in_place in [false, true] {
                    // Whole chunks (as MPI exchanges them), then slices.
                    for max_slices in [1, MAX_SLICES] {
                        for per_peer in [false, true] {
                            for lag in [1, 2, usize::MAX] {
                                let profile = Profile {
                                    lands_in_output: !per_peer,
                                    per_peer,
                                    lag,
                                    ..Profile::sliced(max_slices)
                                };
                                batched_case::<1>(pdims, contiguous, in_place, profile, 1);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Signals of the mock single copy: every member writes, then the group meets. With a
    /// counter (the second field), counts the steps delivered to each peer, which must
    /// come in order; without, every output is taken whole.
    struct Met<'a>(&'a dyn Communicator, Option<&'a Mutex<Vec<usize>>>);

    impl SingleCopySignals for Met<'_> {
        fn delivered(&self, peer: usize, step: usize) -> Result<()> {
            if let Some(d) = self.1 {
                let mut d = d.lock().unwrap();
                assert_eq!(d[peer], step, "steps delivered to peer {peer} in order");
                d[peer] += 1;
            } else {
                assert_eq!(step, 0, "outputs taken whole");
            }
            Ok(())
        }
        fn arrived(&self) -> Result<()> {
            self.0.barrier()
        }
        fn abandon(&self, why: Error) -> Result<()> {
            self.0.barrier()?;
            Err(why)
        }
    }

    #[test]
    fn single_copies_match_the_oracle() {
        for pdims in [[2, 2], [1, 3], [3, 1], [2, 3]] {
            for contiguous in [false, true] {
                // Whole chunks, pieces of a few rows, and pieces larger than the chunks.
                for block in [0i64, 64, 1 << 20] {
                    single_copy_case(pdims, contiguous, block, None);
                }
                // Inputs written in steps along each axis (the caller's events).
                for axis in 0..3 {
                    single_copy_case(pdims, contiguous, 0, Some((axis, 3)));
                }
            }
        }
    }

    #[test]
    fn single_copies_deliver_outputs_step_by_step() {
        for pdims in [[2, 2], [1, 3], [3, 1], [2, 3]] {
            for contiguous in [false, true] {
                for axis in 0..3 {
                    // Outputs wanted in steps, alone and with inputs written in steps.
                    landing_case(pdims, contiguous, axis, 4, None);
                    landing_case(pdims, contiguous, axis, 2, Some(((axis + 1) % 3, 3)));
                }
            }
        }
    }

    /// A host mover that fails any copy reaching input cells along `axis` whose step has
    /// not been waited for yet (`waited` steps of `ends` have been; one rank's thread
    /// alone uses it).
    struct StepChecked<'a> {
        along: AxisCells,
        ends: &'a [i64],
        waited: &'a AtomicUsize,
    }

    impl Mover for StepChecked<'_> {
        fn copy(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
            let a = &self.along;
            let end = c.src_offset.rem_euclid(a.next) / a.stride + c.extent[a.axis];
            let w = self.waited.load(Ordering::Relaxed);
            let ready = match w {
                w if w >= self.ends.len() => i64::MAX,
                0 => 0,
                w => self.ends[w - 1],
            };
            assert!(
                end <= ready,
                "cells up to {end} copied with {w} steps waited for"
            );
            HostMover::default().copy(elem, src, dst, c)
        }
    }

    /// Runs `body(run, outputs, sub)` on every rank of the test grid on `pdims`, in every
    /// direction, each rank's single copy writing straight into the members' `outputs`
    /// (threads share memory), then checks every rank's output against the oracle.
    fn single_copy_world(
        pdims: [i32; 2],
        contiguous: bool,
        what: &str,
        body: impl Fn(&TransposeRun<'_>, &[Buf], &dyn Communicator) + Sync,
    ) {
        let (g, n) = test_grid(pdims, contiguous);
        let lay = halo_and_padding();
        for d in Direction::ALL {
            let plans: Vec<TransposePlan> = (0..n)
                .map(|r| TransposePlan::new(&g, r, d, &lay).unwrap())
                .collect();
            let mut outputs: Vec<Vec<u64>> = plans
                .iter()
                .map(|p| vec![5u64; p.output.size as usize])
                .collect();
            let outs: Vec<Buf> = outputs.iter_mut().map(|o| bytes(o)).collect();
            mock::run(n, |c: &dyn Communicator| {
                let plan = &plans[c.rank()];
                let sub = c.split(plan.members[0] as i32, plan.me as i32).unwrap();
                let mut input = oracle(&plan.input, g.gdims, u64::MAX);
                let run = TransposeRun {
                    plan,
                    elem: 8,
                    mover: &HostMover::default(),
                    input: bytes(&mut input),
                    output: outs[c.rank()],
                    work: Buf::empty(),
                    own_cells: true,
                    fields: Batch::ONE,
                };
                let members: Vec<Buf> = plan.members.iter().map(|&r| outs[r]).collect();
                body(&run, &members, sub.as_ref());
            });
            for (r, p) in plans.iter().enumerate() {
                assert_eq!(
                    outputs[r],
                    oracle(&p.output, g.gdims, 5),
                    "{pdims:?} {contiguous} {d:?} {what} rank {r}"
                );
            }
        }
    }

    fn single_copy_case(pdims: [i32; 2], contiguous: bool, block: i64, steps: Option<(Axis, i64)>) {
        let what = format!("block {block} steps {steps:?}");
        single_copy_world(pdims, contiguous, &what, |run, members, sub| {
            let plan = run.plan;
            let Some((axis, k)) = steps else {
                let movers = |_: Buf| -> Box<dyn Mover> { Box::new(HostMover::default()) };
                run.single_copy(members, &[], &movers, block, &Met(sub, None), None)
                    .unwrap();
                return;
            };
            // Steps of the input array along `axis` (halo and padding cells counted).
            let along = plan.in_layout.along(axis, plan.input.size);
            let ends: Vec<i64> = (1..k).map(|j| along.count * j / k).collect();
            let waited = AtomicUsize::new(0);
            let wait = |j: usize| {
                assert_eq!(
                    j,
                    waited.load(Ordering::Relaxed),
                    "steps waited for in order"
                );
                waited.store(j + 1, Ordering::Relaxed);
                Ok(())
            };
            let staged = InputSteps {
                axis,
                ends: ends.clone(),
                wait: &wait,
            };
            let movers = |_: Buf| -> Box<dyn Mover + '_> {
                Box::new(StepChecked {
                    along,
                    ends: &ends,
                    waited: &waited,
                })
            };
            run.single_copy(members, &[], &movers, block, &Met(sub, None), Some(&staged))
                .unwrap();
            assert_eq!(waited.load(Ordering::Relaxed), ends.len());
        });
    }

    /// A host mover into member `peer`'s output that fails any copy reaching cells of a
    /// step already delivered to it (`delivered[peer]` steps of `landing` have been).
    struct LandingChecked<'a> {
        landing: &'a Landing,
        peer: usize,
        delivered: &'a Mutex<Vec<usize>>,
    }

    impl Mover for LandingChecked<'_> {
        fn copy(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
            let done = self.delivered.lock().unwrap()[self.peer];
            if let (Some(a), Some(&end)) = (
                &self.landing.along,
                done.checked_sub(1).and_then(|s| self.landing.ends.get(s)),
            ) {
                let first = c.dst_offset.rem_euclid(a.next) / a.stride;
                assert!(
                    first >= end || c.dst_strides[a.axis] != a.stride,
                    "a copy into cells from {first} of peer {} after its steps up to {end} were delivered",
                    self.peer
                );
            }
            HostMover::default().copy(elem, src, dst, c)
        }
    }

    /// Single copies whose members take their outputs in `k` steps along `axis` (and,
    /// with `input`, whose inputs are written in steps too): every cell lands, and no
    /// copy reaches a step after it was signalled.
    fn landing_case(
        pdims: [i32; 2],
        contiguous: bool,
        axis: Axis,
        k: i64,
        in_steps: Option<(Axis, i64)>,
    ) {
        let what = format!("steps along {axis}, input steps {in_steps:?}");
        single_copy_world(pdims, contiguous, &what, |run, members, sub| {
            let plan = run.plan;
            let landing: Vec<Landing> = (0..plan.npeers())
                .map(|p| {
                    let along = plan.peer_out_layouts[p].along(axis, plan.peer_out_elems[p]);
                    Landing {
                        along: Some(along),
                        ends: (1..k).map(|j| along.count * j / k).collect(),
                    }
                })
                .collect();
            let delivered = Mutex::new(vec![0usize; plan.npeers()]);
            let movers = |dst: Buf| -> Box<dyn Mover + '_> {
                let peer = members.iter().position(|&m| m == dst).unwrap();
                Box::new(LandingChecked {
                    landing: &landing[peer],
                    peer,
                    delivered: &delivered,
                })
            };
            let ends: Vec<i64> = in_steps.map_or_else(Vec::new, |(a, k)| {
                let count = plan.in_layout.along(a, plan.input.size).count;
                (1..k).map(|j| count * j / k).collect()
            });
            let wait = |_: usize| Ok(());
            let staged = in_steps.map(|(a, _)| InputSteps {
                axis: a,
                ends: ends.clone(),
                wait: &wait,
            });
            let x = Met(sub, Some(&delivered));
            run.single_copy(members, &landing, &movers, 0, &x, staged.as_ref())
                .unwrap();
            for (p, l) in landing.iter().enumerate() {
                let want = if p == plan.me { 0 } else { l.steps() };
                assert_eq!(
                    delivered.lock().unwrap()[p],
                    want,
                    "steps delivered to peer {p}"
                );
            }
        });
    }
}
