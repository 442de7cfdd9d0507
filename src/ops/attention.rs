//! Attention: `O = softmax(scale * Q K^T + mask) V`, FlashAttention style.
//!
//! This module owns the attention op's checks, its options and its launch
//! code; `tune::attention` picks tiles and key splits, `shaders/attention_*`
//! hold the kernels.
//!
//! # Algorithm
//! The flash kernel (`shaders/attention_flash.wgsl`) never writes the Sq x Sk
//! score matrix to memory. A workgroup owns a block of query rows of one
//! (batch, head) and streams blocks of keys and values through workgroup
//! memory, keeping per row a running maximum `m` and sum `l` of the softmax
//! (the *online softmax*): when a block raises the maximum, the accumulated
//! output and sum are rescaled by `exp(m_old - m_new)`, and the output is
//! divided by `l` once at the end. Key blocks that the causal diagonal, the
//! sliding window or the key-padding length hide entirely are skipped
//! without being loaded. The row logsumexp `m + ln l` is what the backward
//! pass needs to recompute the probabilities.
//!
//! For decoding (few query rows) the key sequence is split over workgroups
//! (flash-decoding): each writes a partial state `(O_s, m_s, l_s)` and a
//! small merge kernel combines them, so one query row still fills the GPU.
//! When the query rows of a KV head (`group * Sq`) are few (at most
//! [`DECODE_KERNEL_MAX_ROWS`]) and the head dims are whole 16-byte words (D,
//! Dv multiples of 4 f32 or 8 f16, up to 256), `Auto` runs the dedicated
//! decode kernel (`shaders/attention_decode.wgsl`) instead of the flash tile:
//! one workgroup per (batch, KV head, key split) reads K and V once, in
//! coalesced 16-byte words, for all those rows, with no arithmetic spent on
//! absent rows (query rows packed four to a vec4; its tile, a
//! [`DecodeTiles`], is the host's choice and can be forced with
//! [`AttentionOptions::decode_tiles`]); the flash path remains for everything else (and as
//! [`AttentionKernel::FlashSplit`]). Every option (masks, windows, key
//! lengths, soft-cap, lse) is supported by both.
//!
//! A tensor-core flash kernel (`shaders/attention_flash_coop.wgsl`, forced
//! with [`AttentionKernel::FlashCoop`] on adapters with the 16x16 f16/f32
//! cooperative matrix) runs the same algorithm with Q K^T and P V on
//! cooperative matrices, the output rescaled only when a row's maximum grows
//! by more than 2^8 (the accumulators cannot be scaled per row in place).
//! `Auto` picks it for f16 and f32 problems with D and Dv multiples of 16 up
//! to 256 that are not decode-shaped. For f32 a first pass
//! (`shaders/attention_split_scale.wgsl`) finds each head's largest |q|,
//! |k|, |v|; the kernel scales each value by its head's power of two, splits
//! it into two f16 halves and takes three products per fragment pair
//! (3xTF32's idea on f16 tensor cores), each 16-wide slice's products summed
//! from zero and added in f32: on the H200 1.4x PyTorch's fp32 SDPA at S4096
//! D128 (65.7 against 46.2 TFLOP/s), results within ~2e-7 of the f32 flash
//! kernel. Halves cannot carry an infinity or NaN, so that first pass also
//! flags them, and the plan ends with the f32 flash kernel guarded by the
//! flag: it recomputes O and lse when set (IEEE's result, as the f32 flash
//! kernel gives it) and returns at once otherwise.
//!
//! The naive path (`AttentionKernel::Naive`) materialises S in three kernels
//! and is kept as the reference and the "before" of the comparison.
//!
//! The backward pass ([`Context::attention_backward`], FlashAttention-2
//! style) stores no Sq x Sk matrix either: from Q, K and the forward's
//! logsumexp it recomputes P tile by tile, once in a kernel that owns a key
//! block (dK, dV, summed over the query heads sharing a KV head) and once in
//! a kernel that owns a query block (dQ), so no float atomics are needed.
//! For f16 with D and Dv multiples of 16 (up to 128 in `Auto`) both kernels
//! run on tensor cores (`shaders/attention_bwd_coop_dkdv.wgsl`,
//! `attention_bwd_coop_dq.wgsl`; [`BackwardCoopTiles`]): a subgroup keeps
//! its 16 keys' K and V (or its 16 rows' Q and dO) as cooperative matrices,
//! S^T and dP^T (S and dP) come from the tensor cores, P^T and dS^T pass
//! through workgroup memory as f16, and the gradient products run on the
//! tensor cores too. `AttentionKernel::Flash` keeps the scalar kernels.
//!
//! A tensor-core decode kernel (`shaders/attention_decode_coop.wgsl`,
//! [`AttentionKernel::DecodeCoop`], forced only) packs the query rows of a
//! KV head into 16-row fragments and loads K and V fragments straight from
//! memory with no workgroup staging. On the H200 it ran at half the speed
//! of the scalar decode kernel (32k f16 cache: 194 us against 102;
//! cooperative loads from storage are slow there), so `Auto` never takes it.
//!
//! [`KvCache`] keeps growable K/V buffers on the GPU; prefill and decode both
//! go through [`Context::attention_cached`].
//!
//! # Layouts
//! `q` is `[B, Hq, Sq, D]`, `k` `[B, Hkv, Sk, D]`, `v` `[B, Hkv, Sk, Dv]`
//! with `Hq` a multiple of `Hkv` (MHA, GQA, MQA); or, with
//! [`AttentionLayout::Packed`], `[B, S, H * D]` (the output then is
//! `[B, Sq, Hq * Dv]`), read in place through strides.
//!
//! # Masking
//! Key `j` is visible to query `i` when it passes every configured rule:
//! causal (`j <= i + offset`), sliding window (`i + offset - left <= j <= i +
//! offset + right`), where `offset` is 0 for [`DiagonalAlignment::TopLeft`]
//! (PyTorch `is_causal`) and `Sk - Sq` for [`DiagonalAlignment::BottomRight`]
//! (FlashAttention-2, KV-cache decoding) — with key lengths, `key_lengths[b] -
//! Sq` for batch `b`, so each sequence is aligned to its own last key (as
//! FlashAttention-2's variable-length path does); key padding (`j < key_lengths[b]`);
//! and a boolean mask (nonzero = visible). An additive mask is added to the
//! logit after soft-capping (`cap * tanh(s / cap)`). Rows that see no key at
//! all give zeros and `lse = -inf`.
//!
//! NaN: a NaN in q, k or the mask makes exactly the rows it reaches NaN
//! (tracked explicitly, since drivers may fold NaN checks and software exp2
//! clamps NaN away). Values past a key-padding length are never read into
//! the output; a NaN in a V row hidden by another rule (causal, window,
//! mask) still reaches rows whose key block it shares, through `0 * NaN`,
//! as in PyTorch.

