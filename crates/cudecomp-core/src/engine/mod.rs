//! Engines execute plans: packing, exchange through a communicator, unpacking.

pub mod direct;
pub mod exchange;
pub mod halo;
pub mod staged;
pub mod streamed;
pub mod transpose;
