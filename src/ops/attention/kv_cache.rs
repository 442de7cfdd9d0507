//! [`KvCache`]: keys and values of past positions on the GPU, appended in
//! place and read by [`Context::attention_cached`].

use super::*;

/// Growable key/value cache on the GPU: `[B, Hkv, capacity, D]` keys and
/// `[B, Hkv, capacity, Dv]` values, of which the first [`KvCache::len`]
/// positions are filled. [`KvCache::append`] writes new positions in place
/// with GPU copies, doubling the capacity (GPU-side copy) when full, and
/// [`Context::attention_cached`] reads the filled part through strides.
///
/// Not `Clone`: a clone sharing the buffers would see the other's appends.
/// [`KvCache::try_clone`] copies the filled positions into new buffers.
#[derive(Debug)]
pub struct KvCache {
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) len: usize,
}

impl KvCache {
    /// An empty cache. For f16 and bf16, `head_dim` and `value_dim` must be
    /// even (GPU copies move whole 4-byte words).
    ///
    /// A bf16 cache is read by [`Context::attention_cached`] as it is stored
    /// when the decode kernel runs (few query rows per KV head, D and Dv
    /// multiples of 8): the kernel widens the bf16 words in registers, so a
    /// decode step reads 2 bytes per cached element. Other calls (prefill,
    /// other head dims, a forced non-decode kernel, probabilities or scores
    /// returned) stage the cache's buffers to f32 first, capacity included:
    /// 6 more bytes moved per cached element per call.
    pub fn new(
        ctx: &Context,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        value_dim: usize,
        capacity: usize,
        dtype: DType,
    ) -> Result<Self> {
        Error::require_float(dtype, "KvCache::new")?;
        if dtype == DType::F16 {
            ctx.require_f16("f16 KV cache")?;
        }
        if dtype.size() == 2 && (!head_dim.is_multiple_of(2) || !value_dim.is_multiple_of(2)) {
            return Err(Error::InvalidArgument(format!(
                "an {dtype} KV cache needs even head dims (got {head_dim} and {value_dim})"
            )));
        }
        let capacity = capacity.max(1);
        Ok(Self {
            k: ctx.alloc(
                &[batch, kv_heads, capacity, head_dim],
                dtype,
                "wgtile kv cache k",
            )?,
            v: ctx.alloc(
                &[batch, kv_heads, capacity, value_dim],
                dtype,
                "wgtile kv cache v",
            )?,
            len: 0,
        })
    }

    /// Filled positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing has been appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the buffers hold before they must grow.
    pub fn capacity(&self) -> usize {
        self.k.shape()[2]
    }

    /// The key buffer `[B, Hkv, capacity, D]` (positions `len..` are unspecified).
    pub fn keys(&self) -> &Tensor {
        &self.k
    }

    /// The value buffer `[B, Hkv, capacity, Dv]`.
    pub fn values(&self) -> &Tensor {
        &self.v
    }

    /// [`KvCache::append`] for keys and values given sequence-major,
    /// `[B, n, Hkv, D]` and `[B, n, Hkv, Dv]` (what a projection of
    /// `[B, n, hidden]` reshaped gives), each first copied heads-first on the
    /// GPU (one permute).
    pub fn append_seq_major(&mut self, ctx: &Context, k_new: &Tensor, v_new: &Tensor) -> Result<()> {
        for (t, what) in [(k_new, "keys"), (v_new, "values")] {
            if t.rank() != 4 {
                return Err(Error::InvalidArgument(format!(
                    "KvCache::append_seq_major: the {what} must be [B, n, Hkv, D], got {:?}",
                    t.shape()
                )));
            }
        }
        let k = ctx.permute(k_new, &[0, 2, 1, 3])?;
        let v = ctx.permute(v_new, &[0, 2, 1, 3])?;
        self.append(&k, &v)
    }

