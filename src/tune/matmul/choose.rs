//! The heuristic pick: candidates filtered by the adapter, tiny problems to
//! the naive kernel, matrix-vector shapes to the GEMV, the largest tile whose
//! grid fills a wave.

use super::*;

/// The dispatcher's decision for one matmul, with its reasoning.
#[derive(Clone, Debug)]
pub struct MatmulChoice {
    /// The kernel to run.
    pub kernel: MatmulKernel,
    /// Workgroups the grid has (over all batches).
    pub workgroups: u64,
    /// Workgroups over compute units: how many waves the grid takes.
    pub waves: f64,
    /// Why this kernel.
    pub reason: String,
}

impl MatmulChoice {
    /// `kernel` for an `m x n` result (`batch` of them) on this adapter, with
    /// its grid's workgroups and waves, and `reason`.
    pub fn new(
        p: &AdapterProfile,
        kernel: MatmulKernel,
        (m, n): (usize, usize),
        batch: usize,
        reason: String,
    ) -> Self {
        let workgroups = workgroup_count(kernel, m, n, batch);
        MatmulChoice {
            kernel,
            workgroups,
            waves: workgroups as f64 / f64::from(p.compute_units.max(1)),
            reason,
        }
    }
}

impl fmt::Display for MatmulChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} workgroups = {:.2} waves; {}",
            self.kernel, self.workgroups, self.waves, self.reason
        )
    }
}

/// Workgroups a kernel's grid has for an `m x n` output over `batch` matrices.
pub fn workgroup_count(kernel: MatmulKernel, m: usize, n: usize, batch: usize) -> u64 {
    let (bm, bn) = kernel.block();
    let splits = match kernel {
        MatmulKernel::SplitK { splits, .. } => splits as usize,
        _ => 1,
    };
    (m.div_ceil(bm as usize) * n.div_ceil(bn as usize) * batch * splits) as u64
}

/// Picks the matmul kernel for `[batch] x [m, k] x [k, n]` in `dtype` on this adapter.
pub fn choose_matmul(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
) -> MatmulChoice {
    choose(
        p,
        dtype,
        m,
        n,
        k,
        batch,
        Layout::dense(m, n, k, false, false),
    )
}

/// [`choose_matmul`] for operands stored as `layout` says (transposed or in
/// padded rows).
pub fn choose_matmul_layout(
    p: &AdapterProfile,
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    layout: Layout,
) -> MatmulChoice {
    let mut choice = choose(p, dtype, m, n, k, batch, layout);
    if layout.transposed() {
        choice.reason = format!("transposed operands, read in place: {}", choice.reason);
    }
    choice
}

