//! The decode kernel (few query rows, long caches): its tiles, shape
//! arithmetic, specialisation and key splits.

use super::*;

/// Packed query rows (`group * Sq`) up to which the dispatcher uses the
/// decode kernel (`shaders/attention_decode.wgsl`): it serves at most
/// [`DECODE_CHUNK_ROWS`] rows per workgroup, so 16 rows read K and V twice
/// (the second time mostly from L2); beyond that the flash tile's
/// arithmetic reuse wins.
pub const DECODE_KERNEL_MAX_ROWS: usize = 16;

/// Most query rows one decode workgroup serves (its registers hold an
/// accumulator per row: 8 rows x 8 f16 columns = 64 floats).
pub const DECODE_CHUNK_ROWS: usize = 8;

/// Rows per decode workgroup for `rows` packed query rows: the fewest chunks
/// of at most [`DECODE_CHUNK_ROWS`], split evenly (12 rows: 2 x 6), so no
/// register or arithmetic is spent on absent rows beyond the rounding.
pub fn decode_chunk_rows(rows: usize) -> usize {
    let rows = rows.max(1);
    rows.div_ceil(rows.div_ceil(DECODE_CHUNK_ROWS))
}

/// The decode kernel's tile (`shaders/attention_decode.wgsl`): workgroup
/// size, invocations per key in the score step, V prefetch and how many
/// workgroups per compute unit the key splits aim for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeTiles {
    /// Invocations per workgroup (`WG`): 32, 64, 128 or 256 (32: one warp
    /// on NVIDIA, whose barriers cost next to nothing).
    pub threads: u32,
    /// Invocations per key in the score step (`LK`): 2, 4 or 8; a block is
    /// `threads / lk` keys.
    pub lk: u32,
    /// Load the next block's V words with its K words (two blocks of V in
    /// registers); honoured only while the K and V registers of two blocks
    /// stay within 16 words per invocation.
    pub prefetch_v: bool,
    /// Workgroups per compute unit the key splits aim for.
    pub per_unit: u32,
}

impl fmt::Display for DecodeTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wg{} lk{} kb{} {} {}/cu",
            self.threads,
            self.lk,
            self.keys(),
            if self.prefetch_v { "vpre" } else { "v-now" },
            self.per_unit
        )
    }
}

impl DecodeTiles {
    /// Keys per block (`KB`); split lengths are multiples of it.
    pub fn keys(&self) -> usize {
        (self.threads / self.lk.max(1)) as usize
    }

    /// Whether the shape is one the kernel supports (power-of-two sizes,
    /// at least 8 keys per block).
    pub fn valid(&self) -> bool {
        [32, 64, 128, 256].contains(&self.threads)
            && [2, 4, 8].contains(&self.lk)
            && self.keys() >= 8
            && self.per_unit >= 1
    }
}

/// The dispatcher's decode tile for `dtype` and key head dim `d`: 128
/// invocations, LK chosen so each invocation loads at most 4 K words per
/// block (f16 D = 128: LK = 4, 32 keys per block; f32 D = 128: LK = 8, 16
/// keys), V loaded with its own block (not a block ahead), and key splits
/// for 4 workgroups per compute unit: one wave.
/// Measured on the H200 (runs 29-36, `attention_sweep --decode-grid`, Hq 32, Hkv
/// 8, D 128): the grid of shapes against 2 to 8 workgroups per unit showed
/// that the split count matters more than the shape. These tiles run 4
/// workgroups (16 warps) per SM at once, so 4 per unit is one full wave:
/// f16 at 32k keys 79.9 us against 96.0 at 8 per unit (1.94 waves, the
/// second one half empty) and 112.6 at 5; at 128k 233 us against 247.
/// f32 at 32k: 101.7 us against 109.0.
/// Why these shapes: about 128 registers per invocation (two blocks of K
/// words and a block of V words, 8 vec4 accumulators per row quad) with
/// 16 KiB of loads per block and workgroup; f16 with V prefetched too
/// (two blocks of V) ran slower at every split count. f32 prefetched V
/// until run 93, whose grids (two calls, after the epilogue change)
/// had it without at 84.4-85.0 us against 88.9-89.1 at 32k, 259.4-260.8
/// against 264.0-264.4 at 128k.
pub fn decode_kernel_tiles(dtype: DType, d: usize) -> DecodeTiles {
    let words = d.div_ceil(decode_epw(dtype)).max(1);
    let lk = words.div_ceil(4).next_power_of_two().clamp(2, 8) as u32;
    DecodeTiles {
        threads: 128,
        lk,
        prefetch_v: false,
        per_unit: 4,
    }
}

