//! The autotuner and its cache, with a fake measuring closure.

use super::*;

// ---- the autotuner and its cache, with a fake measuring closure ----

// ---- a logger that keeps every message, to check warnings and log lines ----

static LOGS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        LOGS.lock()
            .unwrap()
            .push((record.level(), record.args().to_string()));
    }
    fn flush(&self) {}
}

fn capture_logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        log::set_logger(&Capture).expect("no other logger");
        log::set_max_level(log::LevelFilter::Trace);
    });
}

/// Messages at `level` that mention `needle` (tests run in parallel, so each
/// looks for its own unique path or shape).
fn logged(level: log::Level, needle: &str) -> Vec<String> {
    LOGS.lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == level && m.contains(needle))
        .map(|(_, m)| m.clone())
        .collect()
}

/// A fresh, empty directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "wgtile-autotune-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const BIG: usize = 2048; // 2 * 2048^3 = 16 GFLOP

fn big_candidates(p: &AdapterProfile) -> Vec<MatmulKernel> {
    tune::matmul_candidates(p, DType::F32, BIG, BIG, BIG, 1)
}

fn heuristic(p: &AdapterProfile, m: usize, n: usize, k: usize) -> MatmulKernel {
    tune::choose_matmul(p, DType::F32, m, n, k, 1).kernel
}

/// Times in ms by position in the candidate list: the third is fastest.
fn fake_time(candidates: &[MatmulKernel], kernel: MatmulKernel) -> f64 {
    let i = candidates.iter().position(|&c| c == kernel).unwrap();
    [3.0, 2.0, 1.0, 4.0, 5.0, 6.0, 7.0, 8.0][i.min(7)] * 1e-3
}

// ---- shape buckets and keys ----

#[test]
fn buckets_round_up_to_powers_of_two_and_keep_alignment() {
    // 1792 (a multiple of 256) and 1793 (odd) round to the same power of two
    // but not the same kernels: different buckets.
    assert_ne!(
        ShapeBucket::new(1792, 64, 64, 1),
        ShapeBucket::new(1793, 64, 64, 1)
    );
    assert_eq!(
        DimBucket::new(1792),
        DimBucket {
            pow2: 2048,
            align: 16
        }
    );
    assert_eq!(
        DimBucket::new(1793),
        DimBucket {
            pow2: 2048,
            align: 1
        }
    );
    // 1008 and 1024 are both multiples of 16 up to 1024: one bucket.
    assert_eq!(
        ShapeBucket::new(1008, 1008, 1008, 1),
        ShapeBucket::new(1024, 1024, 1024, 1)
    );
    // 1000 is a multiple of 8 only.
    assert_eq!(
        DimBucket::new(1000),
        DimBucket {
            pow2: 1024,
            align: 8
        }
    );
    assert_ne!(DimBucket::new(1000), DimBucket::new(1024));
    // Alignment is capped at 16; powers of two are their own bucket.
    assert_eq!(
        DimBucket::new(4096),
        DimBucket {
            pow2: 4096,
            align: 16
        }
    );
    assert_eq!(DimBucket::new(4097).pow2, 8192);
    assert_eq!(DimBucket::new(1), DimBucket { pow2: 1, align: 1 });
    assert_eq!(DimBucket::new(0).pow2, 1);
    // Each dimension is its own: transposing the shape changes the bucket.
    assert_ne!(
        ShapeBucket::new(64, 1024, 64, 1),
        ShapeBucket::new(1024, 64, 64, 1)
    );
    assert_ne!(
        ShapeBucket::new(64, 64, 64, 1),
        ShapeBucket::new(64, 64, 64, 3)
    );
}

