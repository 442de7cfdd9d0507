//! Attention against a CPU f64 reference.
//!
//! Error rule (flash-attention's own tests): the flash kernel's largest error
//! against f64 must be at most 2x the naive GPU path's (same inputs, same
//! precision) plus a small absolute slack: 2e-6 for f32, 1e-3 for f16 (one
//! f16 rounding step of outputs near 1 is 4.9e-4). Both must also be within
//! an absolute bound (1e-4 f32, 1e-2 f16, times max(1, max lse) since logit
//! rounding grows with the logits) so a broken naive path cannot hide
//! a broken flash one. Outputs are poisoned with NaN before the kernels run.

#[path = "../common/mod.rs"]
mod common;

mod helpers;

mod backward;
mod coop;
mod decode;
mod forward;
mod masks;
mod model;