use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;
use crate::runtime::Plan;
use crate::runtime::Tensor;
use crate::tune::attention::{
    BackwardCoopPass, BackwardCoopTiles, BackwardTiles, DECODE_KERNEL_MAX_ROWS, DECODE_MAX_ROWS,
    DecodeTiles, FlashCoopTiles, FlashTiles, MAX_FLASH_DV, backward_coop_tiles, backward_tiles,
    decode_chunk_rows, decode_coop_fits, decode_coop_rf, decode_coop_spec, decode_coop_splits,
    decode_fits, decode_kernel_tiles, decode_shuffle_fits, decode_spec, decode_splits,
    decode_tiles_fit, decode_workgroup_bytes, flash_coop_tiles, flash_tiles_for, kv_splits,
};

/// Where the causal diagonal (and the sliding window around it) sits when
/// `Sq != Sk`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiagonalAlignment {
    /// Query `i` is aligned with key `i` (PyTorch SDPA `is_causal`).
    #[default]
    TopLeft,
    /// The last query is aligned with the last key: query `i` with key
    /// `i + Sk - Sq` (FlashAttention-2; what KV-cache decoding needs).
    BottomRight,
}

/// An attention mask, broadcastable from `[Sq, Sk]`, `[B|1, Sq, Sk]` or
/// `[B|1, Hq|1, Sq|1, Sk|1]`, of the same dtype as `q`.
///
/// wgtile has no boolean dtype: a boolean mask is a float tensor where 0
/// hides the key and any other value (1) keeps it.
#[derive(Clone, Debug)]
pub enum AttentionMask {
    /// 0 = masked, nonzero = visible.
    Boolean(Tensor),
    /// Added to the (soft-capped) logit; `-inf` hides the key.
    Additive(Tensor),
}

impl AttentionMask {
    fn tensor(&self) -> &Tensor {
        match self {
            AttentionMask::Boolean(t) | AttentionMask::Additive(t) => t,
        }
    }
}

/// Memory layout of q, k and v.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionLayout {
    /// `[B, H, S, D]` (rank 4).
    #[default]
    HeadsFirst,
    /// `[B, S, H * D]` (rank 3), the head counts given here.
    Packed {
        /// Query heads `Hq`.
        q_heads: usize,
        /// Key/value heads `Hkv`.
        kv_heads: usize,
    },
}

