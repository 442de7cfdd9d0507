//! Square f32 matmul throughput per kernel: `matmul_naive`, `matmul_tiled_<bm>x<bn>`
//! for every tile shape the adapter fits, and `matmul_dispatch` (whatever the
//! dispatcher picks).
//!
//! ```text
//! cargo bench --bench matmul                       # sizes suited to the adapter
//! WGTILE_BENCH_SIZES=256,512 cargo bench --bench matmul
//! cargo bench --bench matmul -- matmul_tiled       # criterion filter
//! ```
//!
//! Times come from `Context::time`: GPU timestamps around each run's compute
//! pass where the adapter has them (one submit for all repeats), wall clock
//! around submit + wait otherwise. Criterion's "elements" are FLOPs, so its
//! "Melem/s" / "Gelem/s" read as MFLOP/s / GFLOP/s.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use wgtile::tune::TILE_CONFIGS;
use wgtile::{Context, DType, MatmulKernel, Plan, Tensor, TimingOptions};

/// Sizes on a CPU adapter (lavapipe: ~0.5 GFLOP/s naive, ~7 GFLOP/s tiled on 2 cores).
const CPU_SIZES: [usize; 3] = [64, 128, 256];
/// Sizes on a GPU.
const GPU_SIZES: [usize; 5] = [256, 512, 1024, 2048, 4096];
/// Largest n the naive kernel is benchmarked at on a CPU adapter / on a GPU.
const CPU_NAIVE_MAX: usize = 256;
const GPU_NAIVE_MAX: usize = 2048;
/// Most repeats one `Context::time` call measures (timestamp query-set limit).
const MAX_REPEATS: u64 = 2048;

fn main() {
    let _ = env_logger::try_init();
    let ctx = match Context::new_blocking(Default::default()) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("matmul bench: no usable adapter, nothing benchmarked: {e}");
            return;
        }
    };
    let profile = ctx.profile();
    eprintln!(
        "matmul bench on {} ({:?}, {:?}), timestamps: {}",
        profile.name, profile.backend, profile.device_type, profile.timestamps
    );

    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .configure_from_args();

    let sizes = sizes(&ctx);
    let naive_max = if profile.is_cpu() {
        CPU_NAIVE_MAX
    } else {
        GPU_NAIVE_MAX
    };
    let inputs: Vec<(usize, Tensor, Tensor)> = sizes
        .iter()
        .filter_map(|&n| {
            let a = ctx.rand_uniform([n, n], -1.0, 1.0, DType::F32, 1);
            let b = ctx.rand_uniform([n, n], -1.0, 1.0, DType::F32, 2);
            match (a, b) {
                (Ok(a), Ok(b)) => Some((n, a, b)),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("matmul bench: skipping n = {n}: {e}");
                    None
                }
            }
        })
        .collect();

    // (group name, kernel or None for the dispatcher, largest n)
    let mut kernels: Vec<(String, Option<MatmulKernel>, usize)> = vec![(
        "matmul_naive".to_string(),
        Some(MatmulKernel::naive_for(profile)),
        naive_max,
    )];
    for t in TILE_CONFIGS {
        if t.fits(profile) {
            for vec4 in [false, true] {
                kernels.push((
                    format!(
                        "matmul_tiled{}_{}x{}x{}",
                        if vec4 { "_vec4" } else { "" },
                        t.bm,
                        t.bn,
                        t.bk
                    ),
                    Some(MatmulKernel::Tiled { tile: t, vec4 }),
                    usize::MAX,
                ));
            }
        } else {
            eprintln!("matmul bench: tile shape {t} does not fit this adapter, skipped");
        }
    }
    kernels.push(("matmul_dispatch".to_string(), None, usize::MAX));

    for (name, kernel, max_n) in &kernels {
        let mut group = c.benchmark_group(name.as_str());
        for (n, a, b) in inputs.iter().filter(|(n, _, _)| n <= max_n) {
            let plan = match ctx.matmul_plan(
                a,
                b,
                None,
                &wgtile::MatmulOptions {
                    kernel: *kernel,
                    ..Default::default()
                },
            ) {
                Ok(plan) => plan,
                Err(e) => {
                    eprintln!("matmul bench: {name} n = {n}: cannot build the plan: {e}");
                    continue;
                }
            };
            // Elements = FLOPs (2 * n^3 for an n x n x n matmul), so criterion's
            // element throughput is FLOP/s.
            group.throughput(Throughput::Elements(plan.flops()));
            let mut reported = false;
            group.bench_function(BenchmarkId::from_parameter(n), |bencher| {
                if !reported {
                    // Once per plan (and only when criterion's filter selects it).
                    report(&ctx, &plan);
                    reported = true;
                }
                bencher.iter_custom(|iters| time_runs(&ctx, &plan, iters));
            });
        }
        group.finish();
    }

    c.final_summary();
}

/// Square sizes: `WGTILE_BENCH_SIZES=256,512` or the adapter's defaults.
fn sizes(ctx: &Context) -> Vec<usize> {
    if let Ok(list) = std::env::var("WGTILE_BENCH_SIZES") {
        let parsed: Vec<usize> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .filter_map(|s| match s.parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    eprintln!("matmul bench: ignoring bad WGTILE_BENCH_SIZES entry {s:?}");
                    None
                }
            })
            .collect();
        if !parsed.is_empty() {
            return parsed;
        }
        eprintln!("matmul bench: WGTILE_BENCH_SIZES={list:?} has no sizes; using the defaults");
    }
    if ctx.profile().is_cpu() {
        CPU_SIZES.to_vec()
    } else {
        GPU_SIZES.to_vec()
    }
}

/// Prints the plan's label and its achieved GFLOP/s (median of a short timing).
fn report(ctx: &Context, plan: &Plan) {
    match ctx.time(plan, &TimingOptions::default()) {
        Ok(t) => eprintln!(
            "{}: {:.2} GFLOP/s, {t}",
            plan.label(),
            t.gflops(plan.flops())
        ),
        Err(e) => eprintln!("{}: timing failed: {e}", plan.label()),
    }
}

/// Total time of `iters` runs of `plan`, measured at most `MAX_REPEATS` runs per
/// `Context::time` call.
fn time_runs(ctx: &Context, plan: &Plan, iters: u64) -> Duration {
    let mut total = 0.0;
    let mut left = iters;
    while left > 0 {
        let repeats = left.min(MAX_REPEATS);
        let timing = ctx
            .time(
                plan,
                &TimingOptions {
                    warmup: 0,
                    warmup_seconds: 0.0,
                    repeats: repeats as u32,
                },
            )
            .unwrap_or_else(|e| panic!("timing {} failed: {e}", plan.label()));
        total += timing.samples.iter().sum::<f64>();
        left -= repeats;
    }
    Duration::from_secs_f64(total)
}
