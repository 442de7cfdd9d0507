//! Matrix multiplication: `[.., M, K] x [.., K, N] -> [.., M, N]` with NumPy
//! `matmul` semantics (batch dimensions broadcast, 1-D operands promoted and the
//! added dimension dropped), f32 or f16 (f16 accumulates in f32).

use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::AdapterProfile;
use crate::gpu::TimingOptions;
use crate::kernels::{Dispatch, Kernel, Spec};
pub use crate::problem::{MatmulShape, Padding};
use crate::runtime::Context;
use crate::runtime::PadCopy;
use crate::runtime::Plan;
use crate::runtime::Tensor;
use crate::tune::autotune::{AutotuneMode, Autotuner};
use crate::tune::pad::PadChoice;
use crate::tune::{self, MatmulChoice, MatmulKernel};

/// Seconds of GPU work before the autotuner measures its first candidate.
const TUNING_WARMUP_SECONDS: f64 = 0.2;

/// Per-call matmul options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatmulOptions {
    /// Force a kernel (tests, comparisons); `None` lets the dispatcher choose.
    pub kernel: Option<MatmulKernel>,
    /// What the padding layer may do.
    pub padding: Padding,
    /// A is stored transposed (`[.., K, M]`), read in place (no copy).
    pub transpose_a: bool,
    /// B is stored transposed (`[.., N, K]`), read in place (no copy).
    pub transpose_b: bool,
    /// f32 operands may run on f16 tensor cores (the cooperative-matrix
    /// kernel), where the adapter has them: each input is rounded to f16
    /// when staged (11-bit significand; magnitudes beyond 65504 saturate),
    /// products are accumulated and written in f32. Several times faster on
    /// large shapes, and less precise: the dispatcher never does this unless
    /// asked. Without tensor cores (or for transposed operands) it has no
    /// effect.
    pub reduced_precision: bool,
    /// f32 operands on f16 tensor cores split into halves (each value,
    /// scaled by its operand's power of two, as hi + lo; three products per
    /// fragment pair, each 16-wide k slice summed apart and added in f32):
    /// f32's accuracy, in practice a smaller error than the f32 CUDA-core
    /// kernels' (H200, session 13: max |error| 5.6e-5 against 2.2e-4 at
    /// 4096^3 for values in [-1, 1]), and 2-2.5x faster from 1024^3 on (70
    /// against 33 TFLOP/s at 4096^3). `None` (the default): the dispatcher
    /// takes it on adapters with tensor cores for problems of at least
    /// [`crate::tune::COOP_SPLIT_MIN_MACS`] multiply-adds with K >=
    /// [`crate::tune::COOP_SPLIT_MIN_K`] whose result is f32; `Some(true)`:
    /// wherever the tensor cores run the shape; `Some(false)`: never (the
    /// f32 CUDA-core kernels). `reduced_precision` wins when set.
    /// Infinities and NaN: the halves cannot carry them (an infinity's are
    /// inf and inf - inf, which makes its products NaN), so the pass that
    /// finds the scales also looks for them and sets a flag; the plan ends
    /// with the f32 CUDA-core tiled kernel, whose workgroups return at once
    /// unless the flag is set and otherwise recompute C with IEEE
    /// semantics, as the f32 kernels give it. With finite operands that
    /// costs one dispatch of empty workgroups, about 2 us per plan on the
    /// H200 (1024^3: 32.1-32.3 -> 31.0 TFLOP/s; 4096^3: unchanged).
    pub split_f32: Option<bool>,
    /// The result's dtype when it differs from the operands' (f16 inputs,
    /// f32 output: the f32 accumulators are written without rounding to
    /// f16; or f32 inputs, f16 output). Every kernel writes it directly; the
    /// padding layer and the autotuner stand aside for such plans. The
    /// epilogue's bias and residual take the output dtype.
    pub out_dtype: Option<DType>,
    /// How many of the last rows of C the padding layer computes apart,
    /// each as a GEMV: `None`, the wave rule decides
    /// ([`crate::tune::pad::fringe_rows`]); `Some(0)` never; `Some(r)` forces r
    /// rows (at most M - 1) for one matrix, with or without copies.
    pub fringe_rows: Option<usize>,
}

impl MatmulOptions {
    /// Options that force `kernel` (no padding: the kernel runs the raw shape).
    pub fn with_kernel(kernel: MatmulKernel) -> Self {
        Self {
            kernel: Some(kernel),
            padding: Padding::Never,
            ..Self::default()
        }
    }

    /// Reads A and/or B as stored transposed.
    pub fn transposed(mut self, transpose_a: bool, transpose_b: bool) -> Self {
        self.transpose_a = transpose_a;
        self.transpose_b = transpose_b;
        self
    }

    /// Options with a padding policy and the dispatcher's kernel.
    pub fn with_padding(padding: Padding) -> Self {
        Self {
            padding,
            ..Self::default()
        }
    }
}

/// The tensor-core kernel an f32 problem runs on, if any: rounded to f16
/// with `reduced_precision`, else split into halves as `split_f32` says
/// (by default from the size threshold on, never for a mixed-dtype result);
/// `None` where the f16 dispatcher would not take the tensor cores for this
/// shape and layout (tiny or matrix-vector problems, no tensor cores).
pub(crate) fn f32_on_tensor_cores(
    profile: &crate::gpu::AdapterProfile,
    options: &MatmulOptions,
    (m, n, k): (usize, usize, usize),
    batches: usize,
    layout: tune::Layout,
    mixed: bool,
) -> Option<MatmulKernel> {
    let kernel = tune::choose_matmul_layout(profile, DType::F16, (m, n, k), batches, layout).kernel;
    if !matches!(kernel, MatmulKernel::Coop { .. }) {
        return None;
    }
    if options.reduced_precision {
        return Some(kernel);
    }
    match options.split_f32 {
        Some(false) => None,
        Some(true) => tune::coop_split_for_shape(profile, (m, n, k), batches, true),
        None if mixed => None,
        None => tune::coop_split_for_shape(profile, (m, n, k), batches, false),
    }
}

/// The dispatcher's choice for the raw shape and, when the padding layer
/// would pad, what it would run instead.
#[derive(Clone, Debug)]
pub struct MatmulExplanation {
    /// The kernel for the shape as given.
    pub choice: MatmulChoice,
    /// The padding layer's decision (`None`: the raw shape runs).
    pub padding: Option<PadChoice>,
}

impl MatmulExplanation {
    /// The kernel that will run.
    pub fn kernel(&self) -> MatmulKernel {
        self.padding
            .as_ref()
            .map_or(self.choice.kernel, |p| p.kernel)
    }
}

impl std::fmt::Display for MatmulExplanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.choice)?;
        if let Some(p) = &self.padding {
            write!(f, "; padding layer: {p}")?;
        }
        Ok(())
    }
}

/// Activation applied in a matmul's epilogue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activation {
    /// None.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Gelu,
    /// SiLU (swish): `x / (1 + exp(-x))`.
    Silu,
}

impl Activation {
    const fn code(self) -> u32 {
        match self {
            Activation::None => 0,
            Activation::Relu => 1,
            Activation::Gelu => 2,
            Activation::Silu => 3,
        }
    }
}

