//! Attention: options and the types of its inputs and outputs; the plans in
//! the submodules. The semantics are documented on [`AttentionOptions`].

use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;
use crate::gpu::Plan;
use crate::gpu::Tensor;
mod backward;
mod coop;
mod decode;
mod forward;
mod kv_cache;

pub(crate) use crate::tune::attention::merge_spec;
use crate::tune::attention::{
    BackwardCoopPass, BackwardCoopTiles, BackwardTiles, DECODE_KERNEL_MAX_ROWS, DECODE_MAX_ROWS,
    DecodeTiles, FlashCoopTiles, FlashTiles, MAX_FLASH_DV, backward_coop_tiles, backward_tiles,
    decode_chunk_rows, decode_coop_fits, decode_coop_rf, decode_coop_spec, decode_coop_splits,
    decode_fits, decode_kernel_tiles, decode_shuffle_fits, decode_spec, decode_splits,
    decode_tiles_fit, decode_workgroup_bytes, flash_coop_tiles, flash_tiles_for, kv_splits,
};
pub use kv_cache::KvCache;

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
    /// Query `i` is aligned with key `i + offset` (any sign): a KV cache
    /// holding `offset` past keys before the queries' own, as ONNX's
    /// Attention places the diagonal. `Offset(0)` is `TopLeft`; with key
    /// lengths the band is not moved per batch (that is `BottomRight`'s).
    Offset(i64),
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

    /// The same kind of mask over `t` (a staged copy of this mask).
    fn over(&self, t: &Tensor) -> Self {
        match self {
            AttentionMask::Boolean(_) => AttentionMask::Boolean(t.clone()),
            AttentionMask::Additive(_) => AttentionMask::Additive(t.clone()),
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
    /// `DECODE_KERNEL_MAX_ROWS`
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
///
/// Attention: `O = softmax(scale * Q K^T + mask) V`, FlashAttention style.
///
/// This module owns the attention op's checks, its options and its launch
/// code; `tune::attention` picks tiles and key splits, `shaders/attention_*`
/// hold the kernels.
///
/// # Algorithm
/// The flash kernel (`shaders/attention_flash.wgsl`) never writes the Sq x Sk
/// score matrix to memory. A workgroup owns a block of query rows of one
/// (batch, head) and streams blocks of keys and values through workgroup
/// memory, keeping per row a running maximum `m` and sum `l` of the softmax
/// (the *online softmax*): when a block raises the maximum, the accumulated
/// output and sum are rescaled by `exp(m_old - m_new)`, and the output is
/// divided by `l` once at the end. Key blocks that the causal diagonal, the
/// sliding window or the key-padding length hide entirely are skipped
/// without being loaded. The row logsumexp `m + ln l` is what the backward
/// pass needs to recompute the probabilities.
///
/// For decoding (few query rows) the key sequence is split over workgroups
/// (flash-decoding): each writes a partial state `(O_s, m_s, l_s)` and a
/// small merge kernel combines them, so one query row still fills the GPU.
/// When the query rows of a KV head (`group * Sq`) are few (at most
/// `DECODE_KERNEL_MAX_ROWS`) and the head dims are whole 16-byte words (D,
/// Dv multiples of 4 f32 or 8 f16, up to 256), `Auto` runs the dedicated
/// decode kernel (`shaders/attention_decode.wgsl`) instead of the flash tile:
/// one workgroup per (batch, KV head, key split) reads K and V once, in
/// coalesced 16-byte words, for all those rows, with no arithmetic spent on
/// absent rows (query rows packed four to a vec4; its tile, a
/// [`DecodeTiles`], is the host's choice and can be forced with
/// [`AttentionOptions::decode_tiles`]); the flash path remains for everything else (and as
/// [`AttentionKernel::FlashSplit`]). Every option (masks, windows, key
/// lengths, soft-cap, lse) is supported by both.
///
/// A tensor-core flash kernel (`shaders/attention_flash_coop.wgsl`, forced
/// with [`AttentionKernel::FlashCoop`] on adapters with the 16x16 f16/f32
/// cooperative matrix) runs the same algorithm with Q K^T and P V on
/// cooperative matrices, the output rescaled only when a row's maximum grows
/// by more than 2^8 (the accumulators cannot be scaled per row in place).
/// `Auto` picks it for f16 and f32 problems with D and Dv multiples of 16 up
/// to 256 that are not decode-shaped. For f32 a first pass
/// (`shaders/attention_split_scale.wgsl`) finds each head's largest |q|,
/// |k|, |v|; the kernel scales each value by its head's power of two, splits
/// it into two f16 halves and takes three products per fragment pair
/// (3xTF32's idea on f16 tensor cores), each 16-wide slice's products summed
/// from zero and added in f32: on the H200 1.4x PyTorch's fp32 SDPA at S4096
/// D128 (65.7 against 46.2 TFLOP/s), results within ~2e-7 of the f32 flash
/// kernel. Halves cannot carry an infinity or NaN, so that first pass also
/// flags them, and the plan ends with the f32 flash kernel guarded by the
/// flag: it recomputes O and lse when set (IEEE's result, as the f32 flash
/// kernel gives it) and returns at once otherwise.
///
/// The naive path (`AttentionKernel::Naive`) materialises S in three kernels
/// and is kept as the reference and the "before" of the comparison.
///
/// The backward pass ([`Context::attention_backward`], FlashAttention-2
/// style) stores no Sq x Sk matrix either: from Q, K and the forward's
/// logsumexp it recomputes P tile by tile, once in a kernel that owns a key
/// block (dK, dV, summed over the query heads sharing a KV head) and once in
/// a kernel that owns a query block (dQ), so no float atomics are needed.
/// For f16 with D and Dv multiples of 16 (up to 128 in `Auto`) both kernels
/// run on tensor cores (`shaders/attention_bwd_coop_dkdv.wgsl`,
/// `attention_bwd_coop_dq.wgsl`; [`BackwardCoopTiles`]): a subgroup keeps
/// its 16 keys' K and V (or its 16 rows' Q and dO) as cooperative matrices,
/// S^T and dP^T (S and dP) come from the tensor cores, P^T and dS^T pass
/// through workgroup memory as f16, and the gradient products run on the
/// tensor cores too. `AttentionKernel::Flash` keeps the scalar kernels.
///
/// A tensor-core decode kernel (`shaders/attention_decode_coop.wgsl`,
/// [`AttentionKernel::DecodeCoop`], forced only) packs the query rows of a
/// KV head into 16-row fragments and loads K and V fragments straight from
/// memory with no workgroup staging. On the H200 it ran at half the speed
/// of the scalar decode kernel (32k f16 cache: 194 us against 102;
/// cooperative loads from storage are slow there), so `Auto` never takes it.
///
/// [`KvCache`] keeps growable K/V buffers on the GPU; prefill and decode both
/// go through [`Context::attention_cached`].
///
/// # Layouts
/// `q` is `[B, Hq, Sq, D]`, `k` `[B, Hkv, Sk, D]`, `v` `[B, Hkv, Sk, Dv]`
/// with `Hq` a multiple of `Hkv` (MHA, GQA, MQA); or, with
/// [`AttentionLayout::Packed`], `[B, S, H * D]` (the output then is
/// `[B, Sq, Hq * Dv]`), read in place through strides.
///
/// # Masking
/// Key `j` is visible to query `i` when it passes every configured rule:
/// causal (`j <= i + offset`), sliding window (`i + offset - left <= j <= i +
/// offset + right`), where `offset` is 0 for [`DiagonalAlignment::TopLeft`]
/// (PyTorch `is_causal`) and `Sk - Sq` for [`DiagonalAlignment::BottomRight`]
/// (FlashAttention-2, KV-cache decoding) — with key lengths, `key_lengths[b] -
/// Sq` for batch `b`, so each sequence is aligned to its own last key (as
/// FlashAttention-2's variable-length path does); key padding (`j < key_lengths[b]`);
/// and a boolean mask (nonzero = visible). An additive mask is added to the
/// logit after soft-capping (`cap * tanh(s / cap)`). Rows that see no key at
/// all give zeros and `lse = -inf`.
///
/// NaN: a NaN in q, k or the mask makes exactly the rows it reaches NaN
/// (tracked explicitly, since drivers may fold NaN checks and software exp2
/// clamps NaN away). Values past a key-padding length are never read into
/// the output; a NaN in a V row hidden by another rule (causal, window,
/// mask) still reaches rows whose key block it shares, through `0 * NaN`,
/// as in PyTorch.
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
    /// Return the attention probabilities too (`with_probabilities`).
    pub return_probs: bool,
    /// Return the logits the softmax reads too (`with_scores`).
    pub return_scores: bool,
    /// Return the raw scores `scale q k^T` too (`with_raw_scores`).
    pub return_raw_scores: bool,
    /// Layout of q, k, v.
    pub layout: AttentionLayout,
    /// The head dims `(D, Dv)` the caller expects, checked against the
    /// operands (`packed_dims`): a packed `[B, S, H * D]` tensor of another
    /// width (a fused QKV projection passed whole) is refused instead of
    /// read with a wider head. `None` = whatever the shapes give.
    pub head_dims: Option<(usize, usize)>,
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
    /// (`decode_coop_rf`: 1 for up to 16 rows per KV head, else 2).
    pub decode_coop_rf: Option<u32>,
    /// Force the decode kernel's tile (tests and tuning). `None` = the
    /// dispatcher's (`decode_kernel_tiles`).
    pub decode_tiles: Option<DecodeTiles>,
    /// The decode kernel adds each key's partial dots by subgroup shuffles
    /// (one barrier per key block) or through workgroup memory (two).
    /// `None` = shuffles where the adapter allows them
    /// (`decode_shuffle_fits`; on the H200 they took f16 32k from 76 to
    /// 70 us); `Some(true)` on an adapter without them is an error.
    pub decode_shuffle: Option<bool>,
}

impl AttentionOptions {
    /// Refuses malformed forced settings, naming the field, whichever path
    /// would run (they used to divide by zero or be ignored).
    pub(crate) fn check_forced(&self) -> Result<()> {
        let invalid = |why: String| Err(Error::InvalidArgument(format!("attention: {why}")));
        if let AttentionLayout::Packed { q_heads, kv_heads } = self.layout
            && (q_heads == 0 || kv_heads == 0)
        {
            return invalid(format!(
                "the packed layout needs at least one head, got q_heads = {q_heads}, kv_heads = {kv_heads}"
            ));
        }
        if self.kv_splits == Some(0) {
            return invalid("kv_splits = 0 (must be at least 1)".into());
        }
        if let Some(rf) = self.decode_coop_rf
            && !matches!(rf, 1 | 2)
        {
            return invalid(format!("decode_coop_rf = {rf} (must be 1 or 2)"));
        }
        let reasons = [
            self.tiles.and_then(FlashTiles::invalid_reason),
            self.backward_tiles.and_then(BackwardTiles::invalid_reason),
            self.coop_tiles.and_then(FlashCoopTiles::invalid_reason),
            self.backward_coop_tiles.and_then(BackwardCoopTiles::invalid_reason),
            self.backward_coop_dq_tiles.and_then(BackwardCoopTiles::invalid_reason),
        ];
        match reasons.into_iter().flatten().next() {
            Some(why) => invalid(format!("forced {why}")),
            None => Ok(()),
        }
    }

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

    /// Return the probabilities too: `softmax(mask(scale q k^T))`,
    /// `[B, Hq, Sq, Sk]` f32, every mask, window and soft-cap applied
    /// (ONNX Attention's `qk_matmul_output_mode` 3); a row that sees no
    /// key is zeros. They exist only on the naive path, which keeps the
    /// score matrix in memory, so this runs it (O(Sq Sk) memory per head;
    /// another forced kernel is an error).
    pub fn with_probabilities(mut self) -> Self {
        self.return_probs = true;
        self
    }

    /// Return the logits too: what the softmax reads, `scale q k^T`
    /// soft-capped (`cap * tanh(s / cap)`), the additive mask added, and
    /// `-inf` for every key a rule hides (causal, window, key lengths,
    /// boolean mask), `[B, Hq, Sq, Sk]` f32. This is ONNX Attention's
    /// `qk_matmul_output_mode` 1 without a soft-cap (ONNX applies its
    /// soft-cap after the mask, wgtile before, as FlexAttention does; mode
    /// 0 is [`AttentionOptions::with_raw_scores`]). Values are within f32
    /// rounding of the exact logits (the kernels keep them in base 2). From
    /// the naive path, as [`AttentionOptions::with_probabilities`].
    pub fn with_scores(mut self) -> Self {
        self.return_scores = true;
        self
    }

    /// Return the raw scores too: `scale q k^T` for every query row and
    /// every key, before the soft-cap and before any mask or rule (causal,
    /// window, key lengths, boolean or additive mask) is applied,
    /// `[B, Hq, Sq, Sk]` f32 (query head `h` against KV head
    /// `h / (Hq / Hkv)`, packed operands read in place). This is ONNX
    /// Attention's `qk_matmul_output_mode` 0, whose product is
    /// `(Q sqrt(scale)) (K sqrt(scale))^T`, the scale included. Each value
    /// is the f32 dot product (fused multiply-adds in order over D) times
    /// the scale, rounded once more; f16 inputs are widened exactly, bf16
    /// ones staged to f32. A NaN or infinity in q or k reaches the entries
    /// of its row or key only. From the naive path, as
    /// [`AttentionOptions::with_probabilities`], and independent of
    /// [`AttentionOptions::with_scores`] (the two can be asked for together).
    pub fn with_raw_scores(mut self) -> Self {
        self.return_raw_scores = true;
        self
    }

    /// These options with the mask (if any) read from `staged`, a staged
    /// copy of it (`None` where there is no mask to stage).
    pub(crate) fn with_mask_over(&self, staged: Option<&Tensor>) -> Self {
        let mut o = self.clone();
        if let (Some(m), Some(t)) = (&self.mask, staged) {
            o.mask = Some(m.over(t));
        }
        o
    }

    /// Whether an output only the naive path writes was asked for.
    pub(crate) fn wants_matrices(&self) -> bool {
        self.return_probs || self.return_scores || self.return_raw_scores
    }

    /// Packed `[B, S, H * D]` inputs (the head dim is each width over its
    /// heads; [`AttentionOptions::packed_dims`] also checks it).
    pub fn packed(mut self, q_heads: usize, kv_heads: usize) -> Self {
        self.layout = AttentionLayout::Packed { q_heads, kv_heads };
        self
    }

    /// Packed inputs whose head dims must be `head_dim` (q, k) and
    /// `value_dim` (v): a tensor of any other width is an error.
    pub fn packed_dims(mut self, q_heads: usize, kv_heads: usize, head_dim: usize, value_dim: usize) -> Self {
        self.head_dims = Some((head_dim, value_dim));
        self.packed(q_heads, kv_heads)
    }

    /// Refuses operands whose head dims differ from [`AttentionOptions::head_dims`].
    pub(crate) fn check_head_dims(&self, q: usize, k: usize, v: usize) -> Result<()> {
        match self.head_dims {
            Some((d, dv)) if q != d || k != d || v != dv => Err(Error::InvalidArgument(format!(
                "attention: the operands' head dims are q {q}, k {k}, v {v}, the options say \
                 {d} and {dv} (a packed tensor wider than heads * head dim, a fused QKV \
                 projection passed whole?)"
            ))),
            _ => Ok(()),
        }
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
    /// The probabilities `[B, Hq, Sq, Sk]`, f32, when asked for
    /// ([`AttentionOptions::with_probabilities`]).
    pub probs: Option<Tensor>,
    /// The logits `[B, Hq, Sq, Sk]`, f32, when asked for
    /// ([`AttentionOptions::with_scores`]).
    pub scores: Option<Tensor>,
    /// The raw scores `scale q k^T`, `[B, Hq, Sq, Sk]`, f32, when asked for
    /// ([`AttentionOptions::with_raw_scores`]).
    pub raw_scores: Option<Tensor>,
}

/// One operand seen as `[batch, heads, seq, dim]` through element strides
/// (the last dimension contiguous).
#[derive(Clone, Debug)]
pub(crate) struct Operand {
    pub(crate) buffer: Arc<crate::gpu::PooledBuffer>,
    pub(crate) dtype: DType,
    pub(crate) batch: usize,
    pub(crate) heads: usize,
    pub(crate) seq: usize,
    pub(crate) dim: usize,
    pub(crate) strides: [usize; 3],
    /// The first element in `buffer` (a part of a fused QKV projection).
    pub(crate) offset: usize,
}

impl Operand {
    /// Whether every stride and the offset are multiples of `n` elements.
    pub(crate) fn aligned(&self, n: usize) -> bool {
        self.offset.is_multiple_of(n) && self.strides.iter().all(|s| s.is_multiple_of(n))
    }
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
        offset: 0,
    })
}

/// A checked attention call: dimensions `[B, Hq, Hkv, Sq, Sk, D, Dv]`, the
/// output shape, the parameter words (without the split fields) and the
/// buffers every kernel binds.
pub(crate) struct Setup {
    pub(crate) dtype: DType,
    pub(crate) dims: [usize; 7],
    pub(crate) o_shape: Vec<usize>,
    pub(crate) words: Vec<u32>,
    pub(crate) mask_buf: Arc<crate::gpu::PooledBuffer>,
    pub(crate) kv_len: Tensor,
    pub(crate) dummy: Tensor,
    pub(crate) flops: u64,
}

pub(crate) const BIG: i64 = 1 << 30;

pub(crate) fn u32_of(x: usize, what: &str) -> Result<u32> {
    u32::try_from(x)
        .map_err(|_| Error::InvalidArgument(format!("attention {what} {x} does not fit in u32")))
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

/// Largest head dim (D or Dv) for which `Auto` runs the backward on tensor
/// cores: beyond it the kernels' register operands (K, V and both
/// accumulators per subgroup) would spill.
pub const BACKWARD_COOP_AUTO_MAX_DIM: usize = 128;
