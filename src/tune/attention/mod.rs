//! The attention dispatcher: tile sizes of the flash kernel per adapter and
//! head dimension, and the number of key splits for decoding (flash-decoding).
//!
//! It decides only; `ops::attention` builds and encodes the dispatches.

use std::fmt;

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::{Kernel, Spec};

pub(crate) use crate::kernels::codegen::flash_coop::CoopLaunch;
pub use crate::kernels::codegen::flash_coop::{
    FLASH_COOP_TEXT_DEFAULT, FlashCoopTiles, MAX_FLASH_COOP_DIM,
};

mod backward;
pub mod coop_backward;
pub mod coop_decode;
mod decode;
mod flash;
mod flash_coop;
#[cfg(any(test, feature = "dev"))]
mod specs;
#[cfg(any(test, feature = "dev"))]
mod sweep;

pub use backward::*;
pub use coop_backward::{
    BACKWARD_COOP_CANDIDATES, BACKWARD_COOP_SWEEP, BackwardCoopPass, BackwardCoopTiles,
    backward_coop_tiles,
};
pub use coop_decode::{
    decode_coop_fits, decode_coop_rf, decode_coop_spec, decode_coop_splits,
    decode_coop_workgroup_bytes,
};
pub use decode::*;
pub use flash::*;
pub use flash_coop::*;
#[cfg(any(test, feature = "dev"))]
pub use specs::*;
#[cfg(any(test, feature = "dev"))]
pub use sweep::*;

/// The split-merge kernel's specialisation for value head dim `dv` and its
/// grid's z size (column chunks): 256 invocations (64 where the adapter
/// allows fewer) over 32 columns, so 8 (2) split lanes read a row's splits
/// in parallel.
pub(crate) fn merge_spec(profile: &AdapterProfile, dtype: DType, dv: usize) -> (Spec, u32) {
    const CW: usize = 32;
    let wg = if profile.max_invocations >= 256 && profile.max_workgroup_size_x >= 256 {
        256
    } else {
        64
    };
    let spec = Spec::new(Kernel::AttentionMerge)
        .dtype(dtype)
        .override_("WG", wg)
        .override_("CW", CW as u32);
    (spec, dv.div_ceil(CW).max(1) as u32)
}
