//! Operations, one module per family. Each op checks its inputs, asks `tune`
//! which kernel to run, and builds a [`Plan`](crate::Plan) of dispatches.

pub mod attention;
pub mod elementwise;
pub mod fused_rows;
pub mod matmul;
pub mod reduce;
pub mod rowops;

/// A timing or debugging probe from the environment: the number in `name`,
/// 0 when unset or not a number.
pub(crate) fn env_probe(name: &str) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
