//! Autotuning: for large shapes, time the dispatcher's top candidates once per
//! shape bucket and keep the fastest.
//!
//! The heuristic ([`super::choose_matmul`]) is right most of the time but
//! cannot see everything (clock behaviour, cache sizes, driver quirks). For a
//! problem above [`TUNE_MIN_FLOPS`], the first call of a shape bucket (see
//! [`ShapeBucket`]) times candidates and the winner goes into an in-memory map
//! and the JSON cache on disk ([`super::cache`]); later calls, in this process
//! or in the next one, reuse it without tuning.
//!
//! `WGTILE_AUTOTUNE` picks the [`AutotuneMode`]: `off`, `fast` (the default)
//! or `full`.
//!
//! Like the rest of [`crate::tune`], this module decides and never encodes
//! or submits: the op layer passes a closure that builds and times one
//! candidate ([`Autotuner::decide`]).

use std::collections::HashSet;
use std::fmt;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::MatmulKernel;
use super::cache::{Entry, Measurement, ShapeBucket, TuneCache, TuneKey};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::AdapterProfile;
use crate::gpu::TimingOptions;

/// Environment variable selecting the [`AutotuneMode`].
pub const AUTOTUNE_ENV: &str = "WGTILE_AUTOTUNE";

/// Problems with fewer floating-point operations (`2 * m * n * k * batch`)
/// than this (2^30, about 1 GFLOP) are never tuned. Below it a matmul takes
/// well under a millisecond on any GPU worth tuning for, the candidates differ
/// by microseconds, and a wrong heuristic pick costs less than the tuning
/// (pipeline builds, fresh data, warm-up and repeats of several kernels:
/// tens of milliseconds) would ever win back.
pub const TUNE_MIN_FLOPS: u64 = 1 << 30;

/// Memory-bound kernels (the quantised GEMVs) reading fewer bytes than
/// this (4 MiB) are never tuned: a few microseconds on any GPU worth
/// tuning for, where launch overhead hides what the candidates change.
pub const TUNE_MIN_BYTES: u64 = 1 << 22;

/// What the autotuner chooses between: a matmul kernel, or another kernel's
/// launch shape (the quantised GEMV's workgroup and K split). Cached as
/// JSON, so its serialised form must stay stable between versions of a
/// candidate type (the cache key's op names the type).
pub trait Candidate: Copy + PartialEq + fmt::Debug + fmt::Display + Serialize + DeserializeOwned {}

impl Candidate for MatmulKernel {}

/// How much autotuning to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutotuneMode {
    /// Never measure, never read or write the cache: the heuristic decides.
    Off,
    /// Time the first [`FAST_CANDIDATES`] candidates (the heuristic's
    /// favourites), [`FAST_REPEATS`] timed runs each.
    #[default]
    Fast,
    /// Time every candidate, [`FULL_REPEATS`] timed runs each, with a progress
    /// bar on stderr when it is a terminal.
    Full,
}

/// Candidates the fast mode times.
pub const FAST_CANDIDATES: usize = 3;
/// Timed runs per candidate in the fast mode.
pub const FAST_REPEATS: u32 = 3;
/// Timed runs per candidate in the full mode.
pub const FULL_REPEATS: u32 = 5;