/// Work fused into a matmul's store, in registers, before the single write:
/// `C = act(alpha * (A @ B) + bias) + residual`, where `bias` has one value
/// per output column (shape `[N]`) and `residual` has the output's shape.
#[derive(Clone, Debug)]
pub struct Epilogue {
    alpha: f32,
    bias: Option<Tensor>,
    residual: Option<Tensor>,
    activation: Activation,
    /// Generated epilogue text ([`Epilogue::expr`]), or why it failed.
    generated: Option<std::result::Result<String, String>>,
}

impl Default for Epilogue {
    fn default() -> Self {
        Self {
            alpha: 1.0,
            bias: None,
            residual: None,
            activation: Activation::None,
            generated: None,
        }
    }
}

impl Epilogue {
    /// The identity epilogue (`C = A @ B`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Multiplies the product by `alpha`.
    pub fn scale(mut self, alpha: f32) -> Self {
        self.alpha = alpha;
        self
    }

    /// Adds `bias[col]` (shape `[N]`, the operands' dtype).
    pub fn bias(mut self, bias: &Tensor) -> Self {
        self.bias = Some(bias.clone());
        self
    }

    /// Adds a tensor of the output's shape after the activation.
    pub fn residual(mut self, residual: &Tensor) -> Self {
        self.residual = Some(residual.clone());
        self
    }

    /// Applies `activation` after scale and bias.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// ReLU after scale and bias.
    pub fn relu(self) -> Self {
        self.activation(Activation::Relu)
    }

    /// GELU (tanh form) after scale and bias.
    pub fn gelu(self) -> Self {
        self.activation(Activation::Gelu)
    }

    /// SiLU after scale and bias.
    pub fn silu(self) -> Self {
        self.activation(Activation::Silu)
    }

    /// An epilogue generated from an elementwise expression of the
    /// accumulator [`Expr::acc`](crate::Expr::acc) (f32), for example
    /// `(Expr::acc() * 0.5 + bias.expr()).gelu_erf() + residual.expr()`. It
    /// REPLACES the other settings (scale, activation, bias, residual): the
    /// expression's tensors become the bias (a rank-1 tensor of `N` values,
    /// one per output column) and the residual (a tensor of the output's
    /// shape), at most one of each, in the operands' dtype. Scalars are baked
    /// into the kernel text (each distinct expression, values included, is
    /// its own pipeline). An expression that breaks these rules makes the
    /// matmul return `Err`.
    pub fn expr(mut self, expr: &crate::Expr) -> Self {
        match crate::fusion::generate_epilogue(expr) {
            Ok(code) => {
                self.alpha = 1.0;
                self.activation = Activation::None;
                self.bias = code.bias;
                self.residual = code.residual;
                self.generated = Some(Ok(code.wgsl));
            }
            Err(e) => self.generated = Some(Err(e.to_string())),
        }
        self
    }

    /// True when it leaves `A @ B` unchanged.
    pub fn is_identity(&self) -> bool {
        self.generated.is_none()
            && self.alpha == 1.0
            && self.bias.is_none()
            && self.residual.is_none()
            && self.activation == Activation::None
    }

    /// Whether it reads tensors (which the padded path cannot index).
    fn reads_tensors(&self) -> bool {
        self.bias.is_some() || self.residual.is_some()
    }

    /// Adds the `EPI_*` specialisation of a kernel that has the epilogue part.
    fn specialise(&self, spec: Spec) -> Spec {
        if !spec.kernel.has_epilogue() {
            return spec;
        }
        let mut spec = spec;
        if let Some(Ok(text)) = &self.generated {
            return spec.epilogue_text(text.clone());
        }
        if self.bias.is_some() {
            spec = spec.constant("EPI_BIAS", 1);
        }
        if self.residual.is_some() {
            spec = spec.constant("EPI_RESIDUAL", 1);
        }
        if self.activation != Activation::None {
            spec = spec.constant("EPI_ACT", self.activation.code());
        }
        spec
    }

    fn check(&self, ctx: &Context, dtype: DType, n: usize, out_shape: &[usize]) -> Result<()> {
        if let Some(Err(e)) = &self.generated {
            return Err(Error::InvalidArgument(format!(
                "matmul epilogue expression: {e}"
            )));
        }
        if let Some(bias) = &self.bias {
            if bias.shape() != [n] {
                return Err(Error::shape(
                    "matmul bias",
                    bias.shape(),
                    &[n],
                    "the bias needs one value per output column",
                ));
            }
            check_operand(ctx, bias, dtype, "matmul bias")?;
        }
        if let Some(residual) = &self.residual {
            if residual.shape() != out_shape {
                return Err(Error::shape(
                    "matmul residual",
                    residual.shape(),
                    out_shape,
                    "the residual needs the output's shape",
                ));
            }
            check_operand(ctx, residual, dtype, "matmul residual")?;
        }
        Ok(())
    }
}

fn check_operand(ctx: &Context, t: &Tensor, dtype: DType, op: &'static str) -> Result<()> {
    if !Arc::ptr_eq(&t.ctx.inner, &ctx.inner) {
        return Err(Error::InvalidArgument(format!(
            "{op}: tensors must live on the context that runs them"
        )));
    }
    if t.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            op,
            expected: dtype,
            got: t.dtype(),
        });
    }
    Ok(())
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        limit: "u32 indexing",
        requested: v as u64,
        max: u64::from(u32::MAX),
        what: what.to_string(),
    })
}

