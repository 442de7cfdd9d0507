//! The padding layer's decisions: whether to copy operands into aligned
//! scratch, which rows to compute apart. Documented on [`PadChoice`].

use std::fmt;

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::problem::Padding;
pub use crate::tune::matmul_cost::{
    COOP_GAIN, COOP_PAD_HALVES, COOP_SPLIT_GAIN, COOP_SPLIT_UNALIGNED, COOP_UNALIGNED,
    FRINGE_MAX_ROWS, SPLIT_PAD_FLOATS, VEC4_GAIN,
};
use crate::tune::{self, MatmulKernel};

/// Whether the f32 split plan runs its kernel on the padded K
/// ([`PadChoice::full_k`]) where it copies both operands: on unless
/// `WGTILE_COOP_EDGES=0`, the switch that also keeps the kernel's edge
/// checks in whole-block dimensions (to measure the two together).
pub fn split_full_k() -> bool {
    crate::dev::overrides().coop_edges
}

fn split_pad_floats() -> usize {
    crate::dev::overrides()
        .split_pad_floats
        .unwrap_or(SPLIT_PAD_FLOATS)
}

/// Throughput of a kernel family relative to the scalar-load tiled kernel, by
/// the gains above; `None` for families padding does not help (naive, GEMV).
/// `aligned`: the operands' rows start on 16 bytes (the coop kernel's fast loads).
fn relative_speed(p: &AdapterProfile, kernel: MatmulKernel, aligned: bool) -> Option<f64> {
    // On CPU adapters 16-byte loads buy nothing measurable (lavapipe's sweep:
    // padded / unpadded 0.95-1.04x), so padding never pays there.
    let vec4_gain = if p.is_cpu() { 1.0 } else { VEC4_GAIN };
    match kernel {
        MatmulKernel::Tiled { vec4, .. } | MatmulKernel::SplitK { vec4, .. } => {
            Some(if vec4 { vec4_gain } else { 1.0 })
        }
        MatmulKernel::Coop { split: true, .. } => {
            Some(COOP_SPLIT_GAIN * if aligned { 1.0 } else { COOP_SPLIT_UNALIGNED })
        }
        MatmulKernel::Coop { .. } => {
            Some(VEC4_GAIN * COOP_GAIN * if aligned { 1.0 } else { COOP_UNALIGNED })
        }
        // The CPU kernel: its scalar and vec4 variants trade places on
        // lavapipe (docs/perf/log-2026-11.md, runs 22-27), so only `Padding::Always` pads.
        MatmulKernel::Broadcast { .. } => Some(1.0),
        _ => None,
    }
}

/// FLOPs the adapter does in the time it moves one byte, for the copy cost:
/// about 27 TFLOP/s over 4 TB/s on the H200 for the tiled kernels; lavapipe
/// on 2 cores about 1.5 GFLOP/s over ~5 GB/s.
fn flops_per_byte(p: &AdapterProfile) -> f64 {
    if p.is_cpu() { 0.3 } else { 7.0 }
}