/// Which implementation runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionKernel {
    /// The decode kernel for few packed query rows (`group * Sq <=`
    /// [`DECODE_KERNEL_MAX_ROWS`]
    /// and head dims it takes), else the flash kernel (split-KV for
    /// decode-shaped problems).
    #[default]
    Auto,
    /// The scalar flash kernel, never split (never the tensor-core one);
    /// for the backward, the scalar kernels.
    Flash,
    /// The flash kernel with key splits chosen as for decoding
    /// (flash-decoding), never the decode kernel: the "before" of the decode
    /// benchmark.
    FlashSplit,
    /// The split-KV decode kernel (`shaders/attention_decode.wgsl`), one
    /// workgroup per (batch, KV head, key split) serving all query rows of
    /// the KV head: [`Error::InvalidArgument`] when D or Dv is not a multiple
    /// of 16 bytes' worth of elements or exceeds 256.
    Decode,
    /// The three-kernel reference that writes the full score matrix.
    Naive,
    /// The tensor-core flash kernel (cooperative matrices): f16, or f32
    /// with each value (scaled by its head's power of two) split into two
    /// f16 halves and three products per pair (results within ~1e-6 of the
    /// f32 flash kernel; inputs with an infinity or NaN are recomputed by
    /// the f32 flash kernel, so they give its result). D and Dv
    /// multiples of 16 up to 256, adapters with the 16x16 f16/f32
    /// cooperative matrix and one fixed subgroup size; anything else is
    /// `Error::UnsupportedFeature` (or `InvalidArgument` for the shapes).
    /// `Auto` picks it where it runs. For the backward, the tensor-core
    /// backward kernels (f16 only, same conditions).
    FlashCoop,
    /// The tensor-core kernel's algorithm with the matrix operations
    /// emulated per invocation: no tensor cores needed (f16 and subgroups
    /// only), many times slower. For testing the algorithm anywhere.
    FlashCoopEmulated,
    /// Split-KV decode on tensor cores (`shaders/attention_decode_coop.wgsl`):
    /// one subgroup per (batch, KV head, 16 packed query rows, key split),
    /// K and V fragments loaded straight from memory. f16, D and Dv
    /// multiples of 16 up to 256, K and V strides multiples of 8, adapters
    /// with the 16x16 f16/f32 cooperative matrix. Not in `Auto`: half the
    /// speed of [`AttentionKernel::Decode`] on the H200 (docs/perf/log-2026-11.md,
    /// runs 29-36).
    DecodeCoop,
    /// The tensor-core decode kernel's algorithm with emulated matrix
    /// operations (f16 and subgroups only; tests).
    DecodeCoopEmulated,
}

/// Options of [`Context::attention`]; build with the methods, e.g.
/// `AttentionOptions::new().causal(DiagonalAlignment::BottomRight).with_lse()`.
#[derive(Clone, Debug, Default)]
pub struct AttentionOptions {
    /// Softmax scale; `None` = `1 / sqrt(D)`.
    pub scale: Option<f32>,
    /// Causal masking.
    pub causal: bool,
    /// Diagonal alignment of the causal mask and the window.
    pub alignment: DiagonalAlignment,
    /// Sliding window: keys at most this far left of the diagonal (`None` = unbounded).
    pub window_left: Option<usize>,
    /// Sliding window: keys at most this far right of the diagonal (`None` = unbounded).
    pub window_right: Option<usize>,
    /// Logit soft-capping `cap * tanh(s / cap)` before softmax.
    pub softcap: Option<f32>,
    /// Boolean or additive mask.
    pub mask: Option<AttentionMask>,
    /// Keys per batch element (key padding / varlen keys); each `<= Sk`.
    pub key_lengths: Option<Vec<u32>>,
    /// Also return the per-row logsumexp `[B, Hq, Sq]` (f32).
    pub return_lse: bool,
    /// Layout of q, k, v.
    pub layout: AttentionLayout,
    /// Implementation.
    pub kernel: AttentionKernel,
    /// Force this many key splits (flash-decoding or the decode kernel)
    /// instead of the dispatcher's choice.
    pub kv_splits: Option<u32>,
    /// Force the flash kernel's tile shape (tests and tuning); `td` and `vk`
    /// are adjusted to the value head dimension. `None` = the dispatcher's.
    pub tiles: Option<FlashTiles>,
    /// Force the backward kernels' tile shape (tests and tuning); `td` and
    /// `vk` are adjusted to the head dims. `None` = the dispatcher's.
    pub backward_tiles: Option<BackwardTiles>,
    /// Force the tensor-core flash kernel's tile shape (with
    /// [`AttentionKernel::FlashCoop`]; tests and tuning). `None` = the
    /// dispatcher's.
    pub coop_tiles: Option<FlashCoopTiles>,
    /// Force the tensor-core backward kernels' tile shape (with
    /// [`AttentionKernel::FlashCoop`] or `FlashCoopEmulated`; tests and
    /// tuning). `None` = the dispatcher's.
    pub backward_coop_tiles: Option<BackwardCoopTiles>,
    /// Force the tensor-core dQ kernel's tile shape alone (tests and
    /// tuning; with [`AttentionOptions::backward_coop_tiles`] the two
    /// kernels can differ). `None` = as the dK/dV kernel.
    pub backward_coop_dq_tiles: Option<BackwardCoopTiles>,
    /// Row fragments (16 rows each) per workgroup of
    /// [`AttentionKernel::DecodeCoop`]: 1 or 2. `None` = the dispatcher's
    /// ([`decode_coop_rf`]: 1 for up to 16 rows per KV head, else 2).
    pub decode_coop_rf: Option<u32>,
    /// Force the decode kernel's tile (tests and tuning). `None` = the
    /// dispatcher's ([`decode_kernel_tiles`]).
    pub decode_tiles: Option<DecodeTiles>,
    /// The decode kernel adds each key's partial dots by subgroup shuffles
    /// (one barrier per key block) or through workgroup memory (two).
    /// `None` = shuffles where the adapter allows them
    /// ([`decode_shuffle_fits`]; on the H200 they took f16 32k from 76 to
    /// 70 us); `Some(true)` on an adapter without them is an error.
    pub decode_shuffle: Option<bool>,
}

