//! The quantised GEMMs. On tensor cores: f16 activations times a quantised
//! weight, the weight decoded into the tensor-core kernel's f16 workgroup
//! tiles as it is staged (`shaders/matmul_coop_quant.wgsl`), so it is read
//! packed and never written wider. A first pass checks the block scales;
//! a weight whose decoded values could leave f16's range arms the f32
//! fallback (`shaders/quant_matmul_naive.wgsl`: one dispatch, so the
//! unarmed plan pays for one empty launch), which then writes the result
//! instead. bf16 activations are narrowed to f16 by the checked cast first,
//! whose range test joins the scale check in arming the fallback (on x
//! widened to f32). Elsewhere (GPUs without cooperative matrices): the
//! register-tiled kernel with the weight decoded into its f32 tiles
//! (`shaders/quant_matmul_tiled.wgsl`), exact.

use super::{QuantTensor, format_code, u32_of};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor, grid};
use crate::kernels::codegen::matmul_coop::coop_quant_blocks;
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::problem::MatmulShape;
use crate::quant::{QuantAxis, QuantFormat};
use crate::runtime::{Context, Epilogue};
use crate::tune::{self, MatmulKernel, TileConfig};

/// Invocations per workgroup of the scale check.
const CHECK_WG: u32 = 256;

/// The f16 GEMM that bf16 activations are staged for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum QuantF16Engine {
    /// The tensor-core kernel in this layout (the route's).
    TensorCores(MatmulKernel),
    /// The tiled kernel with this tile (for tests on any `shader-f16`
    /// adapter).
    Tiled(TileConfig),
}

impl Context {
    /// The tensor-core kernel for `x[M, K] @ W` (W `[N, K]` as the kernel
    /// reads it), if the f16 dispatcher picks one for this shape.
    pub(crate) fn quant_gemm_kernel(&self, (m, k, n): (usize, usize, usize)) -> Option<MatmulKernel> {
        let shape = MatmulShape::with_transposes(&[m, k], &[n, k], false, true).ok()?;
        let kernel = tune::choose_matmul_layout(
            self.profile(),
            DType::F16,
            (m, n, k),
            1,
            tune::Layout::of(&shape),
        )
        .kernel;
        match kernel {
            MatmulKernel::Coop { split: false, .. } if kernel.fits(self.profile()) => Some(kernel),
            _ => None,
        }
    }

    /// `x` (f16, contiguous, `[.., K]`) times `w` on the tensor cores with
    /// `kernel`, into a new f32 tensor of `out_shape`; the scale check and
    /// the armed f32 fallback come with it.
    pub(crate) fn quant_gemm_plan(
        &self,
        kernel: MatmulKernel,
        x: &Tensor,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
        out_shape: &[usize],
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let out = self.alloc(out_shape, DType::F32, "wgtile quantized matmul out")?;
        let (flag, clear) = self.range_flag()?;
        let mut scratch = Vec::new();
        let (check, _) = self.weight_pass(w, Some(&flag), &mut scratch)?;
        let mut dispatches = vec![clear];
        dispatches.extend(check);
        dispatches.push(self.quant_coop_dispatch(kernel, x, w, &out, (m, k, n), epilogue)?);
        // The fallback, armed by the check: the weight decoded in f32.
        let fallback = self.quant_naive_dispatch(x, w, (m, k, n), &out, epilogue)?;
        dispatches.extend(self.armed(&flag, vec![fallback])?);
        let how = format!("{kernel} [weights decoded to f16 in the tiles; f32 fallback armed by a scale beyond f16]");
        Ok(self.quant_gemm_result((x, w), (m, k, n), (dispatches, out, scratch), &how))
    }

