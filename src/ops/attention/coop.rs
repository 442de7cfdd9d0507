//! The tensor-core flash forward: whether it runs (forced, or `Auto` on
//! shapes it supports) and its plan.

use super::*;

/// The tensor-core kernel's launch: tiles, subgroup size, problem dims.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoopChoice {
    tiles: FlashCoopTiles,
    emulated: bool,
    sg: u32,
    dims: [usize; 7],
    /// f16, or f32 (the split kernel).
    dtype: DType,
}

impl CoopChoice {
    /// Whether the kernel can write a bf16 O (`O_BF16`): f16 operands.
    pub(crate) fn writes_bf16(&self) -> bool {
        self.dtype == DType::F16
    }
}

impl Context {
    /// Whether (and how) the tensor-core flash kernel runs: forced by
    /// [`AttentionKernel::FlashCoop`] (errors when it cannot), chosen by
    /// `Auto` for f16 problems it supports that are not decode-shaped (more
    /// than [`DECODE_MAX_ROWS`] query rows) and force no scalar tiles or
    /// splits.
    pub(crate) fn coop_choice(
        &self,
        q: &Operand,
        k: &Operand,
        v: &Operand,
        opts: &AttentionOptions,
        dtype: DType,
    ) -> Result<Option<CoopChoice>> {
        let emulated = opts.kernel == AttentionKernel::FlashCoopEmulated;
        let forced = opts.kernel == AttentionKernel::FlashCoop || emulated;
        // Auto takes the tensor-core kernel where it runs: 1.5-2.2x the
        // scalar kernel for f16 on the H200, 1.2-1.6x for f32 split into
        // halves (docs/perf/attention.md).
        let auto = opts.kernel == AttentionKernel::Auto
            && opts.tiles.is_none()
            && opts.kv_splits.is_none()
            && q.seq > DECODE_MAX_ROWS;
        if !forced && !auto {
            return Ok(None);
        }
        let p = self.profile();
        let (d, dv) = (q.dim, v.dim);
        let dims_ok = |x: usize| {
            (16..=crate::tune::attention::MAX_FLASH_COOP_DIM).contains(&x) && x.is_multiple_of(16)
        };
        let supported = if emulated {
            p.shader_f16 && p.subgroups
        } else {
            crate::tune::has_coop_f16(p)
        };
        let fits = |t: &FlashCoopTiles| {
            if emulated {
                t.fits_emulated(p, d, dv, dtype)
            } else {
                t.fits(p, d, dv, dtype)
            }
        };
        // f16 and f32 (the split kernel: each value as two halves).
        if forced {
            if !supported {
                if emulated {
                    return Err(Error::UnsupportedFeature {
                        feature: "SHADER_F16 and SUBGROUP",
                        what: "emulated tensor-core attention (AttentionKernel::FlashCoopEmulated)"
                            .into(),
                    });
                }
                return Err(Error::UnsupportedFeature {
                    feature: "EXPERIMENTAL_COOPERATIVE_MATRIX (16x16 f16/f32, fixed subgroup size)",
                    what: "tensor-core attention (AttentionKernel::FlashCoop; WGTILE_COOPERATIVE_MATRIX=1 enables it)".into(),
                });
            }
            if !dims_ok(d) || !dims_ok(dv) {
                return Err(Error::InvalidArgument(format!(
                    "the tensor-core attention kernel needs D and Dv multiples of 16 up to 256, got D = {d}, Dv = {dv}"
                )));
            }
        } else if !supported || !dims_ok(d) || !dims_ok(dv) {
            return Ok(None);
        }
        let tiles = match opts.coop_tiles {
            Some(t) if forced => {
                if !fits(&t) {
                    return Err(Error::InvalidArgument(format!(
                        "tensor-core attention tiles {t} do not fit this adapter or D = {d}, Dv = {dv}"
                    )));
                }
                Some(t)
            }
            _ if emulated => crate::tune::attention::FLASH_COOP_CANDIDATES
                .into_iter()
                .find(|t| fits(t)),
            _ => flash_coop_tiles(p, d, dv, dtype),
        };
        let Some(tiles) = tiles else {
            if forced {
                return Err(Error::LimitExceeded {
                    limit: "max_compute_workgroup_storage_size",
                    requested: 0,
                    max: u64::from(p.max_workgroup_storage),
                    what: "no tensor-core attention tile fits this adapter".into(),
                });
            }
            return Ok(None);
        };
        // 16-byte loads: every stride a multiple of 8 halves (true for every
        // layout with D and Dv multiples of 16; checked all the same).
        let aligned = [q, k, v]
            .iter()
            .all(|t| t.aligned(8));
        if !aligned {
            if forced {
                return Err(Error::InvalidArgument(
                    "the tensor-core attention kernel needs strides that are multiples of 8 elements"
                        .into(),
                ));
            }
            return Ok(None);
        }
        Ok(Some(CoopChoice {
            tiles,
            emulated,
            sg: if emulated { 16 } else { p.subgroup_max_size },
            dims: [q.batch, q.heads, k.heads, q.seq, k.seq, d, dv],
            dtype,
        }))
    }

