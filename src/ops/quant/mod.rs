//! Block-quantised tensors: quantise and dequantise on the GPU, upload the
//! packed bytes of a checkpoint, read them back. Formats, rounding and the
//! packed layout: [`crate::quant`]; kernels: `shaders/quant.wgsl`.

pub mod gemm;
pub mod gemv;
mod tune;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor, grid};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::quant::{HostQuant, QuantAxis, QuantFormat, QuantLayout};
use crate::runtime::Context;

/// Invocations per workgroup of the quantisation kernels.
const WG: u32 = 256;

/// Elements per invocation of NVFP4's amax pass (`AMAX_PER` in
/// `shaders/quant.wgsl`).
const AMAX_PER: u32 = 32;

/// A block-quantised tensor on the GPU: packed element codes, one scale
/// per block (and a zero point for [`QuantFormat::Int4Zp`]), NVFP4's
/// per-tensor scale, the logical shape and the block axis. Made by
/// [`Context::quantize`] or [`Context::upload_quantized`]; read back with
/// [`QuantTensor::to_host_blocking`]. The parts follow [`HostQuant`]'s
/// layout word for word.
#[derive(Clone, Debug)]
pub struct QuantTensor {
    pub(crate) format: QuantFormat,
    pub(crate) axis: QuantAxis,
    pub(crate) block: usize,
    pub(crate) shape: Vec<usize>,
    /// u32 words held in f32 tensors (the kernels read them as bits).
    pub(crate) data: Tensor,
    pub(crate) scales: Tensor,
    pub(crate) zeros: Tensor,
    /// `[amax bits, per-tensor scale bits, 0, 0]`.
    pub(crate) globals: Tensor,
}

impl QuantTensor {
    /// The format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// Which way the blocks run.
    pub fn axis(&self) -> QuantAxis {
        self.axis
    }

    /// Elements per block.
    pub fn block(&self) -> usize {
        self.block
    }

    /// The logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The packed geometry.
    pub fn layout(&self) -> QuantLayout {
        QuantLayout::new(&self.shape, self.axis, self.block, self.format.element_bits())
            .expect("a QuantTensor's shape was checked when it was made")
    }

    /// Bytes of element codes, scales and zero points (what a kernel reads).
    pub fn packed_bytes(&self) -> u64 {
        let lay = self.layout();
        let blocks = lay.blocks() as u64;
        let f = self.format;
        blocks * (lay.words_per_block() as u64 * 4)
            + (blocks * u64::from(f.scale_bits() + f.zero_bits())).div_ceil(8)
    }

    /// The packed parts on the host, bit for bit (resolves once read back).
    pub async fn to_host(&self) -> Result<HostQuant> {
        async fn words(t: &Tensor, n: usize) -> Result<Vec<u32>> {
            let v = t.to_vec::<f32>().await?;
            Ok(v[..n].iter().map(|x| x.to_bits()).collect())
        }
        let lay = self.layout();
        let f = self.format;
        let blocks = lay.blocks();
        let globals = words(&self.globals, 4).await?;
        Ok(HostQuant {
            format: f,
            axis: self.axis,
            block: self.block,
            shape: self.shape.clone(),
            data: words(&self.data, blocks * lay.words_per_block()).await?,
            scales: words(&self.scales, blocks.div_ceil((32 / f.scale_bits()) as usize)).await?,
            zeros: if f.zero_bits() > 0 {
                words(&self.zeros, blocks.div_ceil(4)).await?
            } else {
                Vec::new()
            },
            global_scale: if f == QuantFormat::Nvfp4 {
                f32::from_bits(globals[1])
            } else {
                1.0
            },
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// The packed parts on the host (blocking; native only; in the browser
    /// await [`QuantTensor::to_host`]).
    pub fn to_host_blocking(&self) -> Result<HostQuant> {
        pollster::block_on(self.to_host())
    }
}

/// The kernels' parameter block (`Params` in `shaders/quant.wgsl`).
fn params(lay: &QuantLayout, gx: u32, n: u32) -> Result<[u32; 8]> {
    params_read(lay, gx, n, false)
}

impl QuantTensor {
    /// The GPU tensors it is made of: codes, scales, zero points, globals.
    pub(crate) fn parts(&self) -> [&Tensor; 4] {
        [&self.data, &self.scales, &self.zeros, &self.globals]
    }

    /// The bindings of the GEMVs and the f32 GEMM that multiply by this
    /// weight: 0 params, 1 x, 2 codes, 3 out, 5 and 6 the epilogue's bias
    /// and residual, 10 scales, 11 zero points, 12 globals.
    pub(crate) fn product_bindings<'a>(
        &'a self,
        params: &'a wgpu::Buffer,
        x: &'a Tensor,
        out: &'a Tensor,
        (bias, residual): (&'a wgpu::Buffer, &'a wgpu::Buffer),
    ) -> Vec<(u32, &'a wgpu::Buffer)> {
        vec![
            (0, params),
            (1, x.buffer()),
            (2, self.data.buffer()),
            (3, out.buffer()),
            (5, bias),
            (6, residual),
            (10, self.scales.buffer()),
            (11, self.zeros.buffer()),
            (12, self.globals.buffer()),
        ]
    }
}

/// A count the quantisation kernels index with, as u32 (`what` names it).
pub(crate) fn u32_of(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        Error::InvalidArgument(format!("quantised tensor: {what} {v} does not fit in u32"))
    })
}