/// The padding layer's decision for one matmul.
///
/// The padding layer: keeps awkward shapes off the slow path.
///
/// A dimension one past an alignment multiple (K or N = 1793, 4097, 50257)
/// rules out the fast kernels: 16-byte loads need rows that start on 16-byte
/// boundaries (K and N multiples of 4 in f32, 8 for the f16 tensor-core
/// kernel, whose padded rows go to multiples of 32 halves:
/// `COOP_PAD_HALVES`). The lecture's fix is padding (nanoGPT: vocabulary 50257 -> 50304).
/// wgtile has three tools, chosen by cost:
/// 1. bounds-checked kernels run any shape as it is ([`Padding::Never`]);
/// 2. this module's copy of A and/or B into scratch buffers whose rows are
///    padded to the alignment (the logical K and N stay: the kernels read
///    the rows through their pitch, zero the part of a load past K and
///    never store past N), when the cost model says the aligned kernel's gain
///    beats the copies ([`Padding::Auto`]). The f32 split kernel, where both
///    operands are copied, runs on the padded K instead (a whole number of
///    its K steps, B copied with zero rows past K: [`PadChoice::full_k`]),
///    so it needs no K checks. The tensor-core kernel writes C
///    directly; the vec4 tiled kernel, whose stores need N a multiple of 4,
///    computes N rounded up into scratch and the result is cropped back;
/// 3. tensors allocated padded from the start (`Context::tensor_padded`):
///    matmul reads them in place, no copies at all.
///
/// One more step against wave quantisation, with or without copies: when M
/// is one to `FRINGE_MAX_ROWS` past a multiple of the kernel's block rows
/// (tensor-core or tiled, on a GPU) and the grid without those rows is a
/// whole wave shorter (M = 4097: 4 waves instead of 5 on tensor cores), the
/// kernel runs the rows before them and each of the last rows of C is a
/// GEMV (`fringe_rows`; `MatmulOptions::fringe_rows` forces a count). Such
/// plans bypass the autotuner: they run the heuristic's kernel.
///
/// No result changes: the products past K are zeroed in the kernels, and
/// columns past N are dropped (the last rows' GEMVs add the same products
/// in another order: equal up to f32 rounding of the sums).
///
/// This module decides and encodes the copies; the matmul op calls it.
#[derive(Clone, Debug, PartialEq)]
pub struct PadChoice {
    /// Padded contracted dimension (K rounded up).
    pub k: usize,
    /// Padded output columns (N rounded up).
    pub n: usize,
    /// The kernel that runs on the padded operands.
    pub kernel: MatmulKernel,
    /// A or B is copied (K or N padded); false for the last rows apart alone.
    pub copies: bool,
    /// The kernel computes N rounded up into scratch, cropped afterwards
    /// (kernels whose stores need aligned rows); otherwise it writes C directly.
    pub crop: bool,
    /// Estimated time of the copies over the estimated kernel time saved.
    pub cost_ratio: f64,
    /// The last `fringe_rows` rows of C come from GEMVs (one each) and the
    /// kernel runs the rows before them (see `fringe_rows`); 0: none.
    pub fringe_rows: usize,
    /// The kernel runs the padded `k` as its K: B is copied with `k` rows
    /// (zero past the logical K, as A's padded columns are), so every K
    /// step is whole and the f32 split kernel drops its K checks
    /// (`split_full_k`).
    pub full_k: bool,
}

/// How many of the last rows of C the padding layer computes apart: M - r
/// rows a multiple of the kernel's block rows for r from 1 to
/// [`FRINGE_MAX_ROWS`], one matrix, a tensor-core or (on GPUs) tiled
/// kernel, and a grid one wave shorter without those rows (waves at one
/// workgroup per compute unit); else 0. At M = 4097 with 256-row blocks:
/// 561 workgroups are 4.25 waves, a fifth wave that computes one row per
/// workgroup; the other 4096 rows take 528, four whole waves, and the lone
/// row is a GEMV over B (reading B once, memory-bound) that reads A's last
/// row in place and writes C's. H200 (runs 37-41): 4097 f16 at 0.87x of 4096, against 0.75x
/// without the split. The same for the last column (runs 42-48: the
/// kernel's last block column left out, a matrix-vector product over B's
/// column and both fringes written to scratch so they could overlap the
/// kernel) lost: 4097 667 us against 639, 1793 85 against 78. The kernel
/// on 512 workgroups took as long as on 528 (3.88 and 4 waves are both four
/// rounds), and the strided matrix-vector product took 51 us.
///
/// The tiled kernels take the same split on GPUs, with or without copies:
/// f32 4097 on 128 x 128 tiles is 1089 workgroups (8.25 waves) and 1056
/// (8) without the last row: 0.99x of 4096 (runs 49-55).
///
/// Two or three rows past a block take as many GEMVs (runs 86-92: M = 4098
/// ran at 0.80x (f16) and 0.88x (f32) of 4096 on a fifth round).
pub fn fringe_rows(
    p: &AdapterProfile,
    kernel: MatmulKernel,
    m: usize,
    n: usize,
    batch: usize,
) -> usize {
    let splits = match kernel {
        MatmulKernel::Coop { .. } => true,
        MatmulKernel::Tiled { .. } => !p.is_cpu(),
        _ => false,
    };
    let bm = kernel.block().0 as usize;
    let r = m % bm.max(1);
    if batch != 1 || !splits || m <= bm || !(1..=FRINGE_MAX_ROWS).contains(&r) {
        return 0;
    }
    let units = u64::from(p.compute_units.max(1));
    let waves = |rows| tune::workgroup_count(kernel, rows, n, 1).div_ceil(units);
    if waves(m - r) < waves(m) { r } else { 0 }
}