#[test]
fn the_key_changes_with_the_candidate_set_and_the_problem() {
    let p = gpu();
    let c = big_candidates(&p);
    let bucket = ShapeBucket::new(BIG, BIG, BIG, 1);
    let key = TuneKey::new(&p, "matmul", DType::F32, bucket, &c);
    assert_eq!(key, TuneKey::new(&p, "matmul", DType::F32, bucket, &c));
    assert_eq!(key.crate_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(key.adapter.backend, "Vulkan");
    assert_eq!(key.dtype, "f32");
    assert!(!key.a_t && !key.b_t);

    // Stable (FNV-1a of the Debug strings): the same in every process.
    assert_eq!(candidates_checksum(&c), candidates_checksum(&c.clone()));
    assert_ne!(candidates_checksum::<MatmulKernel>(&[]), candidates_checksum(&c));
    let fewer = &c[..c.len() - 1];
    assert_ne!(
        TuneKey::new(&p, "matmul", DType::F32, bucket, fewer),
        key,
        "dropping a candidate invalidates the key"
    );
    let mut reordered = c.clone();
    reordered.swap(0, 1);
    assert_ne!(candidates_checksum(&reordered), candidates_checksum(&c));

    assert_ne!(TuneKey::new(&p, "matmul", DType::F16, bucket, &c), key);
    let mut other = p.clone();
    other.driver_info = "555.1".into();
    assert_ne!(
        TuneKey::new(&other, "matmul", DType::F32, bucket, &c),
        key,
        "a driver update invalidates the key"
    );
}

// ---- candidates ----

#[test]
fn candidates_start_with_the_heuristic_and_end_with_naive() {
    let p = gpu();
    let c = big_candidates(&p);
    assert_eq!(c[0], heuristic(&p, BIG, BIG, BIG));
    assert_eq!(*c.last().unwrap(), MatmulKernel::naive_for(&p));
    // 3 vec4 + 3 scalar tiled + naive, no duplicates, no coop on f32.
    assert_eq!(c.len(), 7, "{c:?}");
    for (i, a) in c.iter().enumerate() {
        assert!(!c[i + 1..].contains(a), "duplicate {a}");
        assert!(!matches!(a, MatmulKernel::Coop { .. }));
    }
    let vec4 = c
        .iter()
        .position(|k| matches!(k, MatmulKernel::Tiled { vec4: true, .. }));
    let scalar = c
        .iter()
        .position(|k| matches!(k, MatmulKernel::Tiled { vec4: false, .. }));
    assert!(vec4.unwrap() < scalar.unwrap());

    // Unaligned K: no vec4.
    let c = tune::matmul_candidates(&p, DType::F32, BIG, BIG, BIG + 1, 1);
    assert!(
        c.iter()
            .all(|k| !matches!(k, MatmulKernel::Tiled { vec4: true, .. }))
    );
    assert_eq!(c.len(), 4, "{c:?}");

    // f16 on tensor cores: the coop layouts come right after the heuristic's pick.
    let tc = gpu().with_tensor_cores();
    let c = tune::matmul_candidates(&tc, DType::F16, BIG, BIG, BIG, 1);
    assert!(matches!(c[0], MatmulKernel::Coop { .. }), "{c:?}");
    let coops = c
        .iter()
        .take_while(|k| matches!(k, MatmulKernel::Coop { .. }))
        .count();
    assert_eq!(coops, COOP_CONFIGS.len());
    assert_eq!(c.len(), COOP_CONFIGS.len() + 2 * TILE_CONFIGS.len() + 1);

    // A small adapter: only the tiles that fit.
    let small = gpu()
        .with_units(8)
        .with_invocations(64)
        .with_workgroup_storage(16 << 10);
    let c = tune::matmul_candidates(&small, DType::F32, BIG, BIG, BIG, 1);
    assert!(c.iter().all(|k| k.fits(&small)));
    assert!(c.contains(&MatmulKernel::naive_for(&small)));
}

// ---- decisions ----

#[test]
fn the_fastest_measured_candidate_wins_and_is_cached() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let mut calls = Vec::new();
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            calls.push(k);
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    assert_eq!(d.kernel, c[2]);
    assert!(d.tuning_seconds >= 0.0);
    // Fast: the first three, in order.
    assert_eq!(calls, c[..FAST_CANDIDATES].to_vec());

    // Same bucket (2000 is a multiple of 16 up to 2048): from memory.
    let d = tuner
        .decide(
            &p,
            "matmul",
            DType::F32,
            2000,
            2000,
            2000,
            1,
            &c,
            c[0],
            |_| panic!("a cached bucket is not measured"),
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Cache);
    assert_eq!(d.kernel, c[2]);
    assert_eq!(d.tuning_seconds, 0.0);
}