    /// The plan of a quantised GEMM of `x` and `w`: its dispatches, output
    /// and scratch, labelled with the format, the block axis, the shape and
    /// `how`.
    fn quant_gemm_result(
        &self,
        (x, w): (&Tensor, &QuantTensor),
        (m, k, n): (usize, usize, usize),
        (dispatches, output, scratch): (Vec<Dispatch>, Tensor, Vec<Tensor>),
        how: &str,
    ) -> Plan {
        Plan {
            gpu: self.inner.gpu.clone(),
            label: format!(
                "quantized GEMM ({}, blocks along {}, {m}x{n}x{k}) {how}",
                w.format,
                if w.axis == QuantAxis::Columns { "columns" } else { "rows" }
            ),
            dispatches,
            output,
            flops: 2 * (m * n * k) as u64,
            bytes: w.packed_bytes() + x.size_bytes() + (m * n * 4) as u64,
            scratch,
        }
    }

    /// The tensor-core GEMM dispatch of f16 `x` and `w` with `kernel`.
    fn quant_coop_dispatch(
        &self,
        kernel: MatmulKernel,
        x: &Tensor,
        w: &QuantTensor,
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
        epilogue: &Epilogue,
    ) -> Result<Dispatch> {
        let u = u32_of;
        for (what, v) in [("M x K", m * k), ("M x N", m * n), ("packed words", w.data.numel())] {
            u(what, v)?;
        }
        let spec = epilogue.specialise(coop_spec(
            kernel,
            format_code(w.format),
            (u("block", w.block)?, u("words per block", w.layout().words_per_block())?),
            w.axis == QuantAxis::Columns,
            k.is_multiple_of(8),
        ));
        let what = format!("matmul_quantized with {kernel}");
        self.quant_b_dispatch(&spec, (x, w, None), out, (m, k, n), kernel.block(), true, what, epilogue)
    }

    /// bf16 `x` (contiguous, `[.., K]`) times `w` through an f16 GEMM
    /// (`engine`: the tensor cores, or the tiled kernel for tests), into a
    /// new f32 tensor of `out_shape`. The checked cast narrows x to f16 and
    /// publishes its range test ([`crate::DType::BF16`]); on tensor cores
    /// the weight's scale check joins it. Where either fails, x widened to
    /// f32 and the f32 naive product run instead: one of the two groups
    /// runs, decided on the GPU.
    pub(crate) fn quant_gemm_plan_bf16(
        &self,
        engine: QuantF16Engine,
        x: &Tensor,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
        out_shape: &[usize],
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let out = self.alloc(out_shape, DType::F32, "wgtile quantized matmul out")?;
        let (flag, clear) = self.range_flag()?;
        let (casts, halves) = self.checked_halves(&[x], &flag)?;
        let mut dispatches = vec![clear];
        dispatches.extend(casts);
        let x16 = &halves[0];
        let mut scratch = vec![x16.clone()];
        // On tensor cores the weight's scale check joins the range test.
        let coop = matches!(engine, QuantF16Engine::TensorCores(_));
        let (check, paired) = self.weight_pass(w, coop.then_some(&flag), &mut scratch)?;
        dispatches.extend(check);
        let paired = paired.as_ref();
        let (on_f16, how) = match engine {
            QuantF16Engine::TensorCores(kernel) => (
                self.quant_coop_dispatch(kernel, x16, w, &out, (m, k, n), epilogue)?,
                format!("{kernel} [weights decoded to f16 in the tiles"),
            ),
            QuantF16Engine::Tiled(tile) => (
                self.quant_tiled_dispatch(x16, w, &out, (m, k, n), tile, epilogue, paired)?,
                tiled_how(tile),
            ),
        };
        let x32 = self.alloc(x.shape(), DType::F32, "wgtile widened activations")?;
        let mut fallback: Vec<Dispatch> = self.cast_dispatch(x, &x32)?.into_iter().collect();
        fallback.push(self.quant_naive_dispatch(&x32, w, (m, k, n), &out, epilogue)?);
        dispatches.extend(self.armed_either((&flag, 1), vec![on_f16], fallback)?);
        let how = format!("{how}; bf16 x staged to f16, the f32 fallback armed by its range test or a scale beyond f16]");
        scratch.push(x32);
        Ok(self.quant_gemm_result((x, w), (m, k, n), (dispatches, out, scratch), &how))
    }

