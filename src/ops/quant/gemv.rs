//! `x @ W` with a quantised `W`: the fused GEMV (weights decoded in
//! registers, `shaders/quant_gemv.wgsl`) for few rows of x, the tensor-core
//! GEMM for many rows of f16 x (`gemm.rs`), else the weight dequantised
//! once and the matmul engine.

use std::borrow::Cow;

use super::{QuantTensor, format_code, u32_of};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor, grid};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::quant::{QuantAxis, QuantFormat};
use crate::runtime::{Context, Epilogue};
use crate::tune::route::MatmulOptions;
use crate::tune;

pub use crate::tune::quant::QUANT_GEMV_MAX_ROWS;
use crate::tune::quant::{
    QUANT_GEMV_KSPLITS, QUANT_GEMV_WORKGROUPS, QuantEngines, QuantGemvLaunch, QuantRoute, quant_cols_columns,
    quant_route,
};

/// Workgroup of the fused GEMV: ROWS weight rows x (WG / ROWS) invocations.
const WG: u32 = 256;
const ROWS: u32 = 8;

/// The GEMV's specialisation for `format` and `mr` rows of x.
pub(crate) fn gemv_spec(format: QuantFormat, mr: u32, words_per_block: u32) -> Spec {
    Spec::new(Kernel::QuantGemv)
        .constant("FORMAT", format_code(format))
        .constant("MR", mr)
        .constant("ROWS", ROWS)
        .constant("WPB", words_per_block)
        .override_("WG", WG)
}

/// The column-blocked GEMV's specialisation for `launch`.
pub(crate) fn gemv_cols_spec(format: QuantFormat, mr: u32, words_per_block: u32, launch: QuantGemvLaunch) -> Spec {
    let cols = quant_cols_columns();
    let (unit, sub) = cols_units(words_per_block, launch.wg / cols, cols);
    Spec::new(Kernel::QuantGemvCols)
        .constant("KSPLIT", launch.ksplit)
        .constant("COLS", cols)
        .constant("UNIT", unit)
        .constant("SUB", sub)
        .constant("FORMAT", format_code(format))
        .constant("MR", mr)
        .constant("WPB", words_per_block)
        .override_("WG", launch.wg)
}

/// The column-blocked GEMV's step (`UNIT`: the largest even divisor of the
/// block's `wpb` words up to 8) and the invocations on adjacent units of a
/// column (`SUB`: 4, 2 or 1, at most the units per block and dividing the
/// `slices` and the `cols`), as `shaders/quant_gemv_cols.wgsl` takes them.
fn cols_units(wpb: u32, slices: u32, cols: u32) -> (u32, u32) {
    let unit = [8, 6, 4, 2].into_iter().find(|u| wpb.is_multiple_of(*u)).unwrap_or(2);
    let sub = [4, 2]
        .into_iter()
        .find(|&s| s <= wpb / unit && slices.is_multiple_of(s) && cols.is_multiple_of(s))
        .unwrap_or(1);
    (unit, sub)
}

/// The column-blocked GEMV's reduction of `ksplit` partial sums (it reads
/// nothing of the format or the launch).
pub(crate) fn gemv_cols_reduce_spec(ksplit: u32) -> Spec {
    Spec::new(Kernel::QuantGemvColsReduce).constant("KSPLIT", ksplit)
}

/// Every GEMV specialisation of `format` at its default block: every
/// launch the autotuner may pick ([`crate::tune::quant::quant_gemv_candidates`]).
pub(crate) fn specs_for(format: QuantFormat) -> Vec<Spec> {
    let wpb = (format.default_block() * format.element_bits() as usize / 32) as u32;
    let mut out: Vec<Spec> = [1, 2, 4, 8].map(|mr| gemv_spec(format, mr, wpb)).to_vec();
    for wg in QUANT_GEMV_WORKGROUPS {
        for ksplit in QUANT_GEMV_KSPLITS {
            let launch = QuantGemvLaunch { wg, ksplit };
            out.extend([1, 2, 4, 8].map(|mr| gemv_cols_spec(format, mr, wpb, launch)));
        }
    }
    out
}

