//! The device layer: adapter facts ([`AdapterProfile`]). Knows no op and
//! makes no choice.

mod profile;

pub use profile::{AdapterProfile, CoopMatrixConfig, estimate_compute_units};
