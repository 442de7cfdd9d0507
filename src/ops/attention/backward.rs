//! The attention backward by recomputation (FlashAttention-2): the
//! prepare pass, dK/dV and dQ, on tensor cores where they run.

use super::*;

impl Context {
    /// FlashAttention-2 backward with recomputation: given the forward's
    /// inputs, its output `o`, the upstream gradient `d_o` (shaped like `o`)
    /// and the forward's logsumexp `lse` (`[B, Hq, Sq]` f32, from
    /// [`AttentionOptions::with_lse`]), returns dq, dk, dv. The options must
    /// be the forward's (masks, window, soft-cap, scale, layout). Never stores
    /// an Sq x Sk matrix. D and Dv up to 256.
    ///
    /// bf16 q, k, v, o and d_o (and mask; `lse` stays f32) are staged to f32
    /// (exact), run through the f32 kernels, and dq, dk and dv come back in
    /// bf16, rounded to nearest even. Any other mix of dtypes is
    /// [`Error::DTypeMismatch`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        d_o: &Tensor,
        lse: &Tensor,
        options: &AttentionOptions,
    ) -> Result<AttentionGrads> {
        let (plan, grads) = self.attention_backward_plan(q, k, v, o, d_o, lse, options)?;
        plan.run()?;
        Ok(grads)
    }

    /// The [`Plan`] of [`Context::attention_backward`] (its output is dq).
    #[allow(clippy::too_many_arguments)]
    // Long on purpose: every check of the backward's extra inputs (o, d_o, lse) against the
    // forward's shapes, then the prepare, dK/dV and dQ launches in run order; the tensor-core
    // choice is apart (backward_coop_choice).
    pub fn attention_backward_plan(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        d_o: &Tensor,
        lse: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionGrads)> {
        let op = "attention backward";
        options.check_forced()?;
        for t in [q, k, v, o, d_o, lse] {
            self.check_owned(t, "an attention backward operand")?;
            t.require_contiguous(op)?;
        }
        if let Some(mask) = &options.mask {
            mask.tensor().require_contiguous("an attention mask")?;
        }
        if q.dtype() == DType::BF16 {
            return self.attention_backward_bf16([q, k, v, o, d_o], lse, options);
        }
        let (hq, hkv) = match options.layout {
            AttentionLayout::Packed { q_heads, kv_heads } => (q_heads, kv_heads),
            AttentionLayout::HeadsFirst => (0, 0),
        };
        let qo = operand(q, options.layout, hq, "q")?;
        let ko = operand(k, options.layout, hkv, "k")?;
        let vo = operand(v, options.layout, hkv, "v")?;
        options.check_head_dims(qo.dim, ko.dim, vo.dim)?;
        let Setup {
            dtype,
            dims: [b, hq, hkv, sq, sk, d, dv],
            o_shape,
            words,
            mask_buf,
            kv_len,
            dummy,
            flops,
        } = self.attention_setup(&qo, &ko, &vo, options)?;
        for (t, what) in [(o, "o"), (d_o, "d_o")] {
            if t.dtype() != dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    expected: dtype,
                    got: t.dtype(),
                });
            }
            if t.shape() != o_shape.as_slice() {
                return Err(Error::shape(
                    op,
                    t.shape(),
                    &o_shape,
                    format!("{what} must have the forward output's shape"),
                ));
            }
        }
        if lse.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                op,
                expected: DType::F32,
                got: lse.dtype(),
            });
        }
        if lse.shape() != [b, hq, sq] {
            return Err(Error::shape(
                op,
                lse.shape(),
                &[b, hq, sq],
                "lse must be [B, Hq, Sq] as the forward returned it",
            ));
        }
        if d.max(dv) > MAX_BACKWARD_DIM {
            return Err(Error::InvalidArgument(format!(
                "attention backward supports head dims up to {MAX_BACKWARD_DIM}, got D = {d}, Dv = {dv}"
            )));
        }
        let profile = self.profile();
        if profile.max_storage_buffers_per_stage < 9 {
            return Err(Error::LimitExceeded {
                limit: "max_storage_buffers_per_shader_stage",
                requested: 9,
                max: u64::from(profile.max_storage_buffers_per_stage),
                what: "the attention backward dK/dV kernel".into(),
            });
        }
        let dq = self.alloc(q.shape(), dtype, "wgtile attention dq")?;
        let dk = self.alloc(k.shape(), dtype, "wgtile attention dk")?;
        let dv_t = self.alloc(v.shape(), dtype, "wgtile attention dv")?;
        let grads = AttentionGrads {
            dq: dq.clone(),
            dk: dk.clone(),
            dv: dv_t.clone(),
        };
        let rows = b * hq * sq;
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: String::new(),
            dispatches: Vec::new(),
            output: dq.clone(),
            flops: flops * 5 / 2,
            bytes: (q.numel() + k.numel() + v.numel() + 2 * o.numel()) as u64
                * 2
                * dtype.size() as u64
                + lse.size_bytes(),
            scratch: Vec::new(),
        };
        let stats = self.alloc(&[2, rows.max(1)], DType::F32, "wgtile attention bwd stats")?;
        let mut words = words;
        words.extend([0, 1, 0]);
        let params = self.uniform(&words);
        // The two kernels (dK/dV per key block, dQ per query block): their
        // specialisations, rows per workgroup, bindings beyond the shared
        // ones, and the plan's label; tensor cores or scalar.
        let coop = self.backward_coop_choice([&qo, &ko, &vo], options, dtype)?;
        let (specs, [kv_rows, q_rows], label) = if let Some(([kv_t, q_t], emulated)) = coop {
            let sg = if emulated {
                16
            } else {
                profile.subgroup_max_size
            };
            // The subgroup barrier on NVIDIA only: naga emits it with
            // subgroup-memory semantics, which the Vulkan memory model does
            // not extend to workgroup memory; NVIDIA's warps order their own
            // shared-memory accesses at it (tested on the H200), other
            // drivers may not. `WGTILE_SUB_BARRIER=0` keeps workgroup
            // barriers everywhere, to measure.
            let sub_barrier = profile.subgroup_barrier
                && profile.vendor == 0x10de
                && crate::dev::overrides().sub_barrier;
            // Timing probe (wrong results when set; 0 otherwise).
            let probe = crate::dev::overrides().coop_bwd_probe;
            let tiles = if kv_t == q_t {
                kv_t.to_string()
            } else {
                format!("dK/dV {kv_t}, dQ {q_t}")
            };
            (
                [
                    kv_t.spec(BackwardCoopPass::DkDv, d, dv, sg, emulated, sub_barrier)
                        .constant("PROBE", probe),
                    q_t.spec(BackwardCoopPass::Dq, d, dv, sg, emulated, sub_barrier)
                        .constant("PROBE", probe),
                ],
                [kv_t.rows() as usize, q_t.rows() as usize],
                if emulated {
                    format!("attention backward, tensor-core algorithm emulated ({tiles})")
                } else {
                    format!("attention backward on tensor cores ({tiles}, subgroup {sg})")
                },
            )
        } else {
            let chosen = match options.backward_tiles {
                Some(t) => {
                    let t = t.for_dims(d, dv);
                    if !t.fits(profile) {
                        return Err(Error::InvalidArgument(format!(
                            "backward tiles {t} do not fit this adapter"
                        )));
                    }
                    Some(t)
                }
                None => backward_tiles(profile, d, dv),
            };
            let tiles = chosen.ok_or_else(|| Error::LimitExceeded {
                limit: "max_compute_workgroup_storage_size",
                requested: 0,
                max: u64::from(profile.max_workgroup_storage),
                what: "no attention backward tile shape fits this adapter".into(),
            })?;
            let t = tiles.br as usize;
            (
                [
                    tiles.spec(Kernel::AttentionBwdDkDv, dtype),
                    tiles.spec(Kernel::AttentionBwdDq, dtype),
                ],
                [t, t],
                format!("attention backward ({tiles})"),
            )
        };
        // The tensor-core kernels read q, k, v and dO as 16-byte words at
        // 15-18; the scalar ones as elements at 1-3 and 10.
        let operands: Vec<(u32, &wgpu::Buffer)> = if coop.is_some() {
            vec![
                (15, q.buffer()),
                (16, k.buffer()),
                (17, v.buffer()),
                (18, d_o.buffer()),
            ]
        } else {
            vec![
                (1, q.buffer()),
                (2, k.buffer()),
                (3, v.buffer()),
                (10, d_o.buffer()),
            ]
        };
        let device = &self.inner.device;
        let max_groups = profile.max_workgroups_per_dim as usize;
        for (n, what) in [
            (sk.div_ceil(kv_rows), "key blocks"),
            (sq.div_ceil(q_rows), "query blocks"),
            (hq, "heads"),
            (b, "batch"),
        ] {
            if n > max_groups {
                return Err(Error::LimitExceeded {
                    limit: "max_compute_workgroups_per_dimension",
                    requested: n as u64,
                    max: max_groups as u64,
                    what: format!("attention backward grid ({what})"),
                });
            }
        }
        if rows > 0 {
            self.backward_prepare(&mut plan, &params, o, lse, d_o, &stats, rows)?;
        }
        let shared: [(u32, &wgpu::Buffer); 4] = [
            (0, &params),
            (6, &mask_buf),
            (7, kv_len.buffer()),
            (11, stats.buffer()),
        ];
        let [kv_spec, q_spec] = &specs;
        if b * hkv > 0 && sk > 0 {
            let mut bindings = shared.to_vec();
            bindings.extend([(13, dk.buffer()), (14, dv_t.buffer())]);
            bindings.extend(operands.iter().copied());
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                self.inner.pipelines.get(device, kv_spec)?,
                &bindings,
                [sk.div_ceil(kv_rows) as u32, hkv as u32, b as u32],
            ));
        }
        if rows > 0 {
            let mut bindings = shared.to_vec();
            bindings.push((12, dq.buffer()));
            bindings.extend(operands.iter().copied());
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                self.inner.pipelines.get(device, q_spec)?,
                &bindings,
                [sq.div_ceil(q_rows) as u32, hq as u32, b as u32],
            ));
        }
        plan.label = label;
        plan.scratch.extend([stats, dummy, kv_len, dk, dv_t]);
        Ok((plan, grads))
    }
}

