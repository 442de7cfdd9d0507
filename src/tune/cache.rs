//! The autotune cache: which kernel won for a shape bucket on an adapter,
//! kept in memory and in a JSON file on disk.
//!
//! The file lives at `$WGTILE_CACHE_DIR/autotune.json` when that variable is
//! set, else at `<user cache dir>/wgtile/autotune.json` (`~/.cache` on Linux,
//! `~/Library/Caches` on macOS, `%LOCALAPPDATA%` on Windows); with neither
//! there is no disk cache. It is read on first use and rewritten (temp file in
//! the same directory, then rename) after each new entry, merged with whatever
//! another process wrote meanwhile.
//!
//! The cache never fails a call: a corrupt file or one of another format
//! version logs a warning and is ignored (and overwritten on the next save);
//! an unwritable location logs one warning and the cache keeps working in
//! memory.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::autotune::{AutotuneMode, Candidate};
use crate::dtype::DType;
use crate::gpu::AdapterProfile;

/// Version of the file format; a file with another version is ignored.
pub const CACHE_FORMAT_VERSION: u32 = 1;

/// File name of the cache inside its directory.
pub const CACHE_FILE_NAME: &str = "autotune.json";

/// Environment variable naming the directory of the cache file.
pub const CACHE_DIR_ENV: &str = "WGTILE_CACHE_DIR";

/// Alignments above this share a class: every kernel's alignment need
/// (4 elements for vec4 loads, 8 for cooperative matrices) divides it.
pub const MAX_ALIGNMENT_CLASS: u32 = 16;

/// One dimension of a [`ShapeBucket`]: its size rounded up to a power of two
/// and its alignment class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DimBucket {
    /// The size rounded up to a power of two (0 and 1 give 1).
    pub pow2: u64,
    /// The largest power of two dividing the size, capped at
    /// [`MAX_ALIGNMENT_CLASS`] (0 counts as fully aligned).
    pub align: u32,
}

impl DimBucket {
    /// The bucket of a dimension of size `size`.
    pub fn new(size: usize) -> Self {
        let size = size as u64;
        let align = if size == 0 {
            MAX_ALIGNMENT_CLASS
        } else {
            (1u64 << size.trailing_zeros().min(31)).min(u64::from(MAX_ALIGNMENT_CLASS)) as u32
        };
        Self {
            pow2: size.max(1).checked_next_power_of_two().unwrap_or(u64::MAX),
            align,
        }
    }
}

impl fmt::Display for DimBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<={}/{}", self.pow2, self.align)
    }
}

/// The shapes that share one autotune result.
///
/// Each dimension (M, N, K, batch) is rounded up to a power of two, and its
/// *alignment class* (the largest power of two dividing it, capped at 16) is
/// kept beside it. Rounding alone would put 1792 and 1793 together, yet
/// 1792 runs the vec4 and cooperative-matrix kernels and 1793 runs neither:
/// alignment decides which kernels exist, so it must separate buckets. 1008
/// and 1024 (both multiples of 16, both up to 1024) share a bucket; 1000 (a
/// multiple of 8 only) does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShapeBucket {
    /// Rows of C.
    pub m: DimBucket,
    /// Columns of C.
    pub n: DimBucket,
    /// The contracted dimension.
    pub k: DimBucket,
    /// Number of matrices.
    pub batch: DimBucket,
}

impl ShapeBucket {
    /// The bucket of `[batch] x [m, k] x [k, n]`.
    pub fn new(m: usize, n: usize, k: usize, batch: usize) -> Self {
        Self {
            m: DimBucket::new(m),
            n: DimBucket::new(n),
            k: DimBucket::new(k),
            batch: DimBucket::new(batch),
        }
    }
}

impl fmt::Display for ShapeBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "m {} n {} k {} batch {} (size<=pow2/alignment)",
            self.m, self.n, self.k, self.batch
        )
    }
}