impl AttentionOptions {
    /// Defaults: scale `1/sqrt(D)`, no masking, heads-first layout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Causal masking with the given diagonal alignment.
    pub fn causal(mut self, alignment: DiagonalAlignment) -> Self {
        self.causal = true;
        self.alignment = alignment;
        self
    }

    /// Diagonal alignment (for a window without causal masking).
    pub fn alignment(mut self, alignment: DiagonalAlignment) -> Self {
        self.alignment = alignment;
        self
    }

    /// Sliding window of `left` keys before and `right` keys after the diagonal.
    pub fn window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.window_left = left;
        self.window_right = right;
        self
    }

    /// Softmax scale.
    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Logit soft-capping.
    pub fn softcap(mut self, cap: f32) -> Self {
        self.softcap = Some(cap);
        self
    }

    /// A boolean mask (0 = hidden).
    pub fn bool_mask(mut self, mask: &Tensor) -> Self {
        self.mask = Some(AttentionMask::Boolean(mask.clone()));
        self
    }

    /// An additive mask.
    pub fn additive_mask(mut self, mask: &Tensor) -> Self {
        self.mask = Some(AttentionMask::Additive(mask.clone()));
        self
    }

    /// Key-padding lengths, one per batch element.
    pub fn key_lengths(mut self, lengths: &[u32]) -> Self {
        self.key_lengths = Some(lengths.to_vec());
        self
    }

    /// Return the logsumexp too.
    pub fn with_lse(mut self) -> Self {
        self.return_lse = true;
        self
    }

    /// Packed `[B, S, H * D]` inputs.
    pub fn packed(mut self, q_heads: usize, kv_heads: usize) -> Self {
        self.layout = AttentionLayout::Packed { q_heads, kv_heads };
        self
    }

    /// Implementation choice.
    pub fn kernel(mut self, kernel: AttentionKernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// Force the number of key splits (flash-decoding).
    pub fn kv_splits(mut self, splits: u32) -> Self {
        self.kv_splits = Some(splits);
        self
    }

    /// Force the flash tile shape.
    pub fn tiles(mut self, tiles: FlashTiles) -> Self {
        self.tiles = Some(tiles);
        self
    }

    /// Force the tensor-core backward tile shape (implies
    /// [`AttentionKernel::FlashCoop`] unless the emulated kernel is set).
    pub fn backward_coop_tiles(mut self, tiles: BackwardCoopTiles) -> Self {
        self.backward_coop_tiles = Some(tiles);
        if self.kernel != AttentionKernel::FlashCoopEmulated {
            self.kernel = AttentionKernel::FlashCoop;
        }
        self
    }

    /// Force the tensor-core flash tile shape (implies
    /// [`AttentionKernel::FlashCoop`]).
    pub fn coop_tiles(mut self, tiles: FlashCoopTiles) -> Self {
        self.coop_tiles = Some(tiles);
        self.kernel = AttentionKernel::FlashCoop;
        self
    }

    /// Force the decode kernel's tile.
    pub fn decode_tiles(mut self, tiles: DecodeTiles) -> Self {
        self.decode_tiles = Some(tiles);
        self
    }

    /// Force the decode kernel's partial-dot reduction: subgroup shuffles
    /// (`true`) or workgroup memory (`false`).
    pub fn decode_shuffle(mut self, on: bool) -> Self {
        self.decode_shuffle = Some(on);
        self
    }
}

/// What [`Context::attention`] returns.
#[derive(Clone, Debug)]
pub struct AttentionOutput {
    /// `[B, Hq, Sq, Dv]` (or `[B, Sq, Hq * Dv]` for packed inputs), q's dtype.
    pub o: Tensor,
    /// Per-row logsumexp (natural log) `[B, Hq, Sq]`, f32, when asked for;
    /// `-inf` for rows that see no key.
    pub lse: Option<Tensor>,
}

/// One operand seen as `[batch, heads, seq, dim]` through element strides
/// (the last dimension contiguous).
#[derive(Clone, Debug)]
struct Operand {
    buffer: Arc<wgpu::Buffer>,
    dtype: DType,
    batch: usize,
    heads: usize,
    seq: usize,
    dim: usize,
    strides: [usize; 3],
}

