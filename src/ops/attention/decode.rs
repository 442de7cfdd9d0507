//! The decode paths (few query rows against a long key cache): the choice
//! of the decode kernel, the split-KV decode kernel and its tensor-core
//! form, and the key splits and merge pass they share with flash-decoding.

use super::forward::Launch;
use super::*;

impl Context {
    /// The decode kernel's tiles when the decode path runs (forced, or
    /// `Auto` on few query rows per KV head), checking forced tiles and a
    /// forced decode kernel against the shape and the adapter.
    ///
    /// `dtype` is K's and V's (a bf16 KV cache's words: [`Launch::kv_dtype`]).
    pub(crate) fn decode_choice(
        &self,
        dims: [usize; 7],
        dtype: DType,
        opts: &AttentionOptions,
    ) -> Result<Option<DecodeTiles>> {
        let [_, hq, hkv, sq, _, d, dv] = dims;
        let profile = self.profile();
        let group = hq / hkv.max(1);
        let dtiles = opts
            .decode_tiles
            .unwrap_or_else(|| decode_kernel_tiles(dtype, d));
        if !dtiles.valid() {
            return Err(Error::InvalidArgument(format!(
                "decode tiles {dtiles} are not a supported shape"
            )));
        }
        let decode_ok = decode_fits(dtype, d, dv)
            && decode_tiles_fit(dtype, dv, dtiles)
            && profile.max_storage_buffers_per_stage >= 6
            && profile.max_invocations >= dtiles.threads
            && profile.max_workgroup_size_x >= dtiles.threads
            && decode_workgroup_bytes(dtype, group * sq, d, dv, dtiles)
                <= profile.max_workgroup_storage;
        let use_decode = match opts.kernel {
            AttentionKernel::Decode if !decode_ok => {
                return Err(Error::InvalidArgument(format!(
                    "the attention decode kernel needs D and Dv multiples of {} up to 256 \
                     (got {d} and {dv}) and an adapter with {} invocations",
                    16 / dtype.size(),
                    dtiles.threads
                )));
            }
            AttentionKernel::Decode => true,
            AttentionKernel::Auto => decode_ok && group * sq <= DECODE_KERNEL_MAX_ROWS,
            _ => false,
        };
        Ok(use_decode.then_some(dtiles))
    }