impl AutotuneMode {
    /// Parses `off`/`fast`/`full` (case-insensitive; also `0`/`false`/`no`
    /// for off and `1`/`true`/`on`/`yes` for fast); an empty string is the
    /// default ([`AutotuneMode::Fast`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "false" | "no" | "none" => Some(Self::Off),
            "" | "fast" | "1" | "true" | "on" | "yes" => Some(Self::Fast),
            "full" => Some(Self::Full),
            _ => None,
        }
    }

    /// The mode `WGTILE_AUTOTUNE` asks for: unset means [`AutotuneMode::Fast`];
    /// an unknown value logs a warning and means [`AutotuneMode::Fast`].
    pub fn from_env() -> Self {
        match &crate::config::get().autotune {
            Some(v) => Self::parse(v).unwrap_or_else(|| {
                log::warn!("{AUTOTUNE_ENV}={v:?} is not one of off, fast, full; using fast");
                Self::Fast
            }),
            None => Self::Fast,
        }
    }

    /// How many of the (best-first) candidates this mode times.
    pub fn max_candidates(self) -> usize {
        match self {
            Self::Off => 0,
            Self::Fast => FAST_CANDIDATES,
            Self::Full => usize::MAX,
        }
    }

    /// Timed runs per candidate the measuring closure should take.
    pub fn repeats(self) -> u32 {
        match self {
            Self::Off => 0,
            Self::Fast => FAST_REPEATS,
            Self::Full => FULL_REPEATS,
        }
    }

    /// Timing options for the measuring closure: one warm-up run, then
    /// warm-up until the clock has settled (see [`TimingOptions::warmup_seconds`];
    /// a short minimum, as consecutive candidates keep the GPU busy), then
    /// [`AutotuneMode::repeats`] timed runs.
    pub fn timing_options(self) -> TimingOptions {
        TimingOptions {
            warmup: 1,
            warmup_seconds: 0.05,
            repeats: self.repeats().max(1),
        }
    }

    /// Whether a cached result tuned in `tuned` mode answers this mode (a
    /// fast result, over a few candidates, does not satisfy the full mode).
    pub fn satisfied_by(self, tuned: AutotuneMode) -> bool {
        match self {
            Self::Off => false,
            Self::Fast => matches!(tuned, Self::Fast | Self::Full),
            Self::Full => tuned == Self::Full,
        }
    }
}

impl fmt::Display for AutotuneMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::Fast => "fast",
            Self::Full => "full",
        })
    }
}

/// Where a [`Decision`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecisionSource {
    /// The heuristic: autotuning off, problem too small, a CPU adapter, fewer
    /// than two candidates, or every measurement failed.
    Heuristic,
    /// A result tuned earlier (this process or a cache file).
    Cache,
    /// Tuned by this call.
    Tuned,
}

/// The autotuner's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision<C = MatmulKernel> {
    /// The kernel to run.
    pub kernel: C,
    /// Where the choice came from.
    pub source: DecisionSource,
    /// Seconds this call spent tuning (0 unless it measured).
    pub tuning_seconds: f64,
}

impl<C: fmt::Display> fmt::Display for Decision<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?}", self.kernel, self.source)?;
        if self.tuning_seconds > 0.0 {
            write!(f, ", tuned in {:.1} ms", self.tuning_seconds * 1e3)?;
        }
        f.write_str(")")
    }
}

#[derive(Debug)]
struct State {
    cache: TuneCache,
    /// Keys whose decision this process has already logged at info level.
    announced: HashSet<TuneKey>,
}

/// Decides between the heuristic, a cached result and tuning; one per
/// [`Context`](crate::Context). `Send + Sync`.
///
/// Tuning is serialised (one thread measures at a time, so timings do not
/// disturb each other, and a second thread waiting on the same shape reuses
/// the first one's result). A `decide` called from inside a measuring
/// closure on the same thread gets the heuristic instead of deadlocking.
#[derive(Debug)]
pub struct Autotuner {
    mode: AutotuneMode,
    state: Mutex<State>,
    /// Held while measuring.
    tuning: Mutex<()>,
    /// The thread measuring, to answer re-entrant calls.
    tuning_thread: Mutex<Option<ThreadId>>,
}

impl Default for Autotuner {
    fn default() -> Self {
        Self::from_env()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking measuring closure must not disable the tuner for good.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Clears the tuning thread when measuring ends, panics included.
struct TuningThreadGuard<'a>(&'a Mutex<Option<ThreadId>>);

impl Drop for TuningThreadGuard<'_> {
    fn drop(&mut self) {
        *lock(self.0) = None;
    }
}

