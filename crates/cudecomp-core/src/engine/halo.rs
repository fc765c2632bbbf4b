//! Executes a halo plan: faces packed through a mover, exchanged through a transport.

use crate::comm::{post_pieces, Request, Transport, Way};
use crate::config::HaloBackend;
use crate::engine::exchange::FaceExchange;
use crate::engine::pipeline::Batch;
use crate::mem::{Buf, FieldSteps, Mover};
use crate::plan::{slice_count, Copy3, HaloPlan, HaloSide};
use crate::{unsupported, Result};

/// Buffers and means of one halo update.
#[derive(Clone, Copy)]
pub(crate) struct HaloRun<'a> {
    /// What to copy and exchange.
    pub plan: &'a HaloPlan,
    /// The grid's halo backend (blocking or not; DIRECT runs through [`HaloRun::direct`]).
    pub backend: HaloBackend,
    /// Bytes per element.
    pub elem: usize,
    /// Copies faces between the array and the workspace (host or device).
    pub mover: &'a dyn Mover,
    /// The user's array holding the pencil, halos included; updated in place.
    pub data: Buf,
    /// Workspace for packed faces (send slots, then receive slots).
    pub work: Buf,
    /// Fields updated together: `count` pencils `in_stride` elements apart in `data`;
    /// each workspace slot holds every field's face, one after another.
    pub fields: Batch,
}

