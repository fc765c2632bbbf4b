//! Error type shared by every layer. Each variant stands for one `cudecompResult_t`
//! value (named in its doc); the Python bindings map each variant to an exception class.

use thiserror::Error;

/// A failed library call. The message says what was expected and what was given.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// Bad argument or call sequence (`CUDECOMP_RESULT_INVALID_USAGE`).
    #[error("{0}")]
    InvalidUsage(String),
    /// Valid request that this build or backend cannot serve (`CUDECOMP_RESULT_NOT_SUPPORTED`).
    #[error("{0}")]
    NotSupported(String),
    /// Broken internal invariant (`CUDECOMP_RESULT_INTERNAL_ERROR`).
    #[error("{0}")]
    Internal(String),
    /// CUDA driver or NVRTC failure (`CUDECOMP_RESULT_CUDA_ERROR`).
    #[error("{0}")]
    Cuda(String),
    /// MPI failure (`CUDECOMP_RESULT_MPI_ERROR`).
    #[error("{0}")]
    Mpi(String),
    /// NCCL failure (`CUDECOMP_RESULT_NCCL_ERROR`).
    #[error("{0}")]
    Nccl(String),
    /// NVSHMEM failure (`CUDECOMP_RESULT_NVSHMEM_ERROR`).
    #[error("{0}")]
    Nvshmem(String),
    /// The operating system refused a file operation (no upstream counterpart: upstream
    /// has no I/O); the message names the operation, the file and the system's reason.
    #[error("{0}")]
    Io(String),
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// `return Err(Error::InvalidUsage(format!(...)))`.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => { return Err($crate::Error::InvalidUsage(format!($($arg)*))) };
}

/// `return Err(Error::NotSupported(format!(...)))`.
#[macro_export]
macro_rules! unsupported {
    ($($arg:tt)*) => { return Err($crate::Error::NotSupported(format!($($arg)*))) };
}
