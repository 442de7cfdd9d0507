//! The GEMV (M = 1 or N = 1) dispatches and which GEMV kernels run.

use super::*;

impl Context {
    /// Matrix-vector dispatches: `matvec` for N = 1, otherwise (M = 1)
    /// `vecmat` with K split over enough workgroups to fill the GPU, then
    /// `reduce` over the splits' f32 partial sums.
    ///
    /// Only the batches in `range` run (the padding layer's last row of C:
    /// one batch of a [M, 1, K] view of A).
    // Long on purpose: the three GEMV kernels (matvec, one-dispatch vecmat, split vecmat and
    // its reduce) share the parameter block and the batch range.
    pub(crate) fn gemv_dispatches(
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
            self.matmul_params(shape, base, epilogue, (k_chunk, splits))
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
        let variant = gemv_variant(self.profile(), dtype, shape);
        if variant == GemvVariant::Rows {
            return self.gemv_rows_dispatches((dtype, out_dtype), shape, (a, b, c), epilogue, scratch, range, false);
        }
        // One dispatch, no partial sums, where N alone covers the compute
        // units and B's rows split into 16-byte words
        // (`WGTILE_GEMV_WIDE=0` turns it off, `=1` takes it whenever the
        // alignment allows, to compare).
        let (lanes, slices) = gemv_wide_shape();
        let wide_groups = n.div_ceil(lanes as usize * (16 / dtype.size()));
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

    /// `vecmat_rows` for 2 <= M <= 8 rows of x (N and B's pitch even), then
    /// `reduce` per row: K split as for one row, the partials `[count, M,
    /// splits, N]`. With `b_bf16`, B is bf16 (read as u32 words of two) and
    /// x f32 (`dtype`), from one row on.
    #[allow(clippy::too_many_arguments)] // the GEMV's common arguments, and B's dtype
    pub(crate) fn gemv_rows_dispatches(
        &self,
        (dtype, out_dtype): (DType, DType),
        shape: &MatmulShape,
        (a, b, c): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        epilogue: &Epilogue,
        scratch: &mut Vec<Tensor>,
        range: std::ops::Range<usize>,
        b_bf16: bool,
    ) -> Result<Vec<Dispatch>> {
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let even = |s: usize| s.is_multiple_of(2);
        let rows_fit = if b_bf16 {
            crate::tune::gemv::gemv_bf16_fit(m, n, shape.b_pitch, shape.transpose_a || shape.transpose_b)
        } else {
            crate::tune::gemv::gemv_rows_fit(m, n, shape.b_pitch, shape.transpose_a || shape.transpose_b)
        };
        if !(rows_fit && shape.b_strides.iter().all(|&s| even(s))) {
            return Err(Error::InvalidArgument(format!(
                "the GEMV of several rows takes 2 to 8 rows of x against a weight of even N and \
                 even strides, read in place; got M = {m}, N = {n}, B's pitch {}",
                shape.b_pitch
            )));
        }
        let (bias, residual) = self.epilogue_buffers(epilogue);
        let device = &self.inner.device;
        let max = self.profile().max_workgroups_per_dim as usize;
        let batches = range.len();
        let per_dispatch = batches.min(max);
        let col_groups = n.div_ceil(256);
        if col_groups > max {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: col_groups as u64,
                max: max as u64,
                what: "vector-matrix product along N".into(),
            });
        }
        // K split as for one row: about four workgroups per compute unit,
        // at least 64 rows of B per split.
        let target = 4 * self.profile().compute_units.max(1) as usize;
        let wanted = target.div_ceil(col_groups * batches).max(1);
        let k_chunk = k.div_ceil(wanted.min(k.div_ceil(64).clamp(1, max)));
        let splits = k.div_ceil(k_chunk);
        let partials = self.alloc(&[per_dispatch, m, splits, n], DType::F32, "wgtile gemv partials")?;
        let mut spec = Spec::new(Kernel::GemvVecmatRows)
            .dtype(dtype)
            .constant("MR", u32_of(m, "rows")?);
        if b_bf16 {
            spec = spec.constant("B_BF16", 1);
        }
        let vecmat = self.inner.pipelines.get(device, &spec)?;
        let reduce = self.inner.pipelines.get(
            device,
            &epilogue.specialise(out_spec(Kernel::GemvReduce, dtype, out_dtype)),
        )?;
        let mut dispatches = Vec::new();
        for base in range.clone().step_by(per_dispatch.max(1)) {
            let count = per_dispatch.min(range.end - base) as u32;
            let p = self.matmul_params(shape, base, epilogue, (k_chunk, splits));
            dispatches.push(Dispatch::with_bindings(
                device,
                vecmat.clone(),
                &[(0, &p), (1, a), (7, b), (9, b), (4, &partials.buffer)],
                [col_groups as u32, splits as u32, count],
            ));
            dispatches.push(Dispatch::with_bindings(
                device,
                reduce.clone(),
                &[(0, &p), (3, c), (4, &partials.buffer), (5, bias), (6, residual)],
                [n.div_ceil(256) as u32, m as u32, count],
            ));
        }
        scratch.push(partials);
        Ok(dispatches)
    }
}