fn operand(t: &Tensor, layout: AttentionLayout, heads: usize, what: &str) -> Result<Operand> {
    let s = t.shape();
    let (batch, heads, seq, dim, strides) = match layout {
        AttentionLayout::HeadsFirst => {
            if s.len() != 4 {
                return Err(Error::InvalidArgument(format!(
                    "attention {what} must be [B, H, S, D] (rank 4), got {s:?}"
                )));
            }
            (
                s[0],
                s[1],
                s[2],
                s[3],
                [s[1] * s[2] * s[3], s[2] * s[3], s[3]],
            )
        }
        AttentionLayout::Packed { .. } => {
            if s.len() != 3 {
                return Err(Error::InvalidArgument(format!(
                    "packed attention {what} must be [B, S, H * D] (rank 3), got {s:?}"
                )));
            }
            if heads == 0 || !s[2].is_multiple_of(heads) {
                return Err(Error::shape(
                    "attention",
                    s,
                    &[heads],
                    format!("{what}'s last dimension is not a multiple of its {heads} heads"),
                ));
            }
            let dim = s[2] / heads;
            (s[0], heads, s[1], dim, [s[1] * s[2], dim, s[2]])
        }
    };
    Ok(Operand {
        buffer: t.buffer.clone(),
        dtype: t.dtype(),
        batch,
        heads,
        seq,
        dim,
        strides,
    })
}

