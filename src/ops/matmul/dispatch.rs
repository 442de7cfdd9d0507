//! The dispatches of one matmul kernel on dense buffers: parameters,
//! epilogue buffers, the f32 split's maxima pass and its guarded fallback.

use super::*;

impl Context {
    /// The matmul dispatches of `kernel` on dense buffers of `shape`; scratch
    /// tensors they need are pushed to `scratch` (the plan keeps them alive).
    // Long on purpose: one arm per kernel family (naive, tiled, broadcast, coop and its f32
    // split, split-K, GEMV), each the family's grid and bindings over the same parameter and
    // epilogue buffers.
    pub(crate) fn matmul_dispatches(
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
                false,
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
            (Some(p), _) => Some(p.buffer()),
            (None, MatmulKernel::Tiled { .. }) => Some(&self.inner.dummy_rw),
            _ => None,
        };
        let mut spec = kernel.spec(dtype);
        let coop = matches!(kernel, MatmulKernel::Coop { .. });
        if coop && out_dtype == DType::BF16 {
            // bf16 out: two columns per word from an f32 epilogue.
            if !shape.n.is_multiple_of(2) {
                return Err(Error::InvalidArgument(format!(
                    "internal: {kernel} writes bf16 only for an even N (N = {n})"
                )));
            }
            spec = tune::coop_out_bf16(spec);
        } else if coop {
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
        // (run 114): 1024 / 2048 / 4096 30.7 / 61.4 / 71.6 ->
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
            let (maxima, passes) = self.split_scale_dispatches(shape, a, b, dtype == DType::BF16)?;
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
            let params = self.matmul_params(shape, base, epilogue, (k_chunk, splits));
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
        // The scaled bf16 form needs no fallback: infinities and NaN pass
        // through f16 as they do through f32.
        if let Some(maxima) = split_max.as_ref().filter(|_| dtype != DType::BF16) {
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
                let params = self.matmul_params(shape, base, epilogue, (k_chunk, splits));
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

    /// The f32 CUDA-core kernel's dispatches for what a split plan's kernel
    /// computes (same shape, buffers and epilogue), guarded by the flag the
    /// maxima pass sets in word 2 of `maxima` when an operand holds an
    /// infinity or NaN: the split cannot carry those (an infinity's halves
    /// are inf and inf - inf, so its products come out NaN), the f32
    /// kernels give IEEE's answer. Unflagged, each workgroup returns at once.
    pub(crate) fn split_fallback_dispatches(
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
        // The guard is in the tiled kernels with 8x8 register tiles:
        // anything else the f32 dispatcher might pick (split-K, naive, the
        // 16x16 CPU tiles) becomes the scalar tiled kernel, which takes
        // every layout.
        let kernel = match kernel {
            MatmulKernel::Tiled { tile, .. } if tile.reg != 16 && kernel.fits(profile) => kernel,
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
    pub(crate) fn split_scale_dispatches(
        &self,
        shape: &MatmulShape,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        bf16: bool,
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
            .get(device, &tune::split_scale_spec(bf16))?;
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
    pub(crate) fn matmul_params(
        &self,
        shape: &MatmulShape,
        base: usize,
        epilogue: &Epilogue,
        (k_chunk, splits): (usize, usize),
    ) -> wgpu::Buffer {
        let [a_rs, a_cs, b_rs, b_cs] = shape.operand_strides();
        let alpha = epilogue.alpha;
        let mut epi_k = [0u32; EPILOGUE_DATA_CONSTANTS];
        for (slot, c) in epi_k.iter_mut().zip(epilogue.data_constants()) {
            *slot = c.to_bits();
        }
        let mut words = vec![
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
        ];
        words.extend(epi_k);
        self.uniform(&words)
    }

    /// The buffers bound for the epilogue's bias and residual: the tensors,
    /// or the context's dummy buffer for a term that is off.
    pub(crate) fn epilogue_buffers<'e>(
        &'e self,
        epilogue: &'e Epilogue,
    ) -> (&'e wgpu::Buffer, &'e wgpu::Buffer) {
        let dummy = &self.inner.dummy;
        (
            epilogue.bias.as_ref().map_or(dummy, |t| t.buffer()),
            epilogue.residual.as_ref().map_or(dummy, |t| t.buffer()),
        )
    }
}

/// Whether the coop kernel stages transposed operands as stored and reads
/// them with the column-major cooperative load (the default: 240-248
/// TFLOP/s at 4096 on the H200) rather than scattering them into row-major
/// tiles (184 with B^T, 45-47 with A^T); docs/perf/matmul.md.
pub(crate) fn coop_colmajor() -> bool {
    crate::dev::overrides().coop_colmajor
}