    /// The tensor-core decode path (forced only): a subgroup per KV head,
    /// 16 packed rows and key split, then the merge.
    pub(crate) fn decode_coop_attention(&self, plan: &mut Plan, l: &Launch<'_>, opts: &AttentionOptions) -> Result<()> {
        let [b, hq, hkv, sq, sk, d, dv] = l.dims;
        let dtype = l.dtype;
        let device = &self.inner.device;
        let profile = self.profile();
        let max_groups = profile.max_workgroups_per_dim as usize;
        let group = hq / hkv.max(1);
        let emulated = opts.kernel == AttentionKernel::DecodeCoopEmulated;
        if dtype != DType::F16 {
            return Err(Error::InvalidArgument(format!(
                "the tensor-core decode kernel takes f16 inputs, got {dtype}"
            )));
        }
        let rows_kv = group * sq;
        let rf = opts
            .decode_coop_rf
            .unwrap_or_else(|| decode_coop_rf(rows_kv));
        if !decode_coop_fits(profile, 1, 16, 16, emulated) {
            return Err(Error::UnsupportedFeature {
                feature: if emulated {
                    "SHADER_F16 and SUBGROUP"
                } else {
                    "EXPERIMENTAL_COOPERATIVE_MATRIX (16x16 f16/f32, fixed subgroup size)"
                },
                what: "the tensor-core decode kernel".into(),
            });
        }
        let aligned = [l.k, l.v]
            .iter()
            .all(|t| t.aligned(8));
        if !decode_coop_fits(profile, rf, d, dv, emulated) || !aligned {
            return Err(Error::InvalidArgument(format!(
                "the tensor-core decode kernel needs D and Dv multiples of 16 up to 256, \
                 K, V strides that are multiples of 8 and 1 or 2 row fragments that fit \
                 the adapter (got D = {d}, Dv = {dv}, {rf} fragments)"
            )));
        }
        let ys = hkv * rows_kv.div_ceil(16 * rf as usize);
        if ys > max_groups || b > max_groups {
            return Err(l.limit(
                ys.max(b),
                "tensor-core decode grid (heads, batch)".into(),
            ));
        }
        let wanted = opts.kv_splits.map_or_else(
            || decode_coop_splits(profile, (ys * b) as u64, sk),
            |s| s as usize,
        );
        let rows = b * hq * sq;
        let (splits, split_len, params, scratch) =
            self.split_setup(l.words.to_vec(), wanted, 16, [sk, rows, dv])?;
        let sg = profile.subgroup_max_size;
        let pipeline = self
            .inner
            .pipelines
            .get(device, &decode_coop_spec(rf, d, dv, sg, emulated))?;
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            pipeline,
            &[
                (0, &params),
                (1, &l.q.buffer),
                (2, &l.k.buffer),
                (3, &l.v.buffer),
                (5, &scratch.buffer),
                (6, l.mask_buf),
                (7, &l.kv_len.buffer),
            ],
            [splits as u32, ys as u32, b as u32],
        ));
        plan.dispatches.push(self.merge_dispatch(
            (dtype, dv, rows),
            &params,
            &l.o.buffer,
            &scratch.buffer,
            l.lse_buf,
        )?);
        plan.label = format!(
            "attention decode on tensor cores{} ({rows_kv} rows per KV head, {} per workgroup, {splits} key splits of {split_len})",
            if emulated { ", emulated" } else { "" },
            16 * rf
        );
        plan.scratch.push(scratch);
        Ok(())
    }

    /// The decode path: split-KV decode kernel, then the merge.
    pub(crate) fn decode_attention(
        &self,
        plan: &mut Plan,
        l: &Launch<'_>,
        opts: &AttentionOptions,
        dtiles: DecodeTiles,
    ) -> Result<()> {
        let [b, hq, hkv, sq, sk, d, dv] = l.dims;
        let dtype = l.dtype;
        let device = &self.inner.device;
        let profile = self.profile();
        let max_groups = profile.max_workgroups_per_dim as usize;
        let group = hq / hkv.max(1);
        let rows_kv = group * sq;
        let chunks = rows_kv.div_ceil(decode_chunk_rows(rows_kv));
        let kv_dtype = l.kv_dtype;
        let ys = hkv * chunks;
        if ys > max_groups || b > max_groups {
            return Err(l.limit(
                ys.max(b),
                "attention decode grid (heads, batch)".into(),
            ));
        }
        let wanted = opts.kv_splits.map_or_else(
            || decode_splits(profile, (ys * b) as u64, sk, dtiles) as usize,
            |s| s as usize,
        );
        let rows = b * hq * sq;
        let (splits, split_len, params, scratch) =
            self.split_setup(l.words.to_vec(), wanted, dtiles.keys(), [sk, rows, dv])?;
        let shuffle_ok = decode_shuffle_fits(profile, dtiles);
        let shuffle = match opts.decode_shuffle {
            Some(true) if !shuffle_ok => {
                return Err(Error::UnsupportedFeature {
                    feature: "SUBGROUP",
                    what: format!(
                        "decode with subgroup shuffles (subgroups of at least {} lanes \
                         dividing {} invocations; the adapter's are {}..{})",
                        dtiles.lk,
                        dtiles.threads,
                        profile.subgroup_min_size,
                        profile.subgroup_max_size
                    ),
                });
            }
            Some(on) => on,
            None => shuffle_ok,
        };
        let pipeline = self
            .inner
            .pipelines
            .get(device, &decode_spec(kv_dtype, rows_kv, d, dv, dtiles, shuffle))?;
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            pipeline,
            &[
                (0, &params),
                (1, &l.q.buffer),
                (5, &scratch.buffer),
                (6, l.mask_buf),
                (7, &l.kv_len.buffer),
                (12, &l.k.buffer),
                (13, &l.v.buffer),
            ],
            [splits as u32, ys as u32, b as u32],
        ));
        plan.dispatches.push(self.merge_dispatch(
            (dtype, dv, rows),
            &params,
            &l.o.buffer,
            &scratch.buffer,
            l.lse_buf,
        )?);
        plan.label = format!(
            "attention decode ({rows_kv} rows per KV head, {splits} key splits of {split_len}, {dtiles}{})",
            if shuffle { ", shuffles" } else { "" }
        );
        plan.scratch.push(scratch);
        Ok(())
    }


    /// The key splits of a decode kernel: about `wanted` splits of `sk`
    /// keys, each a multiple of `kb` keys long; returns the split count and
    /// length, the parameters (`words` with the split fields) and the f32
    /// scratch for the `rows` partial states of Dv columns plus (m, l).
    pub(crate) fn split_setup(
        &self,
        mut words: Vec<u32>,
        wanted: usize,
        kb: usize,
        [sk, rows, dv]: [usize; 3],
    ) -> Result<(usize, usize, wgpu::Buffer, Tensor)> {
        let split_len = sk.div_ceil(wanted.max(1)).div_ceil(kb).max(1) * kb;
        let splits = sk.div_ceil(split_len).max(1);
        let max_groups = self.profile().max_workgroups_per_dim as usize;
        if splits > max_groups {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: splits as u64,
                max: max_groups as u64,
                what: "attention decode grid (splits)".into(),
            });
        }
        words.push(u32_of(split_len, "split length")?);
        words.push(splits as u32);
        words.push(1);
        let params = self.uniform(&words);
        let scratch = self.alloc(
            &[splits, rows, dv + 2],
            DType::F32,
            "wgtile attention decode states",
        )?;
        Ok((splits, split_len, params, scratch))
    }

    /// The merge pass of split-KV attention (decode kernel or flash-decoding):
    /// combines the `splits` partial states in `scratch` into O (and lse)
    /// for `rows` query rows of value dim `dv`.
    pub(crate) fn merge_dispatch(
        &self,
        (dtype, dv, rows): (DType, usize, usize),
        params: &wgpu::Buffer,
        o: &wgpu::Buffer,
        scratch: &wgpu::Buffer,
        lse: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let max_groups = self.profile().max_workgroups_per_dim as usize;
        let (spec, gz) = merge_spec(self.profile(), dtype, dv);
        let merge = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let (gx, gy) = (rows.min(max_groups), rows.div_ceil(max_groups.max(1)));
        Ok(Dispatch::with_bindings(
            &self.inner.device,
            merge,
            &[(0, params), (4, o), (5, scratch), (8, lse)],
            [gx as u32, gy as u32, gz],
        ))
    }
}
