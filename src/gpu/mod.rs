//! The device layer: the device and queue ([`Gpu`]), adapter facts
//! ([`AdapterProfile`]), tensors, dispatches and plans, and what a timing
//! asks for. Knows no op and makes no choice.

mod device;
mod dispatch;
#[cfg(any(test, feature = "dev"))]
mod fake;
mod plan;
mod pool;
mod profile;
mod scope;
mod tensor;
mod timing;

pub use device::BATCH_CHUNK;
pub(crate) use device::Gpu;
pub(crate) use dispatch::{Dispatch, grid};
pub use plan::Plan;
pub use pool::BufferPoolStats;
pub(crate) use pool::{Pool, PooledBuffer};
pub(crate) use scope::settle;
pub(crate) use tensor::{BUFFER_ALIGN, check_rank, last_dim, numel};
pub use tensor::{MAX_RANK, Tensor, normal_values, uniform_values};

pub use profile::{AdapterProfile, CoopMatrixConfig, estimate_compute_units};
pub use timing::{TimeSource, TimingOptions};