    /// `x` (f32 or f16, contiguous, `[.., K]`) times `w` on the register-tiled
    /// kernel with the weight decoded into its f32 tiles
    /// (`shaders/quant_matmul_tiled.wgsl`), into a new f32 tensor of
    /// `out_shape`.
    pub(crate) fn quant_tiled_plan(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
        out_shape: &[usize],
        tile: Option<TileConfig>,
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let op = "matmul_quantized";
        let u = u32_of;
        for (what, v) in [("M x K", m * k), ("M x N", m * n), ("packed words", w.data.numel())] {
            u(what, v)?;
        }
        if x.dtype() == DType::F16 {
            self.require_f16("f16 activations")?;
        }
        let tile = self.quant_tile(tile, (m, n), op)?;
        let out = self.alloc(out_shape, DType::F32, "wgtile quantized matmul out")?;
        let mut dispatches = Vec::new();
        let mut scratch = Vec::new();
        if m * n > 0 {
            let (pairing, paired) = self.weight_pass(w, None, &mut scratch)?;
            dispatches.extend(pairing);
            dispatches.push(self.quant_tiled_dispatch(x, w, &out, (m, k, n), tile, epilogue, paired.as_ref())?);
        }
        let how = format!("{}]", tiled_how(tile));
        Ok(self.quant_gemm_result((x, w), (m, k, n), (dispatches, out, scratch), &how))
    }

    /// The pass over `w`'s blocks before a GEMM: the scale check into
    /// `flag` where given (the tensor-core GEMM's), else only for int4
    /// with zero points (the tiled GEMM's, its flag unread), pairing each
    /// block's scale and zero point; the paired words, if any. What the
    /// pass writes is kept in `scratch`.
    fn weight_pass(
        &self,
        w: &QuantTensor,
        flag: Option<&wgpu::Buffer>,
        scratch: &mut Vec<Tensor>,
    ) -> Result<(Option<Dispatch>, Option<Tensor>)> {
        let (flag, pair) = match flag {
            Some(f) => (f.clone(), false),
            None if w.format == QuantFormat::Int4Zp => {
                let unread = self.alloc(&[4], DType::U32, "wgtile unread scale flag")?;
                let buffer = unread.buffer().clone();
                scratch.push(unread);
                (buffer, true)
            }
            None => return Ok((None, None)),
        };
        let (check, paired) = self.scale_check_dispatch(w, &flag, pair)?;
        scratch.extend(paired.clone());
        Ok((Some(check), paired))
    }

    /// The tiled GEMM dispatch of `x` (f32 or f16) and `w` with `tile`;
    /// `paired`: the weight pass's paired scales and zero points (int4 with
    /// zero points), read in place of both.
    #[allow(clippy::too_many_arguments)] // the product, its tile, epilogue and paired words
    fn quant_tiled_dispatch(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
        tile: TileConfig,
        epilogue: &Epilogue,
        paired: Option<&Tensor>,
    ) -> Result<Dispatch> {
        let spec = epilogue.specialise(quant_tiled_spec(x.dtype(), tile, w)?);
        let what = format!("matmul_quantized with {tile:?}");
        self.quant_b_dispatch(&spec, (x, w, paired), out, (m, k, n), (tile.bm, tile.bn), false, what, epilogue)
    }

    /// `tile`, or the tiled GEMM's tile for `m` x `n` outputs on this
    /// adapter (refused by name where none fits).
    fn quant_tile(&self, tile: Option<TileConfig>, (m, n): (usize, usize), op: &str) -> Result<TileConfig> {
        let tile = tile.or_else(|| tune::quant::quant_tiled_tile(self.profile(), m, n));
        tile.ok_or_else(|| Error::UnsupportedFeature {
            feature: "workgroups of 64 invocations with 8 KiB of workgroup memory",
            what: format!("{op}: the tiled GEMM"),
        })
    }