    /// Encodes the tensor-core flash kernel into `plan`.
    // Long on purpose: the f16 and the f32 split forms share the launch; the split adds the
    // scale pass and the guarded fallback in between.
    pub(crate) fn flash_coop(
        &self,
        plan: &mut Plan,
        c: CoopChoice,
        [q, k, v]: [&Operand; 3],
        o_tensor: &Tensor,
        words: &[u32],
        (mask, kv_len, lse): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
    ) -> Result<()> {
        let [b, hq, _, sq, sk, d, dv] = c.dims;
        let max_groups = self.profile().max_workgroups_per_dim as usize;
        let q_blocks = sq.div_ceil(c.tiles.br() as usize);
        if q_blocks > max_groups || hq > max_groups || b > max_groups {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: q_blocks.max(hq).max(b) as u64,
                max: max_groups as u64,
                what: "tensor-core attention grid".into(),
            });
        }
        let mut words = words.to_vec();
        // split_len, splits, pack_heads: one split, no packed rows.
        words.extend([u32_of(sk, "key count")?, 1, 0]);
        let params = self.uniform(&words);
        let device = &self.inner.device;
        let o_bf16 = o_tensor.dtype() == DType::BF16;
        if o_bf16 && !c.writes_bf16() {
            return Err(Error::InvalidArgument(
                "internal: the tensor-core attention writes bf16 only from f16 operands".into(),
            ));
        }
        let o = &o_tensor.buffer;
        let spec = if c.emulated {
            c.tiles.spec_emulated(d, dv, c.dtype)
        } else {
            c.tiles.spec(d, dv, c.sg, c.dtype)
        }
        .constant("PROBE", coop_probe());
        let spec = if o_bf16 { crate::tune::attention::flash_coop_out_bf16(spec) } else { spec };
        let pipeline = self.inner.pipelines.get(device, &spec)?;
        let mut bindings = vec![
            (0, &params),
            (4, o),
            (5, lse),
            (6, mask),
            (7, kv_len),
            (10, &q.buffer),
            (11, &k.buffer),
            (12, &v.buffer),
        ];
        // f32: each head's exponents first (attention_split_scale.wgsl),
        // and a flag word after them.
        let exps = if c.dtype == DType::F32 {
            let hkv = c.dims[2];
            let n = b * (hq + 2 * hkv) + 1;
            let exps = self.alloc(&[n], DType::F32, "wgtile attention split maxima")?;
            plan.dispatches.push(self.fill_dispatch(&exps.buffer, 0)?);
            let scale = self
                .inner
                .pipelines
                .get(device, &Spec::new(Kernel::AttentionSplitScale))?;
            // The shader's RA rows per workgroup.
            const ROWS: usize = 64;
            let chunks = sq.max(sk).div_ceil(ROWS).max(1);
            if chunks > max_groups || 3 * b > max_groups {
                return Err(Error::LimitExceeded {
                    limit: "max_compute_workgroups_per_dimension",
                    requested: chunks.max(3 * b) as u64,
                    max: max_groups as u64,
                    what: "attention split-scale grid".into(),
                });
            }
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                scale,
                &[
                    (0, &params),
                    (7, kv_len),
                    (10, &q.buffer),
                    (11, &k.buffer),
                    (12, &v.buffer),
                    (13, &exps.buffer),
                ],
                [chunks as u32, hq.max(hkv) as u32, 3 * b as u32],
            ));
            Some(exps)
        } else {
            None
        };
        if let Some(e) = &exps {
            bindings.push((13, &e.buffer));
        }
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            pipeline,
            &bindings,
            [q_blocks as u32, hq as u32, b as u32],
        ));
        // f32: halves cannot carry an infinity or NaN (inf's lo is inf -
        // inf). When the split-scale pass saw one, the scalar f32 flash
        // kernel recomputes O and lse with IEEE's rules; otherwise its
        // workgroups return at once. Its parameters are the same words (one
        // split, no packed rows).
        if let Some(e) = &exps {
            let tiles =
                flash_tiles_for(self.profile(), sq, dv).ok_or_else(|| Error::LimitExceeded {
                    limit: "max_compute_workgroup_storage_size",
                    requested: 0,
                    max: u64::from(self.profile().max_workgroup_storage),
                    what: "no flash attention tile for the f32 tensor-core plan's fallback".into(),
                })?;
            let blocks = sq.div_ceil(tiles.br as usize);
            if blocks > max_groups {
                return Err(Error::LimitExceeded {
                    limit: "max_compute_workgroups_per_dimension",
                    requested: blocks as u64,
                    max: max_groups as u64,
                    what: "attention fallback grid".into(),
                });
            }
            let fallback = self.inner.pipelines.get(device, &tiles.guarded_spec())?;
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                fallback,
                &[
                    (0, &params),
                    (1, &q.buffer),
                    (2, &k.buffer),
                    (3, &v.buffer),
                    (4, o),
                    (5, lse),
                    (6, mask),
                    (7, kv_len),
                    (13, &e.buffer),
                ],
                [blocks as u32, hq as u32, b as u32],
            ));
        }
        plan.scratch.extend(exps);
        plan.label = if c.emulated {
            format!(
                "attention flash tensor-core algorithm, emulated ({})",
                c.tiles
            )
        } else {
            format!(
                "attention flash tensor cores ({}, subgroup {}{})",
                c.tiles,
                c.sg,
                if c.dtype == DType::F32 {
                    ", f32 as f16 pairs"
                } else {
                    ""
                }
            )
        };
        Ok(())
    }
}

/// Probe of the tensor-core forward (`WGTILE_COOP_ATTN_PROBE`): 0 off; 1
/// every visible probability is 1 (O = the mean of the visible V rows); 2
/// O's first min(BC, Dv) columns are the raw S = Q K^T of the first key
/// block; timing bits 4, 8, 16, 32 skip the softmax, the products, the K/V
/// loads, the rescale check, and for f32 inputs 64 and 128 the split
/// arithmetic of the K/V staging and of P (results wrong).
fn coop_probe() -> u32 {
    crate::dev::overrides().coop_attn_probe
}
