//! The runtime: [`Context`] (the device with its pipeline caches and
//! autotuner), the tensor constructors, the timing of plans and the padding
//! layer's copies. Encodes and submits; never decides
//! which kernel runs (that is `tune`'s job).

mod batch;
mod cast;
mod context;
mod epilogue;
mod pad_copy;
mod tensor;
mod timing;

pub(crate) use cast::*;
pub use context::*;
pub use epilogue::{Activation, Epilogue};
pub(crate) use pad_copy::*;
pub use timing::*;