/// The adapter part of a [`TuneKey`]: what identifies a GPU and its driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AdapterKey {
    /// Adapter name.
    pub name: String,
    /// Backend, as `Debug` prints it (`Vulkan`, `Metal`...).
    pub backend: String,
    /// PCI vendor id.
    pub vendor: u32,
    /// PCI device id.
    pub device: u32,
    /// Driver name.
    pub driver: String,
    /// Driver version / details.
    pub driver_info: String,
}

impl AdapterKey {
    /// The key of `profile`'s adapter.
    pub fn new(profile: &AdapterProfile) -> Self {
        Self {
            name: profile.name.clone(),
            backend: format!("{:?}", profile.backend),
            vendor: profile.vendor,
            device: profile.device,
            driver: profile.driver.clone(),
            driver_info: profile.driver_info.clone(),
        }
    }
}

/// What an autotune result is valid for: adapter and driver, crate version,
/// operation, dtype, transposes, shape bucket and candidate set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TuneKey {
    /// The adapter.
    pub adapter: AdapterKey,
    /// wgtile's version (kernels change between versions).
    pub crate_version: String,
    /// The operation, e.g. `"matmul"`.
    pub op: String,
    /// The element type, `"f32"` or `"f16"`.
    pub dtype: String,
    /// A is transposed.
    pub a_t: bool,
    /// B is transposed.
    pub b_t: bool,
    /// The shape bucket.
    pub bucket: ShapeBucket,
    /// [`candidates_checksum`] of the candidate list (a changed candidate set
    /// invalidates the entry).
    pub candidates: u64,
}

impl TuneKey {
    /// The key of `op` in `dtype` over `[batch] x [m, k] x [k, n]` on
    /// `profile`'s adapter, without transposes.
    pub fn new(
        profile: &AdapterProfile,
        op: &str,
        dtype: DType,
        bucket: ShapeBucket,
        candidates: &[impl fmt::Debug],
    ) -> Self {
        Self {
            adapter: AdapterKey::new(profile),
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            op: op.to_string(),
            dtype: dtype.wgsl().to_string(),
            a_t: false,
            b_t: false,
            bucket,
            candidates: candidates_checksum(candidates),
        }
    }
}

/// A stable checksum of a candidate list (order matters: the fast mode times
/// the first few): 64-bit FNV-1a over the candidates' `Debug` strings. Unlike
/// std's hasher it is the same in every process and every build.
pub fn candidates_checksum<C: fmt::Debug>(candidates: &[C]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for c in candidates {
        for byte in format!("{c:?}").bytes().chain([b';']) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}

/// One candidate's measured time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The candidate, as its [`Candidate`] type serialises it.
    pub kernel: serde_json::Value,
    /// Its median run time in seconds.
    pub seconds: f64,
}

impl Measurement {
    /// `kernel` took `seconds`.
    pub fn new<C: Candidate>(kernel: C, seconds: f64) -> Self {
        Self {
            kernel: to_value(kernel),
            seconds,
        }
    }
}

/// A candidate as the cache stores it (a matmul kernel as before the
/// cache held other kinds: the file format is unchanged).
fn to_value<C: Candidate>(kernel: C) -> serde_json::Value {
    // Candidates are plain enums and structs of integers and flags.
    serde_json::to_value(kernel).unwrap_or(serde_json::Value::Null)
}

/// The result of tuning one key. The key's op names the kind of candidate
/// (a matmul kernel, a quantised GEMV's launch), which the entry stores as
/// JSON and [`Entry::winner`] reads back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The fastest candidate.
    pub kernel: serde_json::Value,
    /// Every candidate that ran, with its time (failed ones are absent).
    pub measured: Vec<Measurement>,
    /// How thoroughly it was tuned (a fast result does not satisfy the full mode).
    pub mode: AutotuneMode,
    /// Seconds the tuning took.
    pub tuning_seconds: f64,
}

