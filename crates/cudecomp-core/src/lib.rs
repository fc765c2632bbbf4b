//! cudecomp core: slab and pencil decompositions of 3-D grids, global transposes and
//! halo updates, usable from Rust without Python.
//!
//! Layers (each only uses those above it): [`geometry`] and [`plan`] are pure;
//! [`comm`] moves bytes; [`mem`] holds memory spaces and copy kernels; [`engine`]
//! executes plans; [`handle`] ties them into the objects the Python API exposes.

pub mod autotune;
pub mod comm;
pub mod config;
pub mod cuda;
pub mod engine;
mod error;
pub mod geometry;
pub mod handle;
pub mod mem;
pub mod perf;
pub mod plan;

pub use error::{Error, Result};