/// The K reductions of every split the column-blocked GEMV may run.
pub(crate) fn reduce_specs() -> Vec<Spec> {
    QUANT_GEMV_KSPLITS.into_iter().filter(|&k| k > 1).map(gemv_cols_reduce_spec).collect()
}

impl Context {
    /// `x @ W` for a quantised weight whose blocks run along K: a weight
    /// stored `[N, K]` blocked along rows ([`QuantAxis::Rows`], PyTorch's
    /// `Linear` layout) gives `x @ Wᵀ`; one stored `[K, N]` blocked down
    /// columns gives `x @ W`. `x` is `[.., K]` in f32 or f16 (widened to f32
    /// by a small kernel first); the result is `[.., N]` in f32, accumulated
    /// in f32.
    ///
    /// Up to 8 rows of `x` run a fused GEMV, which reads the packed weight
    /// once and never writes it wider: for a column-blocked `[K, N]` weight
    /// (the fast layout: adjacent columns on adjacent invocations) when K is
    /// a multiple of the block, for a row-blocked one when K is a multiple
    /// of 8 (4-bit) or 4 (8-bit formats).
    ///
    /// More rows of f16 or bf16 `x`, on an adapter with tensor cores
    /// (cooperative matrices), run the tensor-core matmul with the weight
    /// decoded into its f16 workgroup tiles as they are staged (blocks of a
    /// multiple of 8 elements, either axis, any M, N, K). Each dequantised weight is
    /// rounded to f16 there, nearest even: exact for the MX formats and
    /// NVFP4's element times its block scale within f16's normal range
    /// (a relative error below 2^-11 otherwise, or 2^-25 absolute below
    /// 2^-14, the precision the f16 activations have). A first pass reads
    /// the block scales: if any block could decode beyond f16's range (or
    /// has a NaN scale), the f32 route below writes the whole result
    /// instead. bf16 `x` is narrowed to f16 first, after the range test
    /// [`DType::BF16`] documents; where that fails too, the f32 route runs
    /// on x widened exactly.
    ///
    /// More rows of f32 or f16 `x` on a GPU without tensor cores (or where
    /// the f16 dispatcher keeps the shape off them) run the register-tiled
    /// matmul with the weight decoded into its f32 workgroup tiles (blocks
    /// of a multiple of 8 elements, either axis, any M, N, K): exact
    /// decoding, f32 accumulation.
    ///
    /// Anything else (a CPU adapter, blocks not a multiple of 8, bf16 `x`
    /// off tensor cores first widened to f32) dequantises the weight to f32
    /// and runs [`Context::matmul`]'s engine (correct, not fused).
    ///
    /// On a GPU with autotuning on (`WGTILE_AUTOTUNE`), the first call of a
    /// shape bucket times the column-blocked GEMV's launches (workgroup
    /// size, K split over workgroups) where the packed weight is 4 MiB or
    /// more, and the tensor-core GEMM's layouts or the tiled GEMM's tiles
    /// from 1 GFLOP, on random activations and this weight; the winner is
    /// cached per adapter, format, block and shape bucket, in memory and on
    /// disk, as the matmul's are. Element codes
    /// that are not numbers (E4M3's NaN, E5M2's infinities and NaNs, only
    /// in uploaded data) give what IEEE arithmetic gives on every route.
    pub fn matmul_quantized(&self, x: &Tensor, w: &QuantTensor) -> Result<Tensor> {
        self.matmul_quantized_with(x, w, &Epilogue::default())
    }