    /// Appends `k_new` `[B, Hkv, n, D]` and `v_new` `[B, Hkv, n, Dv]` at
    /// position `len` (GPU copies, no host round trip), growing the buffers
    /// to at least twice their capacity when needed.
    pub fn append(&mut self, k_new: &Tensor, v_new: &Tensor) -> Result<()> {
        let ks = self.k.shape().to_vec();
        let vs = self.v.shape().to_vec();
        for (t, s, what) in [(k_new, &ks, "keys"), (v_new, &vs, "values")] {
            t.check_device(&self.k.gpu, "a tensor appended to the KV cache")?;
            t.require_contiguous("KvCache::append")?;
            if t.dtype() != self.k.dtype() {
                return Err(Error::DTypeMismatch {
                    op: "KvCache::append",
                    expected: self.k.dtype(),
                    got: t.dtype(),
                });
            }
            let ts = t.shape();
            if ts.len() != 4 || ts[0] != s[0] || ts[1] != s[1] || ts[3] != s[3] {
                return Err(Error::shape(
                    "KvCache::append",
                    ts,
                    s,
                    format!("new {what} must be [B, Hkv, n, D] matching the cache"),
                ));
            }
        }
        let n = k_new.shape()[2];
        if v_new.shape()[2] != n {
            return Err(Error::shape(
                "KvCache::append",
                k_new.shape(),
                v_new.shape(),
                "keys and values must add the same number of positions",
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let ctx = self.k.gpu.clone();
        let needed = self.len + n;
        if needed > self.capacity() {
            let cap = needed.max(2 * self.capacity());
            let k = ctx.alloc(
                &[ks[0], ks[1], cap, ks[3]],
                self.k.dtype(),
                "wgtile kv cache k",
            )?;
            let v = ctx.alloc(
                &[vs[0], vs[1], cap, vs[3]],
                self.v.dtype(),
                "wgtile kv cache v",
            )?;
            let (old_k, old_v, len) = (self.k.clone(), self.v.clone(), self.len);
            ctx.submit("KvCache grow", |enc| {
                copy_rows(enc, &old_k, &k, 0, len, 0);
                copy_rows(enc, &old_v, &v, 0, len, 0);
            })?;
            self.k = k;
            self.v = v;
        }
        let len = self.len;
        let (k, v) = (self.k.clone(), self.v.clone());
        ctx.submit("KvCache append", |enc| {
            copy_rows(enc, k_new, &k, 0, n, len);
            copy_rows(enc, v_new, &v, 0, n, len);
        })?;
        self.len = needed;
        Ok(())
    }

    /// An independent copy: new buffers of the same capacity holding the
    /// filled positions (a GPU-side copy), so appends to either never show
    /// in the other.
    pub fn try_clone(&self) -> Result<KvCache> {
        let gpu = self.k.gpu.clone();
        let k = gpu.alloc(self.k.shape(), self.k.dtype(), "wgtile kv cache k")?;
        let v = gpu.alloc(self.v.shape(), self.v.dtype(), "wgtile kv cache v")?;
        let len = self.len;
        gpu.submit("KvCache clone", |enc| {
            copy_rows(enc, &self.k, &k, 0, len, 0);
            copy_rows(enc, &self.v, &v, 0, len, 0);
        })?;
        Ok(KvCache { k, v, len })
    }
}

/// Copies positions `src_pos..src_pos + n` of every (batch, head) of `src`
/// (`[B, H, S_src, D]`) to positions `dst_pos..` of `dst` (`[B, H, S_dst, D]`).
pub(crate) fn copy_rows(
    enc: &mut wgpu::CommandEncoder,
    src: &Tensor,
    dst: &Tensor,
    src_pos: usize,
    n: usize,
    dst_pos: usize,
) {
    if n == 0 {
        return;
    }
    let (b, h, s_src, d) = (
        src.shape()[0],
        src.shape()[1],
        src.shape()[2],
        src.shape()[3],
    );
    let s_dst = dst.shape()[2];
    let es = src.dtype().size();
    for z in 0..b * h {
        let from = ((z * s_src + src_pos) * d * es) as u64;
        let to = ((z * s_dst + dst_pos) * d * es) as u64;
        let bytes = (n * d * es) as u64;
        if bytes > 0 {
            enc.copy_buffer_to_buffer(&src.buffer, from, &dst.buffer, to, Some(bytes));
        }
    }
}