impl HaloRun<'_> {
    fn copy(&self, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
        self.mover.copy(self.elem, src, dst, c)
    }

    /// Every field of the batch, `src` elements apart in a copy's source and `dst` in its
    /// destination.
    fn steps(&self, src: i64, dst: i64) -> FieldSteps {
        FieldSteps::new(self.fields.count, src, dst)
    }

    /// Faces travel straight from and into the array: dense there, and one field (a
    /// batch's faces lie a pencil apart, so they are packed side by side).
    fn dense(&self) -> bool {
        self.plan.faces_dense() && self.fields.count == 1
    }

    /// Element offset of the workspace slot of `side`'s face, every field's in turn.
    fn slot(&self, side: HaloSide, receive: bool) -> i64 {
        self.plan.slot_offset(side, receive) * self.fields.count
    }

    /// The pack (`receive` false) or unpack copy `c` of `side`'s face moved to field `f`:
    /// its array side a pencil further per field, its workspace side into the field's
    /// place in the batch's slot.
    fn of_field(&self, mut c: Copy3, f: i64, side: HaloSide, receive: bool) -> Copy3 {
        let (stride, face) = (self.fields.in_stride, self.plan.face);
        let slot = self.slot(side, receive) - self.plan.slot_offset(side, receive) + f * face;
        if receive {
            c.src_offset += slot;
            c.dst_offset += f * stride;
        } else {
            c.src_offset += f * stride;
            c.dst_offset += slot;
        }
        c
    }

    /// `(buffer, byte offset)` of the face sent to, or received from, `side`.
    fn face(&self, side: HaloSide, receive: bool) -> (Buf, i64) {
        let p = self.plan;
        let e = self.elem as i64;
        if self.dense() {
            let b = if receive {
                &p.recv[side as usize]
            } else {
                &p.send[side as usize]
            };
            (self.data, p.array_offset(b) * e)
        } else {
            (self.work, self.slot(side, receive) * e)
        }
    }

    fn post(
        &self,
        comm: &dyn Transport,
        side: HaloSide,
        receive: bool,
        reqs: &mut Vec<Request>,
    ) -> Result<()> {
        let Some(peer) = self.plan.neighbours[side as usize] else {
            return Ok(());
        };
        let n = (self.plan.face * self.fields.count * self.elem as i64) as usize;
        let (buf, off) = self.face(side, receive);
        let ptr = buf.range(off, n as i64)?;
        // A message travelling towards `side` carries that side's tag; what arrives from
        // `side` travels towards its opposite.
        let (way, tag) = if receive {
            (Way::Receive, side.opposite().tag())
        } else {
            (Way::Send, side.tag())
        };
        // SAFETY: the range is inside `buf`, which outlives the wait that follows.
        unsafe { post_pieces(comm, way, ptr, n, peer, tag, reqs)? };
        Ok(())
    }

    fn pack(&self, side: HaloSide) -> Result<()> {
        if self.plan.neighbours[side as usize].is_some() && !self.dense() {
            let c = self.of_field(self.plan.pack(side), 0, side, false);
            let fields = self.steps(self.fields.in_stride, self.plan.face);
            self.mover
                .copy_fields(self.elem, self.data, self.work, &c, fields)?;
        }
        Ok(())
    }

    fn unpack(&self, side: HaloSide) -> Result<()> {
        if self.plan.neighbours[side as usize].is_some() && !self.dense() {
            let c = self.of_field(self.plan.unpack(side), 0, side, true);
            let fields = self.steps(self.plan.face, self.fields.in_stride);
            self.mover
                .copy_fields(self.elem, self.work, self.data, &c, fields)?;
        }
        Ok(())
    }

    /// Periodic wrap onto this rank itself; false when neighbours are other ranks.
    fn wrap(&self) -> Result<bool> {
        if !self.plan.local_wrap {
            return Ok(false);
        }
        let stride = self.fields.in_stride;
        for side in HaloSide::BOTH {
            let fields = self.steps(stride, stride);
            self.mover.copy_fields(
                self.elem,
                self.data,
                self.data,
                &self.plan.wrap_copy(side),
                fields,
            )?;
        }
        Ok(true)
    }

    /// Runs the update with the DIRECT backend: each face that needs packing is cut into
    /// slices of about `slice_bytes` (the exchange's own size when `None`); each slice is
    /// packed (unless the face is dense),
    /// delivered into the neighbour's receive slot and unpacked by the neighbour once
    /// signalled, so packing, delivery and unpacking of successive slices overlap. `work`
    /// must be the workspace the neighbours address.
    pub(crate) fn direct(&self, x: &dyn FaceExchange, slice_bytes: Option<i64>) -> Result<()> {
        if self.wrap()? {
            return Ok(());
        }
        if self.fields.count > 1 {
            return self.direct_batch(x);
        }
        let p = self.plan;
        let e = self.elem as i64;
        // Dense faces go whole: with no packing to overlap, slices only add copies and
        // signals; packed faces gain from slices (measured; see the benchmark record).
        let n = if p.faces_dense() {
            1
        } else {
            let bytes = slice_bytes.unwrap_or_else(|| x.slice_bytes());
            slice_count(p.face, self.elem, bytes, x.max_slices())
        };
        let mut first = true;
        for side in HaloSide::BOTH {
            let Some(to) = p.neighbours[side as usize] else {
                continue;
            };
            let (in_array, off) = p.send_source(side);
            let buf = if in_array { self.data } else { self.work };
            let face = &p.send[side as usize];
            for (s, part) in p.face_slices(side, false, n).iter().enumerate() {
                if !in_array {
                    self.copy(self.data, self.work, &p.pack_part(side, part))?;
                }
                let rel = p.offset_in_face(face, part);
                x.ready(first)?;
                first = false;
                x.deliver(
                    buf.slice((off + rel) * e, part.volume() * e)?,
                    to,
                    (p.peer_slot_offset(side) + rel) * e,
                    side as usize * n + s,
                )?;
            }
        }
        x.posted()?;
        // Neighbours deliver their left face first, which lands in this rank's right halo:
        // unpacking it overlaps the delivery of the other face.
        for side in [HaloSide::Right, HaloSide::Left] {
            if let Some(from) = p.neighbours[side as usize] {
                // The neighbour on `side` sends this face towards its opposite side.
                for (s, part) in p.face_slices(side, true, n).iter().enumerate() {
                    x.arrived(from, side.opposite() as usize * n + s)?;
                    self.copy(self.work, self.data, &p.unpack_part(side, part))?;
                }
            }
        }
        x.finish()
    }

    /// [`HaloRun::direct`] of a batch of fields: every field's face packed into its
    /// slot, each side's slot delivered whole, and unpacked field by field once arrived.
    fn direct_batch(&self, x: &dyn FaceExchange) -> Result<()> {
        let (p, e, k) = (self.plan, self.elem as i64, self.fields.count);
        let mut first = true;
        for side in HaloSide::BOTH {
            let Some(to) = p.neighbours[side as usize] else {
                continue;
            };
            self.pack(side)?;
            x.ready(first)?;
            first = false;
            let face = self
                .work
                .slice(self.slot(side, false) * e, k * p.face * e)?;
            x.deliver(face, to, p.peer_slot_offset(side) * k * e, side as usize)?;
        }
        x.posted()?;
        for side in [HaloSide::Right, HaloSide::Left] {
            if let Some(from) = p.neighbours[side as usize] {
                x.arrived(from, side.opposite() as usize)?;
                self.unpack(side)?;
            }
        }
        x.finish()
    }

    /// Runs the update. `comm` is the handle's communicator (global ranks).
    pub(crate) fn run(&self, comm: &dyn Transport) -> Result<()> {
        if self.wrap()? {
            return Ok(());
        }
        match self.backend {
            HaloBackend::Mpi | HaloBackend::Nccl => {
                let mut reqs = Vec::new();
                // Receives are posted in the order the neighbours send (their message
                // towards the left, then towards the right): NCCL has no tags and pairs
                // a rank's messages in posting order, which matters when both neighbours
                // are the same rank (two ranks, periodic).
                for side in HaloSide::BOTH {
                    self.pack(side)?;
                    self.post(comm, side.opposite(), true, &mut reqs)?;
                }
                for side in HaloSide::BOTH {
                    self.post(comm, side, false, &mut reqs)?;
                }
                comm.wait_all(&mut reqs)?;
                for side in HaloSide::BOTH {
                    self.unpack(side)?;
                }
                Ok(())
            }
            HaloBackend::MpiBlocking => {
                // One direction at a time: receive from one side while sending to the other.
                for side in HaloSide::BOTH {
                    let mut reqs = Vec::new();
                    self.pack(side)?;
                    self.post(comm, side.opposite(), true, &mut reqs)?;
                    self.post(comm, side, false, &mut reqs)?;
                    comm.wait_all(&mut reqs)?;
                    self.unpack(side.opposite())?;
                }
                Ok(())
            }
            b => unsupported!(
                "halo backend {} does not run over a message transport: expected MPI, MPI_BLOCKING or NCCL",
                b.display_name()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{mock, Communicator};
    use crate::config::GridConfig;
    use crate::geometry::Grid;
    use crate::mem::HostMover;
    use crate::plan::{HaloSpec, Layout};

    /// A transport without tags: messages between a pair match in posting order, as NCCL's.
    struct Tagless<'a>(&'a dyn Transport);

    impl Transport for Tagless<'_> {
        unsafe fn isend(
            &self,
            buf: *const u8,
            len: usize,
            peer: usize,
            _tag: i32,
        ) -> Result<Request> {
            // SAFETY: this method's contract is `isend`'s, passed on unchanged.
            unsafe { self.0.isend(buf, len, peer, 0) }
        }
        unsafe fn irecv(
            &self,
            buf: *mut u8,
            len: usize,
            peer: usize,
            _tag: i32,
        ) -> Result<Request> {
            // SAFETY: this method's contract is `irecv`'s, passed on unchanged.
            unsafe { self.0.irecv(buf, len, peer, 0) }
        }
        fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
            self.0.wait_all(reqs)
        }
        fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
            self.0.wait_any(reqs)
        }
        unsafe fn alltoallv(
            &self,
            send: *const u8,
            sc: &[usize],
            sd: &[usize],
            recv: *mut u8,
            rc: &[usize],
            rd: &[usize],
        ) -> Result<()> {
            // SAFETY: this method's contract is `alltoallv`'s, passed on unchanged.
            unsafe { self.0.alltoallv(send, sc, sd, recv, rc, rd) }
        }
    }

    /// Two ranks on a periodic axis are each other's left and right neighbour: without tags
    /// the two messages must still land in the right halos.
    #[test]
    fn two_rank_periodic_without_tags() {
        mock::run(2, |c: &dyn Communicator| {
            let cfg = GridConfig {
                gdims: [3, 4, 6],
                pdims: [1, 2],
                ..Default::default()
            };
            let g = Grid::new(&cfg, 2, false).unwrap();
            let spec = HaloSpec {
                axis: 0,
                dim: 2,
                halo: [0, 0, 1],
                periods: [false, false, true],
                padding: [0; 3],
            };
            let plan = crate::plan::HaloPlan::new(&g, c.rank(), spec)
                .unwrap()
                .unwrap();
            let l = Layout::of_pencil(&plan.info);
            let b = plan.info.interior();
            let mut data = vec![u64::MAX; plan.info.size as usize];
            let index = |z: i64| (z.rem_euclid(6) * 100) as u64;
            for z in b.lo[2]..b.lo[2] + b.len[2] {
                for y in 0..4 {
                    for x in 0..3 {
                        data[l.offset([x, y, z]) as usize] = index(z) + (x + 3 * y) as u64;
                    }
                }
            }
            let mut work = vec![0u64; plan.workspace_elems() as usize];
            let run = HaloRun {
                plan: &plan,
                backend: HaloBackend::Nccl,
                elem: 8,
                mover: &HostMover::default(),
                data: crate::mem::test_buf(bytes(&mut data)),
                work: crate::mem::test_buf(bytes(&mut work)),
                fields: Batch::ONE,
            };
            run.run(&Tagless(c)).unwrap();
            for z in [b.lo[2] - 1, b.lo[2] + b.len[2]] {
                for y in 0..4 {
                    for x in 0..3 {
                        assert_eq!(
                            data[l.offset([x, y, z]) as usize],
                            index(z) + (x + 3 * y) as u64,
                            "z={z}"
                        );
                    }
                }
            }
        });
    }

    fn bytes(v: &mut [u64]) -> &mut [u8] {
        let n = std::mem::size_of_val(v);
        // SAFETY: u64 has no padding; any byte pattern is a valid u8.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), n) }
    }
}