/// Longest minimum key run of a decode split (see [`decode_splits`]).
pub const DECODE_MIN_SPLIT: usize = 128;

/// Elements per 16-byte word of the decode kernel: 4 (f32) or 8 (f16, bf16).
pub fn decode_epw(dtype: DType) -> usize {
    16 / dtype.size()
}

/// Whether the decode kernel handles these head dims in `dtype`: D and Dv
/// multiples of the 16-byte word (rows start on a word), 1 to 256.
pub fn decode_fits(dtype: DType, d: usize, dv: usize) -> bool {
    let epw = decode_epw(dtype);
    (1..=256).contains(&d)
        && (1..=256).contains(&dv)
        && d.is_multiple_of(epw)
        && dv.is_multiple_of(epw)
}

/// Derived shape of the decode kernel: (rows per chunk, row quads, KWPL, WVP, VPRE).
pub(crate) fn decode_shape(
    dtype: DType,
    rows: usize,
    d: usize,
    dv: usize,
    t: DecodeTiles,
) -> (u32, u32, u32, u32, bool) {
    let epw = decode_epw(dtype);
    let chunk = decode_chunk_rows(rows) as u32;
    let lk = t.lk.max(1);
    let kwpl = (d / epw).div_ceil(lk as usize).max(1) as u32;
    // WVP >= LK so the G = WG / WVP key groups divide the KB keys of a block.
    let wvp = (dv / epw).max(lk as usize).next_power_of_two() as u32;
    let vpl = t.keys() as u32 / (t.threads / wvp).max(1);
    let vpre = t.prefetch_v && 2 * (kwpl + vpl) <= 16;
    (chunk, chunk.div_ceil(4), kwpl, wvp, vpre)
}

/// Whether tile `t` serves value head dim `dv` in `dtype`: every value word
/// needs an invocation (`WVP <= WG`).
pub fn decode_tiles_fit(dtype: DType, dv: usize, t: DecodeTiles) -> bool {
    let wvp = (dv / decode_epw(dtype))
        .max(t.lk as usize)
        .next_power_of_two();
    wvp <= t.threads as usize
}

/// The decode kernel's specialisation for `rows` packed query rows
/// (`group * Sq`), head dims `d`, `dv` (see [`decode_fits`]) and tile `t`.
/// `dtype` is K's and V's: `BF16` reads them as words widened in the kernel
/// with an f32 query (a bf16 KV cache, [`crate::KvCache`]).
///
/// `shuffle`: each key's partial dots added by subgroup shuffles
/// ([`decode_shuffle_fits`]).
pub fn decode_spec(
    dtype: DType,
    rows: usize,
    d: usize,
    dv: usize,
    t: DecodeTiles,
    shuffle: bool,
) -> Spec {
    let (chunk, rq, kwpl, wvp, vpre) = decode_shape(dtype, rows, d, dv, t);
    let bf16 = dtype == DType::BF16;
    let spec = Spec::new(if shuffle {
        Kernel::AttentionDecodeShuffle
    } else {
        Kernel::AttentionDecode
    })
    // bf16 K and V are read as words and widened in the kernel; q (staged)
    // and the partial states are f32.
    .dtype(if bf16 { DType::F32 } else { dtype })
    .constant("ROWS", chunk)
    .constant("RQ", rq)
    .constant("EPW", decode_epw(dtype) as u32)
    .constant("LK", t.lk)
    .constant("KWPL", kwpl)
    .constant("WVP", wvp)
    .constant("VPRE", u32::from(vpre))
    .constant("WG", t.threads)
    .constant("PROBE", decode_probe())
    .constant("CE", decode_epilogue_chunk(dtype, t))
    .constant("SHUFFLE", u32::from(shuffle));
    if bf16 {
        spec.constant("KV_BF16", 1)
    } else {
        spec
    }
}

