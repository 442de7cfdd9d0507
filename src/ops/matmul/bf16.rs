//! bf16 matmul. WGSL has no bf16 arithmetic and the tensor cores take f16.
//! A few rows of x read a bf16 weight in place (the GEMV). Where the f16
//! dispatcher takes the tensor cores, their kernel reads the bf16 operands
//! in place and narrows them to f16 in its put, after a check pass (the
//! range test of `shaders/cast.wgsl`), or for large products
//! (`tune::bf16_staged`) reads f16 copies that a cast running the same test
//! writes: values f16 holds convert exactly, the few below 2^-17 that bf16
//! as models hold it has move by at most 2^-24 (f16's subnormal step);
//! where a finite value is beyond f16's range, or an operand has such small
//! values and nothing of 2^-10 or more, the f32 plan runs on f32 copies
//! instead. Everything else runs on f32 copies, exact. Bias and residual
//! are staged to f32; a bf16 result is rounded from the f32 one (nearest
//! even), by the tensor-core kernel itself where N is even.

use super::*;

impl Epilogue {
    /// The same epilogue reading `bias` and `residual` instead.
    fn with_tensors(&self, bias: Option<Tensor>, residual: Option<Tensor>) -> Epilogue {
        Epilogue {
            bias,
            residual,
            ..self.clone()
        }
    }
}

impl Context {
    #[cfg(not(target_arch = "wasm32"))]
    /// The bf16 matmul's check pass alone: whether the range test of `a`
    /// and `b` (bf16) arms the f32 fallback (a finite value beyond f16's
    /// range, or a value f16 cannot hold in an operand with nothing of
    /// 2^-10 or more), as the arm pass decides it. For tests: the pass runs
    /// on any adapter, the tensor-core kernel it guards only where there
    /// are tensor cores.
    #[doc(hidden)]
    pub fn bf16_check_pass(&self, a: &Tensor, b: &Tensor) -> Result<bool> {
        for t in [a, b] {
            self.check_operand(t, DType::BF16, "the bf16 check pass")?;
        }
        self.arms_fallback(2, |flag| {
            Ok((self.check_f16_dispatch((a, b), flag)?.into_iter().collect(), Vec::new()))
        })
    }

    /// The f32 fallback of a bf16 product: f32 copies of `a` and `b` and
    /// the f32 CUDA-core kernels' plan on them writing `output`, to be made
    /// conditional by the caller. The copies and the plan's scratch go to
    /// `scratch`.
    fn bf16_fallback(
        &self,
        (a, b): (&Tensor, &Tensor),
        options: &MatmulOptions,
        epilogue: &Epilogue,
        output: &Tensor,
        scratch: &mut Vec<Tensor>,
    ) -> Result<Vec<Dispatch>> {
        let mut dispatches = Vec::new();
        let mut wide = Vec::new();
        for t in [a, b] {
            let w = self.alloc(t.shape(), DType::F32, "wgtile bf16 fallback")?;
            dispatches.extend(self.cast_dispatch(t, &w)?);
            wide.push(w);
        }
        // The f32 CUDA-core kernels on the raw shape: one dispatch where the
        // split form has four (fill, scale pass, kernel, guarded recompute)
        // and padding would add copies, each costing about 3.7 us when the
        // range test passes and it runs empty (H200, run 169). The fallback
        // itself runs only on data f16 cannot hold.
        let inner = MatmulOptions {
            out_dtype: Some(DType::F32),
            split_f32: Some(false),
            padding: crate::Padding::Never,
            fringe_rows: Some(0),
            ..*options
        };
        let plan = self.matmul_plan_with(&wide[0], &wide[1], Some(output), &inner, epilogue)?;
        dispatches.extend(plan.dispatches);
        scratch.extend(plan.scratch);
        scratch.extend(wide);
        Ok(dispatches)
    }

