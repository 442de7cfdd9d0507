//! Which GEMV kernels run a matrix-vector product (M = 1 or N = 1).

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::problem::MatmulShape;

/// Which GEMV kernels run a matrix-vector product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GemvVariant {
    /// N = 1: `matvec`.
    Matvec,
    /// M = 1 in one dispatch: `vecmat_wide`.
    Wide,
    /// M = 1 with K split over workgroups: `vecmat` or `vecmat_pairs`, then `reduce`.
    Split { pairs: bool },
    /// 2 <= M <= [`GEMV_MAX_ROWS`]: `vecmat_rows` (K split, column pairs),
    /// then `reduce` per row.
    Rows,
}

/// Rows of x the GEMV kernels take at once (`vecmat_rows`; more go to the
/// tiled kernels, which then fill their tiles' rows).
pub const GEMV_MAX_ROWS: usize = 8;

/// Whether `vecmat_rows` reads a bf16 `[k, n]` (rows `b_pitch` apart) in
/// place for `m` rows of f32 x: as [`gemv_rows_fit`], from one row on.
pub(crate) fn gemv_bf16_fit(m: usize, n: usize, b_pitch: usize, transposed: bool) -> bool {
    (1..=GEMV_MAX_ROWS).contains(&m) && pairs_fit(n, b_pitch, transposed)
}

/// Whether `vecmat_rows` runs `m` rows of x against `[k, n]` stored with
/// rows `b_pitch` apart: N and the pitch even (whole column pairs),
/// operands not transposed.
pub(crate) fn gemv_rows_fit(m: usize, n: usize, b_pitch: usize, transposed: bool) -> bool {
    (2..=GEMV_MAX_ROWS).contains(&m) && pairs_fit(n, b_pitch, transposed)
}

/// B read in whole column pairs: N and its pitch even, not transposed.
fn pairs_fit(n: usize, b_pitch: usize, transposed: bool) -> bool {
    n >= 2 && n.is_multiple_of(2) && b_pitch.is_multiple_of(2) && !transposed
}

/// The GEMV kernels for `shape` (M = 1 or N = 1): the one-dispatch kernel
/// when B's rows split into 16-byte words, N alone gives a workgroup per two
/// compute units, and the matrix is short and narrow (K <= 8192, rows of at
/// most 16 KiB); otherwise K is split, with column pairs where N and B's
/// strides are even. Measured on the H200 (runs 17-21, GB/s, one dispatch /
/// split): 4096 x 4096 f32 2746 / 2430, f16 2477 / 2271 (a 32 MiB copy runs
/// at 2774 there: the split's second dispatch is what it saves); 4096 x 14336
/// f32 2809 / 3740, f16 2810 / 3052 (each workgroup's 64-byte runs per row
/// spread over wide rows); 14336 x 4096 f32 3578 / 3648, f16 2058 / 2896
/// (128 workgroups cannot keep enough loads in flight over a long K).
pub(crate) fn gemv_variant(p: &AdapterProfile, dtype: DType, shape: &MatmulShape) -> GemvVariant {
    let n = shape.n;
    if n == 1 {
        return GemvVariant::Matvec;
    }
    if shape.m > 1 {
        return GemvVariant::Rows;
    }
    let aligned = |per: usize| {
        n.is_multiple_of(per)
            && shape.b_pitch.is_multiple_of(per)
            && shape.b_strides.iter().all(|s| s.is_multiple_of(per))
    };
    let per_word = 16 / dtype.size();
    let wide = match gemv_wide_mode() {
        Some(on) => on && aligned(per_word),
        None => {
            aligned(per_word)
                && 2 * n.div_ceil(4 * per_word) >= p.compute_units.max(1) as usize
                && shape.k <= 8192
                && n * dtype.size() <= 16 << 10
        }
    };
    if wide {
        GemvVariant::Wide
    } else {
        GemvVariant::Split {
            pairs: gemv_pairs_enabled() && aligned(2),
        }
    }
}

/// The one-dispatch GEMV's workgroup: 16-byte words of columns x row
/// slices, 4 x 64 (the dev overrides compare others).
pub(crate) fn gemv_wide_shape() -> (u32, u32) {
    crate::dev::overrides().gemv_wide_shape.unwrap_or((4, 64))
}

/// The one-dispatch GEMV forced on or off; `None`: the dispatcher decides.
pub(crate) fn gemv_wide_mode() -> Option<bool> {
    crate::dev::overrides().gemv_wide
}

/// The vector-matrix kernel reads column pairs where aligned (on unless a
/// dev override turns it off for a comparison).
pub(crate) fn gemv_pairs_enabled() -> bool {
    crate::dev::overrides().gemv_pairs
}