fn shape_text(m: usize, n: usize, k: usize, batch: usize) -> String {
    if batch == 1 {
        format!("{m}x{n}x{k}")
    } else {
        format!("{batch} x {m}x{n}x{k}")
    }
}

impl Autotuner {
    /// An autotuner in `mode` whose disk cache is the file at `cache_path`
    /// (`None`: memory only). Reads no environment variables and touches no
    /// file until the first tuned-size decision.
    pub fn new(mode: AutotuneMode, cache_path: Option<PathBuf>) -> Self {
        Self {
            mode,
            state: Mutex::new(State {
                cache: TuneCache::new(cache_path),
                announced: HashSet::new(),
            }),
            tuning: Mutex::new(()),
            tuning_thread: Mutex::new(None),
        }
    }

    /// The autotuner the environment asks for: mode from `WGTILE_AUTOTUNE`,
    /// cache at [`TuneCache::default_path`]. In the browser (wasm32) it is
    /// off: there is no blocking timing and no file system.
    pub fn from_env() -> Self {
        if cfg!(target_arch = "wasm32") {
            return Self::new(AutotuneMode::Off, None);
        }
        Self::new(AutotuneMode::from_env(), TuneCache::default_path())
    }

    /// The mode.
    pub fn mode(&self) -> AutotuneMode {
        self.mode
    }

    /// The cache file, if any.
    pub fn cache_path(&self) -> Option<PathBuf> {
        lock(&self.state).cache.path().map(PathBuf::from)
    }

    /// Forgets the in-memory results; the next decision reads the cache file
    /// again, as a new process would (for tests).
    pub fn clear_memory(&self) {
        let mut state = lock(&self.state);
        state.cache.clear_memory();
        state.announced.clear();
    }

    /// Whether a problem is worth tuning on this adapter: `2 m n k batch >=`
    /// [`TUNE_MIN_FLOPS`], and not a CPU adapter (lavapipe, SwiftShader,
    /// WARP: their timings are noisy, each candidate takes seconds, and the
    /// heuristic already targets them).
    pub fn worth_tuning(
        profile: &AdapterProfile,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
    ) -> bool {
        let flops = [m, n, k, batch]
            .into_iter()
            .fold(2u64, |acc, d| acc.saturating_mul(d as u64));
        flops >= TUNE_MIN_FLOPS && !profile.is_cpu()
    }

    /// Which kernel to run for `op` in `dtype` over `[batch] x [m, k] x [k, n]`.
    ///
    /// `candidates` are the kernels that can run the shape, best-first by
    /// the heuristic's preference (see [`super::matmul_candidates`]);
    /// `heuristic` is the heuristic's pick. The heuristic decides when the
    /// mode is off, the problem is below [`TUNE_MIN_FLOPS`], the adapter is a
    /// CPU, or there are fewer than two candidates. Otherwise a cached result
    /// for the key (adapter, crate version, op, dtype, [`ShapeBucket`],
    /// candidate list) decides; failing that, `measure` times the candidates
    /// (fast: the first [`FAST_CANDIDATES`]; full: all) and the fastest wins
    /// and is cached.
    ///
    /// `measure(kernel)` builds the op with `kernel` on fresh data, times
    /// [`AutotuneMode::repeats`] runs (see [`AutotuneMode::timing_options`])
    /// and returns the median in seconds. A candidate whose measurement fails
    /// (or returns a time that is not positive and finite) is skipped; when
    /// all fail, the heuristic decides and nothing is cached. Only a lost
    /// device ([`Error::DeviceLost`]) is returned as an error.
    #[allow(clippy::too_many_arguments)] // the problem's dimensions, spelled out as the ops have them
    pub fn decide<C: Candidate>(
        &self,
        profile: &AdapterProfile,
        op: &str,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        candidates: &[C],
        heuristic: C,
        measure: impl FnMut(C) -> Result<f64>,
    ) -> Result<Decision<C>> {
        self.decide_transposed(
            profile,
            (op, dtype),
            (m, n, k, batch),
            (false, false),
            candidates,
            heuristic,
            measure,
        )
    }

