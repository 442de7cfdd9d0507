//! GPU timing of [`Plan`]s: timestamp queries around each repeat when the
//! adapter has them (one submit for all repeats, so submit overhead stays out),
//! wall clock around submit + wait otherwise.

use std::fmt;

use crate::error::{Error, Result};
use crate::gpu::Plan;
pub use crate::gpu::{TimeSource, TimingOptions};
use crate::runtime::Context;

/// Samples of one measurement, in seconds.
#[derive(Clone, Debug)]
pub struct Timing {
    /// One duration per measured run, in seconds, in run order.
    pub samples: Vec<f64>,
    /// How they were measured.
    pub source: TimeSource,
}

impl Timing {
    /// Median run time in seconds.
    pub fn median(&self) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        match s.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => s[n / 2],
            n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
        }
    }

    /// Fastest run in seconds.
    pub fn min(&self) -> f64 {
        self.samples.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Slowest run in seconds.
    pub fn max(&self) -> f64 {
        self.samples.iter().copied().fold(0.0, f64::max)
    }

    /// Achieved GFLOP/s at the median time.
    pub fn gflops(&self, flops: u64) -> f64 {
        flops as f64 / self.median() / 1e9
    }

    /// Achieved GB/s at the median time.
    pub fn gbps(&self, bytes: u64) -> f64 {
        bytes as f64 / self.median() / 1e9
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "median {:.3} ms, min {:.3} ms, max {:.3} ms over {} runs ({})",
            self.median() * 1e3,
            self.min() * 1e3,
            self.max() * 1e3,
            self.samples.len(),
            match self.source {
                TimeSource::GpuTimestamps => "GPU timestamps",
                TimeSource::WallClock => "wall clock",
            }
        )
    }
}

/// Warm-up stops at this multiple of `warmup_seconds` even if unsettled.
const WARMUP_LIMIT_FACTOR: f64 = 5.0;

/// Most warm-up batches (each up to twice the last) before measuring anyway.
const WARMUP_BATCHES_MAX: u32 = 24;

/// Queries in one query set (wgpu's `QUERY_SET_MAX_QUERIES`).
const MAX_QUERIES: u32 = 4096;

impl Context {
    /// Times `plan`: `warmup` runs, then `repeats` measured runs (native
    /// only; in the browser await [`Context::time_async`]).
    /// [`Error::InvalidArgument`] for `repeats = 0` or a `warmup_seconds`
    /// that is negative or not finite.
    pub fn time(&self, plan: &Plan, options: &TimingOptions) -> Result<Timing> {
        if cfg!(target_arch = "wasm32") {
            return Err(Error::UnsupportedFeature {
                feature: "blocking waits",
                what: "Context::time in the browser (await Context::time_async)".into(),
            });
        }
        // Natively every wait inside blocks, so the future is ready at once.
        pollster::block_on(self.time_async(plan, options))
    }

