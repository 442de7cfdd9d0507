//! Host-generated WGSL: text the shaders mark `// @gen NAME` and the host
//! writes per specialisation (fragment loops unrolled into named variables,
//! optional bindings). Generators take shapes, never decide them.

pub mod coop_backward;
pub mod coop_decode;
pub mod flash_coop;
pub mod fusion;
pub(crate) mod matmul_coop;
