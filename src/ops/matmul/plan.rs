//! The matmul plan: operands checked, the output allocated, the route
//! (padded, tensor cores, the dispatcher's or the autotuner's kernel) taken.

use super::*;
use crate::tune::route::MatmulRoute;

impl Context {
    /// [`Context::matmul_plan`] with a fused [`Epilogue`].
    // Long on purpose: operand, output and epilogue checks in the order of their errors, then
    // the route (tune::route) and the plan; each step is a few lines.
    pub fn matmul_plan_with(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: Option<&Tensor>,
        options: &MatmulOptions,
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        // The exact GELU becomes a generated epilogue here, once.
        let resolved = epilogue.resolved();
        let epilogue = &resolved;
        let mut kernel = options.kernel;
        self.check_all_owned([Some(a), Some(b), out].into_iter().flatten(), "a matmul operand")?;
        if a.dtype() != b.dtype() {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                expected: a.dtype(),
                got: b.dtype(),
            });
        }
        let dtype = a.dtype();
        if dtype == DType::BF16 {
            return self.matmul_plan_bf16(a, b, out, options, epilogue);
        }
        if dtype == DType::F16 {
            self.require_f16("f16 matmul")?;
        }
        let shape = operand_shape(a, b, options)?;
        let padded_operands = !a.is_contiguous() || !b.is_contiguous();
        let transposed = shape.transpose_a || shape.transpose_b;
        let layout = tune::Layout::of(&shape);
        let out_dtype = options.out_dtype.unwrap_or(dtype);
        Error::require_float(out_dtype, "the matmul output dtype")?;
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
            gpu: self.inner.gpu.clone(),
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
                if let Some(why) = kernel.invalid_reason() {
                    return Err(Error::InvalidArgument(format!("forced matmul kernel: {why}")));
                }
                if matches!(kernel, MatmulKernel::Coop { .. }) && !tune::has_coop_f16(profile) {
                    return Err(Error::UnsupportedFeature {
                        feature: "EXPERIMENTAL_COOPERATIVE_MATRIX (16x16x16 f16 -> f32, one subgroup size)",
                        what: format!("matmul kernel {kernel}"),
                    });
                }
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
                         stored rows multiples of 8; gemv: M or N = 1, or M of 2 to 8 with N and B's rows even, row-major; transposed \
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
                let request = tune::route::RouteRequest {
                    dtype,
                    mnk: (m, n, k),
                    batches,
                    layout,
                    epilogue_reads_tensors: epilogue.reads_tensors(),
                    padded_operands,
                    mixed,
                    one_matrix: batches == 1 && a.shape().len() <= 2 && b.shape().len() <= 2,
                };
                match tune::route::matmul_route(profile, options, &request) {
                    MatmulRoute::Padded(pad) => {
                        return self.padded_matmul_plan(a, b, &shape, pad, epilogue, plan);
                    }
                    MatmulRoute::Kernel(kernel) => kernel,
                    MatmulRoute::Autotune(heuristic) => {
                        self.autotuned_kernel(dtype, &shape, a, b, heuristic)?
                    }
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
                GemvVariant::Rows => format!("{} rows at once, K split, column pairs", shape.m),
            };
            plan.label.push_str(&format!(" [{variant}]"));
        }
        if !epilogue.is_identity() {
            plan.label.push_str(" + epilogue");
        }
        Ok(plan)
    }
}