    /// The GEMM dispatch of `spec` (the tensor-core kernel, `coop`, or the
    /// tiled one) with B the quantised `w`, read as `[N, K]` (its column
    /// stride carries the blocks per row), one workgroup per `block` of C
    /// (rows, columns).
    #[allow(clippy::too_many_arguments)]
    fn quant_b_dispatch(
        &self,
        spec: &Spec,
        (x, w, paired): (&Tensor, &QuantTensor, Option<&Tensor>),
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
        (bm, bn): (u32, u32),
        coop: bool,
        what: String,
        epilogue: &Epilogue,
    ) -> Result<Dispatch> {
        let (gx, gy) = (n.div_ceil(bn as usize), m.div_ceil(bm as usize));
        let max = self.profile().max_workgroups_per_dim as usize;
        if gx.max(gy) > max {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: gx.max(gy) as u64,
                max: max as u64,
                what,
            });
        }
        let mut shape = MatmulShape::with_transposes(&[m, k], &[n, k], false, true)?;
        shape.b_pitch = w.layout().blocks_per_line();
        let pipeline = self.inner.pipelines.get(&self.inner.device, spec)?;
        let params = self.matmul_params(&shape, 0, epilogue, (0, 1));
        let mut bindings = w.product_bindings(&params, x, out, self.epilogue_buffers(epilogue));
        if let Some(p) = paired {
            bindings.retain(|&(b, _)| b != 10);
            bindings.push((10, p.buffer()));
        }
        // The codes again as pairs of words (8-bit runs).
        bindings.push((13, w.data.buffer()));
        if coop {
            // The tensor-core kernel also reads A and B as 32-bit words.
            bindings.extend([(7, x.buffer()), (8, w.data.buffer())]);
        } else {
            // The tiled core declares the split-K partials.
            bindings.push((4, &self.inner.dummy_rw));
        }
        Ok(Dispatch::with_bindings(&self.inner.device, pipeline, &bindings, [gx as u32, gy as u32, 1]))
    }

    /// `(M, K, N)` of `x[M, K] @ w` for the GEMMs called directly: both on
    /// this device, `x` contiguous and of a dtype the kernel takes (`ok`,
    /// named by `dtypes`), a rank-2 weight with K matching and blocks of a
    /// multiple of 8 (a run of 8 k stays in one block).
    fn quant_gemm_operands(
        &self,
        op: &'static str,
        x: &Tensor,
        w: &QuantTensor,
        (ok, dtypes): (bool, &str),
    ) -> Result<(usize, usize, usize)> {
        self.check_owned(x, op)?;
        self.check_all_owned(w.parts(), op)?;
        if !ok || x.shape().len() != 2 || w.shape.len() != 2 {
            return Err(Error::InvalidArgument(format!("{op} takes {dtypes} x [M, K] and a rank-2 weight")));
        }
        x.require_contiguous(op)?;
        let (m, k) = (x.shape()[0], x.shape()[1]);
        let (wk, n) = match w.axis {
            QuantAxis::Rows => (w.shape[1], w.shape[0]),
            QuantAxis::Columns => (w.shape[0], w.shape[1]),
        };
        if wk != k || !w.block.is_multiple_of(8) {
            return Err(Error::shape(op, x.shape(), &w.shape, "K differs, or blocks not a multiple of 8"));
        }
        Ok((m, k, n))
    }

    /// The tensor-core quantised GEMM of f16 `x[M, K]` in the layout
    /// `kernel` (a [`MatmulKernel::Coop`] without the f32 split that fits
    /// the adapter), whatever the dispatcher or the autotuner would pick:
    /// for tests and side-by-side measurements.
    #[doc(hidden)]
    pub fn quant_gemm_coop(&self, x: &Tensor, w: &QuantTensor, kernel: MatmulKernel, epilogue: &Epilogue) -> Result<Plan> {
        let op = "quant_gemm_coop";
        let (m, k, n) = self.quant_gemm_operands(op, x, w, (x.dtype() == DType::F16, "f16"))?;
        if !matches!(kernel, MatmulKernel::Coop { split: false, .. }) || !kernel.fits(self.profile()) {
            return Err(Error::InvalidArgument(format!(
                "{op}: {kernel} is not a tensor-core layout this adapter runs"
            )));
        }
        let epilogue = self.quant_epilogue(epilogue, &[m, n])?;
        self.quant_gemm_plan(kernel, x, w, (m, k, n), &[m, n], &epilogue)
    }

    /// The tiled quantised GEMM on any adapter, whatever the route would
    /// pick (CPU adapters dequantise instead), with `tile` or the route's:
    /// for tests and side-by-side measurements.
    #[doc(hidden)]
    pub fn quant_gemm_tiled(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        tile: Option<TileConfig>,
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let op = "quant_gemm_tiled";
        let (m, k, n) = self.quant_gemm_operands(op, x, w, (x.dtype() != DType::BF16, "f32 or f16"))?;
        if let Some(t) = tile
            && (!t.fits(self.profile()) || t.reg != 8 || !t.bk.is_multiple_of(8))
        {
            return Err(Error::InvalidArgument(format!(
                "{op}: tile {t:?} does not fit this adapter, or is not an 8 x 8 register tile with a K step of a multiple of 8"
            )));
        }
        let epilogue = self.quant_epilogue(epilogue, &[m, n])?;
        self.quant_tiled_plan(x, w, (m, k, n), &[m, n], tile, &epilogue)
    }

    /// bf16 `x[M, K]` times `w` through the tiled GEMM on f16 activations:
    /// the staging the route gives bf16 activations on tensor cores (the
    /// checked cast, its range test and the armed f32 fallback) on any
    /// adapter with `shader-f16`, for tests of the staging.
    #[doc(hidden)]
    pub fn quant_gemm_bf16_via_f16(&self, x: &Tensor, w: &QuantTensor, epilogue: &Epilogue) -> Result<Plan> {
        let op = "quant_gemm_bf16_via_f16";
        let (m, k, n) = self.quant_gemm_operands(op, x, w, (x.dtype() == DType::BF16, "bf16"))?;
        self.require_f16(op)?;
        let tile = self.quant_tile(None, (m, n), op)?;
        let epilogue = self.quant_epilogue(epilogue, &[m, n])?;
        self.quant_gemm_plan_bf16(QuantF16Engine::Tiled(tile), x, w, (m, k, n), &[m, n], &epilogue)
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// The quantised GEMM's f32 fallback alone, on f16 `x[M, K]`, and
    /// its scale check (true where it would arm the fallback). For tests:
    /// both run on any adapter, the tensor-core kernel they guard only
    /// where there are tensor cores.
    #[doc(hidden)]
    pub fn quant_gemm_fallback(&self, x: &Tensor, w: &QuantTensor, epilogue: &Epilogue) -> Result<(Tensor, bool)> {
        self.check_owned(x, "quant_gemm_fallback")?;
        self.check_all_owned(w.parts(), "quant_gemm_fallback")?;
        if x.dtype() != DType::F16 || x.shape().len() != 2 || w.shape.len() != 2 {
            return Err(Error::InvalidArgument(
                "quant_gemm_fallback takes f16 x [M, K] and a rank-2 weight".into(),
            ));
        }
        x.require_contiguous("quant_gemm_fallback")?;
        let (m, k) = (x.shape()[0], x.shape()[1]);
        let n = match w.axis {
            QuantAxis::Rows => w.shape[0],
            QuantAxis::Columns => w.shape[1],
        };
        let epilogue = self.quant_epilogue(epilogue, &[m, n])?;
        let out = self.alloc(&[m, n], DType::F32, "wgtile quantized GEMM fallback")?;
        let flag = self.alloc(&[4], DType::F32, "wgtile quantized GEMM check flag")?;
        let mut kept = Vec::new();
        let (check, _) = self.weight_pass(w, Some(flag.buffer()), &mut kept)?;
        let mut dispatches = vec![self.fill_dispatch(flag.buffer(), 0)?];
        dispatches.extend(check);
        if m * n > 0 {
            dispatches.push(self.quant_naive_dispatch(x, w, (m, k, n), &out, &epilogue)?);
        }
        self.run_dispatches("quant_gemm_fallback", &dispatches)?;
        let flagged = flag.to_vec_blocking::<f32>()?[2].to_bits() != 0;
        Ok((out, flagged))
    }

    /// `out = x @ w` in f32, one invocation per output (f16 or f32 `x`).
    fn quant_naive_dispatch(
        &self,
        x: &Tensor,
        w: &QuantTensor,
        (m, k, n): (usize, usize, usize),
        out: &Tensor,
        epilogue: &Epilogue,
    ) -> Result<Dispatch> {
        let g = grid(
            self.profile(),
            ((m * n) as u64).div_ceil(64),
            "the quantised GEMM's f32 fallback",
        )?;
        let spec = epilogue.specialise(naive_spec(w.format, w.axis == QuantAxis::Columns, x.dtype()));
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let params = self.quant_product_params(w, (m, k, n), (g[0], 0), epilogue)?;
        let binds = w.product_bindings(&params, x, out, self.epilogue_buffers(epilogue));
        Ok(Dispatch::with_bindings(&self.inner.device, pipeline, &binds, g))
    }

    /// The scale check: sets word 2 of `flag` where a block of `w` decodes
    /// to values f16 cannot hold (`shaders/quant_scale_check.wgsl`).
    /// With `pair`, for int4 with zero points, it also pairs each block's
    /// scale and zero point in one word of a new tensor, which it returns
    /// (the tiled GEMM's `paired`).
    fn scale_check_dispatch(
        &self,
        w: &QuantTensor,
        flag: &wgpu::Buffer,
        pair: bool,
    ) -> Result<(Dispatch, Option<Tensor>)> {
        let blocks = w.layout().blocks();
        let g = grid(
            self.profile(),
            (blocks as u64).div_ceil(u64::from(CHECK_WG)).max(1),
            "the quantised GEMM's scale check",
        )?;
        let pair = pair && w.format == QuantFormat::Int4Zp;
        let spec = scale_check_spec(format_code(w.format), pair);
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let params = self.uniform(&[u32_of("blocks", blocks)?, g[0], 0, 0]);
        let paired = if pair {
            Some(self.alloc(&[blocks.max(1)], DType::U32, "wgtile paired scales and zero points")?)
        } else {
            None
        };
        let dispatch = Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &[
                (0, &params),
                (3, w.scales.buffer()),
                (4, w.zeros.buffer()),
                (5, w.globals.buffer()),
                (6, flag),
                (7, paired.as_ref().map_or(&self.inner.dummy_rw, |p| p.buffer())),
            ],
            g,
        );
        Ok((dispatch, paired))
    }
}