impl PadChoice {
    /// No copies, only the last `rows` rows of C apart (`kernel` on the rows
    /// before them, the operands as they are).
    pub fn split_only(kernel: MatmulKernel, k: usize, n: usize, rows: usize) -> Self {
        Self {
            k,
            n,
            copies: false,
            kernel,
            crop: false,
            cost_ratio: 0.0,
            fringe_rows: rows,
            full_k: false,
        }
    }
}

impl fmt::Display for PadChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} for {}{}{} (copies cost {:.0}% of the time saved)",
            if self.copies {
                format!("pad rows to K = {}, N = {}", self.k, self.n)
            } else {
                "no copies".to_string()
            },
            self.kernel,
            if self.crop { ", result cropped" } else { "" },
            match self.fringe_rows {
                0 => String::new(),
                1 => ", the last row of C as a GEMV (a whole wave fewer)".into(),
                r => format!(", the last {r} rows of C as GEMVs (a whole wave fewer)"),
            },
            100.0 * self.cost_ratio
        )
    }
}

/// Decides whether to pad `[batch] x [m, k] x [k, n]` for the dispatcher's
/// kernel: `None` runs the raw shape.
pub fn choose(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    policy: Padding,
) -> Option<PadChoice> {
    if policy == Padding::Never || m == 0 || n == 0 || k == 0 || batch == 0 {
        return None;
    }
    let raw = tune::choose_matmul(p, dtype, m, n, k, batch).kernel;
    choose_for(p, raw, dtype, (m, n, k), batch, policy)
}

