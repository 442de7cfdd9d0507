//! Shaders checked with naga, no GPU needed: every kernel in every
//! specialisation the dispatcher can produce (`kernels`) and the generated
//! fused kernels (`fusion`) parse, validate and translate to SPIR-V, MSL
//! and HLSL.

#[path = "../common/mod.rs"]
mod common;

mod fusion;
mod kernels;
