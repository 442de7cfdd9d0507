//! The GEMV (M = 1 or N = 1) dispatches and which GEMV kernels run.

use super::*;

impl Context {
    /// Matrix-vector dispatches: `matvec` for N = 1, otherwise (M = 1)
    /// `vecmat` with K split over enough workgroups to fill the GPU, then
    /// `reduce` over the splits' f32 partial sums.
    ///
    /// 2 <= M <= 8 (N and B's strides even): `vecmat_rows`, the K split
    /// and `reduce` of one row for every row of x. With `b_bf16`, B is bf16
    /// (read as u32 words of two) against f32 x (`dtype`), from one row on.
    ///
    /// Only the batches in `range` run (the padding layer's last row of C:
    /// one batch of a [M, 1, K] view of A).
    // Long on purpose: the four GEMV kernels (matvec, one-dispatch vecmat, split vecmat or its
    // rows variant, and their reduce) share the parameter block and the batch range.
    #[allow(clippy::too_many_arguments)] // the GEMV's common arguments, and B's dtype
    pub(crate) fn gemv_dispatches(
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
        // A bf16 B takes the one-dispatch kernel where an f16 one of its
        // bytes would (two bytes a value alike), the rows kernel elsewhere.
        let variant = if b_bf16 {
            match gemv_variant(self.profile(), DType::F16, shape) {
                GemvVariant::Wide => GemvVariant::Wide,
                _ => GemvVariant::Rows,
            }
        } else {
            gemv_variant(self.profile(), dtype, shape)
        };
        let b_size = if b_bf16 { 2 } else { dtype.size() };
        // One dispatch, no partial sums, where N alone covers the compute
        // units and B's rows split into 16-byte words
        // (`WGTILE_GEMV_WIDE=0` turns it off, `=1` takes it whenever the
        // alignment allows, to compare).
        let (lanes, slices) = gemv_wide_shape();
        let wide_groups = n.div_ceil(lanes as usize * (16 / b_size));
        if variant == GemvVariant::Wide {
            if wide_groups > max {
                return Err(too_many(wide_groups, "vector-matrix product along N"));
            }
            let mut spec = out_spec(Kernel::GemvVecmatWide, dtype, out_dtype)
                .constant("WIDE_HALF", crate::tune::wide_half(dtype, b_bf16));
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
        let rows = variant == GemvVariant::Rows;
        if rows {
            let transposed = shape.transpose_a || shape.transpose_b;
            let fit = if b_bf16 {
                crate::tune::gemv::gemv_bf16_fit(m, n, shape.b_pitch, transposed)
            } else {
                crate::tune::gemv::gemv_rows_fit(m, n, shape.b_pitch, transposed)
            };
            if !(fit && shape.b_strides.iter().all(|s| s.is_multiple_of(2))) {
                return Err(Error::InvalidArgument(format!(
                    "the GEMV of several rows takes 2 to 8 rows of x against a weight of even N and \
                     even strides, read in place; got M = {m}, N = {n}, B's pitch {}",
                    shape.b_pitch
                )));
            }
        }
        // Rows of C per batch the kernels write (vecmat and vecmat_pairs: one).
        let m_rows = if rows { m } else { 1 };
        let pairs = rows || variant == GemvVariant::Split { pairs: true };
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
            &[per_dispatch, m_rows, splits, n],
            DType::F32,
            "wgtile gemv partials",
        )?;
        let vecmat_spec = if rows {
            let spec = Spec::new(Kernel::GemvVecmatRows)
                .dtype(dtype)
                .constant("MR", u32_of(m, "rows")?);
            if b_bf16 { spec.constant("B_BF16", 1) } else { spec }
        } else if pairs {
            Spec::new(Kernel::GemvVecmatPairs).dtype(dtype)
        } else {
            Spec::new(Kernel::GemvVecmat).dtype(dtype)
        };
        let vecmat = self.inner.pipelines.get(device, &vecmat_spec)?;
        let reduce = self.inner.pipelines.get(
            device,
            &epilogue.specialise(out_spec(Kernel::GemvReduce, dtype, out_dtype)),
        )?;
        for base in dispatch_bases {
            let count = per_dispatch.min(range.end - base) as u32;
            let p = params(splits, k_chunk, base);
            // vecmat_rows reads B as pairs of its dtype or as bf16 words.
            let mut bindings = vec![(0, &p), (1, a), (4, &partials.buffer)];
            match (rows, pairs) {
                (true, _) => bindings.extend([(7, b), (9, b)]),
                (false, true) => bindings.push((7, b)),
                (false, false) => bindings.push((2, b)),
            }
            dispatches.push(Dispatch::with_bindings(
                device,
                vecmat.clone(),
                &bindings,
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
                [n.div_ceil(256) as u32, m_rows as u32, count],
            ));
        }
        scratch.push(partials);
        Ok(dispatches)
    }
}