/// The dispatcher's rules; `transposes` (when some operand is stored
/// transposed) keeps to the kernels that read such operands in place.
// Long on purpose: the dispatcher's rules in the order they apply (tiny, GEMV, tensor cores,
// CPU kernels, tiles by wave fill), each with the reason it reports.
pub(crate) fn choose(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    layout: Layout,
) -> MatmulChoice {
    let strided = layout.transposed();
    let units = p.compute_units.max(1) as f64;
    let describe =
        |kernel: MatmulKernel, reason: String| MatmulChoice::new(p, kernel, (m, n), batch, reason);
    let macs = (m as u64)
        .saturating_mul(n as u64)
        .saturating_mul(k as u64)
        .saturating_mul(batch as u64);
    let fitting: Vec<TileConfig> = TILE_CONFIGS.into_iter().filter(|t| t.fits(p)).collect();
    if macs <= TINY_MACS || fitting.is_empty() {
        let why = if fitting.is_empty() {
            "no tile shape fits this adapter's workgroup limits".to_string()
        } else {
            format!(
                "tiny problem ({macs} multiply-adds <= {TINY_MACS}): tiling cannot pay for its barriers"
            )
        };
        return describe(MatmulKernel::naive_for(p), why);
    }
    let tiled = |tile: TileConfig| MatmulKernel::Tiled {
        tile,
        vec4: layout.vec4(n),
    };
    if !strided && (m == 1 || n == 1) && MatmulKernel::Gemv.fits(p) {
        return describe(
            MatmulKernel::Gemv,
            "matrix-vector: every matrix element is used once, so the kernel is \
             memory-bound; no tiling helps, coalescing and loads in flight do"
                .into(),
        );
    }
    if crate::tune::gemv::gemv_rows_fit(m, n, layout.b_pitch, strided) && MatmulKernel::Gemv.fits(p) {
        return describe(
            MatmulKernel::Gemv,
            format!(
                "{m} rows of x: the weight read once for all of them, each element used \
                 {m} times; a tile's rows would stand mostly empty"
            ),
        );
    }
    // Transposed f16 operands too: the coop kernel reads them in place
    // (staged as stored, loaded column-major) at 240-248 TFLOP/s at 4096
    // on the H200, as fast as row-major (docs/perf/matmul.md).
    if dtype == DType::F16 {
        let coops: Vec<MatmulKernel> = COOP_CONFIGS
            .into_iter()
            .filter_map(|c| MatmulKernel::coop_for(p, c))
            .collect();
        if !coops.is_empty() {
            let filling = coops
                .iter()
                .copied()
                .find(|&c| workgroup_count(c, m, n, batch) as f64 >= WAVE_FILL * units);
            let kernel = filling.unwrap_or(*coops.last().expect("non-empty"));
            return describe(
                kernel,
                if filling.is_some() {
                    format!(
                        "f16 on tensor cores: largest subgroup layout whose grid fills a wave of {} compute units",
                        p.compute_units
                    )
                } else {
                    "f16 on tensor cores: no layout fills a wave; the smallest gives the most workgroups".into()
                },
            );
        }
    }
    if p.is_cpu() {
        let broadcast = MatmulKernel::Broadcast {
            vec4: layout.vec4(n) && !strided,
        };
        if broadcast.fits(p) && macs >= BROADCAST_MIN_MACS {
            return describe(
                broadcast,
                "CPU adapter with subgroups of 8: the subgroup-broadcast kernel (llvmpipe \
                 runs every non-constant load as a loop over the lanes; sharing A by \
                 subgroupBroadcast needs the fewest)"
                    .into(),
            );
        }
        for t in CPU_TILE_CONFIGS.into_iter().filter(|t| t.fits(p)) {
            let kernel = tiled(t);
            if workgroup_count(kernel, m, n, batch) as f64 >= WAVE_FILL * units {
                return describe(
                    kernel,
                    "CPU adapter: the 16x16 register tile (each invocation is a lane of \
                     a narrow batch and every barrier switches batches: work per \
                     invocation pays)"
                        .into(),
                );
            }
        }
    }
    for t in &fitting {
        let kernel = tiled(*t);
        if workgroup_count(kernel, m, n, batch) as f64 >= WAVE_FILL * units {
            return describe(
                kernel,
                format!(
                    "largest tile whose grid fills at least one wave of {} compute units",
                    p.compute_units
                ),
            );
        }
    }
    let smallest = *fitting.last().expect("non-empty");
    // Too few tiles for the GPU but a long K: split K across workgroups
    // (each chunk at least SPLIT_K_MIN_CHUNK long) and add the partials.
    let tiles = workgroup_count(tiled(smallest), m, n, batch);
    let max_splits = (k / SPLIT_K_MIN_CHUNK).min(SPLIT_K_MAX) as u64;
    if (tiles as f64) < units / 2.0 && max_splits >= 2 {
        let splits = (units as u64).div_ceil(tiles).clamp(2, max_splits) as u32;
        let MatmulKernel::Tiled { tile, vec4 } = tiled(smallest) else {
            unreachable!("tiled() builds Tiled")
        };
        return describe(
            MatmulKernel::SplitK { tile, vec4, splits },
            format!(
                "only {tiles} tiles for {} compute units with K = {k}: K split in {splits}",
                p.compute_units
            ),
        );
    }
    describe(
        tiled(smallest),
        format!(
            "no tile shape fills a wave of {} compute units; the smallest gives the most workgroups",
            p.compute_units
        ),
    )
}

/// Every kernel that fits the adapter and accepts `[batch] x [m, k] x [k, n]`
/// in `dtype`, best-first by the heuristic's preference: its own pick
/// ([`choose_matmul`]), then the cooperative-matrix layouts (f16, in
/// [`COOP_CONFIGS`] order), the vec4 tiled kernels, the scalar tiled kernels
/// (both in [`TILE_CONFIGS`] order) and the naive kernel last. The
/// autotuner's fast mode times the first few.
pub fn matmul_candidates(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
) -> Vec<MatmulKernel> {
    matmul_candidates_layout(
        p,
        dtype,
        (m, n, k),
        batch,
        Layout::dense(m, n, k, false, false),
    )
}

/// [`matmul_candidates`] for operands stored as `layout` says: the kernels
/// that read that layout, the heuristic's pick first.
pub fn matmul_candidates_layout(
    p: &AdapterProfile,
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    layout: Layout,
) -> Vec<MatmulKernel> {
    let coops = COOP_CONFIGS
        .into_iter()
        .filter_map(|c| MatmulKernel::coop_for(p, c));
    let tiled = [true, false].into_iter().flat_map(|vec4| {
        TILE_CONFIGS
            .into_iter()
            .map(move |tile| MatmulKernel::Tiled { tile, vec4 })
    });
    // The CPU kernel only where it was made for (the dispatcher's rule).
    let broadcast = [true, false]
        .into_iter()
        .filter(|_| p.is_cpu())
        .map(|vec4| MatmulKernel::Broadcast { vec4 });
    let mut out: Vec<MatmulKernel> = Vec::new();
    for kernel in std::iter::once(choose_matmul_layout(p, dtype, (m, n, k), batch, layout).kernel)
        .chain(coops)
        .chain(tiled)
        .chain(broadcast)
        .chain(std::iter::once(MatmulKernel::naive_for(p)))
    {
        if kernel.fits(p) && kernel.accepts_with(dtype, m, n, k, layout) && !out.contains(&kernel) {
            out.push(kernel);
        }
    }
    out
}

/// The kernel for operands stored transposed: the same rules restricted to
/// the kernels that read through strides ([`MatmulKernel::reads_strided`]):
/// the scalar-load tiled kernel by the wave rule, or naive for tiny problems.
pub fn choose_matmul_strided(
    p: &AdapterProfile,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    (transpose_a, transpose_b): (bool, bool),
) -> MatmulChoice {
    choose_matmul_layout(
        p,
        DType::F32,
        (m, n, k),
        batch,
        Layout::dense(m, n, k, transpose_a, transpose_b),
    )
}
