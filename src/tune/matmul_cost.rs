//! The dispatcher's measured cost constants for matmul: thresholds, gains
//! and speeds taken from runs on real adapters (each says which; the runs
//! are in docs/perf/log-2026-11.md, the story in docs/perf/matmul.md).
//! Changing one changes which kernel runs; the snapshot test shows where.

// The dispatcher's rules (tune::matmul)

/// Problems with at most this many multiply-adds (M * N * K * batch) use the
/// naive kernel: its lack of reuse costs less than the tiled kernel's tile
/// staging and barriers.
pub const TINY_MACS: u64 = 32 * 32 * 32;

/// Least multiply-adds (M * N * K * batch) for the subgroup-broadcast
/// kernel: its fully unrolled shader takes llvmpipe 7-13 s to compile per
/// specialisation on a cold shader cache, which only a large problem (it
/// saves about 65 ms per call at 512^3) pays back; smaller ones take the
/// 16x16 register tile, which compiles in well under a second.
pub const BROADCAST_MIN_MACS: u64 = 128 * 128 * 128;

/// Shortest K chunk split-K gives a workgroup (shorter chunks spend more on
/// partial sums than they gain in parallelism).
pub const SPLIT_K_MIN_CHUNK: usize = 512;

/// Most chunks split-K uses.
pub const SPLIT_K_MAX: usize = 16;

/// A grid "fills a wave" from this fraction of the compute units on: a
/// larger tile that leaves some units idle still beats a smaller tile on a
/// full grid (H200, f16 1792: 98 blocks of 256x128 on 132 SMs ran at 108.6
/// TFLOP/s, 196 blocks of 128x128 at 71.7).
pub const WAVE_FILL: f64 = 0.7;

/// TFLOP/s of each of [`COOP_SPLIT_CONFIGS`](crate::tune::COOP_SPLIT_CONFIGS) at 4096^3 (grids of 4-16
/// waves), H200 runs 86-87 (the kernel alone with its first
/// passes, the lower of two runs): 70.1, 68.9, 65.0, 49.7, 51.7.
pub const COOP_SPLIT_TFLOPS: [f64; 5] = [70.1, 68.9, 65.0, 49.7, 51.7];

/// Smallest problem (multiply-adds, batches included) the dispatcher sends
/// to the f32 split kernel by default; below it the f32 tiled kernels run.
/// H200 (runs 78-85): at 1024^3 the split ran at 30.4 TFLOP/s (2x2x32x2)
/// against 12.4 for the tiled kernel; smaller sizes were not measured.
pub const COOP_SPLIT_MIN_MACS: u64 = 1 << 30;

/// Where a bf16 product on the tensor cores stages its operands to f16 by
/// the checked cast (the f16 kernel then reads f16) rather than narrowing
/// bf16 in the kernel's put after a check pass: `M N >= BF16_STAGE_MIN (M +
/// N)`. The kernel converts each operand value once per tile that stages
/// it (M N K (1/BN + 1/BM) conversions), the staging once (K (M + N)
/// values written), so the ratio does not depend on K. H100, bf16 result
/// (runs 174-175 of docs/perf/log-2026-12.md, `bf16_matmul`): 8192^3
/// staged 4423 us against 4567 in the kernel (f16 4221), 4096^3 621-624
/// against 625-627, 2048^3 110 against 102 (M N / (M + N) = 4096, 2048,
/// 1024).
pub const BF16_STAGE_MIN: usize = 2048;

/// Whether a bf16 product of `m` x `n` results per matrix on the tensor
/// cores is staged to f16 first ([`BF16_STAGE_MIN`]).
pub fn bf16_staged(m: usize, n: usize) -> bool {
    m.saturating_mul(n) >= BF16_STAGE_MIN.saturating_mul(m.saturating_add(n))
}