impl Context {
    /// `a @ b` with the kernel the dispatcher picks.
    pub fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let plan = self.matmul_plan(a, b, None, &MatmulOptions::default())?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// `act(alpha * (a @ b) + bias) + residual` in one kernel (see [`Epilogue`]).
    pub fn matmul_with(&self, a: &Tensor, b: &Tensor, epilogue: &Epilogue) -> Result<Tensor> {
        let plan = self.matmul_plan_with(a, b, None, &MatmulOptions::default(), epilogue)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// `a @ b` written into `out` (whose shape and dtype must match the result).
    pub fn matmul_into(&self, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<()> {
        self.matmul_plan(a, b, Some(out), &MatmulOptions::default())?
            .run()
    }

    /// `a @ b` with a kernel chosen by the caller (for comparisons and tests).
    pub fn matmul_with_kernel(
        &self,
        a: &Tensor,
        b: &Tensor,
        kernel: MatmulKernel,
    ) -> Result<Tensor> {
        let plan = self.matmul_plan(a, b, None, &MatmulOptions::with_kernel(kernel))?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// The f32 split plan's passes around its tensor-core kernel, alone: the
    /// largest finite |A| and |B| (`shaders/matmul_split_scale.wgsl`) over
    /// the logical elements of `a @ b` as `options` read them (transposes,
    /// padded rows, batches), then the f32 CUDA-core fallback that pass arms
    /// when an operand holds an infinity or NaN, writing `out` (untouched
    /// otherwise). Returns the two maxima and whether the fallback ran.
    /// For tests: these passes run on any adapter, the split kernel only on
    /// tensor cores.
    #[doc(hidden)]
    pub fn split_passes(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: &Tensor,
        options: &MatmulOptions,
    ) -> Result<([f32; 2], bool)> {
        for t in [a, b, out] {
            if t.dtype() != DType::F32 {
                return Err(Error::DTypeMismatch {
                    op: "split passes",
                    expected: DType::F32,
                    got: t.dtype(),
                });
            }
        }
        let shape = operand_shape(a, b, options)?;
        if out.shape() != shape.out_shape.as_slice() || !out.is_contiguous() {
            return Err(Error::shape(
                "split passes output",
                out.shape(),
                &shape.out_shape,
                "the output must be a dense tensor of the result's shape",
            ));
        }
        let mut scratch = Vec::new();
        let (maxima, passes) = self.split_scale_dispatches(&shape, &a.buffer, &b.buffer)?;
        let mut dispatches: Vec<Dispatch> = passes.into();
        dispatches.extend(self.split_fallback_dispatches(
            (DType::F32, DType::F32),
            &shape,
            (&a.buffer, &b.buffer, &out.buffer),
            &Epilogue::default(),
            &mut scratch,
            &maxima.buffer,
        )?);
        let plan = Plan {
            ctx: self.clone(),
            label: "split passes".into(),
            dispatches,
            output: maxima,
            flops: 0,
            bytes: (a.storage_len() + b.storage_len()) as u64 * 4,
            scratch,
        };
        plan.run()?;
        let words = plan.output().to_vec_blocking::<f32>()?;
        Ok(([words[0], words[1]], words[2].to_bits() != 0))
    }

    /// What the dispatcher and the padding layer would do for
    /// `[batch] x [m, k] x [k, n]` in `dtype` (with [`Padding::Auto`]), and why.
    pub fn explain_matmul(
        &self,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
    ) -> MatmulExplanation {
        let profile = self.profile();
        let layout = tune::Layout::dense(m, n, k, false, false);
        let split = (dtype == DType::F32)
            .then(|| {
                f32_on_tensor_cores(
                    profile,
                    &MatmulOptions::default(),
                    (m, n, k),
                    batch,
                    layout,
                    false,
                )
            })
            .flatten();
        if let Some(kernel) = split {
            return MatmulExplanation {
                choice: tune::MatmulChoice::new(
                    profile,
                    kernel,
                    (m, n),
                    batch,
                    "f32 on tensor cores, each value split into two f16 halves \
                     (f32's accuracy; MatmulOptions::split_f32)"
                        .into(),
                ),
                padding: crate::tune::pad::choose_for(
                    profile,
                    kernel,
                    dtype,
                    (m, n, k),
                    batch,
                    Padding::Auto,
                ),
            };
        }
        MatmulExplanation {
            choice: tune::choose_matmul(profile, dtype, m, n, k, batch),
            padding: crate::tune::pad::choose(profile, dtype, m, n, k, batch, Padding::Auto),
        }
    }

    /// Checks the operands, allocates (or checks) the output and encodes the
    /// dispatches, without running them. `kernel: None` lets the dispatcher choose.
    pub fn matmul_plan(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: Option<&Tensor>,
        options: &MatmulOptions,
    ) -> Result<Plan> {
        self.matmul_plan_with(a, b, out, options, &Epilogue::default())
    }

    /// [`Context::matmul_plan`] with a fused [`Epilogue`].
    pub fn matmul_plan_with(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: Option<&Tensor>,
        options: &MatmulOptions,
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let mut kernel = options.kernel;
        for t in [Some(a), Some(b), out].into_iter().flatten() {
            if !Arc::ptr_eq(&t.ctx.inner, &self.inner) {
                return Err(Error::InvalidArgument(
                    "matmul operands must live on the context that runs them".into(),
                ));
            }
        }
        if a.dtype() != b.dtype() {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                expected: a.dtype(),
                got: b.dtype(),
            });
        }
        let dtype = a.dtype();
        if dtype == DType::F16 {
            self.require_f16("f16 matmul")?;
        }
        let shape = operand_shape(a, b, options)?;
        let padded_operands = !a.is_contiguous() || !b.is_contiguous();
        let transposed = shape.transpose_a || shape.transpose_b;
        let layout = tune::Layout::of(&shape);
        let out_dtype = options.out_dtype.unwrap_or(dtype);
        if out_dtype == DType::F16 {
            self.require_f16("an f16 matmul output")?;
        }
        let mixed = out_dtype != dtype;
        for (t, what) in [
            (out, "the matmul output"),
            (epilogue.bias.as_ref(), "the epilogue bias"),
            (epilogue.residual.as_ref(), "the epilogue residual"),
        ] {
            if let Some(t) = t {
                t.require_contiguous(what)?;
            }
        }
        let output = match out {
            Some(o) => {
                if o.shape() != shape.out_shape.as_slice() {
                    return Err(Error::shape(
                        "matmul output",
                        o.shape(),
                        &shape.out_shape,
                        "the output tensor's shape differs from the result's",
                    ));
                }
                if o.dtype() != out_dtype {
                    return Err(Error::DTypeMismatch {
                        op: "matmul output",
                        expected: out_dtype,
                        got: o.dtype(),
                    });
                }
                let inputs = [
                    Some(a),
                    Some(b),
                    epilogue.bias.as_ref(),
                    epilogue.residual.as_ref(),
                ];
                if inputs
                    .into_iter()
                    .flatten()
                    .any(|t| Arc::ptr_eq(&t.buffer, &o.buffer))
                {
                    return Err(Error::InvalidArgument(
                        "the matmul output must not share its buffer with an input".into(),
                    ));
                }
                o.clone()
            }
            None => self.alloc(&shape.out_shape, out_dtype, "wgtile matmul out")?,
        };
        let (m, n, k) = (shape.m, shape.n, shape.k);
        epilogue.check(self, out_dtype, n, &shape.out_shape)?;
        let batches = shape.batch_count();
        let bytes = (a.numel() + b.numel()) as u64 * dtype.size() as u64
            + output.numel() as u64 * out_dtype.size() as u64;
        let mut plan = Plan {
            ctx: self.clone(),
            label: String::new(),
            dispatches: Vec::new(),
            output,
            flops: shape.flops(),
            bytes,
            scratch: Vec::new(),
        };
        if m == 0 || n == 0 || batches == 0 {
            plan.label = "matmul (empty result)".into();
            return Ok(plan);
        }
        if k == 0 {
            if epilogue.is_identity() {
                // NumPy: a sum over nothing is zero.
                plan.label = "matmul (K = 0: zeros)".into();
                plan.dispatches
                    .push(self.fill_dispatch(&plan.output.buffer, 0)?);
                return Ok(plan);
            }
            // Zeros through the epilogue: the naive kernel's loop runs no times.
            kernel = Some(MatmulKernel::naive_for(self.profile()));
        }

        let profile = self.profile();
        let kernel = match kernel {
            Some(kernel) => {
                if !kernel.fits(profile) {
                    return Err(Error::LimitExceeded {
                        limit: "max_compute_invocations_per_workgroup",
                        requested: u64::from(kernel.threads()),
                        max: u64::from(profile.max_invocations),
                        what: format!("matmul kernel {kernel}"),
                    });
                }
                let reduced = dtype == DType::F32
                    && matches!(kernel, MatmulKernel::Coop { split: false, .. });
                if reduced && !options.reduced_precision {
                    return Err(Error::InvalidArgument(format!(
                        "{kernel} would round f32 operands to f16: set \
                         MatmulOptions::reduced_precision to allow it"
                    )));
                }
                if !reduced && !kernel.accepts_with(dtype, m, n, k, layout) {
                    return Err(Error::InvalidArgument(format!(
                        "{kernel} cannot run a {dtype} matmul with M = {m}, K = {k}, N = {n}{}{} \
                         (vec4: stored rows and N multiples of 4; coop-matrix: f16, row-major, \
                         stored rows multiples of 8; gemv: M or N = 1, row-major; transposed \
                         operands: naive, scalar tiled, scalar broadcast, or tiled vec4)",
                        if transposed { ", transposed" } else { "" },
                        if padded_operands {
                            format!(", row pitches {} and {}", shape.a_pitch, shape.b_pitch)
                        } else {
                            String::new()
                        }
                    )));
                }
                kernel
            }
            None => {
                // The padded kernel would index bias and residual with padded
                // columns: epilogues that read tensors run the raw shape.
                // The padding copies are row-major: transposed operands run as
                // stored, and so do operands the caller padded already.
                // f32 on tensor cores: split into halves by default on large
                // shapes (padded like the other kernels), rounded to f16 when
                // asked (the opt-in reduced form runs the shape as it is).
                let tensor_cores = (dtype == DType::F32)
                    .then(|| {
                        f32_on_tensor_cores(profile, options, (m, n, k), batches, layout, mixed)
                    })
                    .flatten();
                let rounded = matches!(tensor_cores, Some(MatmulKernel::Coop { split: false, .. }));
                let padding = if epilogue.reads_tensors()
                    || transposed
                    || padded_operands
                    || rounded
                    || mixed
                {
                    Padding::Never
                } else {
                    options.padding
                };
                let one_matrix = batches == 1 && a.shape().len() <= 2 && b.shape().len() <= 2;
                let raw = || {
                    tensor_cores.unwrap_or_else(|| {
                        tune::choose_matmul(profile, dtype, m, n, k, batches).kernel
                    })
                };
                // `fringe_rows: Some(r)` also takes rows apart where nothing
                // is padded (the raw kernel on the rows before them).
                let forced_split = || match options.fringe_rows {
                    Some(rows) if padding != Padding::Never && rows > 0 => {
                        Some(crate::tune::pad::PadChoice::split_only(raw(), k, n, rows))
                    }
                    _ => None,
                };
                let choice = (padding != Padding::Never)
                    .then(|| {
                        crate::tune::pad::choose_for(
                            profile,
                            raw(),
                            dtype,
                            (m, n, k),
                            batches,
                            padding,
                        )
                    })
                    .flatten();
                if let Some(mut pad) = choice.or_else(forced_split) {
                    pad.fringe_rows = if one_matrix {
                        options.fringe_rows.unwrap_or(pad.fringe_rows).min(m - 1)
                    } else {
                        0
                    };
                    // The rows apart alone, turned off: nothing left to do
                    // apart, the plain plan below.
                    if pad.copies || pad.fringe_rows > 0 {
                        return self.padded_matmul_plan(a, b, &shape, pad, epilogue, plan);
                    }
                }
                if let Some(kernel) = tensor_cores {
                    // f32 on tensor cores: rounded to f16 by request
                    // (reduced precision), else split into halves.
                    kernel
                } else if padded_operands || mixed {
                    // The autotuner's keys cover dense operands (row-major or
                    // transposed) of one dtype.
                    tune::choose_matmul_layout(profile, dtype, (m, n, k), batches, layout).kernel
                } else {
                    let heuristic =
                        tune::choose_matmul_layout(profile, dtype, (m, n, k), batches, layout)
                            .kernel;
                    self.autotuned_kernel(dtype, &shape, a, b, heuristic)?
                }
            }
        };
        for (numel, what) in [
            (a.storage_len(), "matmul operand A"),
            (b.storage_len(), "matmul operand B"),
            (plan.output.numel(), "matmul output"),
        ] {
            u32_of(numel, what)?;
        }
        let mut scratch = Vec::new();
        plan.dispatches = self.matmul_dispatches(
            kernel,
            (dtype, out_dtype),
            &shape,
            (&a.buffer, &b.buffer, &plan.output.buffer),
            (epilogue, None),
            &mut scratch,
        )?;
        plan.scratch = scratch;
        plan.label = format!("matmul {dtype} {m}x{n}x{k} x{batches} {kernel}");
        if kernel == MatmulKernel::Gemv {
            let variant = match gemv_variant(self.profile(), dtype, &shape) {
                GemvVariant::Matvec => "one row per 64 invocations".to_string(),
                GemvVariant::Wide => match gemv_wide_shape() {
                    (4, 64) => "one dispatch, 16-byte words".to_string(),
                    (l, s) => format!("one dispatch, 16-byte words, {l}x{s} workgroups"),
                },
                GemvVariant::Split { pairs: true } => "K split, column pairs".to_string(),
                GemvVariant::Split { pairs: false } => "K split".to_string(),
            };
            plan.label.push_str(&format!(" [{variant}]"));
        }
        if !epilogue.is_identity() {
            plan.label.push_str(" + epilogue");
        }
        Ok(plan)
    }

    /// The matmul dispatches of `kernel` on dense buffers of `shape`; scratch
    /// tensors they need are pushed to `scratch` (the plan keeps them alive).
    fn matmul_dispatches(
        &self,
        kernel: MatmulKernel,
        (dtype, out_dtype): (DType, DType),
        shape: &MatmulShape,
        (a, b, c): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        (epilogue, guard): (&Epilogue, Option<&wgpu::Buffer>),
        scratch: &mut Vec<Tensor>,
    ) -> Result<Vec<Dispatch>> {
        if guard.is_some() && !matches!(kernel, MatmulKernel::Tiled { .. }) {
            return Err(Error::InvalidArgument(format!(
                "{kernel} has no guard (only the tiled kernels do)"
            )));
        }
        if kernel == MatmulKernel::Gemv {
            let all = 0..shape.batch_count();
            return self.gemv_dispatches(
                (dtype, out_dtype),
                shape,
                (a, b, c),
                epilogue,
                scratch,
                all,
            );
        }
        let profile = self.profile();
        let (m, n) = (shape.m, shape.n);
        let batches = shape.batch_count();
        let (bm, bn) = kernel.block();
        let max_groups = profile.max_workgroups_per_dim;
        let gx = n.div_ceil(bn as usize);
        let gy = m.div_ceil(bm as usize);
        for (groups, dim) in [(gx, "N"), (gy, "M")] {
            if groups > max_groups as usize {
                return Err(Error::LimitExceeded {
                    limit: "max_compute_workgroups_per_dimension",
                    requested: groups as u64,
                    max: u64::from(max_groups),
                    what: format!("matmul with {kernel} along {dim}"),
                });
            }
        }
        let (bias, residual) = self.epilogue_buffers(epilogue);
        let device = &self.inner.device;
        // Split-K: the tiled kernel over (batch, split) pairs writes f32
        // partial sums, a second pass adds them and applies the epilogue.
        let (splits, k_chunk, partials) = match kernel {
            MatmulKernel::SplitK { tile, splits, .. } => {
                let k_chunk = shape
                    .k
                    .div_ceil(splits as usize)
                    .next_multiple_of(tile.bk as usize);
                let splits = shape.k.div_ceil(k_chunk);
                let partials = self.alloc(
                    &[batches * splits, m, n],
                    DType::F32,
                    "wgtile split-K partials",
                )?;
                (splits, k_chunk, Some(partials))
            }
            _ => (1, 0, None),
        };
        // The tiled core declares the partial-sum binding (4) in every variant.
        let binding4 = match (&partials, kernel) {
            (Some(p), _) => Some(&*p.buffer),
            (None, MatmulKernel::Tiled { .. }) => Some(&self.inner.dummy_rw),
            _ => None,
        };
        let mut spec = kernel.spec(dtype);
        let coop = matches!(kernel, MatmulKernel::Coop { .. });
        if coop {
            // The coop kernel's Spec dtype is its output's.
            spec = spec.dtype(out_dtype);
        } else if out_dtype != dtype && partials.is_none() {
            spec = spec.output(out_dtype);
        }
        if coop && !tune::Layout::of(shape).coop_aligned(dtype) {
            spec = spec.constant("ALIGNED", 0);
        }
        // The f32 split kernel without edge checks in dimensions that are
        // whole blocks (`WGTILE_COOP_EDGES=0` keeps them, to measure). H200
        // (session 17, run 114): 1024 / 2048 / 4096 30.7 / 61.4 / 71.6 ->
        // 33.2 / 65.2 / 75.4 TFLOP/s; the f16 kernel lost 1.5-2% the same
        // way and keeps its checks. The padding layer runs odd sizes on the
        // padded K ([`crate::tune::pad::PadChoice::full_k`]), so they drop the K
        // checks too.
        if let MatmulKernel::Coop {
            bk, split: true, ..
        } = kernel
            && crate::tune::pad::split_full_k()
        {
            let (bm, bn) = kernel.block();
            let blocks = [
                ("EDGE_M", m, bm as usize),
                ("EDGE_N", n, bn as usize),
                ("EDGE_K", shape.k, bk as usize),
            ];
            for (name, dim, block) in blocks {
                if dim.is_multiple_of(block) {
                    spec = spec.constant(name, 0);
                }
            }
        }
        if coop && shape.transpose_a {
            spec = spec.constant("TRANS_A", 1);
        }
        if coop && shape.transpose_b {
            spec = spec.constant("TRANS_B", 1);
        }
        if coop && (shape.transpose_a || shape.transpose_b) && coop_colmajor() {
            spec = spec.constant("TRANS_COLMAJOR", 1);
        }
        if coop {
            // Timing bits (results wrong): see the shader's PROBE.
            let probe = crate::dev::overrides().coop_probe;
            if probe != 0 {
                spec = spec.constant("PROBE", probe);
            }
        }
        if partials.is_none() {
            spec = epilogue.specialise(spec);
        }
        if guard.is_some() {
            spec = tune::tiled_guarded(spec);
        }
        let pipeline = self.inner.pipelines.get(device, &spec)?;
        let mut dispatches = Vec::new();
        // The f32 split form: the partial maxima of |A| and |B| first; the
        // f32 CUDA-core kernel's dispatches after it, which compute only when
        // that pass flags an infinity or NaN.
        let split_max = if matches!(kernel, MatmulKernel::Coop { split: true, .. }) {
            let (maxima, passes) = self.split_scale_dispatches(shape, a, b)?;
            dispatches.extend(passes);
            Some(maxima)
        } else {
            None
        };
        // Batches (times splits) beyond the per-dimension workgroup limit are
        // split into several dispatches, each with its own base index.
        let groups_z = batches * splits;
        let per_dispatch = groups_z.min(max_groups as usize);
        for base in (0..groups_z).step_by(per_dispatch) {
            let count = per_dispatch.min(groups_z - base);
            let params = self.matmul_params(shape, base, epilogue.alpha, (k_chunk, splits));
            let mut bindings = vec![
                (0, &params),
                (1, a),
                (2, b),
                (3, c),
                (5, bias),
                (6, residual),
            ];
            bindings.extend(binding4.map(|p| (4, p)));
            if coop {
                // The coop kernel also reads A and B as 32-bit words.
                bindings.extend([(7, a), (8, b)]);
            }
            if let Some(p) = &split_max {
                bindings.push((9, &p.buffer));
            }
            if let Some(g) = guard {
                bindings.push((9, g));
            }
            dispatches.push(Dispatch::with_bindings(
                device,
                pipeline.clone(),
                &bindings,
                [gx as u32, gy as u32, count as u32],
            ));
        }
        if let Some(maxima) = &split_max {
            dispatches.extend(self.split_fallback_dispatches(
                (dtype, out_dtype),
                shape,
                (a, b, c),
                epilogue,
                scratch,
                &maxima.buffer,
            )?);
        }
        scratch.extend(split_max);
        if let Some(partials) = partials {
            let spec = epilogue.specialise(out_spec(Kernel::MatmulSplitKReduce, dtype, out_dtype));
            let reduce = self.inner.pipelines.get(device, &spec)?;
            let (rx, ry) = (n.div_ceil(16), m.div_ceil(16));
            if rx.max(ry) > max_groups as usize {
                return Err(Error::LimitExceeded {
                    limit: "max_compute_workgroups_per_dimension",
                    requested: rx.max(ry) as u64,
                    max: u64::from(max_groups),
                    what: "the split-K reduction".into(),
                });
            }
            let per_dispatch = batches.min(max_groups as usize);
            for base in (0..batches).step_by(per_dispatch) {
                let count = per_dispatch.min(batches - base);
                let params = self.matmul_params(shape, base, epilogue.alpha, (k_chunk, splits));
                dispatches.push(Dispatch::with_bindings(
                    device,
                    reduce.clone(),
                    &[
                        (0, &params),
                        (3, c),
                        (4, &partials.buffer),
                        (5, bias),
                        (6, residual),
                    ],
                    [rx as u32, ry as u32, count as u32],
                ));
            }
            scratch.push(partials);
        }
        Ok(dispatches)
    }

    /// The autotuner's pick for this shape bucket: the heuristic's kernel
    /// when tuning is off or not worth it, the cached winner when there is
    /// one, else the fastest of the top candidates timed now on fresh random
    /// inputs of the same shapes, generated on the GPU (never the caller's
    /// data: zeros or special values would time differently).
    fn autotuned_kernel(
        &self,
        dtype: DType,
        shape: &MatmulShape,
        a: &Tensor,
        b: &Tensor,
        heuristic: MatmulKernel,
    ) -> Result<MatmulKernel> {
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let batches = shape.batch_count();
        let profile = self.profile();
        let tuner = self.autotuner();
        if tuner.mode() == AutotuneMode::Off || !Autotuner::worth_tuning(profile, m, n, k, batches)
        {
            return Ok(heuristic);
        }
        let layout = tune::Layout::of(shape);
        let transposes = (shape.transpose_a, shape.transpose_b);
        let candidates = tune::matmul_candidates_layout(profile, dtype, (m, n, k), batches, layout);
        let mut inputs: Option<(Tensor, Tensor)> = None;
        let decision = tuner.decide_transposed(
            profile,
            ("matmul", dtype),
            (m, n, k, batches),
            transposes,
            &candidates,
            heuristic,
            |candidate| {
                let first = inputs.is_none();
                if first {
                    let ta = self.alloc(a.shape(), dtype, "wgtile tuning A")?;
                    let tb = self.alloc(b.shape(), dtype, "wgtile tuning B")?;
                    self.fill_random(&ta, 0x5eed_0a0a)?;
                    self.fill_random(&tb, 0x5eed_0b0b)?;
                    inputs = Some((ta, tb));
                }
                let (ta, tb) = inputs.as_ref().expect("just filled");
                let plan_of = |kernel: MatmulKernel| {
                    let options =
                        MatmulOptions::with_kernel(kernel).transposed(transposes.0, transposes.1);
                    self.matmul_plan(ta, tb, None, &options)
                };
                let elapsed = crate::kernels::stopwatch();
                if !first {
                    let plan = plan_of(candidate)?;
                    let built = elapsed();
                    let t = self.time(&plan, &tuner.mode().timing_options())?.median();
                    log::debug!(
                        "autotune: {candidate}: built in {:.0} ms, timed in {:.0} ms",
                        built * 1e3,
                        (elapsed() - built) * 1e3
                    );
                    return Ok(t);
                }
                // The first candidate (the heuristic's pick) is timed while
                // threads compile the other timed candidates' pipelines. The
                // GPU may be idling at a low clock: its warm-up brings it up
                // before it is measured, or it reads slow and loses unfairly
                // (seen on the H200: 64x64 tiles chosen over faster 128x128
                // ones).
                let timed = candidates.len().min(tuner.mode().max_candidates());
                let others: Vec<MatmulKernel> = candidates[..timed]
                    .iter()
                    .copied()
                    .filter(|&c| c != candidate)
                    .collect();
                let first_time = || -> Result<f64> {
                    let plan = plan_of(candidate)?;
                    let options = TimingOptions {
                        warmup: 1,
                        warmup_seconds: TUNING_WARMUP_SECONDS,
                        ..tuner.mode().timing_options()
                    };
                    Ok(self.time(&plan, &options)?.median())
                };
                let t = if cfg!(target_arch = "wasm32") {
                    first_time()?
                } else {
                    std::thread::scope(|scope| {
                        for &kernel in &others {
                            let plan_of = &plan_of;
                            scope.spawn(move || {
                                // A failure shows again (and is reported)
                                // when this candidate is measured.
                                if let Err(e) = plan_of(kernel) {
                                    log::debug!("autotune: building {kernel} failed: {e}");
                                }
                            });
                        }
                        first_time()
                    })?
                };
                log::debug!(
                    "autotune: {candidate} built and timed (and {} others built) in {:.0} ms",
                    others.len(),
                    elapsed() * 1e3
                );
                Ok(t)
            },
        )?;
        Ok(decision.kernel)
    }

    /// The f32 CUDA-core kernel's dispatches for what a split plan's kernel
    /// computes (same shape, buffers and epilogue), guarded by the flag the
    /// maxima pass sets in word 2 of `maxima` when an operand holds an
    /// infinity or NaN: the split cannot carry those (an infinity's halves
    /// are inf and inf - inf, so its products come out NaN), the f32
    /// kernels give IEEE's answer. Unflagged, each workgroup returns at once.
    fn split_fallback_dispatches(
        &self,
        dtypes: (DType, DType),
        shape: &MatmulShape,
        buffers: (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        epilogue: &Epilogue,
        scratch: &mut Vec<Tensor>,
        maxima: &wgpu::Buffer,
    ) -> Result<Vec<Dispatch>> {
        let profile = self.profile();
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let layout = tune::Layout::of(shape);
        let kernel =
            tune::choose_matmul_layout(profile, DType::F32, (m, n, k), shape.batch_count(), layout)
                .kernel;
        // The guard is in the tiled kernels: anything else the f32
        // dispatcher might pick (split-K, naive) becomes the scalar tiled
        // kernel, which takes every layout.
        let kernel = match kernel {
            MatmulKernel::Tiled { .. } if kernel.fits(profile) => kernel,
            _ => MatmulKernel::Tiled {
                tile: tune::TILE_CONFIGS[0],
                vec4: false,
            },
        };
        self.matmul_dispatches(
            kernel,
            dtypes,
            shape,
            buffers,
            (epilogue, Some(maxima)),
            scratch,
        )
    }

    /// The f32 split kernel's first passes: zero three words, then
    /// `shaders/matmul_split_scale.wgsl` folds the largest finite |A| and
    /// |B| (over their logical elements) into the first two and sets the
    /// third where it sees an infinity or NaN.
    fn split_scale_dispatches(
        &self,
        shape: &MatmulShape,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
    ) -> Result<(Tensor, [Dispatch; 2])> {
        // Rows per workgroup (the shader's R).
        const ROWS: usize = 8;
        let [a_rs, a_cs, b_rs, b_cs] = shape.operand_strides();
        // The shader's `Operand`: batches, rows, columns, the inner batch
        // count, the two batch strides, the row and column strides.
        let operand = |rows: usize, cols: usize, batch: [usize; 2], rs: u32, cs: u32| {
            [
                shape.batch_count() as u32,
                rows as u32,
                cols as u32,
                shape.batch[1].max(1) as u32,
                batch[0] as u32,
                batch[1] as u32,
                rs,
                cs,
            ]
        };
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let words = [
            operand(m, k, shape.a_strides, a_rs, a_cs),
            operand(k, n, shape.b_strides, b_rs, b_cs),
        ]
        .concat();
        let params = self.uniform(&words);
        let maxima = self.alloc(&[3], DType::F32, "wgtile matmul split maxima")?;
        let zero = self.fill_dispatch(&maxima.buffer, 0)?;
        let device = &self.inner.device;
        let pipeline = self
            .inner
            .pipelines
            .get(device, &Spec::new(Kernel::MatmulSplitScale))?;
        let rows = shape.batch_count() * shape.m.max(shape.k);
        let groups = rows
            .div_ceil(ROWS)
            .clamp(1, self.profile().max_workgroups_per_dim as usize);
        let scale = Dispatch::with_bindings(
            device,
            pipeline,
            &[
                (0, &params),
                (1, a),
                (2, b),
                (3, a),
                (4, b),
                (9, &maxima.buffer),
            ],
            [groups as u32, 2, 1],
        );
        Ok((maxima, [zero, scale]))
    }

    /// The uniform of every matmul kernel (`shaders/matmul_params.wgsl`):
    /// sizes, batch strides from `base` on, the epilogue's alpha and, for the
    /// split-K GEMV, `(k_chunk, splits)`.
    fn matmul_params(
        &self,
        shape: &MatmulShape,
        base: usize,
        alpha: f32,
        (k_chunk, splits): (usize, usize),
    ) -> wgpu::Buffer {
        let [a_rs, a_cs, b_rs, b_cs] = shape.operand_strides();
        self.uniform(&[
            shape.m as u32,
            shape.n as u32,
            shape.k as u32,
            shape.batch[1] as u32,
            shape.a_strides[0] as u32,
            shape.a_strides[1] as u32,
            shape.b_strides[0] as u32,
            shape.b_strides[1] as u32,
            base as u32,
            alpha.to_bits(),
            k_chunk as u32,
            splits as u32,
            a_rs,
            a_cs,
            b_rs,
            b_cs,
        ])
    }

    /// The buffers bound for the epilogue's bias and residual: the tensors,
    /// or the context's dummy buffer for a term that is off.
    fn epilogue_buffers<'e>(
        &'e self,
        epilogue: &'e Epilogue,
    ) -> (&'e wgpu::Buffer, &'e wgpu::Buffer) {
        let dummy = &self.inner.dummy;
        (
            epilogue.bias.as_ref().map_or(dummy, |t| &*t.buffer),
            epilogue.residual.as_ref().map_or(dummy, |t| &*t.buffer),
        )
    }

    /// Matrix-vector dispatches: `matvec` for N = 1, otherwise (M = 1)
    /// `vecmat` with K split over enough workgroups to fill the GPU, then
    /// `reduce` over the splits' f32 partial sums.
    ///
    /// Only the batches in `range` run (the padding layer's last row of C:
    /// one batch of a [M, 1, K] view of A).
    fn gemv_dispatches(
        &self,
        (dtype, out_dtype): (DType, DType),
        shape: &MatmulShape,
        (a, b, c): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        epilogue: &Epilogue,
        scratch: &mut Vec<Tensor>,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<Dispatch>> {
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let (bias, residual) = self.epilogue_buffers(epilogue);
        let batches = range.len();
        let max = self.profile().max_workgroups_per_dim as usize;
        let device = &self.inner.device;
        let per_dispatch = batches.min(max);
        let dispatch_bases = range.clone().step_by(per_dispatch.max(1));
        let params = |splits: usize, k_chunk: usize, base: usize| {
            self.matmul_params(shape, base, epilogue.alpha, (k_chunk, splits))
        };
        let too_many = |groups: usize, what: &str| Error::LimitExceeded {
            limit: "max_compute_workgroups_per_dimension",
            requested: groups as u64,
            max: max as u64,
            what: what.to_string(),
        };
        let mut dispatches = Vec::new();
        if n == 1 {
            let groups = m.div_ceil(4);
            if groups > max {
                return Err(too_many(groups, "matrix-vector product along M"));
            }
            let pipeline = self.inner.pipelines.get(
                device,
                &epilogue.specialise(out_spec(Kernel::GemvMatvec, dtype, out_dtype)),
            )?;
            for base in dispatch_bases {
                let count = per_dispatch.min(range.end - base);
                let p = params(1, k, base);
                dispatches.push(Dispatch::with_bindings(
                    device,
                    pipeline.clone(),
                    &[(0, &p), (1, a), (2, b), (3, c), (5, bias), (6, residual)],
                    [groups as u32, 1, count as u32],
                ));
            }
            return Ok(dispatches);
        }
        // One dispatch, no partial sums, where N alone covers the compute
        // units and B's rows split into 16-byte words
        // (`WGTILE_GEMV_WIDE=0` turns it off, `=1` takes it whenever the
        // alignment allows, to compare).
        let (lanes, slices) = gemv_wide_shape();
        let wide_groups = n.div_ceil(lanes as usize * (16 / dtype.size()));
        let variant = gemv_variant(self.profile(), dtype, shape);
        if variant == GemvVariant::Wide {
            if wide_groups > max {
                return Err(too_many(wide_groups, "vector-matrix product along N"));
            }
            let mut spec = out_spec(Kernel::GemvVecmatWide, dtype, out_dtype)
                .constant("WIDE_HALF", u32::from(dtype == DType::F16));
            if (lanes, slices) != (4, 64) {
                spec = spec
                    .constant("WIDE_LANES", lanes)
                    .constant("WIDE_SLICES", slices);
            }
            let pipeline = self
                .inner
                .pipelines
                .get(device, &epilogue.specialise(spec))?;
            for base in dispatch_bases {
                let count = per_dispatch.min(range.end - base);
                let p = params(1, k, base);
                dispatches.push(Dispatch::with_bindings(
                    device,
                    pipeline.clone(),
                    &[(0, &p), (1, a), (8, b), (3, c), (5, bias), (6, residual)],
                    [wide_groups as u32, 1, count as u32],
                ));
            }
            return Ok(dispatches);
        }
        // Two adjacent columns per load where B's rows, batches and N keep
        // the pairs whole and aligned (`WGTILE_GEMV_PAIRS=0` turns it off, to
        // compare).
        let pairs = variant == GemvVariant::Split { pairs: true };
        let columns_per_group = if pairs { 256 } else { 128 };
        // Split K so the grid holds about four workgroups per compute unit,
        // keeping at least 64 rows of B per split.
        let col_groups = n.div_ceil(columns_per_group);
        if col_groups > max {
            return Err(too_many(col_groups, "vector-matrix product along N"));
        }
        let target = 4 * self.profile().compute_units.max(1) as usize;
        let wanted = target.div_ceil(col_groups * batches).max(1);
        let splits_max = k.div_ceil(64).clamp(1, max);
        let k_chunk = k.div_ceil(wanted.min(splits_max));
        let splits = k.div_ceil(k_chunk);
        // Indexed by the dispatch's own workgroup z: one dispatch's batches.
        let partials = self.alloc(
            &[per_dispatch, splits, n],
            DType::F32,
            "wgtile gemv partials",
        )?;
        let vecmat_kernel = if pairs {
            Kernel::GemvVecmatPairs
        } else {
            Kernel::GemvVecmat
        };
        let vecmat = self
            .inner
            .pipelines
            .get(device, &Spec::new(vecmat_kernel).dtype(dtype))?;
        let reduce = self.inner.pipelines.get(
            device,
            &epilogue.specialise(out_spec(Kernel::GemvReduce, dtype, out_dtype)),
        )?;
        for base in dispatch_bases {
            let count = per_dispatch.min(range.end - base) as u32;
            let p = params(splits, k_chunk, base);
            let b_binding = if pairs { (7, b) } else { (2, b) };
            dispatches.push(Dispatch::with_bindings(
                device,
                vecmat.clone(),
                &[(0, &p), (1, a), b_binding, (4, &partials.buffer)],
                [col_groups as u32, splits as u32, count],
            ));
            dispatches.push(Dispatch::with_bindings(
                device,
                reduce.clone(),
                &[
                    (0, &p),
                    (3, c),
                    (4, &partials.buffer),
                    (5, bias),
                    (6, residual),
                ],
                [n.div_ceil(256) as u32, 1, count],
            ));
        }
        scratch.push(partials);
        Ok(dispatches)
    }

    /// The padding layer's plan: copy A and B into zero-padded scratch
    /// buffers, run the aligned kernel, copy the result back into the output.
    fn padded_matmul_plan(
        &self,
        a: &Tensor,
        b: &Tensor,
        shape: &MatmulShape,
        pad: PadChoice,
        epilogue: &Epilogue,
        mut plan: Plan,
    ) -> Result<Plan> {
        let dtype = a.dtype();
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let (kp, np) = (pad.k, pad.n);
        // Each operand as a batch of matrices of its own (1-D operands promoted).
        let a_dims = matrix_dims(a.shape(), true);
        let b_dims = matrix_dims(b.shape(), false);
        let a_batch: usize = a_dims[..a_dims.len() - 2].iter().product();
        let b_batch: usize = b_dims[..b_dims.len() - 2].iter().product();
        let with_last_two = |dims: &[usize], r: usize, c: usize| {
            let mut d = dims.to_vec();
            let len = d.len();
            d[len - 2] = r;
            d[len - 1] = c;
            d
        };
        // A with rows of kp elements, B with rows of np (zero-filled past the
        // logical end), only where the row is not aligned already; both
        // copies in one dispatch where they can share it.
        let a_pad = (kp != k)
            .then(|| self.alloc(&with_last_two(&a_dims, m, kp), dtype, "wgtile pad A"))
            .transpose()?;
        // B's rows: K, or the padded K' where the kernel runs K' (its rows
        // past K zero, as A's columns past K are).
        let kk = if pad.full_k { kp } else { k };
        let b_pad = (np != n || kk != k)
            .then(|| self.alloc(&with_last_two(&b_dims, kk, np), dtype, "wgtile pad B"))
            .transpose()?;
        let mut copies = Vec::new();
        for (src, pad, from, to, batches, what) in [
            (
                a,
                &a_pad,
                (m, k),
                (m, kp),
                a_batch,
                "padded matmul operand A",
            ),
            (
                b,
                &b_pad,
                (k, n),
                (kk, np),
                b_batch,
                "padded matmul operand B",
            ),
        ] {
            if let Some(dst) = pad {
                u32_of(dst.numel(), what)?;
                copies.push(PadCopy {
                    src,
                    from,
                    dst,
                    to,
                    batches,
                });
            }
        }
        let mut dispatches = self.pad_copy_dispatches(&copies)?;
        let a_buf = a_pad.as_ref().map_or(&a.buffer, |t| &t.buffer).clone();
        let b_buf = b_pad.as_ref().map_or(&b.buffer, |t| &t.buffer).clone();
        let mut scratch: Vec<Tensor> = a_pad.into_iter().chain(b_pad).collect();
        // The kernel's logical N: rounded up when its stores need aligned rows
        // (the padded B columns are zero, and so are those columns of C).
        // With the last r rows apart it runs rows 0 .. M - r of C (A's rows
        // keep their pitch; C's rows, of N, are where they were).
        let kernel_n = if pad.crop { np } else { n };
        let kernel_m = m - pad.fringe_rows;
        let padded = MatmulShape::new(
            &with_last_two(&a_dims, kernel_m, kk),
            &with_last_two(&b_dims, kk, kernel_n),
        )?
        .with_pitches(kp, np)?;
        let batches = padded.batch_count();
        let c_pad = if pad.crop {
            let c = self.alloc(&[batches, m, np], dtype, "wgtile pad C")?;
            u32_of(c.numel(), "padded matmul output")?;
            Some(c)
        } else {
            None
        };
        let c_buf = c_pad.as_ref().map_or(&plan.output.buffer, |c| &c.buffer);
        dispatches.extend(self.matmul_dispatches(
            pad.kernel,
            (dtype, dtype),
            &padded,
            (&a_buf, &b_buf, c_buf),
            (epilogue, None),
            &mut scratch,
        )?);
        if let Some(c_pad) = c_pad {
            dispatches.extend(self.pad_copy_dispatches(&[PadCopy {
                src: &c_pad,
                from: (kernel_m, np),
                dst: &plan.output,
                to: (kernel_m, n),
                batches,
            }])?);
            scratch.push(c_pad);
        }
        if pad.fringe_rows > 0 {
            // The last rows: batches M - r .. M of A (pitch K') viewed as
            // [M, 1, K] times B (pitch N') on the GEMV kernels, which write
            // them straight into rows M - r .. M of C (batch z of [M, 1, N]
            // is row z; one matrix).
            let rows = MatmulShape::new(&[m, 1, k], &[k, n])?.with_pitches(kp, np)?;
            dispatches.extend(self.gemv_dispatches(
                (dtype, dtype),
                &rows,
                (&a_buf, &b_buf, &plan.output.buffer),
                epilogue,
                &mut scratch,
                kernel_m..m,
            )?);
        }
        plan.label = format!(
            "matmul {dtype} {m}x{n}x{k} x{batches}{}{}{}: {}",
            if pad.copies {
                format!(" rows padded to K = {kp}, N = {np}")
            } else {
                String::new()
            },
            if pad.crop { " (cropped)" } else { "" },
            match pad.fringe_rows {
                0 => String::new(),
                1 => ", last row as a GEMV".into(),
                r => format!(", last {r} rows as GEMVs"),
            },
            pad.kernel
        );
        plan.dispatches = dispatches;
        plan.scratch = scratch;
        Ok(plan)
    }
}

/// The shape of `a @ b` as `options` read the operands: transposes, and the
/// row pitch of tensors stored with padded rows (read in place).
fn operand_shape(a: &Tensor, b: &Tensor, options: &MatmulOptions) -> Result<MatmulShape> {
    let shape = MatmulShape::with_transposes(
        a.shape(),
        b.shape(),
        options.transpose_a,
        options.transpose_b,
    )?;
    if a.is_contiguous() && b.is_contiguous() {
        return Ok(shape);
    }
    let a_pitch = if a.is_contiguous() {
        shape.a_pitch
    } else {
        a.row_stride()
    };
    let b_pitch = if b.is_contiguous() {
        shape.b_pitch
    } else {
        b.row_stride()
    };
    shape.with_pitches(a_pitch, b_pitch)
}

/// `kernel` reading `dtype` operands and writing `out_dtype` results.
fn out_spec(kernel: Kernel, dtype: DType, out_dtype: DType) -> Spec {
    let spec = Spec::new(kernel).dtype(dtype);
    if out_dtype == dtype {
        spec
    } else {
        spec.output(out_dtype)
    }
}

/// Which GEMV kernels run a matrix-vector product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GemvVariant {
    /// N = 1: `matvec`.
    Matvec,
    /// M = 1 in one dispatch: `vecmat_wide`.
    Wide,
    /// M = 1 with K split over workgroups: `vecmat` or `vecmat_pairs`, then `reduce`.
    Split { pairs: bool },
}

/// The GEMV kernels for `shape` (M = 1 or N = 1): the one-dispatch kernel
/// when B's rows split into 16-byte words, N alone gives a workgroup per two
/// compute units, and the matrix is short and narrow (K <= 8192, rows of at
/// most 16 KiB); otherwise K is split, with column pairs where N and B's
/// strides are even. Measured on the H200 (session 3, GB/s, one dispatch /
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
fn gemv_wide_shape() -> (u32, u32) {
    crate::dev::overrides().gemv_wide_shape.unwrap_or((4, 64))
}

/// Whether the coop kernel stages transposed operands as stored and reads
/// them with the column-major cooperative load (the default: 240-248
/// TFLOP/s at 4096 on the H200) rather than scattering them into row-major
/// tiles (184 with B^T, 45-47 with A^T); docs/perf/matmul.md.
fn coop_colmajor() -> bool {
    crate::dev::overrides().coop_colmajor
}

/// The one-dispatch GEMV forced on or off; `None`: the dispatcher decides.
fn gemv_wide_mode() -> Option<bool> {
    crate::dev::overrides().gemv_wide
}

/// The vector-matrix kernel reads column pairs where aligned (on unless a
/// dev override turns it off for a comparison).
fn gemv_pairs_enabled() -> bool {
    crate::dev::overrides().gemv_pairs
}

/// `shape` as a batch of matrices: a 1-D operand becomes `[1, K]` on the left
/// (`lhs`) or `[K, 1]` on the right.
fn matrix_dims(shape: &[usize], lhs: bool) -> Vec<usize> {
    match (shape.len(), lhs) {
        (1, true) => vec![1, shape[0]],
        (1, false) => vec![shape[0], 1],
        _ => shape.to_vec(),
    }
}