    /// [`Autotuner::decide`] for operands stored transposed
    /// (`(transpose_a, transpose_b)`): the flags are part of the cache key, so
    /// each layout is tuned and remembered on its own.
    #[allow(clippy::too_many_arguments)] // decide's arguments plus the layout
    pub fn decide_transposed<C: Candidate>(
        &self,
        profile: &AdapterProfile,
        (op, dtype): (&str, DType),
        (m, n, k, batch): (usize, usize, usize, usize),
        transposes: (bool, bool),
        candidates: &[C],
        heuristic: C,
        measure: impl FnMut(C) -> Result<f64>,
    ) -> Result<Decision<C>> {
        let worth = Self::worth_tuning(profile, m, n, k, batch);
        let problem = (m, n, k, batch);
        self.decide_keyed(profile, (op, dtype), problem, transposes, worth, candidates, heuristic, measure)
    }

    /// Whether a memory-bound kernel reading `bytes` is worth tuning on
    /// this adapter: at least [`TUNE_MIN_BYTES`], and not a CPU adapter.
    pub fn worth_tuning_bytes(profile: &AdapterProfile, bytes: u64) -> bool {
        bytes >= TUNE_MIN_BYTES && !profile.is_cpu()
    }

    /// [`Autotuner::decide`] for a memory-bound kernel over `[m, k] x [k, n]`
    /// (the quantised GEMVs, far below [`TUNE_MIN_FLOPS`]): tuned where it
    /// reads at least [`TUNE_MIN_BYTES`] (`bytes`) on a GPU.
    #[allow(clippy::too_many_arguments)] // decide's arguments plus the bytes read
    pub fn decide_memory_bound<C: Candidate>(
        &self,
        profile: &AdapterProfile,
        (op, dtype): (&str, DType),
        (m, n, k): (usize, usize, usize),
        bytes: u64,
        candidates: &[C],
        heuristic: C,
        measure: impl FnMut(C) -> Result<f64>,
    ) -> Result<Decision<C>> {
        let worth = Self::worth_tuning_bytes(profile, bytes);
        self.decide_keyed(profile, (op, dtype), (m, n, k, 1), (false, false), worth, candidates, heuristic, measure)
    }