impl Context {
    /// [`Context::attention_backward_plan`] of bf16 q, k, v, o and d_o (and
    /// mask): staged to f32 (exact), the f32 backward, dq, dk and dv rounded
    /// to bf16 (nearest even). The logsumexp is f32 as the forward returns it.
    fn attention_backward_bf16(
        &self,
        [q, k, v, o, d_o]: [&Tensor; 5],
        lse: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionGrads)> {
        let mask = options.mask.as_ref().map(|m| m.tensor());
        for t in [k, v, o, d_o].into_iter().chain(mask) {
            self.check_owned(t, "an attention backward operand or mask")?;
            if t.dtype() != DType::BF16 {
                return Err(Error::DTypeMismatch {
                    op: "attention backward",
                    expected: DType::BF16,
                    got: t.dtype(),
                });
            }
        }
        let originals: Vec<&Tensor> = [q, k, v, o, d_o].into_iter().chain(mask).collect();
        let staged = self.stage_bf16(&originals, DType::F32)?;
        let t = &staged.tensors;
        let wide = options.with_mask_over(t.get(5));
        let (plan, g32) = self.attention_backward_plan(&t[0], &t[1], &t[2], &t[3], &t[4], lse, &wide)?;
        let mut plan = staged.before(plan, &originals);
        let grads = AttentionGrads {
            dq: self.alloc(q.shape(), DType::BF16, "wgtile attention dq")?,
            dk: self.alloc(k.shape(), DType::BF16, "wgtile attention dk")?,
            dv: self.alloc(v.shape(), DType::BF16, "wgtile attention dv")?,
        };
        for (wide, out) in [(&g32.dq, &grads.dq), (&g32.dk, &grads.dk), (&g32.dv, &grads.dv)] {
            plan.dispatches.extend(self.cast_dispatch(wide, out)?);
            plan.bytes = plan.bytes.saturating_sub(wide.size_bytes()) + out.size_bytes();
        }
        plan.scratch.extend([g32.dq, grads.dk.clone(), grads.dv.clone()]);
        plan.output = grads.dq.clone();
        plan.label = format!("{} [bf16 staged to f32]", plan.label);
        Ok((plan, grads))
    }

