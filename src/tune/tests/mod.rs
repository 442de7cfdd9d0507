//! The dispatcher's decisions on fake adapter profiles, no GPU needed: the
//! matmul kernels and tiles (filtering by limits, wave arithmetic, tensor
//! cores, transposed operands, CPU adapters), the padding layer's cost model,
//! and the autotuner and its cache (shape buckets, keys, the JSON file, the
//! decision rules, with a fake measuring closure).

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};

use crate::tune::autotune::{
    AutotuneMode, Autotuner, DecisionSource, FAST_CANDIDATES, TUNE_MIN_FLOPS,
};
use crate::tune::cache::{
    CACHE_FORMAT_VERSION, DimBucket, Entry, Measurement, ShapeBucket, TuneCache, TuneKey,
    candidates_checksum,
};
use crate::tune::{self, COOP_CONFIGS, MatmulKernel, TILE_CONFIGS};
use crate::{AdapterProfile, DType, Error, Padding};

/// A discrete GPU: 132 compute units, 1024 invocations, 48 KiB of workgroup
/// memory, subgroups of 32, f16, no cooperative matrix.
fn gpu() -> AdapterProfile {
    AdapterProfile::fake_gpu().named("synthetic")
}

mod autotune;
mod matmul;
mod pad;