/// [`params`], reading the input transposed (`[cols, rows]` row-major).
fn params_read(lay: &QuantLayout, gx: u32, n: u32, transposed: bool) -> Result<[u32; 8]> {
    let u = u32_of;
    Ok([
        u("rows", lay.rows)?,
        u("cols", lay.cols)?,
        u("block", lay.block)?,
        if transposed {
            2
        } else {
            u32::from(lay.axis == QuantAxis::Columns)
        },
        u("blocks per line", lay.blocks_per_line())?,
        u("blocks", lay.blocks())?,
        gx,
        n,
    ])
}

/// The format's code in `shaders/quant.wgsl` (`FORMAT`).
pub(crate) fn format_code(f: QuantFormat) -> u32 {
    QuantFormat::ALL
        .iter()
        .position(|&g| g == f)
        .expect("every format is in ALL") as u32
}

/// The kernels' specialisation for `format` and the input dtype.
pub(crate) fn quant_spec(kernel: Kernel, format: QuantFormat, input: DType) -> Spec {
    // Integer inputs are refused before (`check_owned`).
    let in_half = match input {
        DType::F32 | DType::I32 | DType::U32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
    };
    let spec = Spec::new(kernel)
        .constant("FORMAT", format_code(format))
        .constant("IN_HALF", in_half)
        .override_("WG", WG);
    // Every kernel here includes quant_common.wgsl, which declares the
    // quantisers' probe (the others never read it).
    let dev = crate::dev::overrides();
    let spec = if dev.quant_probe != 0 { spec.constant("PROBE", dev.quant_probe) } else { spec };
    let spec = if dev.e2m1_bits { spec.constant("E2M1_COMPARE", 0) } else { spec };
    if kernel == Kernel::QuantAmax { spec.constant("AMAX_PER", AMAX_PER) } else { spec }
}

/// Every specialisation the quantisation kernels run in.
pub fn quant_specs() -> Vec<Spec> {
    let mut out = Vec::new();
    for f in QuantFormat::ALL {
        for input in DType::ALL {
            out.push(quant_spec(Kernel::Quantize, f, input));
            out.push(quant_spec(Kernel::QuantizeWords, f, input));
            out.push(quant_spec(Kernel::QuantizeVec, f, input));
            out.push(quant_spec(Kernel::QuantizeWordsShuffle, f, input));
            out.push(quant_spec(Kernel::QuantizeVecShuffle, f, input));
            out.push(quant_spec(Kernel::QuantizeCols, f, input));
            out.push(quant_spec(Kernel::QuantizeColBlocks, f, input));
            if f == QuantFormat::Nvfp4 {
                out.push(quant_spec(Kernel::QuantAmax, f, input));
            }
        }
        for k in [Kernel::Dequantize, Kernel::DequantizeVec, Kernel::DequantizeCols] {
            out.push(quant_spec(k, f, DType::F32));
        }
        for k in [Kernel::Dequantize, Kernel::DequantizeVec] {
            out.push(quant_spec(k, f, DType::F32).constant("GATHER", 1));
        }
        out.extend(gemv::specs_for(f));
    }
    out.extend(gemv::reduce_specs());
    out.extend(gemm::quant_gemm_specs());
    out
}

