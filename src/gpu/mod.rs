//! The device layer: adapter facts ([`AdapterProfile`]) and what a timing
//! asks for. Knows no op and makes no choice.

#[cfg(any(test, feature = "dev"))]
mod fake;
mod profile;
mod timing;

pub use profile::{AdapterProfile, CoopMatrixConfig, estimate_compute_units};
pub use timing::{TimeSource, TimingOptions};
