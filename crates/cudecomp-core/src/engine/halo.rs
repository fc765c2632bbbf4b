//! Executes a halo plan: faces packed through a mover, exchanged through a transport.

use crate::comm::{post_pieces, Request, Transport, Way};
use crate::geometry::HaloBackend;
use crate::mem::{Buf, Mover};
use crate::plan::{Copy3, HaloPlan, HaloSide};
use crate::{unsupported, Result};

/// Buffers and means of one halo update.
#[derive(Clone, Copy)]
pub struct HaloRun<'a> {
    pub plan: &'a HaloPlan,
    pub backend: HaloBackend,
    pub elem: usize,
    pub mover: &'a dyn Mover,
    pub data: Buf,
    pub work: Buf,
}

impl HaloRun<'_> {
    fn copy(&self, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
        self.mover.copy(self.elem, src, dst, c)
    }

    /// `(buffer, byte offset)` of the face sent to, or received from, `side`.
    fn face(&self, side: HaloSide, receive: bool) -> (Buf, i64) {
        let p = self.plan;
        let e = self.elem as i64;
        if p.faces_dense() {
            let b = if receive {
                &p.recv[side as usize]
            } else {
                &p.send[side as usize]
            };
            (self.data, p.array_offset(b) * e)
        } else {
            (self.work, p.slot_offset(side, receive) * e)
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
        let n = (self.plan.face * self.elem as i64) as usize;
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
        if self.plan.neighbours[side as usize].is_some() && !self.plan.faces_dense() {
            self.copy(self.data, self.work, &self.plan.pack(side))?;
        }
        Ok(())
    }

    fn unpack(&self, side: HaloSide) -> Result<()> {
        if self.plan.neighbours[side as usize].is_some() && !self.plan.faces_dense() {
            self.copy(self.work, self.data, &self.plan.unpack(side))?;
        }
        Ok(())
    }

    /// Runs the update. `comm` is the handle's communicator (global ranks).
    pub fn run(&self, comm: &dyn Transport) -> Result<()> {
        if self.plan.local_wrap {
            for side in HaloSide::BOTH {
                self.copy(self.data, self.data, &self.plan.wrap_copy(side))?;
            }
            return Ok(());
        }
        match self.backend {
            HaloBackend::Mpi | HaloBackend::Nccl => {
                let mut reqs = Vec::new();
                for side in HaloSide::BOTH {
                    self.pack(side)?;
                    self.post(comm, side, true, &mut reqs)?;
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
                "halo backend {} is not implemented: expected MPI, MPI_BLOCKING or NCCL",
                b.display_name()
            ),
        }
    }
}