/// How the tiled GEMM runs, for plan labels (the bracket left open).
fn tiled_how(tile: TileConfig) -> String {
    format!("tiled {}x{}x{} [weights decoded to f32 in the tiles", tile.bm, tile.bn, tile.bk)
}

/// The naive product's specialisation for `format`, the block axis (`cols`:
/// down the columns) and `x` of `dtype` (f16 or f32).
fn naive_spec(format: QuantFormat, cols: bool, dtype: DType) -> Spec {
    Spec::new(Kernel::QuantMatmulNaive)
        .constant("FORMAT", format_code(format))
        .constant("COLS", u32::from(cols))
        .constant("X_HALF", u32::from(dtype == DType::F16))
}

/// The tensor-core GEMM's specialisation for `kernel` and a weight of
/// `format`, `(block, words per block)`, blocked down its columns or not,
/// with K a multiple of 8 (`aligned`) or not.
fn coop_spec(kernel: MatmulKernel, format: u32, (block, words): (u32, u32), cols: bool, aligned: bool) -> Spec {
    let mut spec = kernel
        .spec(DType::F16)
        .dtype(DType::F32)
        .constant("TRANS_B", 1)
        .constant("TRANS_COLMAJOR", 1);
    if !aligned {
        spec = spec.constant("ALIGNED", 0);
    }
    for (name, text) in coop_quant_blocks(format, block, words, cols) {
        spec = spec.block(name, text);
    }
    spec
}