#[test]
fn the_full_mode_times_every_candidate_and_a_fast_result_does_not_satisfy_it() {
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("full");
    let path = dir.join("autotune.json");
    let fast = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    fast.decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
        Ok(fake_time(&c, k))
    })
    .unwrap();

    let full = Autotuner::new(AutotuneMode::Full, Some(path.clone()));
    let mut calls = 0;
    // The last candidate is made the fastest: only the full mode finds it.
    let d = full
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            calls += 1;
            Ok(if k == *c.last().unwrap() { 1e-6 } else { 1e-3 })
        })
        .unwrap();
    assert_eq!(calls, c.len());
    assert_eq!(d.source, DecisionSource::Tuned);
    assert_eq!(d.kernel, *c.last().unwrap());

    // A full result answers the fast mode.
    let fast = Autotuner::new(AutotuneMode::Fast, Some(path));
    let d = fast
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            panic!("not measured")
        })
        .unwrap();
    assert_eq!(
        (d.source, d.kernel),
        (DecisionSource::Cache, *c.last().unwrap())
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn off_mode_small_problems_and_cpu_adapters_use_the_heuristic() {
    let p = gpu();
    let c = big_candidates(&p);
    let h = c[0];
    let never = |_| -> crate::Result<f64> { panic!("must not measure") };

    let off = Autotuner::new(AutotuneMode::Off, None);
    let d = off
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, h, never)
        .unwrap();
    assert_eq!((d.kernel, d.source), (h, DecisionSource::Heuristic));

    let fast = Autotuner::new(AutotuneMode::Fast, None);
    // 2 * 512^3 = 2^28 flops: below the threshold.
    assert!(2 * 512u64.pow(3) < TUNE_MIN_FLOPS);
    let small = tune::matmul_candidates(&p, DType::F32, 512, 512, 512, 1);
    let d = fast
        .decide(
            &p,
            "matmul",
            DType::F32,
            512,
            512,
            512,
            1,
            &small,
            small[0],
            never,
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Heuristic);
    // The threshold counts the batch: 8 x 512^3 is 2^31 flops.
    let mut called = false;
    fast.decide(
        &p,
        "matmul",
        DType::F32,
        512,
        512,
        512,
        8,
        &small,
        small[0],
        |k| {
            called = true;
            Ok(fake_time(&small, k))
        },
    )
    .unwrap();
    assert!(called);

    let mut cpu = gpu();
    cpu.device_type = wgpu::DeviceType::Cpu;
    let d = fast
        .decide(&cpu, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, h, never)
        .unwrap();
    assert_eq!(d.source, DecisionSource::Heuristic);

    // One candidate: nothing to choose between.
    let d = fast
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            BIG,
            1,
            &c[..1],
            h,
            never,
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Heuristic);
}

#[test]
fn failing_candidates_are_skipped() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Full, None);
    // The naturally fastest (c[2]) fails; one returns a nonsense time.
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            if k == c[2] {
                Err(Error::InvalidArgument("no such pipeline".into()))
            } else if k == c[3] {
                Ok(f64::NAN)
            } else {
                Ok(fake_time(&c, k))
            }
        })
        .unwrap();
    assert_eq!((d.kernel, d.source), (c[1], DecisionSource::Tuned));

    // All fail: the heuristic, and nothing cached.
    let k = 3 * BIG;
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, k, 1, &c, c[0], |_| {
            Err(Error::InvalidArgument("broken".into()))
        })
        .unwrap();
    assert_eq!((d.kernel, d.source), (c[0], DecisionSource::Heuristic));
    let mut called = false;
    tuner
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            k,
            1,
            &c,
            c[0],
            |kernel| {
                called = true;
                Ok(fake_time(&c, kernel))
            },
        )
        .unwrap();
    assert!(called, "a failed tuning is retried");

    // A lost device is an error, not a skipped candidate.
    let e = tuner
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            5 * BIG,
            1,
            &c,
            c[0],
            |_| Err(Error::DeviceLost("gone".into())),
        )
        .unwrap_err();
    assert!(matches!(e, Error::DeviceLost(_)), "{e}");
}