/// [`choose`] for a given raw kernel: the dispatcher's, or the f32 split
/// tensor-core kernel ([`MatmulKernel::Coop`] with `split`), which the matmul
/// op picks apart from the dispatcher. The split kernel stays the split
/// kernel, its layout chosen by [`tune::coop_split_time`] with the last rows
/// apart where [`fringe_rows`] takes them.
pub fn choose_for(
    p: &AdapterProfile,
    raw: MatmulKernel,
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    policy: Padding,
) -> Option<PadChoice> {
    if policy == Padding::Never || m == 0 || n == 0 || k == 0 || batch == 0 {
        return None;
    }
    let halves = matches!(raw, MatmulKernel::Coop { split: true, .. });
    // The split kernel's layout with the last rows apart where that saves
    // rounds: at 4097, 128x128 blocks on 4096 rows are 8 whole rounds where
    // the 128x256 blocks that lead at 4096 take 5 with or without it.
    let raw = if halves {
        tune::fastest_split(tune::coop_split_layouts(p), |c| {
            tune::coop_split_time(p, c, m - fringe_rows(p, c, m, n, batch), n, batch)
        })
        .unwrap_or(raw)
    } else {
        raw
    };
    // Rows must start on 16 bytes: 4 elements, or 8 halves for the f16
    // tensor-core kernel, whose padded rows go to COOP_PAD_HALVES (the f32
    // split kernel's to SPLIT_PAD_FLOATS).
    let (align, pitch) = if halves {
        (4, split_pad_floats())
    } else if dtype == DType::F16 && tune::has_coop_f16(p) {
        (8, COOP_PAD_HALVES)
    } else {
        (4, 4)
    };
    let padded = |d: usize| {
        if d.is_multiple_of(align) {
            d
        } else {
            d.next_multiple_of(pitch)
        }
    };
    let (mut kp, np) = (padded(k), padded(n));
    // The split kernel on the padded K where both operands are copied
    // anyway: K' a whole number of its K steps.
    let full_k = halves && kp != k && np != n && split_full_k();
    if full_k && let MatmulKernel::Coop { bk, .. } = raw {
        kp = k.next_multiple_of(pitch.max(bk as usize));
    }
    // Without copies, the last row apart alone where it saves a wave.
    let split_only = || match fringe_rows(p, raw, m, n, batch) {
        0 => None,
        rows => Some(PadChoice::split_only(raw, k, n, rows)),
    };
    if (kp, np) == (k, n) {
        return split_only();
    }
    let layout = tune::Layout {
        transpose_a: false,
        transpose_b: false,
        a_pitch: kp,
        b_pitch: np,
    };
    let padded = if halves {
        raw
    } else {
        tune::choose_matmul_layout(p, dtype, (m, np, k), batch, layout).kernel
    };
    let crop = !matches!(padded, MatmulKernel::Coop { .. }) && np != n;
    let raw_aligned = tune::Layout::dense(m, n, k, false, false).coop_aligned(dtype);
    let raw_speed = relative_speed(p, raw, raw_aligned);
    // The GEMV of a few rows, which even N makes possible, has no rate
    // in this model yet: counted as fast as the raw kernel, so only
    // `Padding::Always` takes it (to measure).
    let padded_speed = if padded == MatmulKernel::Gemv && raw != MatmulKernel::Gemv {
        raw_speed
    } else {
        relative_speed(p, padded, true)
    };
    let gain = match (raw_speed, padded_speed) {
        // A faster family, or another kernel estimated as fast (vec4 on a CPU
        // adapter: only `Padding::Always` takes that, to measure).
        (Some(r), Some(q)) if q > r || (q == r && padded != raw) => q / r,
        // Same kernel either way (naive for tiny shapes, GEMV): nothing to win.
        _ => return split_only(),
    };
    // Time in units of "FLOPs at the raw kernel's rate": the padded kernel
    // takes its FLOPs / gain; each copy reads and writes its elements once
    // (A when K is unaligned, B when N is, C when cropped).
    let flops = 2.0 * (m * n * k * batch) as f64;
    let kernel_n = if crop { np } else { n };
    let padded_flops = 2.0 * (m * kernel_n * k * batch) as f64;
    let saved = flops - padded_flops / gain;
    let mut elems = 0;
    if kp != k {
        elems += m * k + m * kp;
    }
    if np != n {
        elems += k * n + if full_k { kp } else { k } * np;
    }
    if crop {
        elems += m * np + m * n;
    }
    // The copies' bytes in FLOPs at the raw kernel's rate (flops_per_byte is
    // calibrated on the scalar-load tiled kernel).
    let rate = raw_speed.unwrap_or(1.0);
    let copy = (elems * batch * dtype.size()) as f64 * flops_per_byte(p) * rate;
    // When the padded work outweighs the faster kernel (N = 3 -> 4) nothing is
    // saved at all: an infinite cost.
    let cost_ratio = if saved > 0.0 {
        copy / saved
    } else {
        f64::INFINITY
    };
    if policy == Padding::Always || cost_ratio < 1.0 {
        Some(PadChoice {
            k: kp,
            n: np,
            copies: true,
            kernel: padded,
            crop,
            cost_ratio,
            fringe_rows: fringe_rows(p, padded, m, n, batch),
            full_k,
        })
    } else {
        split_only()
    }
}