/// Growable key/value cache on the GPU: `[B, Hkv, capacity, D]` keys and
/// `[B, Hkv, capacity, Dv]` values, of which the first [`KvCache::len`]
/// positions are filled. [`KvCache::append`] writes new positions in place
/// with GPU copies, doubling the capacity (GPU-side copy) when full, and
/// [`Context::attention_cached`] reads the filled part through strides.
#[derive(Clone, Debug)]
pub struct KvCache {
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl KvCache {
    /// An empty cache. For f16, `head_dim` and `value_dim` must be even (GPU
    /// copies move whole 4-byte words).
    pub fn new(
        ctx: &Context,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        value_dim: usize,
        capacity: usize,
        dtype: DType,
    ) -> Result<Self> {
        if dtype == DType::F16 {
            ctx.require_f16("f16 KV cache")?;
            if !head_dim.is_multiple_of(2) || !value_dim.is_multiple_of(2) {
                return Err(Error::InvalidArgument(format!(
                    "an f16 KV cache needs even head dims (got {head_dim} and {value_dim})"
                )));
            }
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

    /// Appends `k_new` `[B, Hkv, n, D]` and `v_new` `[B, Hkv, n, Dv]` at
    /// position `len` (GPU copies, no host round trip), growing the buffers
    /// to at least twice their capacity when needed.
    pub fn append(&mut self, k_new: &Tensor, v_new: &Tensor) -> Result<()> {
        let ks = self.k.shape().to_vec();
        let vs = self.v.shape().to_vec();
        for (t, s, what) in [(k_new, &ks, "keys"), (v_new, &vs, "values")] {
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
        let ctx = self.k.ctx.clone();
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
}

/// Copies positions `src_pos..src_pos + n` of every (batch, head) of `src`
/// (`[B, H, S_src, D]`) to positions `dst_pos..` of `dst` (`[B, H, S_dst, D]`).
fn copy_rows(
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

/// The dispatches' uniform parameters, in `attention_common.wgsl`'s order.
struct Params {
    words: Vec<u32>,
}

/// A checked attention call: dimensions `[B, Hq, Hkv, Sq, Sk, D, Dv]`, the
/// output shape, the parameter words (without the split fields) and the
/// buffers every kernel binds.
struct Setup {
    dtype: DType,
    dims: [usize; 7],
    o_shape: Vec<usize>,
    words: Vec<u32>,
    mask_buf: Arc<wgpu::Buffer>,
    kv_len: Tensor,
    dummy: Tensor,
    flops: u64,
}

const BIG: i64 = 1 << 30;

fn u32_of(x: usize, what: &str) -> Result<u32> {
    u32::try_from(x)
        .map_err(|_| Error::InvalidArgument(format!("attention {what} {x} does not fit in u32")))
}

impl Context {
    /// Attention `softmax(scale * q k^T + mask) v` (see the module docs for
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
        if options.layout != AttentionLayout::HeadsFirst {
            return Err(Error::InvalidArgument(
                "attention_cached takes q as [B, Hq, Sq, D]".into(),
            ));
        }
        let view = |t: &Tensor| {
            let s = t.shape();
            Operand {
                buffer: t.buffer.clone(),
                dtype: t.dtype(),
                batch: s[0],
                heads: s[1],
                seq: cache.len,
                dim: s[3],
                strides: [s[1] * s[2] * s[3], s[2] * s[3], s[3]],
            }
        };
        q.require_contiguous("attention")?;
        if !Arc::ptr_eq(&q.ctx.inner, &self.inner) {
            return Err(Error::InvalidArgument(
                "attention operands must live on the context that runs them".into(),
            ));
        }
        if let Some(mask) = &options.mask {
            mask.tensor().require_contiguous("an attention mask")?;
        }
        let qo = operand(q, options.layout, 0, "q")?;
        let bytes = (q.numel()
            + cache.len
                * cache.k.shape()[0]
                * cache.k.shape()[1]
                * (cache.k.shape()[3] + cache.v.shape()[3])) as u64
            * q.dtype().size() as u64;
        self.attention_impl(qo, view(&cache.k), view(&cache.v), options, bytes)
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
        for t in [q, k, v] {
            if !Arc::ptr_eq(&t.ctx.inner, &self.inner) {
                return Err(Error::InvalidArgument(
                    "attention operands must live on the context that runs them".into(),
                ));
            }
            t.require_contiguous("attention")?;
        }
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
        let bytes = (q.numel() + k.numel() + v.numel()) as u64 * q.dtype().size() as u64;
        self.attention_impl(qo, ko, vo, options, bytes)
    }

    /// Checks q, k, v and the options, and builds the kernels' parameters
    /// (shared by the forward and backward passes).
    fn attention_setup(
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
        words.push(lo as i32 as u32);
        words.push(hi as i32 as u32);
        let log2e = std::f32::consts::LOG2_E;
        for f in [scale, scale * log2e, softcap, softcap * log2e] {
            words.push(f.to_bits());
        }
        words.push(mask_kind);
        for x in mask_strides {
            words.push(u32_of(x, "mask stride")?);
        }
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

    fn attention_impl(
        &self,
        q: Operand,
        k: Operand,
        v: Operand,
        opts: &AttentionOptions,
        in_bytes: u64,
    ) -> Result<(Plan, AttentionOutput)> {
        let Setup {
            dtype,
            dims: [b, hq, hkv, sq, sk, d, dv],
            o_shape,
            words,
            mask_buf,
            kv_len,
            dummy,
            flops,
        } = self.attention_setup(&q, &k, &v, opts)?;
        let dummy_lse = self.alloc(&[4], DType::F32, "wgtile attention unused lse")?;
        let o = self.alloc(&o_shape, dtype, "wgtile attention out")?;
        let lse = if opts.return_lse {
            Some(self.alloc(&[b, hq, sq], DType::F32, "wgtile attention lse")?)
        } else {
            None
        };
        let out = AttentionOutput {
            o: o.clone(),
            lse: lse.clone(),
        };
        let bytes = in_bytes + o.size_bytes();
        let mut plan = Plan {
            ctx: self.clone(),
            label: String::new(),
            dispatches: Vec::new(),
            output: o.clone(),
            flops,
            bytes,
            scratch: Vec::new(),
        };
        if b * hq * sq == 0 {
            plan.label = "attention (empty result)".into();
            return Ok((plan, out));
        }

        let params_base = Params { words };

        let lse_buf = lse.as_ref().unwrap_or(&dummy_lse).buffer.clone();
        let device = &self.inner.device;
        let profile = self.profile();
        let max_groups = profile.max_workgroups_per_dim as usize;
        let limit = |requested: usize, what: String| Error::LimitExceeded {
            limit: "max_compute_workgroups_per_dimension",
            requested: requested as u64,
            max: max_groups as u64,
            what,
        };

        if opts.kernel == AttentionKernel::Naive {
            let scores = self.alloc(&[b, hq, sq, sk], DType::F32, "wgtile attention scores")?;
            let mut words = params_base.words.clone();
            words.extend([0, 1, 0]);
            let params = self.uniform(&words);
            let z = b * hq;
            if z > max_groups || sq.div_ceil(16) > max_groups || sk.div_ceil(16) > max_groups {
                return Err(limit(
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
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                get(Kernel::AttentionScores)?,
                &[
                    (0, &params),
                    (1, &q.buffer),
                    (2, &k.buffer),
                    (6, &mask_buf),
                    (7, &kv_len.buffer),
                    (9, &scores.buffer),
                ],
                grid(sk, sq),
            ));
            let rows = (b * hq * sq).div_ceil(64);
            let (gx, gy) = (rows.min(max_groups), rows.div_ceil(max_groups.max(1)));
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                get(Kernel::AttentionSoftmax)?,
                &[(0, &params), (5, &lse_buf), (9, &scores.buffer)],
                [gx as u32, gy as u32, 1],
            ));
            if dv > 0 {
                plan.dispatches.push(Dispatch::with_bindings(
                    device,
                    get(Kernel::AttentionPv)?,
                    &[
                        (0, &params),
                        (3, &v.buffer),
                        (4, &o.buffer),
                        (7, &kv_len.buffer),
                        (9, &scores.buffer),
                    ],
                    grid(dv, sq),
                ));
            }
            plan.label = format!("attention naive (S = {b}x{hq}x{sq}x{sk} f32 in memory)");
            plan.scratch.extend([scores, dummy, dummy_lse, kv_len]);
            return Ok((plan, out));
        }

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
        if matches!(
            opts.kernel,
            AttentionKernel::DecodeCoop | AttentionKernel::DecodeCoopEmulated
        ) {
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
            let aligned = [&k, &v]
                .iter()
                .all(|t| t.strides.iter().all(|s| s.is_multiple_of(8)));
            if !decode_coop_fits(profile, rf, d, dv, emulated) || !aligned {
                return Err(Error::InvalidArgument(format!(
                    "the tensor-core decode kernel needs D and Dv multiples of 16 up to 256, \
                     K, V strides that are multiples of 8 and 1 or 2 row fragments that fit \
                     the adapter (got D = {d}, Dv = {dv}, {rf} fragments)"
                )));
            }
            let ys = hkv * rows_kv.div_ceil(16 * rf as usize);
            if ys > max_groups || b > max_groups {
                return Err(limit(
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
                self.split_setup(params_base.words, wanted, 16, [sk, rows, dv])?;
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
                    (1, &q.buffer),
                    (2, &k.buffer),
                    (3, &v.buffer),
                    (5, &scratch.buffer),
                    (6, &mask_buf),
                    (7, &kv_len.buffer),
                ],
                [splits as u32, ys as u32, b as u32],
            ));
            plan.dispatches.push(self.merge_dispatch(
                (dtype, dv, rows),
                &params,
                &o.buffer,
                &scratch.buffer,
                &lse_buf,
            )?);
            plan.label = format!(
                "attention decode on tensor cores{} ({rows_kv} rows per KV head, {} per workgroup, {splits} key splits of {split_len})",
                if emulated { ", emulated" } else { "" },
                16 * rf
            );
            plan.scratch.extend([scratch, dummy, dummy_lse, kv_len]);
            return Ok((plan, out));
        }
        if use_decode {
            let rows_kv = group * sq;
            let chunks = rows_kv.div_ceil(decode_chunk_rows(rows_kv));
            let ys = hkv * chunks;
            if ys > max_groups || b > max_groups {
                return Err(limit(
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
                self.split_setup(params_base.words, wanted, dtiles.keys(), [sk, rows, dv])?;
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
                .get(device, &decode_spec(dtype, rows_kv, d, dv, dtiles, shuffle))?;
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                pipeline,
                &[
                    (0, &params),
                    (1, &q.buffer),
                    (5, &scratch.buffer),
                    (6, &mask_buf),
                    (7, &kv_len.buffer),
                    (12, &k.buffer),
                    (13, &v.buffer),
                ],
                [splits as u32, ys as u32, b as u32],
            ));
            plan.dispatches.push(self.merge_dispatch(
                (dtype, dv, rows),
                &params,
                &o.buffer,
                &scratch.buffer,
                &lse_buf,
            )?);
            plan.label = format!(
                "attention decode ({rows_kv} rows per KV head, {splits} key splits of {split_len}, {dtiles}{})",
                if shuffle { ", shuffles" } else { "" }
            );
            plan.scratch.extend([scratch, dummy, dummy_lse, kv_len]);
            return Ok((plan, out));
        }

        if let Some(coop) = self.coop_choice(&q, &k, &v, opts, dtype)? {
            self.flash_coop(
                &mut plan,
                coop,
                [&q, &k, &v],
                &o.buffer,
                &params_base.words,
                (&mask_buf, &kv_len.buffer, &lse_buf),
            )?;
            plan.scratch.extend([dummy, dummy_lse, kv_len]);
            return Ok((plan, out));
        }

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
            return Err(limit(slices.max(b), "attention grid (heads, batch)".into()));
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
            return Err(limit(
                q_blocks * splits,
                "attention grid (query blocks x splits)".into(),
            ));
        }
        let split = splits > 1;
        let mut words = params_base.words;
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
                    (1, &q.buffer),
                    (2, &k.buffer),
                    (3, &v.buffer),
                    (4, &o.buffer),
                    (5, &lse_buf),
                    (6, &mask_buf),
                    (7, &kv_len.buffer),
                ],
                grid,
            ));
            plan.label = format!(
                "attention flash ({tiles}{})",
                if pack { ", GQA heads packed" } else { "" }
            );
            plan.scratch.extend([dummy, dummy_lse, kv_len]);
            return Ok((plan, out));
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
                (1, &q.buffer),
                (2, &k.buffer),
                (3, &v.buffer),
                (4, &o.buffer),
                (5, &scratch.buffer),
                (6, &mask_buf),
                (7, &kv_len.buffer),
            ],
            grid,
        ));
        plan.dispatches.push(self.merge_dispatch(
            (dtype, dv, rows),
            &params,
            &o.buffer,
            &scratch.buffer,
            &lse_buf,
        )?);
        plan.label = format!(
            "attention flash-decoding ({tiles}, {splits} key splits of {split_len}{})",
            if pack { ", GQA heads packed" } else { "" }
        );
        plan.scratch.extend([scratch, dummy, dummy_lse, kv_len]);
        Ok((plan, out))
    }

    /// The key splits of a decode kernel: about `wanted` splits of `sk`
    /// keys, each a multiple of `kb` keys long; returns the split count and
    /// length, the parameters (`words` with the split fields) and the f32
    /// scratch for the `rows` partial states of Dv columns plus (m, l).
    fn split_setup(
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
    fn merge_dispatch(
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

/// The tensor-core kernel's launch: tiles, subgroup size, problem dims.
#[derive(Clone, Copy, Debug)]
struct CoopChoice {
    tiles: FlashCoopTiles,
    emulated: bool,
    sg: u32,
    dims: [usize; 7],
    /// f16, or f32 (the split kernel).
    dtype: DType,
}

impl Context {
    /// Whether (and how) the tensor-core flash kernel runs: forced by
    /// [`AttentionKernel::FlashCoop`] (errors when it cannot), chosen by
    /// `Auto` for f16 problems it supports that are not decode-shaped (more
    /// than [`DECODE_MAX_ROWS`] query rows) and force no scalar tiles or
    /// splits.
    fn coop_choice(
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
            .all(|t| t.strides.iter().all(|s| s.is_multiple_of(8)));
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
    fn flash_coop(
        &self,
        plan: &mut Plan,
        c: CoopChoice,
        [q, k, v]: [&Operand; 3],
        o: &wgpu::Buffer,
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
        let pipeline = self.inner.pipelines.get(
            device,
            &if c.emulated {
                c.tiles.spec_emulated(d, dv, c.dtype)
            } else {
                c.tiles.spec(d, dv, c.sg, c.dtype)
            }
            .constant("PROBE", coop_probe()),
        )?;
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

/// Gradients returned by [`Context::attention_backward`], each with the shape,
/// layout and dtype of its input.
#[derive(Clone, Debug)]
pub struct AttentionGrads {
    /// dL/dq.
    pub dq: Tensor,
    /// dL/dk (summed over the query heads of each KV head).
    pub dk: Tensor,
    /// dL/dv (summed over the query heads of each KV head).
    pub dv: Tensor,
}

/// Largest head dimension (D or Dv) of the backward kernels.
pub const MAX_BACKWARD_DIM: usize = 256;

impl Context {
    /// FlashAttention-2 backward with recomputation: given the forward's
    /// inputs, its output `o`, the upstream gradient `d_o` (shaped like `o`)
    /// and the forward's logsumexp `lse` (`[B, Hq, Sq]` f32, from
    /// [`AttentionOptions::with_lse`]), returns dq, dk, dv. The options must
    /// be the forward's (masks, window, soft-cap, scale, layout). Never stores
    /// an Sq x Sk matrix. D and Dv up to [`MAX_BACKWARD_DIM`].
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
        for t in [q, k, v, o, d_o, lse] {
            if !Arc::ptr_eq(&t.ctx.inner, &self.inner) {
                return Err(Error::InvalidArgument(
                    "attention operands must live on the context that runs them".into(),
                ));
            }
            t.require_contiguous(op)?;
        }
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
            ctx: self.clone(),
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
                (15, &*q.buffer),
                (16, &*k.buffer),
                (17, &*v.buffer),
                (18, &*d_o.buffer),
            ]
        } else {
            vec![
                (1, &*q.buffer),
                (2, &*k.buffer),
                (3, &*v.buffer),
                (10, &*d_o.buffer),
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
            (7, &*kv_len.buffer),
            (11, &*stats.buffer),
        ];
        let [kv_spec, q_spec] = &specs;
        if b * hkv > 0 && sk > 0 {
            let mut bindings = shared.to_vec();
            bindings.extend([(13, &*dk.buffer), (14, &*dv_t.buffer)]);
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
            bindings.push((12, &*dq.buffer));
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
    /// Encodes the backward's `prepare` kernel (lse in log2 units and Delta
    /// per row into `stats`; dtype-generic, shared by both backward paths).
    #[allow(clippy::too_many_arguments)]
    fn backward_prepare(
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
    fn backward_coop_choice(
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
            .all(|t| t.strides.iter().all(|s| s.is_multiple_of(8)));
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

/// Largest head dim (D or Dv) for which `Auto` runs the backward on tensor
/// cores: beyond it the kernels' register operands (K, V and both
/// accumulators per subgroup) would spill.
pub const BACKWARD_COOP_AUTO_MAX_DIM: usize = 128;

/// The split-merge kernel's specialisation for value head dim `dv` and its
/// grid's z size (column chunks): 256 invocations (64 where the adapter
/// allows fewer) over 32 columns, so 8 (2) split lanes read a row's splits
/// in parallel.
fn merge_spec(profile: &crate::gpu::AdapterProfile, dtype: DType, dv: usize) -> (Spec, u32) {
    const CW: usize = 32;
    let wg = if profile.max_invocations >= 256 && profile.max_workgroup_size_x >= 256 {
        256
    } else {
        64
    };
    let spec = Spec::new(Kernel::AttentionMerge)
        .dtype(dtype)
        .override_("WG", wg)
        .override_("CW", CW as u32);
    (spec, dv.div_ceil(CW).max(1) as u32)
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