impl Entry {
    /// The entry of a tuning that picked `kernel` out of `measured`.
    pub fn new<C: Candidate>(kernel: C, measured: Vec<Measurement>, mode: AutotuneMode, tuning_seconds: f64) -> Self {
        Self {
            kernel: to_value(kernel),
            measured,
            mode,
            tuning_seconds,
        }
    }

    /// The winner as a `C`, if it reads as one.
    pub fn winner<C: Candidate>(&self) -> Option<C> {
        serde_json::from_value(self.kernel.clone()).ok()
    }
}

#[derive(Serialize, Deserialize)]
struct StoredEntry {
    key: TuneKey,
    #[serde(flatten)]
    entry: Entry,
}

#[derive(Serialize)]
struct FileOut<'a> {
    version: u32,
    entries: Vec<StoredEntryRef<'a>>,
}

#[derive(Serialize)]
struct StoredEntryRef<'a> {
    key: &'a TuneKey,
    #[serde(flatten)]
    entry: &'a Entry,
}

/// Only the version, read first so a file of another format is recognised
/// as such rather than reported as corrupt.
#[derive(Deserialize)]
struct FileVersion {
    version: u32,
}

#[derive(Deserialize)]
struct FileIn {
    entries: Vec<StoredEntry>,
}

/// Most entries a cache holds (in memory and in its file): shape buckets are
/// coarse, so real programs use a few dozen; past the bound an older entry
/// goes, and its bucket is tuned again if it comes back.
pub const MAX_TUNE_ENTRIES: usize = 4096;

/// Autotune results in memory, backed by a JSON file when there is a path.
#[derive(Debug, Default)]
pub struct TuneCache {
    path: Option<PathBuf>,
    entries: HashMap<TuneKey, Entry>,
    loaded: bool,
    io_warned: bool,
}

/// Why a cache file could not be used.
enum LoadError {
    Missing,
    Io(std::io::Error),
    Corrupt(serde_json::Error),
    Version(u32),
}

fn read_file(path: &Path) -> Result<HashMap<TuneKey, Entry>, LoadError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(LoadError::Missing),
        Err(e) => return Err(LoadError::Io(e)),
    };
    let version: FileVersion = serde_json::from_str(&text).map_err(LoadError::Corrupt)?;
    if version.version != CACHE_FORMAT_VERSION {
        return Err(LoadError::Version(version.version));
    }
    let file: FileIn = serde_json::from_str(&text).map_err(LoadError::Corrupt)?;
    Ok(file.entries.into_iter().map(|s| (s.key, s.entry)).collect())
}

