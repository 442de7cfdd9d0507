//! The attention forward: the checked setup every kernel shares, the
//! naive, flash, split-KV (flash-decoding) and decode plans.

use super::*;

/// What every attention path of one call binds and reads.
pub(crate) struct Launch<'a> {
    pub(crate) dtype: DType,
    /// K's and V's storage: `dtype`, or bf16 words (a bf16 KV cache) that
    /// only the decode kernel reads, widening them itself.
    pub(crate) kv_dtype: DType,
    /// `[B, Hq, Hkv, Sq, Sk, D, Dv]`.
    pub(crate) dims: [usize; 7],
    /// The parameter words without the split fields.
    pub(crate) words: &'a [u32],
    pub(crate) mask_buf: &'a wgpu::Buffer,
    pub(crate) kv_len: &'a Tensor,
    pub(crate) lse_buf: &'a wgpu::Buffer,
    pub(crate) o: &'a Tensor,
    pub(crate) q: &'a Operand,
    pub(crate) k: &'a Operand,
    pub(crate) v: &'a Operand,
    pub(crate) max_groups: usize,
}

/// The kernel an attention plan runs (`Context::attention_route`).
pub(crate) enum AttentionRoute {
    DecodeCoop,
    Decode(DecodeTiles),
    Coop(super::coop::CoopChoice),
    Flash,
}

impl Launch<'_> {
    /// The error for a grid past the adapter's workgroups per dimension.
    pub(crate) fn limit(&self, requested: usize, what: String) -> Error {
        Error::LimitExceeded {
            limit: "max_compute_workgroups_per_dimension",
            requested: requested as u64,
            max: self.max_groups as u64,
            what,
        }
    }
}

/// The filled part (`len` positions) of a KV cache buffer `t`
/// (`[B, H, capacity, D]`) as an operand whose elements are `dtype`.
fn cache_view(t: &Tensor, len: usize, dtype: DType) -> Operand {
    let s = t.shape();
    Operand {
        buffer: t.buffer.clone(),
        dtype,
        batch: s[0],
        heads: s[1],
        seq: len,
        dim: s[3],
        strides: [s[1] * s[2] * s[3], s[2] * s[3], s[3]],
        offset: 0,
    }
}

/// Positions in the parameter words (`Params` in
/// `shaders/attention_common.wgsl`) that [`raw_score_words`] rewrites:
/// `lo_off`, `hi_off`; `scale`, `scale_log2`, `softcap`, `softcap_log2`,
/// `mask_kind`; `has_kv_len`, `align_keys` (checked where the words are built).
const WORD_LO: usize = 23;
const WORD_SCALE: usize = 25;
const WORD_HAS_KV_LEN: usize = 34;

/// The scores kernel's words turned into the raw product's (ONNX's
/// `qk_matmul_output_mode` 0): every key of every row visible, no soft-cap,
/// no mask, no key lengths, and the "log2" scale set to the natural one, so
/// the kernel's `logit` returns `dot * scale` in natural units.
fn raw_score_words(words: &[u32]) -> Vec<u32> {
    let mut w = words.to_vec();
    w[WORD_LO] = -BIG as i32 as u32;
    w[WORD_LO + 1] = BIG as i32 as u32;
    w[WORD_SCALE + 1] = w[WORD_SCALE];
    w[WORD_SCALE + 2] = 0.0f32.to_bits();
    w[WORD_SCALE + 3] = 0.0f32.to_bits();
    w[WORD_SCALE + 4] = 0;
    w[WORD_HAS_KV_LEN] = 0;
    w[WORD_HAS_KV_LEN + 1] = 0;
    w
}

impl Context {
    /// Attention `softmax(scale * q k^T + mask) v` (see [`AttentionOptions`] for
    /// layouts and masking). Errors: [`Error::ShapeMismatch`] for head dims,
    /// batch, head counts (`Hq % Hkv != 0`) or masks that disagree,
    /// [`Error::DTypeMismatch`] when q, k, v or the mask differ in dtype,
    /// [`Error::UnsupportedFeature`] for f16 without `shader-f16`,
    /// [`Error::InvalidArgument`] for bad scale, soft-cap or key lengths.
    pub fn attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput> {
        let (plan, out) = self.attention_plan(q, k, v, options)?;
        plan.run()?;
        Ok(out)
    }

