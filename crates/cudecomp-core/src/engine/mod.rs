//! Engines execute plans: packing, exchange through a communicator, unpacking.

pub mod transpose;
