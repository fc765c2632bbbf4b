//! What a GPU handle's operations run with: the bound device, NCCL (created with the first
//! grid that needs it) and whether MPI takes device pointers.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::comm::Communicator;
use crate::cuda::nccl::Nccl;
use crate::cuda::nvshmem::{self, Nvshmem, SymmetricBuffer};
use crate::cuda::Device;
use crate::{Error, Result};

/// The GPU side of a handle.
pub struct DeviceState {
    /// The device the handle was created on.
    pub device: Arc<Device>,
    nccl_path: String,
    nccl: Mutex<Option<Arc<Nccl>>>,
    /// MPI reads device memory directly; otherwise messages are staged through the host.
    pub mpi_cuda_aware: bool,
    /// NCCL exchanges through a registered workspace (`CUDECOMP_ENABLE_NCCL_UBR`).
    nccl_registration: bool,
    nvshmem_path: String,
    nvshmem: Mutex<Option<Arc<Nvshmem>>>,
    /// Symmetric buffers lent to the user, in the order they were made (the same on
    /// every rank): those still there are freed at `finalize`.
    lent: Mutex<Vec<SymmetricBuffer>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DeviceState {
    /// The state of a handle on `device`; `nccl_path` locates `libnccl.so.2`,
    /// `nvshmem_path` NVSHMEM's `libnvshmem_host.so.3`; `nccl_registration`: NCCL
    /// exchanges through a registered workspace.
    pub fn new(
        device: Arc<Device>,
        nccl_path: String,
        nvshmem_path: String,
        mpi_cuda_aware: bool,
        nccl_registration: bool,
    ) -> DeviceState {
        DeviceState {
            device,
            nccl_path,
            nccl: Mutex::new(None),
            mpi_cuda_aware,
            nccl_registration,
            nvshmem_path,
            nvshmem: Mutex::new(None),
            lent: Mutex::new(Vec::new()),
        }
    }

    /// Collective: starts this handle's share of the process's NVSHMEM runtime over `comm`
    /// (the handle's), unless started; `same_node[r]`: rank `r` shares this rank's node.
    pub(crate) fn start_nvshmem(&self, comm: &dyn Communicator, same_node: &[bool]) -> Result<()> {
        let mut n = lock(&self.nvshmem);
        if n.is_none() {
            *n = Some(nvshmem::acquire(
                &self.nvshmem_path,
                comm,
                &self.device,
                same_node,
            )?);
        }
        Ok(())
    }

    /// This handle's share of the NVSHMEM runtime (started at the creation of the first
    /// grid that uses it).
    pub(crate) fn nvshmem(&self) -> Result<Arc<Nvshmem>> {
        lock(&self.nvshmem)
            .clone()
            .ok_or_else(|| Error::Internal("NVSHMEM used before the runtime was started".into()))
    }

    /// Collective: lends `bytes` (the most any rank asks for) of symmetric memory.
    pub(crate) fn lend_symmetric(
        &self,
        comm: &dyn Communicator,
        bytes: usize,
    ) -> Result<SymmetricBuffer> {
        let runtime = self.nvshmem()?;
        let b = SymmetricBuffer::new(&runtime, &self.device, comm, bytes)?;
        let mut lent = lock(&self.lent);
        lent.retain(SymmetricBuffer::live);
        lent.push(b.clone());
        Ok(b)
    }

    /// This handle stops using NVSHMEM: frees the symmetric buffers it lent that are still
    /// there (collective, in the order they were made), then lets go of the runtime (after
    /// the workspaces' symmetric memory was freed; the process's runtime stays up for
    /// later handles).
    pub(crate) fn release_nvshmem(&self) -> Result<()> {
        let lent = std::mem::take(&mut *lock(&self.lent));
        for b in &lent {
            b.release(&self.device)?;
        }
        lock(&self.nvshmem).take();
        Ok(())
    }

    /// Collective on first use: the NCCL communicator over `comm` (the handle's).
    pub(crate) fn nccl(&self, comm: &dyn Communicator) -> Result<Arc<Nccl>> {
        let mut n = lock(&self.nccl);
        if let Some(n) = n.as_ref() {
            return Ok(n.clone());
        }
        self.device.bind()?;
        let made = Arc::new(Nccl::new(&self.nccl_path, comm, self.nccl_registration)?);
        *n = Some(made.clone());
        Ok(made)
    }

    /// Collective: destroys the NCCL communicator, if any.
    pub(crate) fn destroy_nccl(&self) -> Result<()> {
        if let Some(n) = lock(&self.nccl).take() {
            self.device.bind()?;
            n.destroy()?;
        }
        Ok(())
    }
}