    /// [`Context::attention`] through the naive three-kernel path (the
    /// reference): fails with [`Error::LimitExceeded`] when the score matrix
    /// does not fit the adapter's limits.
    pub fn attention_naive(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput> {
        let options = options.clone().kernel(AttentionKernel::Naive);
        self.attention(q, k, v, &options)
    }

    /// Attention over the filled part of a [`KvCache`] (prefill and decode
    /// share this path; decoding usually wants
    /// `causal(DiagonalAlignment::BottomRight)`). Heads-first layout only.
    /// q (and mask) must have the cache's dtype; for a bf16 cache `o` is
    /// bf16 and the logsumexp f32 ([`KvCache::new`] says how it is read).
    pub fn attention_cached(
        &self,
        q: &Tensor,
        cache: &KvCache,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput> {
        let (plan, out) = self.attention_cached_plan(q, cache, options)?;
        plan.run()?;
        Ok(out)
    }

    /// The [`Plan`] of [`Context::attention_cached`] (valid while the cache
    /// does not grow).
    pub fn attention_cached_plan(
        &self,
        q: &Tensor,
        cache: &KvCache,
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionOutput)> {
        options.check_forced()?;
        if options.layout != AttentionLayout::HeadsFirst {
            return Err(Error::InvalidArgument(
                "attention_cached takes q as [B, Hq, Sq, D]".into(),
            ));
        }
        self.check_all_owned([q, &cache.k, &cache.v], "attention_cached's query or cache")?;
        q.require_contiguous("attention")?;
        self.check_owned(q, "the attention query")?;
        if let Some(mask) = &options.mask {
            mask.tensor().require_contiguous("an attention mask")?;
        }
        let qo = operand(q, options.layout, 0, "q")?;
        options.check_head_dims(qo.dim, cache.k.shape()[3], cache.v.shape()[3])?;
        let bytes = (q.numel()
            + cache.len
                * cache.k.shape()[0]
                * cache.k.shape()[1]
                * (cache.k.shape()[3] + cache.v.shape()[3])) as u64
            * q.dtype().size() as u64;
        if cache.k.dtype() == DType::BF16 {
            return self.attention_cached_bf16(q, cache, options, bytes);
        }
        let view = |t: &Tensor| cache_view(t, cache.len, t.dtype());
        self.attention_impl(qo, view(&cache.k), view(&cache.v), options, bytes, (None, false))
    }

    /// [`Context::attention_cached_plan`] of a bf16 cache (q and mask bf16
    /// too): q and the mask staged to f32 (exact). When the decode kernel
    /// runs (few query rows per KV head, D and Dv multiples of 8, not forced
    /// elsewhere), it reads the cache's bf16 words and widens them in
    /// registers: the cache is read once, at 2 bytes an element. Otherwise
    /// (prefill, other kernels or dims) the cache's buffers are staged to
    /// f32, capacity included, for the f32 kernels. `o` is rounded to bf16;
    /// the logsumexp stays f32.
    fn attention_cached_bf16(
        &self,
        q: &Tensor,
        cache: &KvCache,
        options: &AttentionOptions,
        bytes: u64,
    ) -> Result<(Plan, AttentionOutput)> {
        let mask = options.mask.as_ref().map(|m| m.tensor());
        for t in [q].into_iter().chain(mask) {
            if t.dtype() != DType::BF16 {
                return Err(Error::DTypeMismatch {
                    op: "attention",
                    expected: DType::BF16,
                    got: t.dtype(),
                });
            }
        }
        let (ks, vs) = (cache.k.shape(), cache.v.shape());
        let qs = q.shape();
        let dims = [qs[0], qs[1], ks[1], qs[2], cache.len, qs[3], vs[3]];
        let naive = options.wants_matrices();
        let direct = !naive
            && !matches!(
                options.kernel,
                AttentionKernel::DecodeCoop | AttentionKernel::DecodeCoopEmulated
            )
            && self.decode_choice(dims, DType::BF16, options)?.is_some();
        let mut originals: Vec<&Tensor> = vec![q];
        originals.extend(mask);
        if !direct {
            originals.extend([&cache.k, &cache.v]);
        }
        let staged = self.stage_bf16(&originals, DType::F32)?;
        let t = &staged.tensors;
        let wide = options.with_mask_over(t.get(1));
        let qo = operand(&t[0], options.layout, 0, "q")?;
        let (plan, out) = if direct {
            // The operands say f32 (what the kernel computes in); the words
            // behind K and V are bf16.
            let view = |t: &Tensor| cache_view(t, cache.len, DType::F32);
            self.attention_impl(
                qo,
                view(&cache.k),
                view(&cache.v),
                &wide,
                bytes,
                (Some(DType::BF16), false),
            )?
        } else {
            let n = t.len();
            let view = |t: &Tensor| cache_view(t, cache.len, t.dtype());
            self.attention_impl(qo, view(&t[n - 2]), view(&t[n - 1]), &wide, bytes, (None, false))?
        };
        let mut plan = self.round_output_bf16(staged.before(plan, &originals), None)?;
        // The memory floor: the bf16 query and filled cache read, o written
        // (whatever the staging copies).
        plan.bytes = bytes + plan.output().size_bytes();
        plan.label = format!(
            "{} [bf16 cache {}]",
            plan.label,
            if direct {
                "read as words by the decode kernel"
            } else {
                "staged to f32"
            }
        );
        let o = plan.output().clone();
        Ok((plan, AttentionOutput { o, ..out }))
    }

    /// Checks the call and builds its [`Plan`] without running it; the plan's
    /// output is `o`, and the returned [`AttentionOutput`] holds the tensors
    /// the plan writes.
    pub fn attention_plan(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionOutput)> {
        options.check_forced()?;
        for t in [q, k, v] {
            self.check_owned(t, "an attention operand")?;
            t.require_contiguous("attention")?;
        }
        if q.dtype() == DType::BF16 {
            return self.attention_plan_bf16(q, k, v, options);
        }
        self.attention_plan_o(q, k, v, options, false)
    }

    /// [`Context::attention_plan`] of f16 or f32 operands; `o_bf16`: O is
    /// bf16 where the tensor-core flash kernel runs on f16 ones (the
    /// returned `o` says which).
    fn attention_plan_o(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
        o_bf16: bool,
    ) -> Result<(Plan, AttentionOutput)> {
        if let Some(mask) = &options.mask {
            mask.tensor().require_contiguous("an attention mask")?;
        }
        let (hq, hkv) = match options.layout {
            AttentionLayout::Packed { q_heads, kv_heads } => (q_heads, kv_heads),
            AttentionLayout::HeadsFirst => (0, 0),
        };
        let qo = operand(q, options.layout, hq, "q")?;
        let ko = operand(k, options.layout, hkv, "k")?;
        let vo = operand(v, options.layout, hkv, "v")?;
        options.check_head_dims(qo.dim, ko.dim, vo.dim)?;
        let bytes = (q.numel() + k.numel() + v.numel()) as u64 * q.dtype().size() as u64;
        self.attention_impl(qo, ko, vo, options, bytes, (None, o_bf16))
    }

    /// Attention of q, k and v read in place from one fused projection
    /// `qkv` `[B, S, Hq * D + Hkv * D + Hkv * Dv]` (q's heads first, then
    /// k's, then v's, as `x @ [Wq | Wk | Wv]` writes them): no copies.
    /// `options` must be packed ([`AttentionOptions::packed`], which takes
    /// D = Dv = width / (Hq + 2 Hkv), or [`AttentionOptions::packed_dims`]);
    /// a width that does not match is [`Error::ShapeMismatch`]. The result
    /// and every other rule are [`Context::attention`]'s. bf16 `qkv` is cut
    /// into three copies first (its kernels read staged copies anyway).
    pub fn attention_qkv(&self, qkv: &Tensor, options: &AttentionOptions) -> Result<AttentionOutput> {
        let (plan, out) = self.attention_qkv_plan(qkv, options)?;
        plan.run()?;
        Ok(out)
    }

    /// The plan of [`Context::attention_qkv`].
    pub fn attention_qkv_plan(&self, qkv: &Tensor, options: &AttentionOptions) -> Result<(Plan, AttentionOutput)> {
        options.check_forced()?;
        let op = "attention_qkv";
        self.check_owned(qkv, op)?;
        qkv.require_contiguous(op)?;
        let AttentionLayout::Packed { q_heads, kv_heads } = options.layout else {
            return Err(Error::InvalidArgument(format!(
                "{op}: the options must be packed (AttentionOptions::packed or packed_dims): \
                 qkv is [B, S, Hq * D + Hkv * D + Hkv * Dv]"
            )));
        };
        let s = qkv.shape();
        if s.len() != 3 {
            return Err(Error::InvalidArgument(format!(
                "{op}: qkv must be [B, S, Hq * D + Hkv * D + Hkv * Dv] (rank 3), got {s:?}"
            )));
        }
        let width = s[2];
        let (d, dv) = match options.head_dims {
            Some(dims) => dims,
            None => {
                let parts = q_heads + 2 * kv_heads;
                (width / parts, width / parts)
            }
        };
        let widths = [q_heads * d, kv_heads * d, kv_heads * dv];
        if widths.iter().sum::<usize>() != width {
            return Err(Error::shape(
                op,
                s,
                &[q_heads, kv_heads, d, dv],
                format!(
                    "the last dimension must be Hq * D + Hkv * D + Hkv * Dv = {} for [Hq, Hkv, D, Dv]",
                    widths.iter().sum::<usize>()
                ),
            ));
        }
        if qkv.dtype() == DType::BF16 {
            return self.attention_qkv_copies(qkv, widths, options);
        }
        if let Some(mask) = &options.mask {
            mask.tensor().require_contiguous("an attention mask")?;
        }
        let part = |offset: usize, heads: usize, dim: usize| Operand {
            buffer: qkv.buffer.clone(),
            dtype: qkv.dtype(),
            batch: s[0],
            heads,
            seq: s[1],
            dim,
            strides: [s[1] * width, dim, width],
            offset,
        };
        let q = part(0, q_heads, d);
        let k = part(widths[0], kv_heads, d);
        let v = part(widths[0] + widths[1], kv_heads, dv);
        self.attention_impl(q, k, v, options, qkv.size_bytes(), (None, false))
    }

    /// [`Context::attention_qkv_plan`] through three copies (bf16).
    fn attention_qkv_copies(
        &self,
        qkv: &Tensor,
        widths: [usize; 3],
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionOutput)> {
        let mut start = 0;
        let mut cuts = Vec::new();
        for w in widths {
            cuts.push(self.narrow_plan(qkv, 2, start, w)?);
            start += w;
        }
        let (plan, out) = self.attention_plan(cuts[0].output(), cuts[1].output(), cuts[2].output(), options)?;
        let mut plan = plan.after(cuts);
        plan.label.push_str(" (q, k, v copied out of qkv)");
        Ok((plan, out))
    }

    /// [`Context::attention_plan`] of bf16 q, k and v (and mask): on tensor
    /// cores staged to f16 with the f32 path armed by the range test (see
    /// [`DType::BF16`]), else staged to f32 (exact) for the f32 kernels;
    /// `o` rounded to bf16 (the logsumexp stays f32).
    fn attention_plan_bf16(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionOutput)> {
        let originals = self.bf16_attention_operands([q, k, v], options, "attention")?;
        // The probabilities and scores come from the naive path: f32 staging.
        // Elsewhere the f16 kernels where they run on tensor cores; without
        // them f32 staging is exact and costs no check and no fallback.
        if !options.wants_matrices() && crate::tune::has_coop_f16(self.profile()) {
            // Options the f16 kernels cannot take (a forced f32-only kernel)
            // fail there; the f32 path below reports what is wrong, if anything.
            if let Ok(done) = self.attention_bf16_via_f16(&originals, options) {
                return Ok(done);
            }
        }
        let staged = self.stage_bf16(&originals, DType::F32)?;
        let wide = options.with_mask_over(staged.tensors.get(3));
        let t = &staged.tensors;
        let (plan, out) = self.attention_plan(&t[0], &t[1], &t[2], &wide)?;
        let plan = self.round_output_bf16(staged.before(plan, &originals), None)?;
        let o = plan.output().clone();
        Ok((plan, AttentionOutput { o, ..out }))
    }

    /// bf16 attention through the f16 kernels, the f32 plan armed by the
    /// range test, on any adapter with `shader-f16` (the route takes it on
    /// tensor cores only): for tests of the staging and its fallback.
    #[doc(hidden)]
    pub fn attention_plan_bf16_via_f16(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionOutput)> {
        let originals = self.bf16_attention_operands([q, k, v], options, "attention_plan_bf16_via_f16")?;
        self.require_f16("bf16 attention through f16")?;
        self.attention_bf16_via_f16(&originals, options)
    }

    /// q, k, v and the mask of a bf16 attention, each checked to be a bf16
    /// tensor of this device.
    fn bf16_attention_operands<'t>(
        &self,
        qkv: [&'t Tensor; 3],
        options: &'t AttentionOptions,
        op: &'static str,
    ) -> Result<Vec<&'t Tensor>> {
        let mask = options.mask.as_ref().map(|m| m.tensor());
        let all: Vec<&Tensor> = qkv.into_iter().chain(mask).collect();
        for t in &all {
            self.check_operand(t, DType::BF16, op)?;
        }
        Ok(all)
    }

    /// bf16 attention on the f16 kernels: q, k, v (and mask) cast to f16
    /// by the checked cast, each publishing its range test
    /// (`shaders/cast.wgsl`); then either the f16 plan and `o` rounded to
    /// bf16 (the test passed) or the f32 plan on f32 copies writing `o` and
    /// the logsumexp (it failed): conditional dispatches, zero workgroups
    /// for the group that does not run.
    fn attention_bf16_via_f16(
        &self,
        originals: &[&Tensor],
        options: &AttentionOptions,
    ) -> Result<(Plan, AttentionOutput)> {
        let (flag, clear) = self.range_flag()?;
        let (casts, halves) = self.checked_halves(originals, &flag)?;
        let mut dispatches = vec![clear];
        dispatches.extend(casts);
        let mut scratch = Vec::new();
        // The tensor-core kernel writes o as bf16 itself; other f16 kernels
        // write f16, rounded after them.
        let (p16, out16) = self.attention_plan_o(
            &halves[0],
            &halves[1],
            &halves[2],
            &options.with_mask_over(halves.get(3)),
            true,
        )?;
        let mut on_f16: Vec<Dispatch> = p16.dispatches.to_vec();
        let o = if out16.o.dtype() == DType::BF16 {
            out16.o.clone()
        } else {
            let o = self.alloc(out16.o.shape(), DType::BF16, "wgtile attention out")?;
            on_f16.extend(self.cast_dispatch(&out16.o, &o)?);
            o
        };
        let mut fallback = Vec::new();
        let mut wides = Vec::new();
        for &t in originals {
            let w = self.alloc(t.shape(), DType::F32, "wgtile bf16 fallback")?;
            fallback.extend(self.cast_dispatch(t, &w)?);
            wides.push(w);
        }
        // Where Auto took the tensor cores (they wrote o as bf16), the
        // fallback's f32 plan is the scalar flash kernel: one dispatch where
        // the split form has four (fill, scale pass, kernel, guarded
        // recompute), each costing about 3.7 us when the range test passes
        // and it runs empty (H200, run 169). The fallback itself runs only
        // on data f16 cannot hold.
        let one_pass = options.kernel == AttentionKernel::Auto && out16.o.dtype() == DType::BF16;
        let wide_options = AttentionOptions {
            kernel: if one_pass { AttentionKernel::Flash } else { options.kernel },
            ..options.with_mask_over(wides.get(3))
        };
        let (p32, out32) = self.attention_plan(&wides[0], &wides[1], &wides[2], &wide_options)?;
        fallback.extend(p32.dispatches.iter().cloned());
        fallback.extend(self.cast_dispatch(&out32.o, &o)?);
        if let (Some(l16), Some(l32)) = (&out16.lse, &out32.lse) {
            fallback.extend(self.cast_dispatch(l32, l16)?);
        }
        dispatches.extend(self.armed_either((&flag, originals.len() as u32), on_f16, fallback)?);
        scratch.extend(halves);
        scratch.extend(wides);
        scratch.extend(p16.scratch.iter().cloned());
        scratch.extend(p32.scratch.iter().cloned());
        if out16.o.dtype() != DType::BF16 {
            scratch.push(out16.o.clone());
        }
        scratch.push(out32.o.clone());
        scratch.extend(out32.lse.clone());
        let plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!(
                "{} [bf16 staged to f16; f32 fallback armed by the range test]",
                p16.label().replacen("f16", "bf16", 1)
            ),
            dispatches,
            output: o.clone(),
            flops: p16.flops(),
            bytes: originals.iter().map(|t| t.size_bytes()).sum::<u64>()
                + o.size_bytes()
                + out16.lse.as_ref().map_or(0, |l| l.size_bytes()),
            scratch,
        };
        Ok((
            plan,
            AttentionOutput {
                o,
                lse: out16.lse,
                probs: None,
                scores: None,
                raw_scores: None,
            },
        ))
    }

