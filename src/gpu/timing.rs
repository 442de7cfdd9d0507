//! What a timing asks for and where its samples came from (plain data; the
//! measuring is `Context::time` and `Context::time_async`).

/// How many runs to discard and to measure.
#[derive(Clone, Copy, Debug)]
pub struct TimingOptions {
    /// Runs before measuring (pipeline warm-up, clocks, caches).
    pub warmup: u32,
    /// Keep warming up (in batches of runs, doubling) until this many seconds
    /// have passed and two consecutive batches agree on the time per run within
    /// 5%. A GPU idles at a low clock (the H200: 345 MHz against 1980 under
    /// load) and ramps up over tens to hundreds of milliseconds: without this, a
    /// kernel measured after host-side work reads up to 5x slow.
    pub warmup_seconds: f64,
    /// Measured runs (at most 2048 with timestamps).
    pub repeats: u32,
}

impl Default for TimingOptions {
    fn default() -> Self {
        Self {
            warmup: 2,
            warmup_seconds: 0.3,
            repeats: 10,
        }
    }
}

/// Where the samples came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSource {
    /// GPU timestamp queries at the start and end of each run's compute pass.
    GpuTimestamps,
    /// Host clock around submit and wait (includes submission overhead).
    WallClock,
}
