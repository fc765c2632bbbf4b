//! Memory spaces. Buffers are borrowed, never owned: the library moves bytes inside
//! memory that Python (NumPy, CuPy, ...) or the handle's workspace owns.

pub mod host;

pub use host::HostBuf;
