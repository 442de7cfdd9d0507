//! # wgtile
//!
//! Fast, portable GPU compute on WebGPU (wgpu + WGSL): the techniques of a GPU
//! performance lecture (tiling, fusion, recomputation, low precision,
//! coalescing, padding against wave quantisation) packaged as a library that
//! runs on Vulkan, Metal, DX12 and in the browser.
//!
//! ```no_run
//! # fn main() -> wgtile::Result<()> {
//! let ctx = wgtile::Context::new_blocking(Default::default())?;
//! println!("{}", ctx.profile());
//! let a = ctx.rand_uniform([256, 128], -1.0, 1.0, wgtile::DType::F32, 1)?;
//! let b = ctx.rand_uniform([128, 64], -1.0, 1.0, wgtile::DType::F32, 2)?;
//! let c = ctx.matmul(&a, &b)?;                  // the dispatcher picks the kernel
//! let host: Vec<f32> = c.to_vec_blocking()?;
//! assert_eq!(host.len(), 256 * 64);
//! # Ok(()) }
//! ```
//!
//! Data flows one way: the [`Context`] methods (`ops`: checks, output
//! allocation) ask `tune` which kernel and tiles run, `kernels` specialises
//! and caches the pipelines, the runtime encodes and submits, and a
//! [`Tensor`] holds the result. `cargo xtask deps` checks that no module
//! imports a layer above its own.
//!
//! The library logs through `log`; it never installs a logger.

#![warn(missing_docs)]

/// Declares an internal module: crate-private in a default build, public
/// (and hidden from the docs) with the `dev` feature, for the wgtile-dev
/// crate and the tests that check kernels and decisions without a GPU.
macro_rules! internal {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "dev")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "dev"))]
        #[allow(dead_code, unused_imports)]
        mod $name;
    )*};
}

internal!(dev, kernels, ops, tune);

mod config;
mod dtype;
mod error;
mod expr;
mod gpu;
mod problem;
pub mod quant;
mod runtime;
#[cfg(test)]
mod snapshot_tests;

pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use expr::{BinaryOp, Expr, UnaryOp};
pub use gpu::BATCH_CHUNK;
pub use gpu::BufferPoolStats;
pub use gpu::Plan;
pub use gpu::{AdapterProfile, CoopMatrixConfig};
pub use gpu::{MAX_RANK, Tensor, normal_values, uniform_values};
pub use gpu::{TimeSource, TimingOptions};
pub use ops::attention::{
    AttentionGrads, AttentionKernel, AttentionLayout, AttentionMask, AttentionOptions,
    AttentionOutput, DiagonalAlignment, KvCache,
};
pub use ops::lessons::{Activations, BranchForm, ReadOrder, SigmoidChain};
pub use ops::matmul::{MatmulExplanation, MatmulOptions};
pub use ops::quant::QuantTensor;
pub use ops::rows::reduce::{Axis, Reduction};
pub use ops::rows::{RowOp, RowOptions};
pub use problem::{MatmulShape, Padding};
pub use quant::{QuantAxis, QuantFormat};
pub use runtime::Timing;
pub use runtime::{Activation, Epilogue};
pub use runtime::{Context, ContextOptions, DEFAULT_BUFFER_POOL_BYTES};
pub use tune::attention::{
    BackwardCoopTiles, BackwardTiles, DecodeTiles, FlashCoopTiles, FlashTiles,
};
pub use tune::pad::PadChoice;
pub use tune::{MatmulChoice, MatmulKernel, TileConfig};

/// Re-exported `half::f16`, the host type of [`DType::F16`].
pub use half::{bf16, f16};
/// The README's example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Re-exported so callers can name wgpu types (backends, features, limits)
/// without a separate, possibly mismatched, dependency.
pub use wgpu;
