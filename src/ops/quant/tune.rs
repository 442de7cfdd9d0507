//! The autotuner's measurements of the quantised products: the
//! column-blocked GEMV's launch (workgroup size, K split), the tensor-core
//! GEMM's layout and the tiled GEMM's tile. Each candidate is timed on
//! fresh random activations and the caller's weight, which the kernels
//! only read (realistic codes and scales; a weight whose scales arm the
//! tensor-core GEMM's f32 fallback times the fallback for every candidate,
//! and the heuristic's pick stands). The decision is cached per adapter,
//! format, block and shape bucket like the matmul's
//! ([`crate::tune::autotune`]).

use super::QuantTensor;
use crate::dtype::DType;
use crate::error::Result;
use crate::gpu::{Plan, Tensor};
use crate::quant::QuantAxis;
use crate::runtime::{Context, Epilogue};
use crate::tune::autotune::{AutotuneMode, Candidate};
use crate::tune::quant::{
    QuantGemvLaunch, quant_gemv_candidates, quant_gemv_launch, quant_gemv_launch_fixed, quant_tiled_tile,
};
use crate::tune::{self, MatmulKernel, TILE_CONFIGS, TileConfig};

/// Seed of the random activations the candidates are timed on.
const TUNING_SEED: u32 = 0x5eed_0a1a;

impl Context {
    /// The autotuner's pick among `candidates` (the heuristic's first) for
    /// `op` over `x[m, k] @ W[k, n]`, timing `plan_of(x, candidate)` on a
    /// fresh random `x` of `dtype`. Memory-bound kernels pass the `bytes`
    /// they read (tuned from [`crate::tune::autotune::TUNE_MIN_BYTES`]),
    /// the GEMMs `None` (tuned by their FLOPs).
    fn tune_quant<C: Candidate>(
        &self,
        (op, dtype): (&str, DType),
        (m, k, n): (usize, usize, usize),
        bytes: Option<u64>,
        candidates: &[C],
        plan_of: impl Fn(&Tensor, C) -> Result<Plan>,
    ) -> Result<C> {
        let Some(&heuristic) = candidates.first() else {
            return Err(crate::error::Error::InvalidArgument(format!("{op}: no kernel to tune")));
        };
        let tuner = self.autotuner();
        if tuner.mode() == AutotuneMode::Off || candidates.len() < 2 {
            return Ok(heuristic);
        }
        let mut x: Option<Tensor> = None;
        let mut measure = |candidate: C| -> Result<f64> {
            if x.is_none() {
                let t = self.alloc(&[m, k], dtype, "wgtile tuning activations")?;
                self.fill_random(&t, TUNING_SEED)?;
                x = Some(t);
            }
            let plan = plan_of(x.as_ref().expect("just filled"), candidate)?;
            Ok(self.time(&plan, &tuner.mode().timing_options())?.median())
        };
        let profile = self.profile();
        let decision = match bytes {
            Some(bytes) => tuner.decide_memory_bound(
                profile,
                (op, dtype),
                (m, n, k),
                bytes,
                candidates,
                heuristic,
                &mut measure,
            )?,
            None => tuner.decide(profile, op, dtype, m, n, k, 1, candidates, heuristic, &mut measure)?,
        };
        Ok(decision.kernel)
    }

    /// The column-blocked GEMV's launch for `w` and `m` rows of x: the
    /// heuristic's, or the autotuner's where the weight is large enough.
    pub(crate) fn quant_gemv_tuned(&self, w: &QuantTensor, (m, k, n): (usize, usize, usize)) -> Result<QuantGemvLaunch> {
        let blocks = w.layout().blocks_per_line();
        let max = self.profile().max_invocations;
        if quant_gemv_launch_fixed() {
            return Ok(quant_gemv_launch(max, blocks));
        }
        let candidates = quant_gemv_candidates(max, blocks, m);
        let op = format!("quantized GEMV {} block {}", w.format, w.block);
        self.tune_quant((&op, DType::F32), (m, k, n), Some(w.packed_bytes()), &candidates, |x, launch| {
            self.quant_gemv_cols_plan(x, w, launch, &Epilogue::default())
        })
    }

