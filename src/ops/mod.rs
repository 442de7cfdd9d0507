//! Operations, one module per family. Each op checks its inputs, asks `tune`
//! which kernel to run, and builds a [`Plan`](crate::Plan) of dispatches.

pub mod attention;
pub mod elementwise;
pub mod fused_rows;
pub mod matmul;
pub mod reduce;
pub mod rowops;