    /// Times `plan` as [`Context::time`] does, resolving when done: the
    /// browser's way (GPU timestamps where the adapter grants them, else
    /// the page's clock around each run and its completion).
    pub async fn time_async(&self, plan: &Plan, options: &TimingOptions) -> Result<Timing> {
        if self.inner.gpu.in_batch() {
            return Err(Error::InvalidArgument(
                "time: a plan cannot be timed inside Context::batch (its runs would be recorded, not run)"
                    .into(),
            ));
        }
        crate::gpu::Gpu::check_same(&plan.gpu, &self.inner.gpu, "the plan")?;
        if options.repeats == 0 {
            return Err(Error::InvalidArgument(
                "timing needs at least one measured run (repeats = 0)".into(),
            ));
        }
        if !(options.warmup_seconds.is_finite() && options.warmup_seconds >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "warmup_seconds must be finite and >= 0, got {}",
                options.warmup_seconds
            )));
        }
        let repeats = options.repeats;
        let start = clock::now();
        for _ in 0..options.warmup {
            plan.run()?;
        }
        self.synchronize_async().await?;
        // Warm up until the time and until two consecutive batches agree on
        // the time per run (the clock has settled), doubling the batch.
        let mut batch = 1u32;
        let mut previous = f64::INFINITY;
        let mut settled = options.warmup_seconds <= 0.0;
        for _ in 0..WARMUP_BATCHES_MAX {
            let elapsed = clock::now() - start;
            // A noisy host (a software adapter sharing its cores) may never
            // settle: stop after a bounded multiple of the warm-up time.
            if (settled && elapsed >= options.warmup_seconds)
                || elapsed >= WARMUP_LIMIT_FACTOR * options.warmup_seconds
            {
                break;
            }
            let t = clock::now();
            for _ in 0..batch {
                plan.run()?;
            }
            self.synchronize_async().await?;
            let per_run = (clock::now() - t) / f64::from(batch);
            // A run longer than the whole warm-up ramped the clock by itself.
            settled =
                (per_run - previous).abs() <= 0.05 * previous || per_run >= options.warmup_seconds;
            previous = per_run;
            batch = batch.saturating_mul(2).min(1024);
        }
        if self.profile().timestamps {
            self.time_with_timestamps(plan, repeats.min(MAX_QUERIES / 2))
                .await
        } else {
            let mut samples = Vec::with_capacity(repeats as usize);
            for _ in 0..repeats {
                let start = clock::now();
                plan.run()?;
                self.synchronize_async().await?;
                samples.push(clock::now() - start);
            }
            Ok(Timing {
                samples,
                source: TimeSource::WallClock,
            })
        }
    }

    async fn time_with_timestamps(&self, plan: &Plan, repeats: u32) -> Result<Timing> {
        let device = self.device();
        let count = repeats * 2;
        let query_set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgtile timing"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let bytes = u64::from(count) * 8;
        let resolve = self.create_buffer(
            "wgtile timestamps",
            bytes,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )?;
        self.submit("timing", |enc| {
            for r in 0..repeats {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(&plan.label),
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &query_set,
                        beginning_of_pass_write_index: Some(2 * r),
                        end_of_pass_write_index: Some(2 * r + 1),
                    }),
                });
                for d in &plan.dispatches {
                    d.encode(&mut pass);
                }
            }
            enc.resolve_query_set(&query_set, 0..count, &resolve, 0);
        })?;
        let raw = self.read_bytes(&resolve, bytes).await?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&raw);
        let period_ns = f64::from(self.queue().get_timestamp_period());
        let samples: Vec<f64> = ticks
            .chunks_exact(2)
            .map(|t| t[1].wrapping_sub(t[0]) as f64 * period_ns * 1e-9)
            .collect();
        if samples
            .iter()
            .any(|s| !s.is_finite() || *s < 0.0 || *s > 3600.0)
        {
            return Err(Error::Gpu {
                during: "timing".into(),
                message: format!("implausible timestamp samples {samples:?}"),
            });
        }
        Ok(Timing {
            samples,
            source: TimeSource::GpuTimestamps,
        })
    }
}

/// Seconds on a monotonic clock: the process's natively, the page's
/// (`performance.now()`) in the browser, where `std::time` has none.
mod clock {
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn now() -> f64 {
        use std::sync::OnceLock;
        use std::time::Instant;
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
    }

    #[cfg(target_arch = "wasm32")]
    pub(super) fn now() -> f64 {
        use wasm_bindgen::JsCast;
        // `performance` of the window or worker; `Date.now()` where a
        // global has none.
        let global = js_sys::global();
        let ms = js_sys::Reflect::get(&global, &"performance".into())
            .ok()
            .filter(|p| !p.is_undefined())
            .and_then(|p| {
                let now = js_sys::Reflect::get(&p, &"now".into()).ok()?;
                now.dyn_into::<js_sys::Function>().ok()?.call0(&p).ok()
            })
            .and_then(|v| v.as_f64())
            .unwrap_or_else(js_sys::Date::now);
        ms * 1e-3
    }
}