/// Shortest contraction the dispatcher sends to the f32 split kernel by
/// default: each product is within ~2^-20 of exact, the f32 kernels' k
/// terms within k ulps; from 64 terms on the split's error is the smaller
/// share.
pub const COOP_SPLIT_MIN_K: usize = 64;

// The padding layer's cost model (tune::pad)

/// Speed of the vec4 tiled kernel over the scalar-load one on the same
/// shape. Measured on the H200 before the register prefetch: 1.09-1.19x;
/// with it (runs 17-21' f32 figure): 1.00-1.01x (4095 scalar loads 32.8
/// TFLOP/s, 4096 vec4 33.0), and padding f32 for the 16-byte loads lost
/// (padded / unpadded 0.94-0.97x at 1790-1795 and 4094-4099). So 1: padding
/// the tiled kernels no longer pays on its own (`Padding::Always` still
/// pads, to measure).
pub const VEC4_GAIN: f64 = 1.0;

/// Speed of the cooperative-matrix (tensor core) kernel over the best
/// CUDA-core kernel in f16, measured on the H200 (1.8-2.8x); the low end.
pub const COOP_GAIN: f64 = 1.8;

/// Speed of the cooperative-matrix kernel's word-load variant (rows that do
/// not start on 16 bytes: 4-5 word loads and a shift per 8 halves) over its
/// 16-byte-load form, measured on the H200 in f16: 1793 vs 1792 0.62x, 4097
/// vs 4096 0.53x (run 15). The high end, so a copy must clearly pay.
pub const COOP_UNALIGNED: f64 = 0.6;

/// Speed of the f32 split tensor-core kernel (f32 values as two f16 halves)
/// over the scalar-load tiled f32 kernel: 70.3 against 33.0 TFLOP/s at
/// 4096^3 on the H200 (runs 78-85); the low end.
pub const COOP_SPLIT_GAIN: f64 = 2.0;

/// Speed of the f32 split kernel's word-load variant (rows that do not
/// start on 16 bytes) over its 16-byte-load form, H200 (runs 78-85): 1793
/// at 36.9 against 1792 at 44.7 TFLOP/s (0.83x, one wave either way). The
/// high end, so a copy must clearly pay.
pub const COOP_SPLIT_UNALIGNED: f64 = 0.8;

/// Floats per padded row of the f32 split kernel's operands: 4, what its
/// 16-byte loads need. Unlike the f16 kernel ([`COOP_PAD_HALVES`]), wider
/// rows did not pay (H200, runs 86-92, 256x128 blocks, TFLOP/s): 1793 at
/// 4 / 16 / 32 floats 37.4 / 36.7 / 36.1, 4097 61.0 / 59.9 / 59.2.
/// `WGTILE_SPLIT_PAD_FLOATS` (a multiple of 4) overrides it, to measure.
pub const SPLIT_PAD_FLOATS: usize = 4;

/// Most rows of C the padding layer computes apart, each a GEMV that reads
/// all of B: at M = 4096 + 3 three reads of B (f32 4096^2: ~25 us each on
/// the H200) against a round of the kernel (~250 us there).
pub const FRINGE_MAX_ROWS: usize = 3;

/// Halves per padded row of the tensor-core kernel's operands: 32 (64-byte
/// rows), where 16-byte loads would need only 8. H200 (runs 42-48, f16,
/// whole plans, two rounds): 4097 at 8 halves (rows of 8208 bytes, every
/// other one starting half a 32-byte sector off) 214.4 / 214.7 TFLOP/s, at
/// 16 223.2 / 223.0, at 32 231.5 / 231.4 (0.93x of 4096's 247), at 64
/// 228.5 / 228.4, at 128 232.3 / 232.4; the kernel alone 582 -> 537 us (less
/// than 4096's own 555 on rows of 8192 bytes). 1793: 146.3 / 146.8 at 8,
/// 145.7 / 145.9 at 32 (its kernel is one wave either way).
pub const COOP_PAD_HALVES: usize = 32;
