//! The matmul route for a problem the caller left to the dispatcher: the
//! padding layer (copies, the last rows apart), the tensor cores for f32
//! (split into halves or rounded), or a kernel on the raw shape, from the
//! dispatcher or the autotuner. Decides only; `ops::matmul` builds the plan.

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::problem::Padding;
use crate::tune::pad::{self, PadChoice};
use crate::tune::{self, Layout, MatmulKernel};

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
    /// kernels' (H200, runs 78-85: max |error| 5.6e-5 against 2.2e-4 at
    /// 4096^3 for values in [-1, 1]), and 2-2.5x faster from 1024^3 on (70
    /// against 33 TFLOP/s at 4096^3). `None` (the default): the dispatcher
    /// takes it on adapters with tensor cores for problems of at least
    /// `crate::tune::COOP_SPLIT_MIN_MACS` multiply-adds with K >=
    /// `crate::tune::COOP_SPLIT_MIN_K` whose result is f32; `Some(true)`:
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
    /// (`crate::tune::pad::fringe_rows`); `Some(0)` never; `Some(r)` forces r
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
    profile: &AdapterProfile,
    options: &MatmulOptions,
    (m, n, k): (usize, usize, usize),
    batches: usize,
    layout: Layout,
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

/// What the plan needs to know of a problem to route it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RouteRequest {
    pub(crate) dtype: DType,
    pub(crate) mnk: (usize, usize, usize),
    pub(crate) batches: usize,
    pub(crate) layout: Layout,
    /// The epilogue reads a bias or residual tensor.
    pub(crate) epilogue_reads_tensors: bool,
    /// An operand is stored with padded rows (read in place).
    pub(crate) padded_operands: bool,
    /// The result's dtype differs from the operands'.
    pub(crate) mixed: bool,
    /// One matrix of at most two dimensions on each side.
    pub(crate) one_matrix: bool,
}

/// How a plan runs the problem.
#[derive(Clone, Debug)]
pub(crate) enum MatmulRoute {
    /// Through the padding layer.
    Padded(PadChoice),
    /// This kernel on the raw shape.
    Kernel(MatmulKernel),
    /// The autotuner's pick, the dispatcher's kernel first.
    Autotune(MatmulKernel),
}

/// The route of `r` under `options` (whose `kernel` is `None`).
pub(crate) fn matmul_route(
    p: &AdapterProfile,
    options: &MatmulOptions,
    r: &RouteRequest,
) -> MatmulRoute {
    let (m, n, k) = r.mnk;
    let (dtype, batches, layout) = (r.dtype, r.batches, r.layout);
    // The padded kernel would index bias and residual with padded columns:
    // epilogues that read tensors run the raw shape. The padding copies are
    // row-major: transposed operands run as stored, and so do operands the
    // caller padded already. f32 on tensor cores: split into halves by
    // default on large shapes (padded like the other kernels), rounded to
    // f16 when asked (the opt-in reduced form runs the shape as it is).
    let tensor_cores = (dtype == DType::F32)
        .then(|| f32_on_tensor_cores(p, options, (m, n, k), batches, layout, r.mixed))
        .flatten();
    let rounded = matches!(tensor_cores, Some(MatmulKernel::Coop { split: false, .. }));
    let padding = if r.epilogue_reads_tensors
        || layout.transposed()
        || r.padded_operands
        || rounded
        || r.mixed
    {
        Padding::Never
    } else {
        options.padding
    };
    let raw =
        || tensor_cores.unwrap_or_else(|| tune::choose_matmul(p, dtype, m, n, k, batches).kernel);
    // `fringe_rows: Some(r)` also takes rows apart where nothing is padded
    // (the raw kernel on the rows before them).
    let forced_split = || match options.fringe_rows {
        Some(rows) if padding != Padding::Never && rows > 0 => {
            Some(PadChoice::split_only(raw(), k, n, rows))
        }
        _ => None,
    };
    let choice = (padding != Padding::Never)
        .then(|| pad::choose_for(p, raw(), dtype, (m, n, k), batches, padding))
        .flatten();
    if let Some(mut pad) = choice.or_else(forced_split) {
        pad.fringe_rows = if r.one_matrix {
            options.fringe_rows.unwrap_or(pad.fringe_rows).min(m - 1)
        } else {
            0
        };
        // The rows apart alone, turned off: nothing left to do apart, the
        // plain plan below.
        if pad.copies || pad.fringe_rows > 0 {
            return MatmulRoute::Padded(pad);
        }
    }
    if let Some(kernel) = tensor_cores {
        // f32 on tensor cores: rounded to f16 by request (reduced
        // precision), else split into halves.
        MatmulRoute::Kernel(kernel)
    } else if r.padded_operands || r.mixed {
        // The autotuner's keys cover dense operands (row-major or
        // transposed) of one dtype.
        MatmulRoute::Kernel(tune::choose_matmul_layout(p, dtype, (m, n, k), batches, layout).kernel)
    } else {
        MatmulRoute::Autotune(
            tune::choose_matmul_layout(p, dtype, (m, n, k), batches, layout).kernel,
        )
    }
}