impl TuneCache {
    /// A cache backed by the file at `path` (`None`: memory only). Nothing is
    /// read until the first lookup.
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            ..Self::default()
        }
    }

    /// A cache at [`TuneCache::default_path`].
    pub fn from_env() -> Self {
        Self::new(Self::default_path())
    }

    /// `$WGTILE_CACHE_DIR/autotune.json` when the variable is set and not
    /// empty, else `<user cache dir>/wgtile/autotune.json`, else `None`.
    pub fn default_path() -> Option<PathBuf> {
        match &crate::config::get().cache_dir {
            Some(dir) => Some(PathBuf::from(dir).join(CACHE_FILE_NAME)),
            None => dirs::cache_dir().map(|d| d.join("wgtile").join(CACHE_FILE_NAME)),
        }
    }

    /// The file backing the cache, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The entry for `key`, reading the file first if this is the first lookup.
    pub fn get(&mut self, key: &TuneKey) -> Option<&Entry> {
        self.ensure_loaded();
        self.entries.get(key)
    }

    /// Records `entry` for `key` and saves the file.
    pub fn insert(&mut self, key: TuneKey, entry: Entry) {
        self.ensure_loaded();
        if !self.entries.contains_key(&key) {
            self.make_room(MAX_TUNE_ENTRIES - 1);
        }
        self.entries.insert(key, entry);
        self.save();
    }

    /// Drops entries (in no particular order) until at most `keep` remain.
    fn make_room(&mut self, keep: usize) {
        let excess = self.entries.len().saturating_sub(keep);
        let drop: Vec<TuneKey> = self.entries.keys().take(excess).cloned().collect();
        for key in drop {
            self.entries.remove(&key);
        }
    }

    /// Number of entries in memory.
    pub fn len(&mut self) -> usize {
        self.ensure_loaded();
        self.entries.len()
    }

    /// Whether no entries are in memory.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Forgets the in-memory entries; the next lookup reads the file again
    /// (as a new process would).
    pub fn clear_memory(&mut self) {
        self.entries.clear();
        self.loaded = false;
    }

    fn ensure_loaded(&mut self) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        let Some(path) = self.path.clone() else {
            return;
        };
        match read_file(&path) {
            Ok(entries) => {
                log::debug!(
                    "autotune: read {} entries from {}",
                    entries.len(),
                    path.display()
                );
                // Entries tuned in this process win over the file's.
                for (key, entry) in entries {
                    self.entries.entry(key).or_insert(entry);
                }
                self.make_room(MAX_TUNE_ENTRIES);
            }
            Err(LoadError::Missing) => {
                log::debug!("autotune: no cache file at {} yet", path.display());
            }
            Err(LoadError::Io(e)) => {
                self.io_warned = true;
                log::warn!(
                    "autotune: cannot read the cache {}: {e}; using heuristics and tuning in memory",
                    path.display()
                );
            }
            Err(LoadError::Corrupt(e)) => log::warn!(
                "autotune: the cache {} is corrupt ({e}); ignoring it (it is rewritten on the next save)",
                path.display()
            ),
            Err(LoadError::Version(v)) => log::warn!(
                "autotune: the cache {} has format version {v}, this wgtile writes {CACHE_FORMAT_VERSION}; ignoring it (it is rewritten on the next save)",
                path.display()
            ),
        }
    }

    /// Writes every entry to the file (merged with entries another process
    /// saved since we read it). Returns whether the file was written.
    pub fn save(&mut self) -> bool {
        let Some(path) = self.path.clone() else {
            return false;
        };
        // Keep what other processes added meanwhile (ours win on conflicts).
        if let Ok(on_disk) = read_file(&path) {
            for (key, entry) in on_disk {
                self.entries.entry(key).or_insert(entry);
            }
        }
        match self.write(&path) {
            Ok(()) => {
                log::debug!(
                    "autotune: wrote {} entries to {}",
                    self.entries.len(),
                    path.display()
                );
                true
            }
            Err(e) => {
                if self.io_warned {
                    log::debug!("autotune: cannot write the cache {}: {e}", path.display());
                } else {
                    self.io_warned = true;
                    log::warn!(
                        "autotune: cannot write the cache {}: {e}; tuning results stay in memory",
                        path.display()
                    );
                }
                false
            }
        }
    }

    fn write(&self, path: &Path) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        let mut entries: Vec<StoredEntryRef<'_>> = self
            .entries
            .iter()
            .map(|(key, entry)| StoredEntryRef { key, entry })
            .collect();
        // A stable order keeps the file diffable.
        entries.sort_by(|a, b| {
            let ka = (&a.key.adapter.name, &a.key.op, &a.key.dtype, a.key.bucket);
            let kb = (&b.key.adapter.name, &b.key.op, &b.key.dtype, b.key.bucket);
            ka.cmp(&kb)
        });
        let json = serde_json::to_string_pretty(&FileOut {
            version: CACHE_FORMAT_VERSION,
            entries,
        })
        .map_err(std::io::Error::other)?;
        let name = path
            .file_name()
            .map_or_else(|| CACHE_FILE_NAME.into(), |n| n.to_string_lossy());
        let tmp = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let result = fs::write(&tmp, json).and_then(|()| fs::rename(&tmp, path));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}