/// The scale check's specialisation for a weight of `format`, pairing
/// scales and zero points (`pair`, int4 with zero points) or not.
fn scale_check_spec(format: u32, pair: bool) -> Spec {
    let spec = Spec::new(Kernel::QuantScaleCheck).constant("FORMAT", format);
    if pair { spec.constant("PAIR", 1) } else { spec }
}

/// The tiled quantised GEMM's specialisation for `x` of `dtype`, `tile`
/// and `w`'s format, block and axis.
fn quant_tiled_spec(dtype: DType, tile: TileConfig, w: &QuantTensor) -> Result<Spec> {
    let lay = w.layout();
    Ok(tiled_spec(
        dtype,
        tile,
        format_code(w.format),
        u32_of("block", w.block)?,
        u32_of("words per block", lay.words_per_block())?,
        w.axis == QuantAxis::Columns,
    ))
}

fn tiled_spec(dtype: DType, tile: TileConfig, format: u32, block: u32, words: u32, cols: bool) -> Spec {
    let spec = Spec::new(Kernel::QuantMatmulTiled)
        .dtype(dtype)
        .constant("BM", tile.bm)
        .constant("BN", tile.bn)
        .constant("BK", tile.bk)
        .constant("FORMAT", format)
        .constant("BLK", block)
        .constant("WPB", words)
        .constant("COLS", u32::from(cols))
        .constant("ZS", u32::from(format == format_code(QuantFormat::Int4Zp)));
    if dtype == DType::F32 {
        spec
    } else {
        spec.output(DType::F32)
    }
}