    /// The decision once the problem is judged `worth` tuning or not.
    #[allow(clippy::too_many_arguments)] // decide_transposed's arguments plus the judgement
    // Long on purpose: cache lookup, candidate timing and cache update in one place, so the
    // lock that serialises tuning covers all three.
    fn decide_keyed<C: Candidate>(
        &self,
        profile: &AdapterProfile,
        (op, dtype): (&str, DType),
        (m, n, k, batch): (usize, usize, usize, usize),
        (a_t, b_t): (bool, bool),
        worth: bool,
        candidates: &[C],
        heuristic: C,
        mut measure: impl FnMut(C) -> Result<f64>,
    ) -> Result<Decision<C>> {
        let by_heuristic = Decision {
            kernel: heuristic,
            source: DecisionSource::Heuristic,
            tuning_seconds: 0.0,
        };
        if self.mode == AutotuneMode::Off || candidates.len() < 2 || !worth {
            return Ok(by_heuristic);
        }
        let shape = shape_text(m, n, k, batch);
        let key = TuneKey {
            a_t,
            b_t,
            ..TuneKey::new(
                profile,
                op,
                dtype,
                ShapeBucket::new(m, n, k, batch),
                candidates,
            )
        };
        if let Some(hit) = self.cached(&key, op, dtype, &shape, candidates) {
            return Ok(hit);
        }

        let me = std::thread::current().id();
        if *lock(&self.tuning_thread) == Some(me) {
            log::debug!(
                "autotune: {op} {dtype} {shape} requested while this thread is tuning; using the heuristic"
            );
            return Ok(by_heuristic);
        }
        let _tuning = lock(&self.tuning);
        *lock(&self.tuning_thread) = Some(me);
        let _clear = TuningThreadGuard(&self.tuning_thread);
        // Another thread may have tuned this key while we waited.
        if let Some(hit) = self.cached(&key, op, dtype, &shape, candidates) {
            return Ok(hit);
        }

        let timed: Vec<C> = candidates
            .iter()
            .copied()
            .take(self.mode.max_candidates())
            .collect();
        let bar = self.progress_bar(op, dtype, &shape, timed.len());
        let start = std::time::Instant::now();
        let mut measured = Vec::with_capacity(timed.len());
        for &kernel in &timed {
            bar.set_message(kernel.to_string());
            let result = measure(kernel);
            bar.inc(1);
            match result {
                Ok(seconds) if seconds.is_finite() && seconds > 0.0 => {
                    log::debug!(
                        "autotune: {op} {dtype} {shape}: {kernel} {:.3} ms",
                        seconds * 1e3
                    );
                    measured.push((kernel, seconds));
                }
                Ok(seconds) => {
                    log::debug!(
                        "autotune: {op} {dtype} {shape}: {kernel} skipped, implausible time {seconds} s"
                    );
                }
                Err(e @ Error::DeviceLost(_)) => {
                    bar.finish_and_clear();
                    return Err(e);
                }
                Err(e) => log::debug!("autotune: {op} {dtype} {shape}: {kernel} skipped: {e}"),
            }
        }
        bar.finish_and_clear();
        let tuning_seconds = start.elapsed().as_secs_f64();
        let Some((best, best_seconds)) = measured.iter().min_by(|a, b| a.1.total_cmp(&b.1)).copied() else {
            log::warn!(
                "autotune: every candidate for {op} {dtype} {shape} failed to run; using the heuristic's {heuristic}"
            );
            return Ok(Decision {
                tuning_seconds,
                ..by_heuristic
            });
        };
        log::info!(
            "autotune: tuned {op} {dtype} {shape} in {:.0} ms over {} candidates -> {} ({:.3} ms)",
            tuning_seconds * 1e3,
            measured.len(),
            best,
            best_seconds * 1e3
        );
        let measured = measured.into_iter().map(|(kernel, s)| Measurement::new(kernel, s)).collect();
        let mut state = lock(&self.state);
        state.announced.insert(key.clone());
        state.cache.insert(key, Entry::new(best, measured, self.mode, tuning_seconds));
        Ok(Decision {
            kernel: best,
            source: DecisionSource::Tuned,
            tuning_seconds,
        })
    }

    /// The cached decision for `key`, if one satisfies the mode and names a
    /// current candidate.
    fn cached<C: Candidate>(
        &self,
        key: &TuneKey,
        op: &str,
        dtype: DType,
        shape: &str,
        candidates: &[C],
    ) -> Option<Decision<C>> {
        let mut state = lock(&self.state);
        let entry = state.cache.get(key)?;
        let kernel = entry.winner::<C>()?;
        if !self.mode.satisfied_by(entry.mode) || !candidates.contains(&kernel) {
            return None;
        }
        if state.announced.insert(key.clone()) {
            log::info!("autotune: cache hit for {op} {dtype} {shape} -> {kernel} (no tuning)");
        } else {
            log::trace!("autotune: cache hit for {op} {dtype} {shape} -> {kernel}");
        }
        Some(Decision {
            kernel,
            source: DecisionSource::Cache,
            tuning_seconds: 0.0,
        })
    }

    /// A progress bar over `len` candidates: full mode with stderr a terminal
    /// only, hidden otherwise.
    fn progress_bar(
        &self,
        op: &str,
        dtype: DType,
        shape: &str,
        len: usize,
    ) -> indicatif::ProgressBar {
        if self.mode != AutotuneMode::Full || !std::io::stderr().is_terminal() {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(len as u64),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(&format!(
            "autotune {op} {dtype} {shape} {{bar:30}} {{pos}}/{{len}} {{msg}}"
        )) {
            bar.set_style(style);
        }
        bar
    }
}
