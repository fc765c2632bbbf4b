//! Engines execute plans. [`route`] decides how an operation's data moves; [`run`] sets
//! up its workspace and exchange and drives the pipelines of [`transpose`] and [`halo`],
//! which pack, exchange through an [`exchange`] implementation or a transport, and unpack.

pub mod device;
pub mod direct;
pub mod exchange;
pub mod halo;
pub mod nvshmem;
pub mod route;
pub mod run;
pub mod staged;
pub mod streamed;
pub mod transpose;
pub mod workspace;

use crate::cuda::Stream;

/// Where an operation runs: on host memory (synchronously), or on device memory,
/// enqueued on a CUDA stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// Host buffers; the call returns when the operation is done.
    Host,
    /// Device buffers; work is ordered on the stream (MPI routes synchronise it).
    Device(Stream),
}

impl Exec {
    /// Words for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Exec::Host => "host memory",
            Exec::Device(_) => "CUDA device memory",
        }
    }
}