/// Every specialisation the quantised GEMM compiles (for the shader tests):
/// each format on both block axes, aligned and unaligned K, with the
/// tensor-core layout the dispatcher picks at 4096^3 on a subgroup of 32.
pub fn quant_gemm_specs() -> Vec<Spec> {
    // Every tensor-core layout the autotuner may time (subgroups of 32).
    let kernels = crate::tune::COOP_CONFIGS.map(|(warps_m, warps_n, bk, frags_n)| MatmulKernel::Coop {
        warps_m,
        warps_n,
        bk,
        frags_n,
        subgroup: 32,
        split: false,
    });
    let mut out = Vec::new();
    for format in QuantFormat::ALL {
        let block = format.default_block() as u32;
        let words = block * format.element_bits() / 32;
        for kernel in kernels {
            for cols in [false, true] {
                for aligned in [true, false] {
                    out.push(coop_spec(kernel, format_code(format), (block, words), cols, aligned));
                }
            }
        }
        out.push(scale_check_spec(format_code(format), false));
        if format == QuantFormat::Int4Zp {
            out.push(scale_check_spec(format_code(format), true));
        }
        for (i, tile) in crate::tune::TILE_CONFIGS.into_iter().enumerate() {
            for cols in [false, true] {
                let dtype = if i == 0 { DType::F16 } else { DType::F32 };
                out.push(tiled_spec(dtype, tile, format_code(format), block, words, cols));
            }
        }
        for cols in [false, true] {
            for dtype in [DType::F16, DType::F32] {
                out.push(naive_spec(format, cols, dtype));
            }
        }
    }
    out
}
