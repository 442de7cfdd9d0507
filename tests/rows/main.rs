//! Row kernels against f64 CPU references: reductions, softmax and norms
//! (`rowops`), and the same row ops of elementwise expressions fused into
//! one kernel (`fused`).

#[path = "../common/mod.rs"]
mod common;

mod fused;
mod rowops;