    /// The tensor-core kernel the f16 route would take for this product,
    /// if it takes one (then it reads the bf16 operands directly).
    fn bf16_coop_kernel(
        &self,
        a: &Tensor,
        b: &Tensor,
        shape: &MatmulShape,
        options: &MatmulOptions,
        epilogue: &Epilogue,
    ) -> Option<MatmulKernel> {
        let batches = shape.batch_count();
        let request = tune::route::RouteRequest {
            dtype: DType::F16,
            mnk: (shape.m, shape.n, shape.k),
            batches,
            layout: tune::Layout::of(shape),
            epilogue_reads_tensors: epilogue.reads_tensors(),
            padded_operands: !a.is_contiguous() || !b.is_contiguous(),
            mixed: true,
            one_matrix: batches == 1 && a.shape().len() <= 2 && b.shape().len() <= 2,
        };
        if shape.m == 0 || shape.n == 0 || shape.k == 0 || batches == 0 {
            return None;
        }
        match tune::route::matmul_route(self.profile(), options, &request) {
            tune::route::MatmulRoute::Kernel(k @ MatmulKernel::Coop { split: false, .. }) => Some(k),
            _ => None,
        }
    }

    /// The tensor cores on bf16 `a` and `b` in place (narrowed to f16 in
    /// the kernel's put) after a check pass over both, or staged to f16
    /// copies by the checked cast (large products): where the range test
    /// fails the f32 plan on f32 copies runs instead; `scaled`: each
    /// operand times its power of two before the narrowing (`BF16_SCALED`
    /// in `shaders/matmul_coop.wgsl`: a scale pass first, no check, no
    /// fallback). The output (`out`, or a new tensor) is `out_dtype`: bf16
    /// written by the kernel itself where N is even (the fallback's f32
    /// result rounded after it), else f32.
    #[allow(clippy::too_many_arguments)] // the product, its options and the form
    fn bf16_coop_plan(
        &self,
        kernel: MatmulKernel,
        (a, b): (&Tensor, &Tensor),
        shape: &MatmulShape,
        options: &MatmulOptions,
        epilogue: &Epilogue,
        (out, out_dtype): (Option<&Tensor>, DType),
        scaled: bool,
    ) -> Result<Plan> {
        for (numel, what) in [
            (a.storage_len(), "matmul operand A"),
            (b.storage_len(), "matmul operand B"),
            (shape.out_shape.iter().product(), "matmul output"),
        ] {
            u32_of(numel, what)?;
        }
        let out_dtype = if out_dtype == DType::BF16 && bf16_out_fits(shape) {
            DType::BF16
        } else {
            DType::F32
        };
        let output = match out.filter(|o| o.dtype() == out_dtype) {
            Some(o) => o.clone(),
            None => self.alloc(&shape.out_shape, out_dtype, "wgtile matmul out")?,
        };
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let bytes = a.size_bytes()
            + b.size_bytes()
            + output.size_bytes()
            + [epilogue.bias.as_ref(), epilogue.residual.as_ref()]
                .into_iter()
                .flatten()
                .map(|t| t.size_bytes())
                .sum::<u64>();
        let mut scratch = Vec::new();
        // Scaled: the scale pass and the kernel (the split form's path,
        // bf16). Else the check pass first and the armed fallback after.
        // Staged (large products, tune::bf16_staged): the checked cast
        // writes f16 copies and the f16 kernel reads them, in place of the
        // check pass and the kernel narrowing bf16 in its put.
        let kernel = if scaled { kernel.with_split(true) } else { kernel };
        let staged = !scaled
            && crate::dev::overrides()
                .bf16_staged
                .unwrap_or_else(|| tune::bf16_staged(shape.m, shape.n));
        let mut dispatches = Vec::new();
        let mut halves = Vec::new();
        let flag = if scaled {
            None
        } else {
            let (f, clear) = self.range_flag()?;
            dispatches.push(clear);
            if staged {
                let (casts, h) = self.checked_halves(&[a, b], &f)?;
                dispatches.extend(casts);
                halves = h;
            } else {
                dispatches.extend(self.check_f16_dispatch((a, b), &f)?);
            }
            Some(f)
        };
        // The kernel reads the f16 copies, or bf16 in place.
        let (in_dtype, read_shape, (ka, kb)) = match halves.as_slice() {
            [ha, hb] => (DType::F16, operand_shape(ha, hb, options)?, (ha, hb)),
            _ => (DType::BF16, shape.clone(), (a, b)),
        };
        let kernel_dispatches = self.matmul_dispatches(
            kernel,
            (in_dtype, out_dtype),
            &read_shape,
            (&ka.buffer, &kb.buffer, &output.buffer),
            (epilogue, None),
            &mut scratch,
        )?;
        scratch.extend(halves);
        match &flag {
            // The f16 kernel where the range test passes, else the f32
            // fallback: one of the two runs.
            Some(f) => {
                let fallback = if out_dtype == DType::BF16 {
                    let wide = self.alloc(&shape.out_shape, DType::F32, "wgtile bf16 fallback")?;
                    let mut fallback = self.bf16_fallback((a, b), options, epilogue, &wide, &mut scratch)?;
                    fallback.extend(self.cast_dispatch(&wide, &output)?);
                    scratch.push(wide);
                    fallback
                } else {
                    self.bf16_fallback((a, b), options, epilogue, &output, &mut scratch)?
                };
                dispatches.extend(self.armed_either((f, 2), kernel_dispatches, fallback)?);
            }
            None => dispatches.extend(kernel_dispatches),
        }
        let how = if scaled {
            "bf16 read by the tensor cores; each operand scaled by a power of two"
        } else if staged {
            "bf16 staged to f16 by the checked cast; the f32 plan instead where the range test fails"
        } else {
            "bf16 read by the tensor cores; the f32 plan instead where the range test fails"
        };
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!(
                "matmul bf16 {m}x{n}x{k} x{} {kernel} [{how}]",
                shape.batch_count()
            ),
            dispatches,
            flops: shape.flops(),
            bytes,
            output,
            scratch,
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// The scaled form's first pass alone on bf16 `a` and `b` as `options`
    /// read them (transposes, padded rows, batches): the largest finite |A|
    /// and |B| over their logical elements and whether either holds an
    /// infinity or NaN. For tests: the pass runs on any adapter, the kernel
    /// it scales for only on tensor cores.
    #[doc(hidden)]
    pub fn bf16_scale_maxima(&self, a: &Tensor, b: &Tensor, options: &MatmulOptions) -> Result<([f32; 2], bool)> {
        for t in [a, b] {
            self.check_operand(t, DType::BF16, "bf16_scale_maxima")?;
        }
        let shape = operand_shape(a, b, options)?;
        let (maxima, passes) = self.split_scale_dispatches(&shape, &a.buffer, &b.buffer, true)?;
        self.run_dispatches("bf16 scale pass", &passes)?;
        let words = maxima.to_vec_blocking::<f32>()?;
        Ok(([words[0], words[1]], words[2].to_bits() != 0))
    }

    /// The bf16 product of `a @ b` on the tensor cores in the scaled form
    /// (each operand times its power of two before the narrowing to f16;
    /// no check, no fallback) with an f32 output, whatever the dev switch
    /// says: for tests and measurements. Refused where the f16 dispatcher
    /// keeps the product off the tensor cores.
    #[doc(hidden)]
    pub fn matmul_bf16_scaled_plan(&self, a: &Tensor, b: &Tensor) -> Result<Plan> {
        for t in [a, b] {
            self.check_operand(t, DType::BF16, "matmul_bf16_scaled_plan")?;
        }
        let options = MatmulOptions::default();
        let shape = operand_shape(a, b, &options)?;
        let epilogue = Epilogue::default();
        let kernel = self.bf16_coop_kernel(a, b, &shape, &options, &epilogue).ok_or_else(|| {
            Error::UnsupportedFeature {
                feature: "cooperative matrices (f16 tensor cores)",
                what: "matmul_bf16_scaled_plan (or the f16 dispatcher keeps this product off them)".into(),
            }
        })?;
        self.bf16_coop_plan(kernel, (a, b), &shape, &options, &epilogue, (None, DType::F32), true)
    }

    /// Whether a bf16 product runs on the GEMV of a few rows with the
    /// weight read in place: 1 to 8 rows of x, N and B's strides even, no
    /// transposes, nothing empty.
    fn bf16_gemv_fits(&self, shape: &MatmulShape) -> bool {
        shape.k > 0
            && shape.batch_count() > 0
            && tune::gemv::gemv_bf16_fit(shape.m, shape.n, shape.b_pitch, shape.transpose_a || shape.transpose_b)
            && shape.b_strides.iter().all(|s| s.is_multiple_of(2))
            && MatmulKernel::Gemv.fits(self.profile())
    }

    /// x (bf16, a few rows) staged to f32 and the GEMV of rows reading the
    /// bf16 weight `b` in place: the staging (to run first) and the plan,
    /// f32 out. Staging the whole weight to f16 first cost 4.9x the f16
    /// GEMV on the H200 (run 158: 181.9 us against 37.1 at 4096 x 14336).
    fn bf16_gemv_plan(
        &self,
        (a, b): (&Tensor, &Tensor),
        shape: &MatmulShape,
        options: &MatmulOptions,
        epilogue: &Epilogue,
        out: Option<&Tensor>,
    ) -> Result<(crate::runtime::Staged, Plan)> {
        let staged = self.stage_bf16(&[a], DType::F32)?;
        let x = staged.tensors[0].clone();
        let gshape = operand_shape(&x, b, options)?;
        let output = match out {
            Some(o) => o.clone(),
            None => self.alloc(&gshape.out_shape, DType::F32, "wgtile matmul out")?,
        };
        let mut scratch = Vec::new();
        let dispatches = self.gemv_dispatches(
            (DType::F32, DType::F32),
            &gshape,
            (&x.buffer, &b.buffer, &output.buffer),
            epilogue,
            &mut scratch,
            0..gshape.batch_count(),
            true,
        )?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let extras: u64 = [epilogue.bias.as_ref(), epilogue.residual.as_ref()]
            .into_iter()
            .flatten()
            .map(|t| t.size_bytes())
            .sum();
        let plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!(
                "matmul bf16 {m}x{n}x{k} x{} gemv ({}, the bf16 weight read in place)",
                shape.batch_count(),
                if m == 1 { "one row".to_string() } else { format!("{m} rows at once") }
            ),
            dispatches,
            flops: gshape.flops(),
            bytes: x.size_bytes() + b.size_bytes() + output.size_bytes() + extras,
            output,
            scratch,
        };
        Ok((staged, plan))
    }

