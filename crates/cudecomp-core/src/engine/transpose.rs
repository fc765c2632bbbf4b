//! Executes a transpose plan: packing and unpacking through a mover (host or device),
//! exchange through a transport (MPI, host-staged MPI, NCCL).
//!
//! Workspace layout (elements): packed send chunks from 0, packed receive chunks from
//! `plan.recv_base`. Chunks are sent straight from the input / received straight into
//! the output when the plan says they are dense there and aliasing allows it.

use crate::comm::{pieces, post_pieces, Request, Transport, Way};
use crate::geometry::TransposeBackend;
use crate::mem::{Buf, Mover};
use crate::plan::TransposePlan;
use crate::{unsupported, Result};

/// Buffers and means of one transpose. `input == output` (same start address) means in-place.
#[derive(Clone, Copy)]
pub struct TransposeRun<'a> {
    pub plan: &'a TransposePlan,
    pub backend: TransposeBackend,
    pub elem: usize,
    pub mover: &'a dyn Mover,
    pub input: Buf,
    pub output: Buf,
    pub work: Buf,
}

const TAG_TRANSPOSE: i32 = 0;

impl TransposeRun<'_> {
    fn e(&self) -> i64 {
        self.elem as i64
    }

    fn in_place(&self) -> bool {
        self.input.ptr() == self.output.ptr()
    }

    fn pipelined(&self) -> bool {
        matches!(
            self.backend,
            TransposeBackend::MpiP2pPl | TransposeBackend::NcclPl
        )
    }

    fn send_direct(&self) -> bool {
        self.plan.send_from_input && !self.in_place()
    }

    fn recv_direct(&self) -> bool {
        self.plan.recv_into_output && !(self.in_place() && self.pipelined())
    }

    fn bytes(&self, peer_count: i64) -> usize {
        (peer_count * self.e()) as usize
    }

    /// Where `peer`'s outgoing chunk lives: `(buffer, byte offset)`.
    fn send_slot(&self, peer: usize) -> (Buf, i64) {
        if self.send_direct() {
            (self.input, self.plan.send_offset_in_input(peer) * self.e())
        } else {
            (self.work, self.plan.sends[peer].offset * self.e())
        }
    }

    /// Where `peer`'s incoming chunk lands: `(buffer, byte offset)`.
    fn recv_slot(&self, peer: usize) -> (Buf, i64) {
        if self.recv_direct() {
            (
                self.output,
                self.plan.recv_offset_in_output(peer) * self.e(),
            )
        } else {
            (
                self.work,
                (self.plan.recv_base + self.plan.recvs[peer].offset) * self.e(),
            )
        }
    }

    fn pack(&self, peer: usize) -> Result<()> {
        if self.send_direct() || self.plan.sends[peer].count == 0 {
            return Ok(());
        }
        self.mover
            .copy(self.elem, self.input, self.work, &self.plan.pack(peer))
    }

    fn unpack(&self, peer: usize) -> Result<()> {
        if self.recv_direct() || self.plan.recvs[peer].count == 0 {
            return Ok(());
        }
        self.mover.copy(
            self.elem,
            self.work,
            self.output,
            &self.plan.unpack_from(peer, self.plan.recv_base),
        )
    }

    /// In-place runs stage this rank's own chunk through the send region (packed before
    /// anything lands in the shared buffer); out-of-place runs copy it directly.
    fn self_before(&self) -> Result<()> {
        let me = self.plan.me;
        if self.in_place() {
            if self.plan.sends[me].count > 0 {
                self.mover
                    .copy(self.elem, self.input, self.work, &self.plan.pack(me))?;
            }
            Ok(())
        } else {
            self.mover
                .copy(self.elem, self.input, self.output, &self.plan.self_copy())
        }
    }

    fn self_after(&self) -> Result<()> {
        if self.in_place() {
            self.mover.copy(
                self.elem,
                self.work,
                self.output,
                &self.plan.unpack_self_packed(),
            )?;
        }
        Ok(())
    }

    /// Posts `peer`'s receive or send; returns the number of requests (0 when empty).
    fn post(
        &self,
        comm: &dyn Transport,
        way: Way,
        peer: usize,
        reqs: &mut Vec<Request>,
    ) -> Result<usize> {
        let (count, (buf, off)) = match way {
            Way::Receive => (self.plan.recvs[peer].count, self.recv_slot(peer)),
            Way::Send => (self.plan.sends[peer].count, self.send_slot(peer)),
        };
        let n = self.bytes(count);
        if n == 0 {
            return Ok(0);
        }
        let p = buf.range(off, n as i64)?;
        // SAFETY: the range is inside `buf`, which outlives the exchange (waited below).
        unsafe { post_pieces(comm, way, p, n, peer, TAG_TRANSPOSE, reqs) }
    }

    /// Runs the transpose. `comm` is the plan's sub-communicator.
    pub fn run(&self, comm: &dyn Transport) -> Result<()> {
        let plan = self.plan;
        if plan.npeers() == 1 {
            if self.in_place() && plan.is_identity_in_place() {
                return Ok(());
            }
            self.self_before()?;
            return self.self_after();
        }
        match self.backend {
            TransposeBackend::MpiP2p | TransposeBackend::Nccl => self.p2p(comm),
            TransposeBackend::MpiP2pPl | TransposeBackend::NcclPl => self.p2p_pipelined(comm),
            TransposeBackend::MpiA2a => self.alltoallv(comm),
            b => unsupported!(
                "transpose backend {} is not implemented: expected MPI_P2P, MPI_P2P_PL, MPI_A2A, NCCL or NCCL_PL",
                b.display_name()
            ),
        }
    }

    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        self.plan.schedule.iter().map(|&(to, _)| to)
    }

    fn p2p(&self, comm: &dyn Transport) -> Result<()> {
        for p in self.others() {
            self.pack(p)?;
        }
        self.self_before()?;
        let mut reqs = Vec::new();
        for &(to, from) in &self.plan.schedule {
            self.post(comm, Way::Receive, from, &mut reqs)?;
            self.post(comm, Way::Send, to, &mut reqs)?;
        }
        comm.wait_all(&mut reqs)?;
        self.self_after()?;
        for p in self.others() {
            self.unpack(p)?;
        }
        Ok(())
    }

    /// Receives are posted first; each peer's chunk is packed and sent in turn, and each
    /// arriving chunk is unpacked while later ones are still in flight.
    fn p2p_pipelined(&self, comm: &dyn Transport) -> Result<()> {
        if self.in_place() {
            self.self_before()?;
        }
        let mut recvs = Vec::new();
        let mut owner = Vec::new();
        let mut remaining = vec![0usize; self.plan.npeers()];
        for &(_, from) in &self.plan.schedule {
            let n = self.post(comm, Way::Receive, from, &mut recvs)?;
            owner.extend(std::iter::repeat_n(from, n));
            remaining[from] = n;
        }
        let mut sends = Vec::new();
        for p in self.others() {
            self.pack(p)?;
            self.post(comm, Way::Send, p, &mut sends)?;
        }
        if !self.in_place() {
            self.self_before()?;
        }
        while let Some(i) = comm.wait_any(&mut recvs)? {
            let p = owner[i];
            remaining[p] -= 1;
            if remaining[p] == 0 {
                self.unpack(p)?;
            }
        }
        comm.wait_all(&mut sends)?;
        self.self_after()
    }

    fn alltoallv(&self, comm: &dyn Transport) -> Result<()> {
        let np = self.plan.npeers();
        let me = self.plan.me;
        let mut sc = vec![0usize; np];
        let mut sd = vec![0usize; np];
        let mut rc = vec![0usize; np];
        let mut rd = vec![0usize; np];
        let (sbuf, _) = self.send_slot(me);
        let (rbuf, _) = self.recv_slot(me);
        for p in self.others() {
            sc[p] = self.bytes(self.plan.sends[p].count);
            rc[p] = self.bytes(self.plan.recvs[p].count);
            sd[p] = self.send_slot(p).1 as usize;
            rd[p] = self.recv_slot(p).1 as usize;
            sbuf.range(sd[p] as i64, sc[p] as i64)?;
            rbuf.range(rd[p] as i64, rc[p] as i64)?;
        }
        let fits =
            |v: &[usize], c: &[usize]| v.iter().zip(c).all(|(&d, &n)| d + n < i32::MAX as usize);
        if !fits(&sd, &sc) || !fits(&rd, &rc) || sc.iter().chain(&rc).any(|&n| pieces(n) > 1) {
            // Counts beyond MPI's int: the point-to-point path cuts messages into pieces.
            return self.p2p(comm);
        }
        for p in self.others() {
            self.pack(p)?;
        }
        self.self_before()?;
        // SAFETY: every (displacement, count) range was checked against its buffer above.
        unsafe { comm.alltoallv(sbuf.ptr(), &sc, &sd, rbuf.ptr(), &rc, &rd)? };
        self.self_after()?;
        for p in self.others() {
            self.unpack(p)?;
        }
        Ok(())
    }
}