    /// [`Context::matmul_quantized`] with a fused [`Epilogue`]
    /// (`act(alpha * (x @ W) + bias) + residual`, or a generated
    /// expression), applied in registers before the single store on every
    /// route: the GEMVs, the tensor-core and tiled GEMMs and their f32
    /// fallback. The bias (`[N]`) and residual (the output's shape) are
    /// f32, the output's type.
    pub fn matmul_quantized_with(&self, x: &Tensor, w: &QuantTensor, epilogue: &Epilogue) -> Result<Tensor> {
        let plan = self.matmul_quantized_plan_with(x, w, epilogue)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// The plan of [`Context::matmul_quantized`].
    pub fn matmul_quantized_plan(&self, x: &Tensor, w: &QuantTensor) -> Result<Plan> {
        self.matmul_quantized_plan_with(x, w, &Epilogue::default())
    }

    /// The plan of [`Context::matmul_quantized_with`].
    pub fn matmul_quantized_plan_with(&self, x: &Tensor, w: &QuantTensor, epilogue: &Epilogue) -> Result<Plan> {
        let op = "matmul_quantized";
        self.check_owned(x, op)?;
        self.check_all_owned(w.parts(), op)?;
        x.require_contiguous(op)?;
        if w.shape.len() != 2 {
            return Err(Error::InvalidArgument(format!(
                "{op}: the quantised weight must be rank 2, got {:?}",
                w.shape
            )));
        }
        let (k, n) = match w.axis {
            QuantAxis::Rows => (w.shape[1], w.shape[0]),
            QuantAxis::Columns => (w.shape[0], w.shape[1]),
        };
        let Some((&xk, lead)) = x.shape().split_last() else {
            return Err(Error::shape(op, x.shape(), &w.shape, "x must have rank >= 1"));
        };
        if xk != k {
            return Err(Error::shape(
                op,
                x.shape(),
                &w.shape,
                format!("x has K = {xk}, the weight K = {k} (its blocks run along K)"),
            ));
        }
        let m: usize = lead.iter().product();
        let mut out_shape = lead.to_vec();
        out_shape.push(n);
        let resolved = self.quant_epilogue(epilogue, &out_shape)?;
        let epilogue = &*resolved;
        // bf16 x reaches the tensor cores staged to f16 (after the range
        // test that DType::BF16 documents).
        let tensor_cores = match x.dtype() {
            DType::F16 | DType::BF16 if m > QUANT_GEMV_MAX_ROWS && n > 0 => self.quant_gemm_kernel((m, k, n)),
            _ => None,
        };
        // The route for x as the kernels read it: bf16 is widened first.
        let read_as = if x.dtype() == DType::BF16 { DType::F32 } else { x.dtype() };
        let route_for = |dtype: DType, tensor_cores: bool| {
            let engines = QuantEngines {
                tensor_cores,
                tiled: tune::quant::runs_tiled(self.profile(), dtype, (m, k, n)),
            };
            quant_route(w.format, &w.layout(), (m, k), engines)
        };
        let route = route_for(read_as, tensor_cores.is_some());
        match (route, tensor_cores) {
            (QuantRoute::TensorCores, Some(kernel)) => {
                let kernel = self.quant_gemm_tuned(w, (m, k, n), kernel)?;
                if x.dtype() == DType::BF16 {
                    let engine = super::gemm::QuantF16Engine::TensorCores(kernel);
                    return self.quant_gemm_plan_bf16(engine, x, w, (m, k, n), &out_shape, epilogue);
                }
                return self.quant_gemm_plan(kernel, x, w, (m, k, n), &out_shape, epilogue);
            }
            (QuantRoute::Tiled, _) if x.dtype() != DType::BF16 => {
                let tile = self.quant_tiled_tuned(x.dtype(), w, (m, k, n))?;
                return self.quant_tiled_plan(x, w, (m, k, n), &out_shape, tile, epilogue);
            }
            _ => {}
        }
        if x.dtype() != DType::F32 {
            // f16 and bf16 activations widen to f32 first (one cast kernel
            // over x, which is M x K: small next to the weight).
            if x.dtype() == DType::F16 {
                self.require_f16("f16 activations")?;
            }
            // f16 x's route was for f16 kernels; widened, it is f32's.
            let route = if x.dtype() == DType::F16 { route_for(DType::F32, false) } else { route };
            let xf = self.alloc(x.shape(), DType::F32, "wgtile widened activations")?;
            let widen = self.cast_dispatch(x, &xf)?;
            let mut plan = self.quantized_plan_f32(&xf, w, route, (m, k, n), &out_shape, epilogue)?;
            plan.dispatches.splice(0..0, widen);
            plan.bytes = plan.bytes - xf.size_bytes() + x.size_bytes();
            plan.scratch.push(xf);
            return Ok(plan);
        }
        self.quantized_plan_f32(x, w, route, (m, k, n), &out_shape, epilogue)
    }

    /// [`Context::matmul_quantized_plan`] for a checked f32 `x` on `route`
    /// (never the tensor cores).
    fn quantized_plan_f32(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        route: QuantRoute,
        (m, k, n): (usize, usize, usize),
        out_shape: &[usize],
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let op = "matmul_quantized";
        if let QuantRoute::Dequantize(why) = route {
            log::debug!("{op}: dequantise + matmul ({why})");
            return self.dequantized_matmul(x, w, out_shape, epilogue);
        }
        if route == QuantRoute::Tiled {
            let tile = self.quant_tiled_tuned(DType::F32, w, (m, k, n))?;
            return self.quant_tiled_plan(x, w, (m, k, n), out_shape, tile, epilogue);
        }
        let out = self.alloc(out_shape, DType::F32, "wgtile quantized matmul out")?;
        let mut dispatches = Vec::new();
        let mut scratch = Vec::new();
        if m > 0 && n > 0 {
            if route == QuantRoute::GemvColumns {
                let launch = self.quant_gemv_tuned(w, (m, k, n))?;
                (dispatches, scratch) = self.gemv_cols_dispatches(x, w, &out, (m, k, n), launch, epilogue)?;
            } else {
                dispatches.push(self.gemv_rows_dispatch(x, w, &out, (m, k, n), epilogue)?);
            }
        }
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!(
                "quantized GEMV ({}, blocks along {}, M = {m})",
                w.format,
                if w.axis == QuantAxis::Columns { "columns" } else { "rows" }
            ),
            dispatches,
            output: out,
            flops: 2 * (m * n * k) as u64,
            bytes: w.packed_bytes() + (m * k * 4 + m * n * 4) as u64,
            scratch,
        })
    }

    /// `epilogue` checked for a quantised product of `out_shape` (f32
    /// tensors, the bias `[N]`, the residual of the output's shape, both
    /// contiguous), the exact GELU resolved into a generated epilogue.
    pub(crate) fn quant_epilogue<'e>(&self, epilogue: &'e Epilogue, out_shape: &[usize]) -> Result<Cow<'e, Epilogue>> {
        let n = out_shape.last().copied().unwrap_or(0);
        let resolved = epilogue.resolved();
        resolved.check(self, DType::F32, n, out_shape)?;
        for (t, what) in resolved.tensors().into_iter().zip(["the epilogue bias", "the epilogue residual"]) {
            if let Some(t) = t {
                t.require_contiguous(what)?;
            }
        }
        Ok(resolved)
    }

    /// The parameters of the GEMVs and the f32 GEMM fallback (`Params` in
    /// `shaders/quant_product_params.wgsl`): sizes, workgroups per grid row
    /// `gx`, the row GEMV's `words` per row, the epilogue's words.
    pub(crate) fn quant_product_params(
        &self,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
        (gx, words): (u32, u32),
        epilogue: &Epilogue,
    ) -> Result<wgpu::Buffer> {
        let u = u32_of;
        let blocks = u("blocks per line", w.layout().blocks_per_line())?;
        let mut p = vec![u("M", m)?, u("N", n)?, u("K", k)?, blocks, gx, words, u("block", w.block)?];
        p.extend(epilogue.param_words());
        Ok(self.uniform(&p))
    }

    /// The row-blocked GEMV (`shaders/quant_gemv.wgsl`) of f32 `x` into `out`.
    fn gemv_rows_dispatch(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
        epilogue: &Epilogue,
    ) -> Result<Dispatch> {
        let op = "matmul_quantized";
        let g = grid(self.profile(), (n as u64).div_ceil(u64::from(ROWS)), op)?;
        let per_word = 32 / w.format.element_bits() as usize;
        let words = u32_of("words per row", k / per_word)?;
        let params = self.quant_product_params(w, (m, k, n), (g[0], words), epilogue)?;
        let mr = (m as u32).next_power_of_two();
        let spec = epilogue.specialise(gemv_spec(w.format, mr, w.layout().words_per_block() as u32));
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let binds = w.product_bindings(&params, x, out, self.epilogue_buffers(epilogue));
        Ok(Dispatch::with_bindings(&self.inner.device, pipeline, &binds, g))
    }

    /// The column-blocked GEMV (`shaders/quant_gemv_cols.wgsl`) of f32 `x`
    /// into `out` with `launch`: its dispatches (with a K split, the
    /// partial sums' reduction after it) and scratch (the partials).
    pub(crate) fn gemv_cols_dispatches(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
        launch: QuantGemvLaunch,
        epilogue: &Epilogue,
    ) -> Result<(Vec<Dispatch>, Vec<Tensor>)> {
        let op = "matmul_quantized";
        let lay = w.layout();
        let mut g = grid(self.profile(), (n as u64).div_ceil(u64::from(quant_cols_columns())), op)?;
        let ksplit = launch.ksplit.min(lay.blocks_per_line() as u32).max(1);
        g[2] = ksplit;
        let params = self.quant_product_params(w, (m, k, n), (g[0], 0), epilogue)?;
        let mr = (m as u32).next_power_of_two();
        let spec = gemv_cols_spec(w.format, mr, lay.words_per_block() as u32, QuantGemvLaunch { ksplit, ..launch });
        // The epilogue goes where the sums are final: the reduction when K is split.
        let spec = if ksplit == 1 { epilogue.specialise(spec) } else { spec };
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let (bias, residual) = self.epilogue_buffers(epilogue);
        let mut binds = w.product_bindings(&params, x, out, (bias, residual));
        if ksplit == 1 {
            // The partials binding is declared either way: the dummy.
            binds.push((7, &self.inner.dummy_rw));
            return Ok((vec![Dispatch::with_bindings(&self.inner.device, pipeline, &binds, g)], Vec::new()));
        }
        let partials = self.alloc(&[ksplit as usize, m, n], DType::F32, "wgtile quantized GEMV partials")?;
        binds.push((7, partials.buffer()));
        let main = Dispatch::with_bindings(&self.inner.device, pipeline, &binds, g);
        let reduce = epilogue.specialise(gemv_cols_reduce_spec(ksplit));
        let reduce = self.inner.pipelines.get(&self.inner.device, &reduce)?;
        let reduce = Dispatch::with_bindings(
            &self.inner.device,
            reduce,
            &[(0, &params), (3, out.buffer()), (5, bias), (6, residual), (7, partials.buffer())],
            grid(self.profile(), ((m * n) as u64).div_ceil(256), op)?,
        );
        Ok((vec![main, reduce], vec![partials]))
    }

    /// The fallback: the weight dequantised to f32, then the matmul engine
    /// (the dequantised weight is the plan's scratch).
    fn dequantized_matmul(&self, x: &Tensor, w: &QuantTensor, out_shape: &[usize], epilogue: &Epilogue) -> Result<Plan> {
        let deq = self.dequantize_plan(w)?;
        let wf = deq.output().clone();
        let k = *x.shape().last().unwrap_or(&0);
        let rows = x.numel() / k.max(1);
        let x2 = x.reshape([rows, k])?;
        let transposed = w.axis == QuantAxis::Rows;
        let n = out_shape.last().copied().unwrap_or(0);
        let epilogue = epilogue.with_residual_shape(&[rows, n])?;
        let options = MatmulOptions::default().transposed(false, transposed);
        let mm = self.matmul_plan_with(&x2, &wf, None, &options, &epilogue)?;
        let mut dispatches = deq.dispatches;
        dispatches.extend(mm.dispatches);
        let mut scratch = mm.scratch;
        scratch.push(wf);
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("dequantize {} + {}", w.format, mm.label),
            dispatches,
            output: mm.output.reshape(out_shape)?,
            flops: mm.flops,
            bytes: w.packed_bytes() + mm.bytes,
            scratch,
        })
    }
}