    /// Checks q, k, v and the options, and builds the kernels' parameters
    /// (shared by the forward and backward passes).
    // Long on purpose: the checks of q, k, v, masks, key lengths, window, soft-cap and layout,
    // in the order their errors are documented, and the parameter words they fill.
    pub(crate) fn attention_setup(
        &self,
        q: &Operand,
        k: &Operand,
        v: &Operand,
        opts: &AttentionOptions,
    ) -> Result<Setup> {
        let op = "attention";
        let dtype = q.dtype;
        for t in [k, v] {
            if t.dtype != dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    expected: dtype,
                    got: t.dtype,
                });
            }
        }
        if let Some(m) = &opts.mask {
            self.check_owned(m.tensor(), "the attention mask")?;
        }
        if let Some(m) = &opts.mask
            && m.tensor().dtype() != dtype
        {
            return Err(Error::DTypeMismatch {
                op: "attention mask",
                expected: dtype,
                got: m.tensor().dtype(),
            });
        }
        if dtype == DType::F16 {
            self.require_f16("f16 attention")?;
        }
        if dtype == DType::BF16 {
            // Every bf16 entry point (forward, backward, cached) stages or
            // widens bf16 before it gets here; a path that does not is a bug,
            // reported rather than miscompiled.
            return Err(Error::InvalidArgument(
                "attention kernels take f32 or f16 operands: bf16 must be staged first".into(),
            ));
        }
        let qs = [q.batch, q.heads, q.seq, q.dim];
        let ks = [k.batch, k.heads, k.seq, k.dim];
        let vs = [v.batch, v.heads, v.seq, v.dim];
        if k.batch != q.batch || v.batch != q.batch {
            return Err(Error::shape(op, &qs, &ks, "batch sizes differ"));
        }
        if k.dim != q.dim {
            return Err(Error::shape(op, &qs, &ks, "q and k head dims (D) differ"));
        }
        if v.heads != k.heads || v.seq != k.seq {
            return Err(Error::shape(
                op,
                &ks,
                &vs,
                "k and v differ in head count or sequence length",
            ));
        }
        if (k.heads == 0 && q.heads != 0) || (k.heads != 0 && !q.heads.is_multiple_of(k.heads)) {
            return Err(Error::shape(
                op,
                &qs,
                &ks,
                format!(
                    "query heads ({}) must be a multiple of key/value heads ({})",
                    q.heads, k.heads
                ),
            ));
        }
        let (b, hq, sq, d) = (q.batch, q.heads, q.seq, q.dim);
        let (hkv, sk, dv) = (k.heads, k.seq, v.dim);
        let scale = opts.scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
        if !scale.is_finite() {
            return Err(Error::InvalidArgument(format!(
                "attention scale must be finite, got {scale}"
            )));
        }
        let softcap = opts.softcap.unwrap_or(0.0);
        if opts.softcap.is_some() && !(softcap.is_finite() && softcap > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "attention soft-cap must be finite and positive, got {softcap}"
            )));
        }
        // Output layout follows q's.
        let packed = matches!(opts.layout, AttentionLayout::Packed { .. });
        let (o_shape, o_strides) = if packed {
            (vec![b, sq, hq * dv], [sq * hq * dv, dv, hq * dv])
        } else {
            (vec![b, hq, sq, dv], [hq * sq * dv, sq * dv, dv])
        };

        // Mask broadcast strides over [B, Hq, Sq, Sk].
        let (mask_kind, mask_strides, mask_buffer) = match &opts.mask {
            None => (0u32, [0usize; 4], None),
            Some(m) => {
                let t = m.tensor();
                let s = t.shape();
                let dims: [usize; 4] = match s.len() {
                    2 => [1, 1, s[0], s[1]],
                    3 => [s[0], 1, s[1], s[2]],
                    4 => [s[0], s[1], s[2], s[3]],
                    _ => {
                        return Err(Error::shape(
                            "attention mask",
                            s,
                            &[b, hq, sq, sk],
                            "a mask is [Sq, Sk], [B, Sq, Sk] or [B, H, Sq, Sk]",
                        ));
                    }
                };
                let target = [b, hq, sq, sk];
                let mut strides = [0usize; 4];
                let mut acc = 1;
                for i in (0..4).rev() {
                    if dims[i] != target[i] && dims[i] != 1 {
                        return Err(Error::shape(
                            "attention mask",
                            s,
                            &target,
                            format!(
                                "mask dimension {i} ({}) does not broadcast to {}",
                                dims[i], target[i]
                            ),
                        ));
                    }
                    strides[i] = if dims[i] == 1 { 0 } else { acc };
                    acc *= dims[i];
                }
                let kind = match m {
                    AttentionMask::Boolean(_) => 1,
                    AttentionMask::Additive(_) => 2,
                };
                (kind, strides, Some(t.buffer.clone()))
            }
        };
        if let Some(lens) = &opts.key_lengths {
            if lens.len() != b {
                return Err(Error::shape(
                    "attention key lengths",
                    &[lens.len()],
                    &[b],
                    "one key length per batch element",
                ));
            }
            if let Some(&bad) = lens.iter().find(|&&l| l as usize > sk) {
                return Err(Error::InvalidArgument(format!(
                    "attention key length {bad} exceeds Sk = {sk}"
                )));
            }
        }

        // Diagonal offsets of the visible band: i + lo <= j <= i + hi.
        let offset = match opts.alignment {
            DiagonalAlignment::TopLeft => 0,
            DiagonalAlignment::BottomRight => sk as i64 - sq as i64,
            // Beyond +-BIG every key or none is visible either way.
            DiagonalAlignment::Offset(d) => d.clamp(-BIG, BIG),
        };
        let mut lo = opts
            .window_left
            .map_or(-BIG, |w| offset - w.min(BIG as usize) as i64);
        let mut hi = opts
            .window_right
            .map_or(BIG, |w| offset + w.min(BIG as usize) as i64);
        if opts.causal {
            hi = hi.min(offset);
        }
        lo = lo.clamp(-BIG, BIG);
        hi = hi.clamp(-BIG, BIG);
        // Visible (row, key) pairs ignoring masks and padding: the useful FLOPs.
        let pairs: u64 = (0..sq as i64)
            .map(|i| {
                let first = (i + lo).max(0);
                let last = (i + hi).min(sk as i64 - 1);
                (last - first + 1).max(0) as u64
            })
            .sum();
        let flops = 2 * (b * hq) as u64 * pairs * (d + dv) as u64;

        // Unused bindings get small private buffers (the read-only ones and the
        // writable lse slot must differ: one buffer cannot be both in a dispatch).
        let dummy = self.alloc(&[4], DType::F32, "wgtile attention unused")?;
        let kv_len = match &opts.key_lengths {
            Some(lens) => {
                let bits: Vec<f32> = lens.iter().map(|&l| f32::from_bits(l)).collect();
                self.tensor(&bits, [lens.len()])?
            }
            None => dummy.clone(),
        };
        let mut words = Vec::with_capacity(40);
        for x in [b, hq, hkv, sq, sk, d, dv, hq / hkv.max(1)] {
            words.push(u32_of(x, "dimension")?);
        }
        for s in [q.strides, k.strides, v.strides, o_strides] {
            for x in s {
                words.push(u32_of(x, "stride")?);
            }
        }
        for t in [q, k, v] {
            words.push(u32_of(t.offset, "operand offset")?);
        }
        debug_assert_eq!(words.len(), WORD_LO);
        words.push(lo as i32 as u32);
        words.push(hi as i32 as u32);
        let log2e = std::f32::consts::LOG2_E;
        debug_assert_eq!(words.len(), WORD_SCALE);
        for f in [scale, scale * log2e, softcap, softcap * log2e] {
            words.push(f.to_bits());
        }
        words.push(mask_kind);
        for x in mask_strides {
            words.push(u32_of(x, "mask stride")?);
        }
        debug_assert_eq!(words.len(), WORD_HAS_KV_LEN);
        words.push(u32::from(opts.key_lengths.is_some()));
        // Bottom-right alignment with key lengths: each batch's band ends at
        // its own last key (FlashAttention-2's varlen rule), in the kernels.
        let align_keys = opts.key_lengths.is_some()
            && opts.alignment == DiagonalAlignment::BottomRight
            && (opts.causal || opts.window_left.is_some() || opts.window_right.is_some());
        words.push(u32::from(align_keys));
        Ok(Setup {
            dtype,
            dims: [b, hq, hkv, sq, sk, d, dv],
            o_shape,
            words,
            mask_buf: mask_buffer.unwrap_or_else(|| dummy.buffer.clone()),
            kv_len,
            dummy,
            flops,
        })
    }

    /// The plan of checked operands; `kv_dtype` is K's and V's storage when
    /// it differs from their `dtype` (bf16 words behind f32 operands, read
    /// by the decode kernel only: the caller makes sure it runs).
    pub(crate) fn attention_impl(
        &self,
        q: Operand,
        k: Operand,
        v: Operand,
        opts: &AttentionOptions,
        in_bytes: u64,
        (kv_dtype, o_bf16): (Option<DType>, bool),
    ) -> Result<(Plan, AttentionOutput)> {
        let setup = self.attention_setup(&q, &k, &v, opts)?;
        let kv_dtype = kv_dtype.unwrap_or(setup.dtype);
        let [b, hq, _, sq, ..] = setup.dims;
        let naive = opts.kernel == AttentionKernel::Naive || opts.wants_matrices();
        let route = if naive || b * hq * sq == 0 {
            None
        } else {
            Some(self.attention_route(setup.dims, (setup.dtype, kv_dtype), [&q, &k, &v], opts)?)
        };
        // bf16 O where asked for and the tensor-core flash kernel runs on
        // f16 operands (it writes two values per word); else the operands'.
        let o_dtype = match (o_bf16, &route) {
            (true, Some(AttentionRoute::Coop(c))) if c.writes_bf16() => DType::BF16,
            _ => setup.dtype,
        };
        let dummy_lse = self.alloc(&[4], DType::F32, "wgtile attention unused lse")?;
        let o = self.alloc(&setup.o_shape, o_dtype, "wgtile attention out")?;
        let lse = if opts.return_lse {
            Some(self.alloc(&[b, hq, sq], DType::F32, "wgtile attention lse")?)
        } else {
            None
        };
        if opts.wants_matrices() && !matches!(opts.kernel, AttentionKernel::Auto | AttentionKernel::Naive) {
            return Err(Error::InvalidArgument(format!(
                "attention: the probabilities and (raw) scores come from the naive path, not {:?}",
                opts.kernel
            )));
        }
        let [_, _, _, _, sk, _, _] = setup.dims;
        let probs = if opts.return_probs {
            Some(self.alloc(&[b, hq, sq, sk], DType::F32, "wgtile attention probabilities")?)
        } else {
            None
        };
        // The logits, rescaled from the kernels' base 2 by a kernel that
        // runs between the scores and the softmax.
        let scores = if opts.return_scores {
            Some(self.alloc(&[b, hq, sq, sk], DType::F32, "wgtile attention scores")?)
        } else {
            None
        };
        // The raw scores, written by the scores kernel with every rule off.
        let raw_scores = if opts.return_raw_scores {
            Some(self.alloc(&[b, hq, sq, sk], DType::F32, "wgtile attention raw scores")?)
        } else {
            None
        };
        let out = AttentionOutput {
            o: o.clone(),
            lse: lse.clone(),
            probs: probs.clone(),
            scores: scores.clone(),
            raw_scores: raw_scores.clone(),
        };
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: String::new(),
            dispatches: Vec::new(),
            output: o.clone(),
            flops: setup.flops,
            bytes: in_bytes + o.size_bytes(),
            scratch: Vec::new(),
        };
        if b * hq * sq == 0 {
            plan.label = "attention (empty result)".into();
            return Ok((plan, out));
        }
        let lse_buf = lse.as_ref().unwrap_or(&dummy_lse).buffer.clone();
        if kv_dtype != setup.dtype && naive {
            return Err(Error::InvalidArgument(
                "attention: bf16 key/value words are read by the decode kernel only".into(),
            ));
        }
        let launch = Launch {
            dtype: setup.dtype,
            kv_dtype,
            dims: setup.dims,
            words: &setup.words,
            mask_buf: &setup.mask_buf,
            kv_len: &setup.kv_len,
            lse_buf: &lse_buf,
            o: &o,
            q: &q,
            k: &k,
            v: &v,
            max_groups: self.profile().max_workgroups_per_dim as usize,
        };
        match route {
            Some(route) => self.attention_path(&mut plan, &launch, opts, route)?,
            None => self.naive_attention(&mut plan, &launch, probs, scores.as_ref(), raw_scores.as_ref())?,
        }
        plan.scratch.extend([setup.dummy, dummy_lse, setup.kv_len]);
        Ok((plan, out))
    }

    /// The kernel `opts` and the shape take (tensor-core decode, decode,
    /// tensor-core flash, flash or flash-decoding; the naive path is the
    /// caller's), decided before the outputs are allocated.
    fn attention_route(
        &self,
        dims: [usize; 7],
        (dtype, kv_dtype): (DType, DType),
        [q, k, v]: [&Operand; 3],
        opts: &AttentionOptions,
    ) -> Result<AttentionRoute> {
        let decode = self.decode_choice(dims, kv_dtype, opts)?;
        if kv_dtype != dtype {
            // bf16 KV words: the caller checked that the decode kernel runs.
            return match decode {
                Some(t) if !matches!(
                    opts.kernel,
                    AttentionKernel::DecodeCoop | AttentionKernel::DecodeCoopEmulated
                ) => Ok(AttentionRoute::Decode(t)),
                _ => Err(Error::InvalidArgument(
                    "attention: bf16 key/value words are read by the decode kernel only".into(),
                )),
            };
        }
        if matches!(
            opts.kernel,
            AttentionKernel::DecodeCoop | AttentionKernel::DecodeCoopEmulated
        ) {
            return Ok(AttentionRoute::DecodeCoop);
        }
        if let Some(dtiles) = decode {
            return Ok(AttentionRoute::Decode(dtiles));
        }
        if let Some(coop) = self.coop_choice(q, k, v, opts, dtype)? {
            return Ok(AttentionRoute::Coop(coop));
        }
        Ok(AttentionRoute::Flash)
    }

    /// The dispatches and label of `route` written into `plan`.
    fn attention_path(
        &self,
        plan: &mut Plan,
        l: &Launch<'_>,
        opts: &AttentionOptions,
        route: AttentionRoute,
    ) -> Result<()> {
        if l.o.dtype() != l.dtype && !matches!(route, AttentionRoute::Coop(_)) {
            return Err(Error::InvalidArgument(format!(
                "internal: only the tensor-core flash kernel writes a {} O from {} operands",
                l.o.dtype(),
                l.dtype
            )));
        }
        match route {
            AttentionRoute::DecodeCoop => self.decode_coop_attention(plan, l, opts),
            AttentionRoute::Decode(t) => self.decode_attention(plan, l, opts, t),
            AttentionRoute::Coop(coop) => self.flash_coop(
                plan,
                coop,
                [l.q, l.k, l.v],
                l.o,
                l.words,
                (l.mask_buf, &l.kv_len.buffer, l.lse_buf),
            ),
            AttentionRoute::Flash => self.flash_attention(plan, l, opts),
        }
    }

    /// The naive path: S = mask(scale Q K^T) in memory, its row softmax in
    /// place, then P V; `probs` is where P goes when the caller keeps it,
    /// `scores` where S goes (in natural units), `raw` where `scale Q K^T`
    /// goes (a second run of the scores kernel with every rule off).
    fn naive_attention(
        &self,
        plan: &mut Plan,
        l: &Launch<'_>,
        probs: Option<Tensor>,
        scores_out: Option<&Tensor>,
        raw: Option<&Tensor>,
    ) -> Result<()> {
        let [b, hq, _, sq, sk, _, dv] = l.dims;
        let (dtype, max_groups, device) = (l.dtype, l.max_groups, &self.inner.device);
        let scores = match probs {
            Some(p) => p,
            None => self.alloc(&[b, hq, sq, sk], DType::F32, "wgtile attention scores")?,
        };
        let mut words = l.words.to_vec();
        words.extend([0, 1, 0]);
        let params = self.uniform(&words);
        let z = b * hq;
        if z > max_groups || sq.div_ceil(16) > max_groups || sk.div_ceil(16) > max_groups {
            return Err(l.limit(
                z.max(sq.div_ceil(16)).max(sk.div_ceil(16)),
                "naive attention grid".into(),
            ));
        }
        let get = |kernel: Kernel| {
            self.inner
                .pipelines
                .get(device, &Spec::new(kernel).dtype(dtype))
        };
        let grid =
            |x: usize, y: usize| [x.div_ceil(16) as u32, y.div_ceil(16) as u32, z as u32];
        // The scores kernel into `out` with `params` (the raw scores run it
        // again with every rule off).
        let scores_dispatch = |params: &wgpu::Buffer, out: &Tensor| -> Result<Dispatch> {
            Ok(Dispatch::with_bindings(
                device,
                get(Kernel::AttentionScores)?,
                &[
                    (0, params),
                    (1, &l.q.buffer),
                    (2, &l.k.buffer),
                    (6, l.mask_buf),
                    (7, &l.kv_len.buffer),
                    (9, &out.buffer),
                ],
                grid(sk, sq),
            ))
        };
        plan.dispatches.push(scores_dispatch(&params, &scores)?);
        if let Some(raw) = raw {
            let raw_params = self.uniform(&raw_score_words(&words));
            plan.dispatches.push(scores_dispatch(&raw_params, raw)?);
        }
        if let Some(out) = scores_out {
            let natural = self.eval_into_plan(&(scores.expr() * std::f32::consts::LN_2), out)?;
            plan.dispatches.extend(natural.dispatches);
        }
        let rows = (b * hq * sq).div_ceil(64);
        let (gx, gy) = (rows.min(max_groups), rows.div_ceil(max_groups.max(1)));
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            get(Kernel::AttentionSoftmax)?,
            &[(0, &params), (5, l.lse_buf), (9, &scores.buffer)],
            [gx as u32, gy as u32, 1],
        ));
        if dv > 0 {
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                get(Kernel::AttentionPv)?,
                &[
                    (0, &params),
                    (3, &l.v.buffer),
                    (4, &l.o.buffer),
                    (7, &l.kv_len.buffer),
                    (9, &scores.buffer),
                ],
                grid(dv, sq),
            ));
        }
        plan.label = format!("attention naive (S = {b}x{hq}x{sq}x{sk} f32 in memory)");
        plan.scratch.push(scores);
        Ok(())
    }

    /// The flash path: one pass, or split-KV passes (flash-decoding) and the
    /// merge when few workgroups would leave the GPU idle.
    fn flash_attention(&self, plan: &mut Plan, l: &Launch<'_>, opts: &AttentionOptions) -> Result<()> {
        let [b, hq, hkv, sq, sk, _, dv] = l.dims;
        let dtype = l.dtype;
        let device = &self.inner.device;
        let profile = self.profile();
        let max_groups = profile.max_workgroups_per_dim as usize;
        let group = hq / hkv.max(1);
        let chosen = match opts.tiles {
            Some(t) => {
                let t = t.for_value_dim(dv);
                if !t.fits(profile, dv) {
                    return Err(Error::InvalidArgument(format!(
                        "flash tiles {t} do not fit this adapter or Dv = {dv}"
                    )));
                }
                Some(t)
            }
            None => flash_tiles_for(profile, sq, dv),
        };
        let tiles: FlashTiles = chosen.ok_or_else(|| {
            if dv > MAX_FLASH_DV {
                Error::InvalidArgument(format!(
                    "flash attention supports Dv up to {MAX_FLASH_DV}, got {dv} (use AttentionKernel::Naive)"
                ))
            } else {
                Error::LimitExceeded {
                    limit: "max_compute_workgroup_storage_size",
                    requested: 0,
                    max: u64::from(profile.max_workgroup_storage),
                    what: "no flash attention tile shape fits this adapter".into(),
                }
            }
        })?;
        // Few query rows per head: the rows of one workgroup run over the
        // query heads of a KV head (K and V read once per group).
        let pack = group > 1 && sq < tiles.br as usize;
        let (rows_per_slice, slices) = if pack { (group * sq, hkv) } else { (sq, hq) };
        let q_blocks = rows_per_slice.div_ceil(tiles.br as usize);
        if slices > max_groups || b > max_groups {
            return Err(l.limit(slices.max(b), "attention grid (heads, batch)".into()));
        }
        let workgroups = (q_blocks * slices * b) as u64;
        let mut splits = match (opts.kernel, opts.kv_splits) {
            (AttentionKernel::Flash, _) => 1,
            (_, Some(s)) => s.max(1),
            _ => kv_splits(profile, workgroups, sk, tiles),
        } as usize;
        let bc = tiles.bc() as usize;
        let split_len = if splits > 1 {
            sk.div_ceil(splits).div_ceil(bc).max(1) * bc
        } else {
            sk
        };
        if splits > 1 {
            splits = sk.div_ceil(split_len).max(1);
        }
        if q_blocks * splits > max_groups {
            return Err(l.limit(
                q_blocks * splits,
                "attention grid (query blocks x splits)".into(),
            ));
        }
        let split = splits > 1;
        let mut words = l.words.to_vec();
        words.push(u32_of(split_len, "split length")?);
        words.push(splits as u32);
        words.push(u32::from(pack));
        let params = self.uniform(&words);
        let pipeline = self
            .inner
            .pipelines
            .get(device, &tiles.spec(dtype, split))?;
        let grid = [(q_blocks * splits) as u32, slices as u32, b as u32];
        if !split {
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                pipeline,
                &[
                    (0, &params),
                    (1, &l.q.buffer),
                    (2, &l.k.buffer),
                    (3, &l.v.buffer),
                    (4, &l.o.buffer),
                    (5, l.lse_buf),
                    (6, l.mask_buf),
                    (7, &l.kv_len.buffer),
                ],
                grid,
            ));
            plan.label = format!(
                "attention flash ({tiles}{})",
                if pack { ", GQA heads packed" } else { "" }
            );
            return Ok(());
        }
        let rows = b * hq * sq;
        let scratch = self.alloc(
            &[splits, rows, dv + 2],
            DType::F32,
            "wgtile attention split states",
        )?;
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            pipeline,
            &[
                (0, &params),
                (1, &l.q.buffer),
                (2, &l.k.buffer),
                (3, &l.v.buffer),
                (4, &l.o.buffer),
                (5, &scratch.buffer),
                (6, l.mask_buf),
                (7, &l.kv_len.buffer),
            ],
            grid,
        ));
        plan.dispatches.push(self.merge_dispatch(
            (dtype, dv, rows),
            &params,
            &l.o.buffer,
            &scratch.buffer,
            l.lse_buf,
        )?);
        plan.label = format!(
            "attention flash-decoding ({tiles}, {splits} key splits of {split_len}{})",
            if pack { ", GQA heads packed" } else { "" }
        );
        plan.scratch.push(scratch);
        Ok(())
    }

}