    /// Encodes the backward's `prepare` kernel (lse in log2 units and Delta
    /// per row into `stats`; dtype-generic, shared by both backward paths).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward_prepare(
        &self,
        plan: &mut Plan,
        params: &wgpu::Buffer,
        o: &Tensor,
        lse: &Tensor,
        d_o: &Tensor,
        stats: &Tensor,
        rows: usize,
    ) -> Result<()> {
        let device = &self.inner.device;
        let max_groups = self.profile().max_workgroups_per_dim as usize;
        // 16 rows per workgroup (PREP_ROWS in attention_backward.wgsl).
        let groups = rows.div_ceil(16);
        let (gx, gy) = (groups.min(max_groups), groups.div_ceil(max_groups.max(1)));
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            self.inner.pipelines.get(
                device,
                &Spec::new(Kernel::AttentionBwdPrepare).dtype(o.dtype()),
            )?,
            &[
                (0, params),
                (4, &o.buffer),
                (5, &lse.buffer),
                (10, &d_o.buffer),
                (11, &stats.buffer),
            ],
            [gx as u32, gy as u32, 1],
        ));
        Ok(())
    }

    /// Whether (and with which tiles) the backward runs on tensor cores:
    /// forced by [`AttentionKernel::FlashCoop`] (or `FlashCoopEmulated`:
    /// the emulated kernels), errors when it cannot; chosen by `Auto` for
    /// f16 problems with D and Dv multiples of 16 up to
    /// [`BACKWARD_COOP_AUTO_MAX_DIM`] when no scalar tiles are forced.
    /// Returns the tiles of the dK/dV and dQ kernels and whether they run
    /// emulated.
    pub(crate) fn backward_coop_choice(
        &self,
        ops: [&Operand; 3],
        opts: &AttentionOptions,
        dtype: DType,
    ) -> Result<Option<([BackwardCoopTiles; 2], bool)>> {
        let emulated = opts.kernel == AttentionKernel::FlashCoopEmulated;
        let forced = opts.kernel == AttentionKernel::FlashCoop || emulated;
        let (d, dv) = (ops[0].dim, ops[2].dim);
        let auto = opts.kernel == AttentionKernel::Auto
            && opts.backward_tiles.is_none()
            && d.max(dv) <= BACKWARD_COOP_AUTO_MAX_DIM;
        if !forced && !auto {
            return Ok(None);
        }
        let p = self.profile();
        let dims_ok = |x: usize| {
            (16..=crate::tune::attention::MAX_FLASH_COOP_DIM).contains(&x) && x.is_multiple_of(16)
        };
        let aligned = ops
            .iter()
            .all(|t| t.aligned(8));
        let supported = if emulated {
            p.shader_f16 && p.subgroups
        } else {
            crate::tune::has_coop_f16(p)
        };
        let fits = |t: &BackwardCoopTiles| {
            if emulated {
                t.fits_emulated(p, d, dv)
            } else {
                t.fits(p, d, dv)
            }
        };
        if !forced {
            if dtype != DType::F16 || !supported || !dims_ok(d) || !dims_ok(dv) || !aligned {
                return Ok(None);
            }
            return Ok(backward_coop_tiles(p, d, dv).map(|t| ([t; 2], false)));
        }
        if dtype != DType::F16 {
            return Err(Error::InvalidArgument(format!(
                "the tensor-core attention backward takes f16 inputs, got {dtype}"
            )));
        }
        if !supported {
            return Err(Error::UnsupportedFeature {
                feature: if emulated {
                    "SHADER_F16 and SUBGROUP"
                } else {
                    "EXPERIMENTAL_COOPERATIVE_MATRIX (16x16 f16/f32, fixed subgroup size)"
                },
                what: "the tensor-core attention backward".into(),
            });
        }
        if !dims_ok(d) || !dims_ok(dv) || !aligned {
            return Err(Error::InvalidArgument(format!(
                "the tensor-core attention backward needs D and Dv multiples of 16 up to 256 and strides that are multiples of 8, got D = {d}, Dv = {dv}"
            )));
        }
        let chosen = if emulated {
            crate::tune::attention::BACKWARD_COOP_CANDIDATES
                .into_iter()
                .find(|t| fits(t))
        } else {
            backward_coop_tiles(p, d, dv)
        };
        let pick = |forced: Option<BackwardCoopTiles>| match forced {
            Some(t) if fits(&t) => Ok(t),
            Some(t) => Err(Error::InvalidArgument(format!(
                "tensor-core backward tiles {t} do not fit this adapter or D = {d}, Dv = {dv}"
            ))),
            None => chosen.ok_or_else(|| Error::LimitExceeded {
                limit: "max_compute_workgroup_storage_size",
                requested: 0,
                max: u64::from(p.max_workgroup_storage),
                what: "no tensor-core attention backward tile fits this adapter".into(),
            }),
        };
        let kv = pick(opts.backward_coop_tiles)?;
        let q = pick(opts.backward_coop_dq_tiles.or(opts.backward_coop_tiles))?;
        Ok(Some(([kv, q], emulated)))
    }
}