/// Whether the decode kernel can add each key's partial dots by subgroup
/// shuffles with tile `t`: subgroups of at least `lk` lanes (the LK lanes of
/// a key must share one) whose size divides the workgroup.
pub fn decode_shuffle_fits(p: &AdapterProfile, t: DecodeTiles) -> bool {
    p.subgroups
        && p.subgroup_min_size >= t.lk
        && p.subgroup_max_size > 0
        && t.threads.is_multiple_of(p.subgroup_max_size)
}

/// Timing probe of the decode kernel (`WGTILE_DECODE_PROBE`, wrong results
/// while set): 0 off; bit 0 drops the score math, bit 1 the softmax and
/// P V math, bit 2 the epilogue, bit 3 the key loop (see
/// `shaders/attention_decode.wgsl`), to see what each part costs.
pub(crate) fn decode_probe() -> u32 {
    crate::dev::overrides().decode_probe
}

/// Value elements the decode kernel's epilogue sums per barrier pair (its
/// `CE`; at most 8 KiB of workgroup memory): 2 for f16, 4 for f32.
/// `WGTILE_DECODE_CE` (2 or 4) overrides it for measurements.
///
/// Measured on the H200 (runs 93-102, D 128, 32k keys): the f16 kernel
/// (LK 4) split pass took 61.9 us with 2, against 64.6 for the old
/// epilogue (one element per barrier pair, 20 barriers); with 4 or 1 the
/// driver gave it 168 registers instead of 128, 3 workgroups per SM
/// instead of 4, and 91-94 us. f32 (LK 8) stays at 128 registers with 4.
pub(crate) fn decode_epilogue_chunk(dtype: DType, t: DecodeTiles) -> u32 {
    let forced = crate::dev::overrides().decode_ce;
    // bf16 words hold 8 elements, as f16's: the same registers.
    let chunk = if dtype.size() == 2 { 2 } else { 4 };
    // 256 invocations: 2 (the tiles have at most 256).
    forced.unwrap_or(chunk).min(512 / t.threads.clamp(1, 256))
}

/// Workgroup memory of [`decode_spec`]'s kernel in bytes.
pub fn decode_workgroup_bytes(
    dtype: DType,
    rows: usize,
    d: usize,
    dv: usize,
    t: DecodeTiles,
) -> u32 {
    let (_, rq, kwpl, wvp, _) = decode_shape(dtype, rows, d, dv, t);
    let (rq, kb, wg) = (rq as usize, t.keys(), t.threads as usize);
    let dp = kwpl as usize * t.lk as usize * decode_epw(dtype);
    // q_t, part, lgs and prob, comb (CE per invocation), red; then the 2
    // * RQ flags.
    let comb = decode_epilogue_chunk(dtype, t) as usize * wg;
    let vec4s = rq * dp + rq * t.lk as usize * kb + 2 * rq * kb + comb + wg / wvp as usize;
    (vec4s * 16 + 8 * rq) as u32
}

/// Key splits of the decode kernel: enough workgroups for `t.per_unit` per
/// compute unit, each split at least two blocks, clamped to 64 to
/// [`DECODE_MIN_SPLIT`] keys (and at least one block), at most 256. `workgroups` is the grid without splitting (row
/// chunks x KV heads x batch).
pub fn decode_splits(p: &AdapterProfile, workgroups: u64, sk: usize, t: DecodeTiles) -> u32 {
    let target = u64::from(t.per_unit.max(1)) * u64::from(p.compute_units.max(1));
    if workgroups >= target || sk <= t.keys() {
        return 1;
    }
    // Two blocks, between 64 and DECODE_MIN_SPLIT keys: a 4k cache (f16
    // D = 128, 32-key blocks) gets 64 splits, 512 workgroups on 8 KV heads.
    let min_split = (2 * t.keys()).clamp(64, DECODE_MIN_SPLIT).max(t.keys());
    let max_splits = (sk as u64).div_ceil(min_split as u64).max(1);
    target.div_ceil(workgroups.max(1)).min(max_splits).min(256) as u32
}
