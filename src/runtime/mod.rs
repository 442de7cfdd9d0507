//! The runtime: [`Context`] (the device with its pipeline caches and
//! autotuner), the handles it gives out ([`Tensor`], [`Plan`]), the timing of
//! plans and the padding layer's copies. Encodes and submits; never decides
//! which kernel runs (that is `tune`'s job).

mod context;
mod pad_copy;
mod plan;
mod tensor;
mod timing;

pub use context::*;
pub(crate) use pad_copy::*;
pub use plan::*;
pub use tensor::*;
pub use timing::*;