    /// The column-blocked GEMV of f32 `x[M, K]` with `launch`, whatever
    /// the route or the autotuner would pick: for the autotuner, tests and
    /// side-by-side measurements.
    #[doc(hidden)]
    pub fn quant_gemv_cols_plan(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        launch: QuantGemvLaunch,
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let op = "quant_gemv_cols_plan";
        self.check_owned(x, op)?;
        self.check_all_owned(w.parts(), op)?;
        let lay = w.layout();
        let (m, k) = match x.shape() {
            &[m, k] if x.dtype() == DType::F32 => (m, k),
            _ => {
                return Err(crate::error::Error::InvalidArgument(format!(
                    "{op} takes f32 x [M, K], got {} {:?}",
                    x.dtype(),
                    x.shape()
                )));
            }
        };
        x.require_contiguous(op)?;
        let n = w.shape.get(1).copied().unwrap_or(0);
        let fits = w.axis == QuantAxis::Columns
            && w.shape.len() == 2
            && w.shape[0] == k
            && (1..=super::gemv::QUANT_GEMV_MAX_ROWS).contains(&m)
            && k.is_multiple_of(w.block)
            && lay.words_per_block().is_multiple_of(2);
        let wg_ok = launch.wg.is_power_of_two() && (32..=self.profile().max_invocations.min(1024)).contains(&launch.wg);
        if !fits || !wg_ok || !(1..=16).contains(&launch.ksplit) {
            return Err(crate::error::Error::InvalidArgument(format!(
                "{op}: {launch} needs 1 to 8 rows of x, a [K, N] weight blocked down columns with K a \
                 multiple of the block and an even number of words per block, a power-of-two workgroup \
                 the adapter allows and a split of 1 to 16 (x {:?}, weight {:?} along {:?})",
                x.shape(),
                w.shape,
                w.axis
            )));
        }
        let epilogue = self.quant_epilogue(epilogue, &[m, n])?;
        let out = self.alloc(&[m, n], DType::F32, "wgtile quantized matmul out")?;
        let (dispatches, scratch) = if n > 0 {
            self.gemv_cols_dispatches(x, w, &out, (m, k, n), launch, &epilogue)?
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("quantized GEMV ({}, blocks along columns, M = {m}) {launch}", w.format),
            dispatches,
            output: out,
            flops: 2 * (m * n * k) as u64,
            bytes: w.packed_bytes() + (m * k * 4 + m * n * 4) as u64,
            scratch,
        })
    }

    /// The tensor-core layout of the quantised GEMM, from the f16
    /// dispatcher's pick `heuristic`: the autotuner's pick among the f16
    /// candidates that are tensor-core kernels (`shaders/matmul_coop.wgsl`
    /// takes the quantised weight in each layout) where the product is
    /// large enough.
    pub(crate) fn quant_gemm_tuned(
        &self,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
        heuristic: MatmulKernel,
    ) -> Result<MatmulKernel> {
        let Ok(shape) = crate::problem::MatmulShape::with_transposes(&[m, k], &[n, k], false, true) else {
            return Ok(heuristic);
        };
        let profile = self.profile();
        let layout = tune::Layout::of(&shape);
        let mut candidates = vec![heuristic];
        for kernel in tune::matmul_candidates_layout(profile, DType::F16, (m, n, k), 1, layout) {
            let coop = matches!(kernel, MatmulKernel::Coop { split: false, .. });
            if coop && kernel.fits(profile) && !candidates.contains(&kernel) {
                candidates.push(kernel);
            }
        }
        let op = format!("quantized GEMM tensor cores {} block {} {:?}", w.format, w.block, w.axis);
        self.tune_quant((&op, DType::F16), (m, k, n), None, &candidates, |x, kernel| {
            self.quant_gemm_plan(kernel, x, w, (m, k, n), &[m, n], &Epilogue::default())
        })
    }

    /// The tiled quantised GEMM's tile for `x` of `dtype`: the heuristic's
    /// ([`quant_tiled_tile`]), or the autotuner's pick among the tiles that
    /// fit where the product is large enough.
    pub(crate) fn quant_tiled_tuned(
        &self,
        dtype: DType,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
    ) -> Result<Option<TileConfig>> {
        let profile = self.profile();
        let Some(first) = quant_tiled_tile(profile, m, n) else {
            return Ok(None);
        };
        let tiled = |tile| MatmulKernel::Tiled { tile, vec4: false };
        let mut candidates = vec![tiled(first)];
        for tile in TILE_CONFIGS {
            if tile.fits(profile) && tile.reg == 8 && tile.bk.is_multiple_of(8) && tile != first {
                candidates.push(tiled(tile));
            }
        }
        let op = format!("quantized GEMM tiled {} block {} {:?}", w.format, w.block, w.axis);
        let pick = self.tune_quant((&op, dtype), (m, k, n), None, &candidates, |x, kernel| {
            let MatmulKernel::Tiled { tile, .. } = kernel else {
                unreachable!("every candidate is a tiled kernel")
            };
            self.quant_tiled_plan(x, w, (m, k, n), &[m, n], Some(tile), &Epilogue::default())
        })?;
        Ok(match pick {
            MatmulKernel::Tiled { tile, .. } => Some(tile),
            _ => Some(first),
        })
    }
}