impl Context {
    /// Quantises `t` (f32, f16 or bf16, contiguous) to `format` with the
    /// format's block size ([`QuantFormat::default_block`]) along `axis`;
    /// bit for bit what [`crate::quant::quantize`] gives on the host.
    ///
    /// Rounding is to nearest even everywhere, saturating at the element's
    /// largest finite value. MX formats: the block's E8M0 scale is
    /// `2^(floor(log2(amax)) - emax)` (OCP MX v1.0; all-zero blocks get
    /// 2^-127), a block holding a NaN or infinity gets the NaN scale (0xFF)
    /// and zero codes. NVFP4: the per-tensor scale is `amax * (1 / 2688)`
    /// over the finite values, each block's E4M3 scale the rounded
    /// `amax_block / (6 * global)`, non-finite blocks the NaN scale. Integer
    /// formats: f16 scales `amax / 127` (int8) or `amax / 7` (int4), or
    /// `(max - min) / 15` with a zero point for [`QuantFormat::Int4Zp`] (the
    /// range widened to hold 0); a non-finite block gets a NaN scale. FP8
    /// with f32 scales: each block's scale is `amax * (1 / 448)` (E4M3) or
    /// `amax * (1 / 57344)` (E5M2) in f32 ([`crate::quant::fp8_block_scale`]),
    /// the elements their quotient by it rounded and saturated (never an
    /// E5M2 infinity); all-zero blocks get scale 0 and zero codes,
    /// non-finite blocks the f32 NaN scale.
    pub fn quantize(&self, t: &Tensor, format: QuantFormat, axis: QuantAxis) -> Result<QuantTensor> {
        self.quantize_with_block(t, format, axis, format.default_block())
    }

    /// [`Context::quantize`] with a block size (the integer and FP8 formats
    /// take any multiple of 8 (4-bit) or 4 (8-bit) up to 1024; MX and NVFP4
    /// only theirs).
    pub fn quantize_with_block(
        &self,
        t: &Tensor,
        format: QuantFormat,
        axis: QuantAxis,
        block: usize,
    ) -> Result<QuantTensor> {
        let (plan, q) = self.quantize_plan(t, format, axis, block)?;
        plan.run()?;
        Ok(q)
    }

    /// Quantises the transpose of a `[N, K]` weight (a `Linear` layer's
    /// layout, as checkpoints store it) into a `[K, N]` tensor blocked down
    /// its columns, the layout the fast quantised GEMV reads: the same
    /// codes as quantising `wᵀ` along [`QuantAxis::Columns`], without
    /// forming `wᵀ`.
    pub fn quantize_transposed(&self, w: &Tensor, format: QuantFormat) -> Result<QuantTensor> {
        let (plan, q) = self.quantize_plan_impl(w, format, QuantAxis::Columns, format.default_block(), true)?;
        plan.run()?;
        Ok(q)
    }

    /// Both block-scaled copies of a matrix `t` (rank >= 2), in one plan:
    /// blocked along its rows (the copy a product contracting over `t`'s
    /// last axis reads, `x @ tᵀ` or `tᵀ`-style gradients) and down its
    /// columns (the copy `x @ t` reads). Training needs both: the forward
    /// product and the backward one (`G @ Wᵀ`) contract `W` over different
    /// axes, and a block-scaled matrix is not the transpose of its other
    /// copy. Transposing one copy's codes is impossible (their blocks run
    /// the wrong way), and re-quantising its dequantised values rounds
    /// twice: the tour's low-precision section measures that second error.
    /// Returns `(rows, columns)`; the two kernels run in one submission
    /// (the input is read twice).
    pub fn quantize_both(&self, t: &Tensor, format: QuantFormat) -> Result<(QuantTensor, QuantTensor)> {
        if t.rank() < 2 {
            return Err(Error::InvalidArgument(format!(
                "quantize_both takes a matrix (rank >= 2), got shape {:?}",
                t.shape()
            )));
        }
        let block = format.default_block();
        let (mut plan, rows) = self.quantize_plan(t, format, QuantAxis::Rows, block)?;
        let (cols_plan, cols) = self.quantize_plan(t, format, QuantAxis::Columns, block)?;
        plan.dispatches.extend(cols_plan.dispatches);
        plan.run()?;
        Ok((rows, cols))
    }

