//! Engines execute plans: packing, exchange through a communicator, unpacking.

pub mod halo;
pub mod transpose;