#[test]
fn a_decision_asked_for_while_measuring_gets_the_heuristic() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let inner = Cell::new(None);
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            // E.g. the op layer's measurement going through the dispatcher.
            let nested = tuner
                .decide(
                    &p,
                    "matmul",
                    DType::F32,
                    4096,
                    4096,
                    4096,
                    1,
                    &c,
                    c[1],
                    |_| panic!("nested tuning"),
                )
                .unwrap();
            inner.set(Some(nested.source));
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    assert_eq!(inner.get(), Some(DecisionSource::Heuristic));
}

#[test]
fn concurrent_threads_tune_a_shape_once() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let calls = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let d = tuner
                    .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        Ok(fake_time(&c, k))
                    })
                    .unwrap();
                assert_eq!(d.kernel, c[2]);
            });
        }
    });
    assert_eq!(calls.load(Ordering::Relaxed), FAST_CANDIDATES as u32);
}

// ---- the cache file ----

#[test]
fn a_second_tuner_on_the_same_file_does_no_tuning() {
    capture_logs();
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("second");
    let path = dir.join("nested").join("autotune.json");
    let first = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let d = first
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    assert!(
        path.exists(),
        "the directory is created and the file written"
    );
    // Atomic write: no temp files left behind.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json["version"], CACHE_FORMAT_VERSION);
    assert_eq!(json["entries"].as_array().unwrap().len(), 1);

    // "A second process": a new tuner on the same file.
    let second = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let called = Cell::new(false);
    let d = second
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            called.set(true);
            Ok(1.0)
        })
        .unwrap();
    assert!(!called.get(), "the closure is not called on a cache hit");
    assert_eq!((d.source, d.kernel), (DecisionSource::Cache, c[2]));
    let hits = logged(log::Level::Info, "cache hit for matmul f32 2048x2048x2048");
    assert!(hits.iter().any(|m| m.contains("(no tuning)")), "{hits:?}");

    // clear_memory re-reads the file, as a new process would.
    first.clear_memory();
    let d = first
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            panic!("not measured")
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Cache);

    // A changed candidate set does not reuse the entry.
    let fewer = &c[..4];
    let d = second
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            BIG,
            1,
            fewer,
            c[0],
            |k| Ok(fake_time(&c, k)),
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tune_cache_round_trips_and_merges_with_other_writers() {
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("roundtrip");
    let path = dir.join("autotune.json");
    let key = |m| TuneKey::new(&p, "matmul", DType::F32, ShapeBucket::new(m, m, m, 1), &c);
    let entry = |kernel: MatmulKernel| {
        Entry::new(kernel, vec![Measurement::new(kernel, 1.5e-3)], AutotuneMode::Fast, 0.25)
    };

    let mut a = TuneCache::new(Some(path.clone()));
    let mut b = TuneCache::new(Some(path.clone()));
    assert!(a.is_empty());
    assert!(b.is_empty());
    a.insert(key(1024), entry(c[0]));
    // b read the (missing) file before a wrote: its save keeps a's entry.
    b.insert(key(4096), entry(c[1]));

    let mut fresh = TuneCache::new(Some(path.clone()));
    assert_eq!(fresh.len(), 2);
    assert_eq!(fresh.get(&key(1024)), Some(&entry(c[0])));
    assert_eq!(fresh.get(&key(4096)), Some(&entry(c[1])));
    assert_eq!(fresh.path(), Some(path.as_path()));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_cache_warns_and_is_replaced() {
    capture_logs();
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("corrupt");
    let path = dir.join("autotune.json");
    std::fs::write(&path, "{ this is not json").unwrap();
    let tuner = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!((d.source, d.kernel), (DecisionSource::Tuned, c[2]));
    let warnings = logged(log::Level::Warn, &path.display().to_string());
    assert!(
        warnings.iter().any(|w| w.contains("corrupt")),
        "{warnings:?}"
    );
    // Rewritten as a valid cache.
    let mut reread = TuneCache::new(Some(path.clone()));
    assert_eq!(reread.len(), 1);

    // Valid JSON of another format version: ignored with a warning too.
    std::fs::write(&path, r#"{"version": 999, "entries": "something else"}"#).unwrap();
    let tuner = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    let warnings = logged(log::Level::Warn, &path.display().to_string());
    assert!(
        warnings.iter().any(|w| w.contains("version 999")),
        "{warnings:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_unwritable_cache_warns_once_and_tunes_in_memory() {
    capture_logs();
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let path = file.join("sub").join("autotune.json");
    let tuner = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    for m in [BIG, 2 * BIG] {
        let d = tuner
            .decide(&p, "matmul", DType::F32, m, BIG, BIG, 1, &c, c[0], |k| {
                Ok(fake_time(&c, k))
            })
            .unwrap();
        assert_eq!((d.source, d.kernel), (DecisionSource::Tuned, c[2]));
    }
    let warnings = logged(log::Level::Warn, &path.display().to_string());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    // Still cached in memory.
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            panic!("not measured")
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Cache);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn modes_parse() {
    assert_eq!(AutotuneMode::parse("off"), Some(AutotuneMode::Off));
    assert_eq!(AutotuneMode::parse(" FULL "), Some(AutotuneMode::Full));
    assert_eq!(AutotuneMode::parse("fast"), Some(AutotuneMode::Fast));
    assert_eq!(AutotuneMode::parse(""), Some(AutotuneMode::Fast));
    assert_eq!(AutotuneMode::parse("0"), Some(AutotuneMode::Off));
    assert_eq!(AutotuneMode::parse("sometimes"), None);
    assert_eq!(AutotuneMode::default(), AutotuneMode::Fast);
    assert_eq!(AutotuneMode::Fast.repeats(), 3);
    assert_eq!(AutotuneMode::Full.repeats(), 5);
    assert_eq!(AutotuneMode::Fast.timing_options().repeats, 3);
}

#[test]
fn transposed_layouts_are_tuned_and_cached_apart() {
    let p = gpu();
    let layout = tune::Layout::dense(BIG, BIG, BIG, true, false);
    let c = tune::matmul_candidates_layout(&p, DType::F32, (BIG, BIG, BIG), 1, layout);
    // Only kernels that read A transposed (strided or vec4 along M).
    assert!(c.len() >= 2, "{c:?}");
    assert!(
        c.iter()
            .all(|k| k.accepts_layout(DType::F32, BIG, BIG, BIG, true, false))
    );
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let mut measured = 0;
    let mut tune = |t: (bool, bool)| {
        tuner
            .decide_transposed(
                &p,
                ("matmul", DType::F32),
                (BIG, BIG, BIG, 1),
                t,
                &c,
                c[0],
                |k| {
                    measured += 1;
                    Ok(fake_time(&c, k))
                },
            )
            .unwrap()
            .source
    };
    assert_eq!(tune((true, false)), DecisionSource::Tuned);
    assert_eq!(tune((true, false)), DecisionSource::Cache);
    // The same shape with another layout is another key: tuned again.
    assert_eq!(tune((false, true)), DecisionSource::Tuned);
    assert!(measured >= 4, "{measured}");
}

#[test]
fn tune_cache_is_bounded() {
    use crate::tune::cache::MAX_TUNE_ENTRIES;
    let p = gpu();
    let c = big_candidates(&p);
    let bucket = ShapeBucket::new(256, 256, 256, 1);
    let entry = Entry::new(c[0], Vec::new(), AutotuneMode::Fast, 0.0);
    let mut cache = TuneCache::new(None);
    let key = |i: usize| TuneKey::new(&p, &format!("op{i}"), DType::F32, bucket, &c);
    for i in 0..MAX_TUNE_ENTRIES + 50 {
        cache.insert(key(i), entry.clone());
        assert!(cache.len() <= MAX_TUNE_ENTRIES);
    }
    assert_eq!(cache.len(), MAX_TUNE_ENTRIES);
    // The newest entry is kept; re-inserting a present key evicts nothing.
    let last = key(MAX_TUNE_ENTRIES + 49);
    assert!(cache.get(&last).is_some());
    cache.insert(last.clone(), entry.clone());
    assert_eq!(cache.len(), MAX_TUNE_ENTRIES);
}

#[test]
fn quantized_gemv_launches_are_tuned_by_bytes_and_cached_beside_matmuls() {
    use crate::tune::autotune::TUNE_MIN_BYTES;
    use crate::tune::quant::{QuantGemvLaunch, quant_gemv_candidates};
    let p = gpu();
    let mut cpu = gpu();
    cpu.device_type = wgpu::DeviceType::Cpu;
    let c = quant_gemv_candidates(1024, 128, 1);
    let dir = temp_dir("gemv-launch");
    let path = dir.join("autotune.json");
    let op = ("quantized GEMV mxfp4 block 32", DType::F32);
    // The fourth candidate is fastest (timed in the full mode).
    let time = |l: QuantGemvLaunch| {
        let i = c.iter().position(|&x| x == l).unwrap();
        Ok([3.0, 2.0, 4.0, 1.0, 5.0][i] * 1e-6)
    };
    let full = Autotuner::new(AutotuneMode::Full, Some(path.clone()));
    let never = |_: QuantGemvLaunch| -> crate::Result<f64> { panic!("not worth tuning") };
    // A GEMV (far below TUNE_MIN_FLOPS) is tuned by the bytes it reads:
    // not below TUNE_MIN_BYTES, not on a CPU adapter.
    for (profile, bytes) in [(&p, TUNE_MIN_BYTES - 1), (&cpu, TUNE_MIN_BYTES * 8)] {
        let d = full.decide_memory_bound(profile, op, (1, 4096, 4096), bytes, &c, c[0], never).unwrap();
        assert_eq!((d.kernel, d.source), (c[0], DecisionSource::Heuristic));
    }
    let d = full.decide_memory_bound(&p, op, (1, 4096, 4096), TUNE_MIN_BYTES, &c, c[0], time).unwrap();
    assert_eq!((d.kernel, d.source), (c[3], DecisionSource::Tuned));
    // A matmul tuned into the same file keeps its own entry.
    let m = big_candidates(&p);
    full.decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &m, m[0], |k| Ok(fake_time(&m, k)))
        .unwrap();
    // A second process reads both back, each as its own kind.
    let second = Autotuner::new(AutotuneMode::Full, Some(path.clone()));
    let d = second.decide_memory_bound(&p, op, (1, 4096, 4096), TUNE_MIN_BYTES, &c, c[0], never).unwrap();
    assert_eq!((d.kernel, d.source), (c[3], DecisionSource::Cache));
    let d = second.decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &m, m[0], |_| panic!("cached")).unwrap();
    assert_eq!((d.kernel, d.source), (m[2], DecisionSource::Cache));
    // Another bucket of rows of x is tuned apart.
    let d = second.decide_memory_bound(&p, op, (8, 4096, 4096), TUNE_MIN_BYTES, &c, c[0], time).unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn quantized_gemv_candidates_start_with_the_heuristic() {
    use crate::tune::quant::{quant_gemv_candidates, quant_gemv_launch};
    for (max, blocks, m) in [(1024, 128, 1), (256, 128, 1), (1024, 1, 1), (1024, 3, 1), (1024, 128, 8)] {
        let c = quant_gemv_candidates(max, blocks, m);
        assert_eq!(c[0], quant_gemv_launch(max, blocks), "{max} {blocks}");
        for launch in &c {
            assert!(launch.wg <= max && launch.ksplit as usize <= blocks.max(1), "{launch}");
        }
    }
    assert_eq!(quant_gemv_candidates(1024, 128, 1).len(), 5);
    assert_eq!(quant_gemv_candidates(1024, 1, 1).len(), 2, "no split of a single block");
    // Four rows and more try smaller workgroups first.
    let wgs: Vec<u32> = quant_gemv_candidates(1024, 128, 8).iter().take(3).map(|l| l.wg).collect();
    assert_eq!(wgs, [1024, 512, 256]);
}

#[test]
fn launches_serialise_stably() {
    use crate::tune::quant::QuantGemvLaunch;
    let launch = QuantGemvLaunch { wg: 512, ksplit: 2 };
    let text = serde_json::to_string(&launch).unwrap();
    assert_eq!(text, r#"{"wg":512,"ksplit":2}"#);
    assert_eq!(serde_json::from_str::<QuantGemvLaunch>(&text).unwrap(), launch);
    assert!(serde_json::from_str::<MatmulKernel>(&text).is_err());
}