    /// The plan of [`Context::quantize_with_block`] and the tensor it fills.
    pub fn quantize_plan(
        &self,
        t: &Tensor,
        format: QuantFormat,
        axis: QuantAxis,
        block: usize,
    ) -> Result<(Plan, QuantTensor)> {
        self.quantize_plan_impl(t, format, axis, block, false)
    }

    fn quantize_plan_impl(
        &self,
        t: &Tensor,
        format: QuantFormat,
        axis: QuantAxis,
        block: usize,
        transposed: bool,
    ) -> Result<(Plan, QuantTensor)> {
        self.check_owned(t, "quantize")?;
        t.require_contiguous("quantize")?;
        format.check_block(block)?;
        let shape: Vec<usize> = if transposed {
            if t.rank() != 2 {
                return Err(Error::InvalidArgument(format!(
                    "quantize_transposed takes a rank-2 [N, K] weight, got {:?}",
                    t.shape()
                )));
            }
            vec![t.shape()[1], t.shape()[0]]
        } else {
            t.shape().to_vec()
        };
        let lay = QuantLayout::new(&shape, axis, block, format.element_bits())?;
        let q = self.alloc_quant(format, axis, block, &shape)?;
        let n = u32_of("elements", t.numel())?;
        // The amax kernel's last workgroup indexes up to n + WG * AMAX_PER.
        if n > u32::MAX - AMAX_PER * WG {
            return Err(Error::InvalidArgument(format!(
                "quantize: {n} elements is more than the kernels index"
            )));
        }
        let input = t.dtype();
        let mut dispatches = Vec::new();
        let bind = |kernel: Kernel, gx: u32, count: u32, workgroups: [u32; 3]| -> Result<Dispatch> {
            let pipeline = self
                .inner
                .pipelines
                .get(&self.inner.device, &quant_spec(kernel, format, input))?;
            let params = self.uniform(&params_read(&lay, gx, count, transposed)?);
            let mut buffers = vec![
                (0, &params),
                (1, t.buffer()),
                (5, q.globals.buffer()),
            ];
            if kernel != Kernel::QuantAmax {
                buffers.extend([
                    (2, q.data.buffer()),
                    (3, q.scales.buffer()),
                    (4, q.zeros.buffer()),
                ]);
            }
            Ok(Dispatch::with_bindings(
                &self.inner.device,
                pipeline,
                &buffers,
                workgroups,
            ))
        };
        if lay.blocks() > 0 {
            if format == QuantFormat::Nvfp4 {
                dispatches.push(self.fill_dispatch(q.globals.buffer(), 0)?);
                // AMAX_PER elements per invocation, one atomic per workgroup.
                let g = grid(
                    self.profile(),
                    u64::from(n).div_ceil(u64::from(AMAX_PER * WG)),
                    "quantize",
                )?;
                dispatches.push(bind(Kernel::QuantAmax, g[0], n, g)?);
            }
            let wpb = lay.words_per_block() as u32;
            // Whole groups of 4 blocks (or 4 columns) per workgroup.
            let per_group = (WG / (4 * wpb).max(1)) * 4;
            // The input's rows hold the blocks along rows, and those down
            // the columns of its transpose.
            let line = if transposed { lay.rows } else { lay.cols };
            if (axis == QuantAxis::Rows || transposed) && 4 * wpb <= WG {
                // One invocation per word; 16-byte loads where every word's
                // elements are 16-byte aligned and inside their row.
                let groups = (lay.blocks() as u64).div_ceil(u64::from(per_group));
                let g = grid(self.profile(), groups, "quantize")?;
                let shuffles = crate::tune::quant::quantize_shuffles(self.profile(), wpb, WG);
                let kernel = match (line.is_multiple_of(8), shuffles) {
                    (true, false) => Kernel::QuantizeVec,
                    (true, true) => Kernel::QuantizeVecShuffle,
                    (false, false) => Kernel::QuantizeWords,
                    (false, true) => Kernel::QuantizeWordsShuffle,
                };
                dispatches.push(bind(kernel, g[0], n, g)?);
            } else if axis == QuantAxis::Columns && !transposed && lay.cols.is_multiple_of(4) {
                // One invocation per block (or per word) down a column: x
                // over column groups, y over block rows.
                let blocks = crate::tune::quant::quantize_col_blocks(format, wpb, WG);
                let columns = if blocks { WG } else { per_group };
                let gx = u32_of("column groups", lay.cols.div_ceil(columns as usize))?;
                let gy = u32_of("block rows", lay.rows.div_ceil(lay.block))?;
                let max = self.profile().max_workgroups_per_dim;
                if gx.max(gy) > max {
                    return Err(Error::LimitExceeded {
                        limit: "max_compute_workgroups_per_dimension",
                        requested: u64::from(gx.max(gy)),
                        max: u64::from(max),
                        what: format!("quantize down the columns of {:?}", t.shape()),
                    });
                }
                let kernel = if blocks { Kernel::QuantizeColBlocks } else { Kernel::QuantizeCols };
                dispatches.push(bind(kernel, gx, n, [gx, gy, 1])?);
            } else {
                let groups = lay.blocks().div_ceil(4) as u64;
                let g = grid(self.profile(), groups.div_ceil(u64::from(WG)), "quantize")?;
                dispatches.push(bind(Kernel::Quantize, g[0], n, g)?);
            }
        }
        let elem = t.dtype().size() as u64;
        let plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("quantize to {format} ({axis:?})"),
            dispatches,
            output: q.data.clone(),
            flops: 0,
            bytes: t.numel() as u64 * elem + q.packed_bytes(),
            scratch: Vec::new(),
        };
        Ok((plan, q))
    }

    /// The values of `q` as an f32 tensor of its shape.
    pub fn dequantize(&self, q: &QuantTensor) -> Result<Tensor> {
        let plan = self.dequantize_plan(q)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// The plan of [`Context::dequantize`] (its output is the plan's).
    pub fn dequantize_plan(&self, q: &QuantTensor) -> Result<Plan> {
        self.check_all_owned(q.parts(), "dequantize")?;
        let out = self.alloc(&q.shape, DType::F32, "wgtile dequantized")?;
        self.dequantize_into(q, None, out, format!("dequantize {}", q.format))
    }

    /// Rows of a quantised table `[V, H]` (blocks along either axis) by
    /// `ids` (i32 or u32, any shape): an f32 tensor of shape `ids.shape ++
    /// [H]` whose row `r` is row `ids[r]` of [`Context::dequantize`]'s
    /// result, bit for bit. The embedding lookup of a quantised embedding
    /// table, which [`Context::matmul_quantized`] also multiplies by (x @
    /// Wᵀ of a `[V, H]` table blocked along rows: tied input and output
    /// embeddings share one packed copy). Ids outside `[0, V)`, negative
    /// ones included, give rows of NaN, as [`Context::gather`]'s do.
    pub fn gather_quantized(&self, table: &QuantTensor, ids: &Tensor) -> Result<Tensor> {
        let plan = self.gather_quantized_plan(table, ids)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::gather_quantized`] as a plan.
    pub fn gather_quantized_plan(&self, table: &QuantTensor, ids: &Tensor) -> Result<Plan> {
        let op = "gather_quantized";
        self.check_all_owned(table.parts(), op)?;
        let [rows, h] = table.shape[..] else {
            return Err(Error::InvalidArgument(format!(
                "{op}: the table must be rank 2 ([V, H]), got {:?}",
                table.shape
            )));
        };
        self.check_gather_ids(ids, rows, op)?;
        let mut shape = ids.shape().to_vec();
        shape.push(h);
        let out = self.alloc(&shape, DType::F32, "wgtile gathered rows")?;
        self.dequantize_into(table, Some(ids), out, format!("{op} {}", table.format))
    }

    /// The plan writing `q` dequantised into `out` (`q`'s shape), or the
    /// rows of `q` that `ids` name (`out` of `ids.shape ++ [H]`).
    fn dequantize_into(&self, q: &QuantTensor, ids: Option<&Tensor>, out: Tensor, label: String) -> Result<Plan> {
        let lay = q.layout();
        let n = u32_of("elements", out.numel())?;
        let mut dispatches = Vec::new();
        if n > 0 {
            // Each store coalesced: 4 elements and a 16-byte store per
            // invocation along rows, 4 rows of one column down columns (one
            // word per invocation with 4-byte stores lost 2x for 4-bit
            // formats, docs/perf/quant.md), else one element. Gathered rows
            // of a column-blocked table are not 4 consecutive rows: one
            // element per invocation.
            let (kernel, count) = if lay.axis == QuantAxis::Rows && lay.cols.is_multiple_of(4) {
                (Kernel::DequantizeVec, n / 4)
            } else if lay.axis == QuantAxis::Columns && ids.is_none() {
                (
                    Kernel::DequantizeCols,
                    u32_of("quads", lay.rows.div_ceil(4) * lay.cols)?,
                )
            } else {
                (Kernel::Dequantize, n)
            };
            let g = grid(self.profile(), u64::from(count).div_ceil(u64::from(WG)), "dequantize")?;
            let mut spec = quant_spec(kernel, q.format, DType::F32);
            if ids.is_some() {
                spec = spec.constant("GATHER", 1);
            }
            let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
            let params = self.uniform(&params(&lay, g[0], count)?);
            let mut binds = vec![
                (0, &params),
                (2, q.data.buffer()),
                (3, q.scales.buffer()),
                (4, q.zeros.buffer()),
                (5, q.globals.buffer()),
                (6, out.buffer()),
            ];
            if kernel != Kernel::DequantizeCols {
                // The ids the rows come from (read only with GATHER; the
                // binding is declared either way).
                binds.push((7, ids.map_or(&self.inner.dummy_rw, |t| t.buffer())));
            }
            dispatches.push(Dispatch::with_bindings(&self.inner.device, pipeline, &binds, g));
        }
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label,
            dispatches,
            // What is read: the whole packed tensor, or the gathered rows'
            // share of it and the ids.
            bytes: match ids {
                None => q.packed_bytes(),
                Some(t) => (f64::from(n) * q.format.bytes_per_element(q.block)) as u64 + t.size_bytes(),
            } + u64::from(n) * 4,
            output: out,
            flops: 0,
            scratch: Vec::new(),
        })
    }

    /// A quantised tensor from packed host parts (a checkpoint's bytes as
    /// [`HostQuant`] words: [`HostQuant::from_bytes`] builds them from the
    /// bytes as stored), checked for size and format first.
    pub fn upload_quantized(&self, host: &HostQuant) -> Result<QuantTensor> {
        host.check()?;
        let q = self.alloc_quant(host.format, host.axis, host.block, &host.shape)?;
        // Reused buffers' clears go first: the writes below land before the
        // next submission.
        self.inner.gpu.flush("upload_quantized")?;
        let write = |t: &Tensor, words: &[u32]| {
            if !words.is_empty() {
                self.queue()
                    .write_buffer(t.buffer(), 0, bytemuck::cast_slice(words));
            }
        };
        write(&q.data, &host.data);
        write(&q.scales, &host.scales);
        write(&q.zeros, &host.zeros);
        write(&q.globals, &[0, host.global_scale.to_bits(), 0, 0]);
        Ok(q)
    }

    /// Buffers for a quantised tensor of `shape` (limits checked).
    fn alloc_quant(
        &self,
        format: QuantFormat,
        axis: QuantAxis,
        block: usize,
        shape: &[usize],
    ) -> Result<QuantTensor> {
        format.check_block(block)?;
        let lay = QuantLayout::new(shape, axis, block, format.element_bits())?;
        let blocks = lay.blocks();
        let words = |n: usize, what: &str| self.alloc(&[n.max(1)], DType::F32, what);
        Ok(QuantTensor {
            format,
            axis,
            block,
            shape: shape.to_vec(),
            data: words(
                blocks
                    .checked_mul(lay.words_per_block())
                    .ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} overflows")))?,
                "wgtile quant data",
            )?,
            scales: words(
                blocks.div_ceil((32 / format.scale_bits()) as usize),
                "wgtile quant scales",
            )?,
            zeros: words(
                if format.zero_bits() > 0 { blocks.div_ceil(4) } else { 1 },
                "wgtile quant zeros",
            )?,
            globals: words(4, "wgtile quant globals")?,
        })
    }
}