    /// [`Context::matmul_plan_with`] for bf16 operands (checked to be on
    /// this device and of one dtype).
    // Long on purpose: the staging, the plan on the staged operands, the
    // armed fallback and the rounding, in run order.
    pub(crate) fn matmul_plan_bf16(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: Option<&Tensor>,
        options: &MatmulOptions,
        epilogue: &Epilogue,
    ) -> Result<Plan> {
        let out_dtype = options.out_dtype.unwrap_or(DType::BF16);
        Error::require_float(out_dtype, "the matmul output dtype")?;
        if out_dtype == DType::F16 {
            return Err(Error::DTypeMismatch {
                op: "a bf16 matmul's output (bf16 or f32)",
                expected: DType::BF16,
                got: DType::F16,
            });
        }
        let shape = operand_shape(a, b, options)?;
        if let Some(o) = out {
            self.check_owned(o, "the matmul output")?;
            o.require_contiguous("the matmul output")?;
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
            let inputs = [Some(a), Some(b), epilogue.bias.as_ref(), epilogue.residual.as_ref()];
            if inputs.into_iter().flatten().any(|t| Arc::ptr_eq(&t.buffer, &o.buffer)) {
                return Err(Error::InvalidArgument(
                    "the matmul output must not share its buffer with an input".into(),
                ));
            }
        }
        for (t, what) in [
            (epilogue.bias.as_ref(), "matmul bias"),
            (epilogue.residual.as_ref(), "matmul residual"),
        ] {
            if let Some(t) = t {
                self.check_operand(t, DType::BF16, what)?;
            }
        }
        // The tensor cores where the f16 dispatcher takes them, unless a
        // kernel is forced: that one runs on f32 copies.
        let via_f16 = options.kernel.is_none() && self.inner.gpu.require_f16("").is_ok();
        let extras: Vec<&Tensor> = [epilogue.bias.as_ref(), epilogue.residual.as_ref()]
            .into_iter()
            .flatten()
            .collect();
        let wide_extras = self.stage_bf16(&extras, DType::F32)?;
        let mut staged_extras = wide_extras.tensors.iter().cloned();
        let inner_epilogue = epilogue.with_tensors(
            epilogue.bias.as_ref().and_then(|_| staged_extras.next()),
            epilogue.residual.as_ref().and_then(|_| staged_extras.next()),
        );
        let inner_options = MatmulOptions {
            out_dtype: Some(DType::F32),
            ..*options
        };
        let inner_out = out.filter(|_| out_dtype == DType::F32);
        // Every route ends alike: the staging of its operands (`staged`,
        // of `originals`) and of the epilogue's tensors run first, the
        // result rounded to bf16 unless f32 was asked for.
        let finish = |mut staged: crate::runtime::Staged, originals: &[&Tensor], plan: Plan| {
            let mut all_originals = originals.to_vec();
            all_originals.extend(&extras);
            staged.tensors.extend(wide_extras.tensors);
            staged.dispatches.extend(wide_extras.dispatches);
            staged.scratch.extend(wide_extras.scratch);
            let plan = staged.before(plan, &all_originals);
            if out_dtype == DType::BF16 {
                self.round_output_bf16(plan, out)
            } else {
                Ok(plan)
            }
        };
        if options.kernel.is_none() && self.bf16_gemv_fits(&shape) {
            let (staged, plan) = self.bf16_gemv_plan((a, b), &shape, options, &inner_epilogue, inner_out)?;
            return finish(staged, &[a], plan);
        }
        let operands = [a, b];
        if via_f16
            && let Some(kernel) = self.bf16_coop_kernel(a, b, &shape, options, epilogue)
        {
            let scaled = crate::dev::overrides().bf16_scaled;
            let plan = self.bf16_coop_plan(
                kernel,
                (a, b),
                &shape,
                options,
                &inner_epilogue,
                (out, out_dtype),
                scaled,
            )?;
            // Nothing staged before the plan (its own check or casts run in it).
            let unstaged = crate::runtime::Staged {
                tensors: vec![a.clone(), b.clone()],
                dispatches: Vec::new(),
                scratch: Vec::new(),
            };
            return finish(unstaged, &operands, plan);
        }
        // Elsewhere f32 copies and the f32 kernels: exact, with no check and
        // no fallback.
        let staged = self.stage_bf16(&operands, DType::F32)?;
        let mut plan = self.matmul_plan_with(
            &staged.tensors[0],
            &staged.tensors[1],
            inner_out,
            &inner_options,
            &inner_epilogue,
        )?;
        plan.label.push_str(" [bf16 staged to f32]");
        plan.label = plan.label.replacen("matmul f16", "matmul bf16", 1).replacen("matmul f32", "matmul bf16", 1);
        finish(staged, &operands, plan)
    }
}

/// Whether the tensor-core kernel writes a bf16 result itself: two columns
/// per word, so N even (then every row starts on a word).
fn bf16_out_fits(shape: &MatmulShape) -> bool {
    shape.n.is_multiple_of(2)
}
