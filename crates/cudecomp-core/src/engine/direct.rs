//! The DIRECT backend on host memory: workspaces live in node-shared memory (see
//! [`crate::mem::shm`]), so each rank packs every chunk straight into the receiving
//! rank's workspace, then, after one barrier, unpacks what landed in its own. Each
//! off-rank cell is copied twice (pack, unpack) by plain loads and stores; no MPI message
//! carries data.

use crate::comm::Communicator;
use crate::engine::transpose::{Piece, SliceExchange};
use crate::mem::shm::SharedWorkspaces;
use crate::mem::Buf;
use crate::{Error, Result};

/// Host slices: packing writes into the peers' shared workspaces; the barrier after the
/// packing is the whole exchange.
pub struct SharedSlices<'a> {
    pub workspaces: &'a SharedWorkspaces,
    /// Handle rank of each peer of the plan's sub-communicator.
    pub members: &'a [usize],
    /// The plan's sub-communicator.
    pub comm: &'a dyn Communicator,
}

impl SliceExchange for SharedSlices<'_> {
    fn lands_in_output(&self) -> bool {
        false
    }

    fn pack_into(&self, peer: usize) -> Option<Buf> {
        self.workspaces.peer(self.members[peer])
    }

    /// Host packing is synchronous: slicing would only add calls.
    fn max_slices(&self) -> usize {
        1
    }

    fn ready(&self, _u: usize) -> Result<()> {
        Ok(())
    }

    fn exchange(&self, _u: usize, _k: usize, sends: &[Piece], _recvs: &[Piece]) -> Result<()> {
        match sends.first() {
            // Every slice is packed into a mapped peer workspace, never sent.
            Some(p) => Err(Error::Internal(format!(
                "DIRECT: rank {} has no mapped shared workspace",
                self.members[p.peer]
            ))),
            None => Ok(()),
        }
    }

    fn posted(&self) -> Result<()> {
        // Every rank has packed into its peers' workspaces.
        self.comm.barrier()
    }

    fn arrived(&self, _u: usize, _k: usize, _recvs: &[Piece]) -> Result<()> {
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }
}
