//! Block-scaled low-precision formats (plain data): the element codecs (FP8
//! E4M3 and E5M2, FP4 E2M1, the E8M0 scale, f16 and f32 scales, small
//! integers), the block rules of the OCP Microscaling spec v1.0 (MXFP8,
//! MXFP4), NVFP4, FP8 with f32 block scales (how FP8 checkpoints ship) and
//! blocked integers, the packed layout, and the host quantise / dequantise
//! that the GPU kernels (`shaders/quant.wgsl`) reproduce bit for bit.
//!
//! Every rounding is round-to-nearest-even of the exact quotient, computed
//! without trusting a division: the scaled value is rounded from its bits
//! when the scale is a power of two (MX), and otherwise a candidate from an
//! f32 division is corrected by exact integer comparisons against the two
//! neighbouring midpoints, so host and GPU agree whatever the GPU's division
//! accuracy.
//!
//! # Loading a quantised checkpoint
//!
//! A checkpoint's packed parts become a [`HostQuant`] as they are stored,
//! then a GPU tensor through `Context::upload_quantized`. An OCP MXFP4
//! weight `[N, K]` stored as `blocks` (`[N, K / 32, 16]` bytes, two E2M1
//! codes per byte, the first in the low nibble) and `scales` (`[N, K / 32]`
//! E8M0 bytes):
//!
//! ```
//! use wgtile::quant::{HostQuant, QuantAxis, QuantFormat};
//! let (n, k) = (4, 64);
//! let blocks = vec![0x21u8; n * k / 2]; // codes 1 and 2: 0.5 and 1.0
//! let scales = vec![128u8; n * k / 32]; // 2^(128 - 127) = 2
//! let w = HostQuant::from_bytes(
//!     QuantFormat::Mxfp4, QuantAxis::Rows, 32, &[n, k], &blocks, &scales, &[], 1.0,
//! )?;
//! assert_eq!(&w.dequantize()?[..2], &[1.0, 2.0]);
//! # Ok::<(), wgtile::Error>(())
//! ```
//!
//! An FP8 weight with one f32 scale per 128 x 128 tile (DeepSeek-V3's
//! `weight_scale_inv`), laid out as its transpose `[K, N]` blocked down
//! the columns, the layout the quantised GEMV reads fastest (`x @ Wᵀ`
//! either way):
//!
//! ```
//! use wgtile::quant::{HostQuant, QuantAxis, QuantFormat};
//! let (n, k) = (256, 384);
//! let codes = vec![0x38u8; n * k]; // E4M3 1.0
//! let tiles: Vec<f32> = (0..2 * 3).map(|t| t as f32 + 1.0).collect(); // [N / 128, K / 128]
//! let w = HostQuant::fp8_from_scales(
//!     QuantFormat::Fp8E4m3, [n, k], &codes, &tiles, (128, 128), (QuantAxis::Columns, 128),
//! )?;
//! let wt = w.dequantize()?; // Wᵀ, [K, N] row-major
//! assert_eq!(wt[0], 1.0); // W[0, 0]: tile (0, 0)
//! assert_eq!(wt[300 * n + 200], 6.0); // W[200, 300]: tile (1, 2)
//! # Ok::<(), wgtile::Error>(())
//! ```
//!
//! A 4-bit GPTQ or AWQ checkpoint (`qweight`, `qzeros` and `scales` as
//! AutoGPTQ or AutoAWQ pack them) loads with [`HostQuant::from_gptq`] or
//! [`HostQuant::from_awq`].
//!
//! On the GPU, `ctx.upload_quantized(&w)?` gives a
//! [`QuantTensor`](crate::QuantTensor) for `ctx.matmul_quantized(&x, &q)`:
//! the fused GEMV for up to 8 rows of x, the quantised GEMM beyond.

use crate::error::{Error, Result};

/// A block-scaled format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuantFormat {
    /// OCP MXFP8 with E4M3 elements (bias 7, max 448, NaN only at
    /// S.1111.111, no infinities): 32 elements per E8M0 scale.
    Mxfp8E4m3,
    /// OCP MXFP8 with E5M2 elements (IEEE-like, max 57344): 32 elements per
    /// E8M0 scale.
    Mxfp8E5m2,
    /// OCP MXFP4: E2M1 elements ({0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign), 32
    /// per E8M0 scale.
    Mxfp4,
    /// NVFP4: E2M1 elements, 16 per E4M3 block scale, and one f32 scale per
    /// tensor (`amax * (1 / (448 * 6))`).
    Nvfp4,
    /// Symmetric int8 in [-127, 127], one f16 scale (`amax / 127`) per block.
    Int8,
    /// Symmetric int4 in [-7, 7], one f16 scale (`amax / 7`) per block.
    Int4,
    /// Asymmetric int4 in [0, 15] with a per-block zero point `z` in [0, 15]
    /// and an f16 scale: `x = (q - z) * scale`, the range widened to hold 0.
    Int4Zp,
    /// FP8 E4M3 elements with one f32 scale per block (`amax * (1 / 448)`),
    /// blocks of 128 by default or any multiple of 4 up to 1024: the layout
    /// of FP8 checkpoints, whose per-tensor, per-channel or 128 x 128 scales
    /// repeat per block ([`HostQuant::fp8_from_scales`]).
    Fp8E4m3,
    /// FP8 E5M2 elements with one f32 scale per block (`amax * (1 /
    /// 57344)`), blocks as [`QuantFormat::Fp8E4m3`].
    Fp8E5m2,
}

/// Which way a 2-D `[R, C]` tensor's blocks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantAxis {
    /// Blocks of consecutive elements along each row (the last axis): the
    /// layout of a weight stored `[N, K]` (PyTorch's `Linear`) blocked along
    /// K. Any rank; the leading dimensions are rows.
    Rows,
    /// Blocks of consecutive elements down each column (the first axis of a
    /// rank-2 tensor): a `[K, N]` weight blocked along K.
    Columns,
}

impl QuantFormat {
    /// Every format, for sweeps and tests.
    pub const ALL: [QuantFormat; 9] = [
        QuantFormat::Mxfp8E4m3,
        QuantFormat::Mxfp8E5m2,
        QuantFormat::Mxfp4,
        QuantFormat::Nvfp4,
        QuantFormat::Int8,
        QuantFormat::Int4,
        QuantFormat::Int4Zp,
        QuantFormat::Fp8E4m3,
        QuantFormat::Fp8E5m2,
    ];

    /// The format's name as in its spec.
    pub const fn name(self) -> &'static str {
        match self {
            QuantFormat::Mxfp8E4m3 => "MXFP8 (E4M3)",
            QuantFormat::Mxfp8E5m2 => "MXFP8 (E5M2)",
            QuantFormat::Mxfp4 => "MXFP4",
            QuantFormat::Nvfp4 => "NVFP4",
            QuantFormat::Int8 => "int8 (blocked)",
            QuantFormat::Int4 => "int4 (blocked)",
            QuantFormat::Int4Zp => "int4 with zero point (blocked)",
            QuantFormat::Fp8E4m3 => "FP8 (E4M3, f32 scales)",
            QuantFormat::Fp8E5m2 => "FP8 (E5M2, f32 scales)",
        }
    }

    /// The block size the spec fixes (MX: 32, NVFP4: 16) or the default
    /// (FP8 with f32 scales 128, the integers 32).
    pub const fn default_block(self) -> usize {
        match self {
            QuantFormat::Nvfp4 => 16,
            QuantFormat::Fp8E4m3 | QuantFormat::Fp8E5m2 => 128,
            _ => 32,
        }
    }

    /// Whether the block size may differ from [`default_block`](Self::default_block).
    pub const fn block_is_free(self) -> bool {
        matches!(
            self,
            QuantFormat::Int8
                | QuantFormat::Int4
                | QuantFormat::Int4Zp
                | QuantFormat::Fp8E4m3
                | QuantFormat::Fp8E5m2
        )
    }

    /// Bits per element.
    pub const fn element_bits(self) -> u32 {
        match self {
            QuantFormat::Mxfp8E4m3
            | QuantFormat::Mxfp8E5m2
            | QuantFormat::Int8
            | QuantFormat::Fp8E4m3
            | QuantFormat::Fp8E5m2 => 8,
            _ => 4,
        }
    }

    /// Bits per block scale (E8M0 and E4M3 8, f16 16, f32 32).
    pub const fn scale_bits(self) -> u32 {
        match self {
            QuantFormat::Int8 | QuantFormat::Int4 | QuantFormat::Int4Zp => 16,
            QuantFormat::Fp8E4m3 | QuantFormat::Fp8E5m2 => 32,
            _ => 8,
        }
    }

    /// Bits per block zero point (Int4Zp only).
    pub const fn zero_bits(self) -> u32 {
        match self {
            QuantFormat::Int4Zp => 8,
            _ => 0,
        }
    }

    /// Storage per element with blocks of `block`, scales and zero points
    /// included (the per-tensor scale of NVFP4 not counted).
    pub fn bytes_per_element(self, block: usize) -> f64 {
        let per_block = f64::from(self.scale_bits() + self.zero_bits()) / block as f64;
        (f64::from(self.element_bits()) + per_block) / 8.0
    }

    /// Refuses a block size this format cannot use.
    pub fn check_block(self, block: usize) -> Result<()> {
        if !self.block_is_free() && block != self.default_block() {
            return Err(Error::InvalidArgument(format!(
                "{} has blocks of {} elements, not {block}",
                self.name(),
                self.default_block()
            )));
        }
        let per_word = 32 / self.element_bits() as usize;
        if block == 0 || !block.is_multiple_of(per_word) || block > 1024 {
            return Err(Error::InvalidArgument(format!(
                "{} blocks must be a positive multiple of {per_word} elements up to 1024, not {block}",
                self.name()
            )));
        }
        Ok(())
    }

    /// The element code of this format's blocks.
    pub(crate) const fn element(self) -> Grid {
        match self {
            QuantFormat::Mxfp8E4m3 | QuantFormat::Fp8E4m3 => Grid::Float(E4M3),
            QuantFormat::Mxfp8E5m2 | QuantFormat::Fp8E5m2 => Grid::Float(E5M2),
            QuantFormat::Mxfp4 | QuantFormat::Nvfp4 => Grid::Float(E2M1),
            QuantFormat::Int8 => Grid::Int { lo: -127, hi: 127 },
            QuantFormat::Int4 => Grid::Int { lo: -7, hi: 7 },
            QuantFormat::Int4Zp => Grid::Int { lo: 0, hi: 15 },
        }
    }

    /// `emax` of the element type (OCP MX: the exponent of its largest
    /// normal), which sets the shared scale.
    pub(crate) const fn emax(self) -> i32 {
        match self {
            QuantFormat::Mxfp8E4m3 => 8,
            QuantFormat::Mxfp8E5m2 => 15,
            _ => 2,
        }
    }
}

impl std::fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// A sign-magnitude binary float of `1 + ebits + mbits` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Minifloat {
    /// Exponent bits.
    pub ebits: u32,
    /// Mantissa bits.
    pub mbits: u32,
    /// Exponent bias.
    pub bias: i32,
    /// The largest finite magnitude's code (saturation target).
    pub max_code: u32,
    /// The magnitude code of NaN, if the format has one.
    pub nan_code: Option<u32>,
    /// The magnitude code of infinity, if the format has one.
    pub inf_code: Option<u32>,
}

/// FP8 E4M3 (OCP "FN": no infinities, NaN at S.1111.111, max 448).
pub const E4M3: Minifloat = Minifloat {
    ebits: 4,
    mbits: 3,
    bias: 7,
    max_code: 0x7E,
    nan_code: Some(0x7F),
    inf_code: None,
};
/// FP8 E5M2 (IEEE-like: infinities and NaN at exponent 31, max 57344).
pub const E5M2: Minifloat = Minifloat {
    ebits: 5,
    mbits: 2,
    bias: 15,
    max_code: 0x7B,
    nan_code: Some(0x7F),
    inf_code: Some(0x7C),
};
/// FP4 E2M1 (no infinities or NaN, max 6).
pub const E2M1: Minifloat = Minifloat {
    ebits: 2,
    mbits: 1,
    bias: 1,
    max_code: 0x7,
    nan_code: None,
    inf_code: None,
};
/// IEEE binary16 (the integer formats' scales).
pub const F16: Minifloat = Minifloat {
    ebits: 5,
    mbits: 10,
    bias: 15,
    max_code: 0x7BFF,
    nan_code: Some(0x7E00),
    inf_code: Some(0x7C00),
};

/// The values a quantised element can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grid {
    Float(Minifloat),
    /// Integers `lo..=hi`, stored two's complement in the element's bits.
    Int {
        lo: i32,
        hi: i32,
    },
}

/// An exact non-negative number `sig * 2^exp`.
#[derive(Clone, Copy, Debug)]
struct Exact {
    sig: u32,
    exp: i32,
}

impl Exact {
    /// `|x|` of a finite f32, exactly.
    fn of_f32(x: f32) -> Exact {
        let bits = x.to_bits() & 0x7fff_ffff;
        let (e, m) = (bits >> 23, bits & 0x7f_ffff);
        if e == 0 {
            Exact { sig: m, exp: -149 }
        } else {
            Exact {
                sig: m | 1 << 23,
                exp: e as i32 - 150,
            }
        }
    }

    /// Strips trailing zero bits (keeps products within 32 bits).
    fn reduced(self) -> Exact {
        if self.sig == 0 {
            return self;
        }
        let tz = self.sig.trailing_zeros();
        Exact {
            sig: self.sig >> tz,
            exp: self.exp + tz as i32,
        }
    }

    /// The exact product; the operands' reduced significands must multiply
    /// within 32 bits (true for every use here: a midpoint of at most 12
    /// significant bits times a scale of at most 24, never both wide).
    fn mul(self, other: Exact) -> Exact {
        let (a, b) = (self.reduced(), other.reduced());
        let p = u64::from(a.sig) * u64::from(b.sig);
        debug_assert!(p < 1 << 32, "exact product overflows: {a:?} x {b:?}");
        Exact {
            sig: p as u32,
            exp: a.exp + b.exp,
        }
    }

    fn cmp(self, other: Exact) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self.sig == 0, other.sig == 0) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let (la, lb) = (self.sig.leading_zeros(), other.sig.leading_zeros());
        let (ta, tb) = (31 - la as i32 + self.exp, 31 - lb as i32 + other.exp);
        if ta != tb {
            return ta.cmp(&tb);
        }
        (self.sig << la).cmp(&(other.sig << lb))
    }
}

impl Minifloat {
    /// The magnitude code's value as an exact number (finite codes only).
    fn exact(self, code: u32) -> Exact {
        let ef = code >> self.mbits;
        let m = code & ((1 << self.mbits) - 1);
        if ef == 0 {
            Exact {
                sig: m,
                exp: 1 - self.bias - self.mbits as i32,
            }
        } else {
            Exact {
                sig: m | 1 << self.mbits,
                exp: ef as i32 - self.bias - self.mbits as i32,
            }
        }
    }

    /// Twice the midpoint of magnitude codes `c` and `c + 1`, halved: exact.
    fn midpoint(self, c: u32) -> Exact {
        let (a, b) = (self.exact(c), self.exact(c + 1));
        // Both on the finer exponent of the two.
        let e = a.exp.min(b.exp);
        let sum = (a.sig << (a.exp - e)) + (b.sig << (b.exp - e));
        Exact {
            sig: sum,
            exp: e - 1,
        }
    }

    /// Decodes a code (sign included) to f32, exactly.
    pub fn decode(self, code: u32) -> f32 {
        let sign_bit = 1 << (self.ebits + self.mbits);
        let mag = code & (sign_bit - 1);
        let negative = code & sign_bit != 0;
        let v = if Some(mag) == self.nan_code
            || (self.inf_code.is_some() && mag > self.inf_code.unwrap_or(0))
        {
            f32::NAN
        } else if Some(mag) == self.inf_code {
            f32::INFINITY
        } else {
            let x = self.exact(mag);
            (f64::from(x.sig) * 2f64.powi(x.exp)) as f32
        };
        if negative { -v } else { v }
    }

    /// `x * 2^-k` rounded to nearest even from the bits of `x`, saturated
    /// at the largest finite magnitude; a NaN gives the NaN code (0 where
    /// the format has none), an infinity saturates. The sign is kept.
    pub fn encode_scaled(self, x: f32, k: i32) -> u32 {
        let sign = (x.to_bits() >> 31) << (self.ebits + self.mbits);
        if x.is_nan() {
            return self.nan_code.map_or(0, |n| sign | n);
        }
        if x.is_infinite() {
            return sign | self.max_code;
        }
        sign | self.round_bits(x.to_bits() & 0x7fff_ffff, k)
    }

    /// The magnitude code of `|x| * 2^-k` (finite `x` given by its bits).
    fn round_bits(self, bits: u32, k: i32) -> u32 {
        if bits == 0 {
            return 0;
        }
        let (e_field, m) = (bits >> 23, bits & 0x7f_ffff);
        // value = sig * 2^(e - 23), sig in [2^23, 2^24)
        let (sig, e) = if e_field == 0 {
            let lz = m.leading_zeros() - 8;
            (m << lz, -126 - lz as i32)
        } else {
            (m | 1 << 23, e_field as i32 - 127)
        };
        let e = e - k;
        let emin = 1 - self.bias;
        let e_eff = e.max(emin);
        let shift = 23 - self.mbits as i32 + (e_eff - e);
        let q = rne_shift(sig, shift);
        // Normal or subnormal alike: a carry into the next binade is the
        // next code.
        let code = (((e_eff + self.bias - 1).max(0) as u64) << self.mbits) + u64::from(q);
        code.min(u64::from(self.max_code)) as u32
    }
}

/// `sig / 2^shift` rounded to nearest even (`shift >= 1`).
fn rne_shift(sig: u32, shift: i32) -> u32 {
    if shift > 25 {
        return 0;
    }
    let shift = shift as u32;
    let q = sig >> shift;
    let rem = sig & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

impl Grid {
    /// The magnitude code nearest `|x| / y` (ties to even), saturated: the
    /// exact quotient's rounding. `y` finite and positive.
    fn round_div(self, x: f32, y: f32) -> u32 {
        let ax = Exact::of_f32(x);
        let ey = Exact::of_f32(y);
        let t = x.abs() / y;
        match self {
            Grid::Float(f) => {
                let max = f.max_code;
                let mut c = if t.is_finite() {
                    f.round_bits(t.to_bits(), 0)
                } else {
                    max
                };
                // The division may be off by an ulp: settle against the
                // exact midpoints on both sides (ties to the even code).
                if c > 0 && goes_down(ax, f.midpoint(c - 1).mul(ey), c) {
                    c -= 1;
                } else if c < max && goes_up(ax, f.midpoint(c).mul(ey), c) {
                    c += 1;
                }
                c
            }
            Grid::Int { lo, hi } => {
                let top = hi.max(-lo) as u32;
                let mut c = if t.is_finite() {
                    (t.round_ties_even().min(top as f32)) as u32
                } else {
                    top
                };
                let mid = |c: u32| Exact {
                    sig: 2 * c + 1,
                    exp: -1,
                };
                if c > 0 && goes_down(ax, mid(c - 1).mul(ey), c) {
                    c -= 1;
                } else if c < top && goes_up(ax, mid(c).mul(ey), c) {
                    c += 1;
                }
                c
            }
        }
    }
}

/// From `c`, whether `x` belongs below the midpoint `m` of `c - 1` and `c`.
fn goes_down(x: Exact, m: Exact, c: u32) -> bool {
    match x.cmp(m) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Equal => c & 1 == 1,
        std::cmp::Ordering::Greater => false,
    }
}

/// From `c`, whether `x` belongs above the midpoint `m` of `c` and `c + 1`.
fn goes_up(x: Exact, m: Exact, c: u32) -> bool {
    match x.cmp(m) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => c & 1 == 1,
        std::cmp::Ordering::Less => false,
    }
}

/// The E8M0 code of `2^e` (`e` clamped to [-127, 127]); 0xFF is NaN.
pub fn e8m0_encode(e: i32) -> u32 {
    (e.clamp(-127, 127) + 127) as u32
}

/// The value of an E8M0 code: `2^(code - 127)`, NaN for 0xFF.
pub fn e8m0_decode(code: u32) -> f32 {
    if code == 0xFF {
        f32::NAN
    } else {
        2f64.powi(code as i32 - 127) as f32
    }
}

/// `floor(log2 |x|)` of a finite nonzero f32, from its bits.
pub(crate) fn floor_log2(x: f32) -> i32 {
    let bits = x.to_bits() & 0x7fff_ffff;
    let e = (bits >> 23) as i32;
    if e == 0 {
        31 - bits.leading_zeros() as i32 - 149
    } else {
        e - 127
    }
}

/// The NVFP4 per-tensor scale of a tensor whose largest finite magnitude
/// is `amax`: `amax * (1 / 2688)` in f32 (a product, so every device rounds
/// it alike).
pub fn nvfp4_global_scale(amax: f32) -> f32 {
    amax * NVFP4_GLOBAL_FACTOR
}

/// `1 / (448 * 6)` rounded to f32.
pub const NVFP4_GLOBAL_FACTOR: f32 = 1.0 / 2688.0;

/// `1 / 448` rounded to f32: FP8 E4M3's block scale factor.
pub const FP8_E4M3_FACTOR: f32 = 1.0 / 448.0;

/// `1 / 57344` rounded to f32: FP8 E5M2's block scale factor.
pub const FP8_E5M2_FACTOR: f32 = 1.0 / 57344.0;

/// The f32 scale of an FP8 block ([`QuantFormat::Fp8E4m3`] or
/// [`QuantFormat::Fp8E5m2`]) whose largest finite magnitude is `amax`:
/// `amax` times the format's factor, a product, so every device rounds it
/// alike (0 for an all-zero block, whose elements all encode 0).
pub fn fp8_block_scale(format: QuantFormat, amax: f32) -> f32 {
    let factor = match format {
        QuantFormat::Fp8E5m2 => FP8_E5M2_FACTOR,
        _ => FP8_E4M3_FACTOR,
    };
    amax * factor
}

/// One block's scale and codes.
struct BlockCodes {
    scale: u32,
    zero: u32,
    codes: Vec<u32>,
}

/// Quantises one block (`x` padded with zeros to the block size).
fn quantize_block(format: QuantFormat, x: &[f32], global: f32) -> BlockCodes {
    let finite = x.iter().all(|v| v.is_finite());
    let amax = x
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f32, |a, &v| a.max(v.abs()));
    let zeros = |scale| BlockCodes {
        scale,
        zero: 0,
        codes: vec![0; x.len()],
    };
    let sign = |v: f32, bits: u32| (v.to_bits() >> 31) << (bits - 1);
    match format {
        QuantFormat::Mxfp8E4m3 | QuantFormat::Mxfp8E5m2 | QuantFormat::Mxfp4 => {
            if !finite {
                return zeros(0xFF);
            }
            let Grid::Float(f) = format.element() else {
                unreachable!()
            };
            let e = if amax == 0.0 {
                -127
            } else {
                (floor_log2(amax) - format.emax()).clamp(-127, 127)
            };
            BlockCodes {
                scale: e8m0_encode(e),
                zero: 0,
                codes: x.iter().map(|&v| f.encode_scaled(v, e)).collect(),
            }
        }
        QuantFormat::Nvfp4 => {
            if !finite {
                return zeros(E4M3.nan_code.unwrap_or(0x7F));
            }
            let denom = 6.0 * global;
            if denom == 0.0 || !denom.is_finite() {
                return zeros(0);
            }
            let s = Grid::Float(E4M3).round_div(amax, denom);
            let y = E4M3.decode(s) * global;
            if y == 0.0 {
                return zeros(s);
            }
            BlockCodes {
                scale: s,
                zero: 0,
                codes: x
                    .iter()
                    .map(|&v| sign(v, 4) | Grid::Float(E2M1).round_div(v, y))
                    .collect(),
            }
        }
        QuantFormat::Int8 | QuantFormat::Int4 => {
            let (bits, top) = if format == QuantFormat::Int8 {
                (8, 127.0)
            } else {
                (4, 7.0)
            };
            if !finite {
                return zeros(F16.nan_code.unwrap_or(0x7E00));
            }
            let s = Grid::Float(F16).round_div(amax, top);
            let y = F16.decode(s);
            if y == 0.0 {
                return zeros(s);
            }
            let grid = format.element();
            let mask = (1u32 << bits) - 1;
            BlockCodes {
                scale: s,
                zero: 0,
                codes: x
                    .iter()
                    .map(|&v| {
                        let m = grid.round_div(v, y) as i32;
                        (if v < 0.0 { -m } else { m }) as u32 & mask
                    })
                    .collect(),
            }
        }
        QuantFormat::Fp8E4m3 | QuantFormat::Fp8E5m2 => {
            if !finite {
                return zeros(f32::NAN.to_bits());
            }
            let Grid::Float(f) = format.element() else {
                unreachable!()
            };
            let y = fp8_block_scale(format, amax);
            if y == 0.0 {
                return zeros(0);
            }
            BlockCodes {
                scale: y.to_bits(),
                zero: 0,
                codes: x
                    .iter()
                    .map(|&v| sign(v, 8) | Grid::Float(f).round_div(v, y))
                    .collect(),
            }
        }
        QuantFormat::Int4Zp => {
            if !finite {
                return zeros(F16.nan_code.unwrap_or(0x7E00));
            }
            let lo = x.iter().fold(0.0f32, |a, &v| a.min(v));
            let hi = x.iter().fold(0.0f32, |a, &v| a.max(v));
            let range = hi - lo;
            let s = if range.is_finite() {
                Grid::Float(F16).round_div(range, 15.0)
            } else {
                F16.max_code
            };
            let y = F16.decode(s);
            if y == 0.0 {
                return zeros(s);
            }
            let z = Grid::Int { lo: 0, hi: 15 }.round_div(lo, y);
            BlockCodes {
                scale: s,
                zero: z,
                codes: x
                    .iter()
                    .map(|&v| {
                        let m = Grid::Int { lo: 0, hi: 31 }.round_div(v, y) as i32;
                        let q = if v < 0.0 { -m } else { m } + z as i32;
                        q.clamp(0, 15) as u32
                    })
                    .collect(),
            }
        }
    }
}

/// The value of element code `q` of a block with scale `s`, zero `z`.
pub(crate) fn dequantize_code(format: QuantFormat, q: u32, s: u32, z: u32, global: f32) -> f32 {
    match format {
        QuantFormat::Mxfp8E4m3 | QuantFormat::Mxfp8E5m2 | QuantFormat::Mxfp4 => {
            let Grid::Float(f) = format.element() else {
                unreachable!()
            };
            let scale = e8m0_decode(s);
            if scale.is_nan() {
                return f32::NAN;
            }
            ldexp(f.decode(q), s as i32 - 127)
        }
        QuantFormat::Nvfp4 => E2M1.decode(q) * (E4M3.decode(s) * global),
        QuantFormat::Int8 => (q as u8 as i8) as f32 * F16.decode(s),
        QuantFormat::Int4 => ((((q & 0xF) << 28) as i32) >> 28) as f32 * F16.decode(s),
        QuantFormat::Int4Zp => (q as i32 - z as i32) as f32 * F16.decode(s),
        QuantFormat::Fp8E4m3 => E4M3.decode(q) * f32::from_bits(s),
        QuantFormat::Fp8E5m2 => E5M2.decode(q) * f32::from_bits(s),
    }
}

/// `x * 2^e` exactly (as IEEE gives it: overflow to inf, gradual underflow).
fn ldexp(x: f32, e: i32) -> f32 {
    (f64::from(x) * 2f64.powi(e)) as f32
}

/// The packed geometry of a quantised 2-D `[rows, cols]` view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantLayout {
    /// Rows of the 2-D view (leading dimensions folded in for `Rows`).
    pub rows: usize,
    /// Columns of the 2-D view.
    pub cols: usize,
    /// Elements per block.
    pub block: usize,
    /// Which way blocks run.
    pub axis: QuantAxis,
    /// Bits per element.
    pub bits: u32,
}

impl QuantLayout {
    /// The layout of `shape` quantised along `axis` with blocks of `block`.
    pub fn new(shape: &[usize], axis: QuantAxis, block: usize, bits: u32) -> Result<Self> {
        let (rows, cols) = match (axis, shape.len()) {
            (_, 0) => {
                return Err(Error::InvalidArgument(
                    "a quantised tensor needs rank >= 1".into(),
                ));
            }
            (QuantAxis::Rows, _) => (
                shape[..shape.len() - 1].iter().product(),
                shape[shape.len() - 1],
            ),
            (QuantAxis::Columns, 2) => (shape[0], shape[1]),
            (QuantAxis::Columns, r) => {
                return Err(Error::InvalidArgument(format!(
                    "blocks down columns need a rank-2 tensor, got rank {r}"
                )));
            }
        };
        Ok(Self {
            rows,
            cols,
            block,
            axis,
            bits,
        })
    }

    /// Lines the blocks run along (rows or columns) and their length.
    pub fn lines(&self) -> (usize, usize) {
        match self.axis {
            QuantAxis::Rows => (self.rows, self.cols),
            QuantAxis::Columns => (self.cols, self.rows),
        }
    }

    /// Blocks per line (the last one padded with zeros).
    pub fn blocks_per_line(&self) -> usize {
        self.lines().1.div_ceil(self.block)
    }

    /// Blocks in all.
    pub fn blocks(&self) -> usize {
        self.lines().0 * self.blocks_per_line()
    }

    /// u32 words per block of elements.
    pub fn words_per_block(&self) -> usize {
        self.block * self.bits as usize / 32
    }

    /// The storage index of block `j` of line `l`: line-major for `Rows`,
    /// block-row-major for `Columns` (so threads on adjacent columns read
    /// adjacent blocks).
    pub fn block_id(&self, line: usize, j: usize) -> usize {
        match self.axis {
            QuantAxis::Rows => line * self.blocks_per_line() + j,
            QuantAxis::Columns => j * self.cols + line,
        }
    }

    /// The row-major index of element `t` of block `j` of line `l`.
    pub fn element_index(&self, line: usize, j: usize, t: usize) -> Option<usize> {
        let pos = j * self.block + t;
        if pos >= self.lines().1 {
            return None;
        }
        Some(match self.axis {
            QuantAxis::Rows => line * self.cols + pos,
            QuantAxis::Columns => pos * self.cols + line,
        })
    }
}

/// A quantised tensor on the host: what [`quantize`] makes, what
/// `Context::upload_quantized` takes (the packed bytes of a checkpoint) and
/// what the GPU kernels write.
#[derive(Clone, Debug, PartialEq)]
pub struct HostQuant {
    /// The format.
    pub format: QuantFormat,
    /// Which way blocks run.
    pub axis: QuantAxis,
    /// Elements per block.
    pub block: usize,
    /// The logical shape.
    pub shape: Vec<usize>,
    /// Packed element codes, `words_per_block` words per block in storage
    /// order ([`QuantLayout::block_id`]); within a block, element `t` is
    /// byte `t % 4` (8-bit) or nibble `t % 8` (4-bit, low first) of word
    /// `t / 4` or `t / 8`.
    pub data: Vec<u32>,
    /// One scale per block in storage order, packed four E8M0/E4M3 bytes,
    /// two f16 halves (low first) or one f32 per word.
    pub scales: Vec<u32>,
    /// Int4Zp's zero points, four bytes per word; empty otherwise.
    pub zeros: Vec<u32>,
    /// NVFP4's per-tensor scale (1 otherwise).
    pub global_scale: f32,
}

/// Packs `values` (each `bits` wide) little-end first into words.
fn pack(values: impl Iterator<Item = u32>, bits: u32, count: usize) -> Vec<u32> {
    let per_word = (32 / bits) as usize;
    let mut out = vec![0u32; count.div_ceil(per_word)];
    for (i, v) in values.enumerate() {
        out[i / per_word] |= (v & field_mask(bits)) << (bits as usize * (i % per_word));
    }
    out
}

/// The low `bits` bits (1 to 32).
fn field_mask(bits: u32) -> u32 {
    u32::MAX >> (32 - bits)
}

/// Field `i` (`bits` wide) of packed words.
pub(crate) fn unpack(words: &[u32], bits: u32, i: usize) -> u32 {
    let per_word = (32 / bits) as usize;
    (words[i / per_word] >> (bits as usize * (i % per_word))) & field_mask(bits)
}

/// Quantises row-major `values` of `shape` on the host, exactly as the GPU
/// does (`Context::quantize`).
pub fn quantize(
    values: &[f32],
    shape: &[usize],
    format: QuantFormat,
    axis: QuantAxis,
    block: usize,
) -> Result<HostQuant> {
    format.check_block(block)?;
    let n: usize = shape.iter().product();
    if values.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{} values for shape {shape:?} ({n} elements)",
            values.len()
        )));
    }
    let lay = QuantLayout::new(shape, axis, block, format.element_bits())?;
    let global = if format == QuantFormat::Nvfp4 {
        nvfp4_global_scale(
            values
                .iter()
                .filter(|v| v.is_finite())
                .fold(0.0f32, |a, &v| a.max(v.abs())),
        )
    } else {
        1.0
    };
    let (lines, _) = lay.lines();
    let nb = lay.blocks_per_line();
    let wpb = lay.words_per_block();
    let mut data = vec![0u32; lay.blocks() * wpb];
    let mut scales = vec![0u32; lay.blocks()];
    let mut zeros = vec![0u32; lay.blocks()];
    let mut x = vec![0.0f32; block];
    for l in 0..lines {
        for j in 0..nb {
            for (t, slot) in x.iter_mut().enumerate() {
                *slot = lay.element_index(l, j, t).map_or(0.0, |i| values[i]);
            }
            let b = quantize_block(format, &x, global);
            let id = lay.block_id(l, j);
            let words = pack(b.codes.into_iter(), format.element_bits(), block);
            data[id * wpb..(id + 1) * wpb].copy_from_slice(&words);
            scales[id] = b.scale;
            zeros[id] = b.zero;
        }
    }
    Ok(HostQuant {
        format,
        axis,
        block,
        shape: shape.to_vec(),
        data,
        scales: pack(scales.into_iter(), format.scale_bits(), lay.blocks()),
        zeros: if format.zero_bits() > 0 {
            pack(zeros.into_iter(), 8, lay.blocks())
        } else {
            Vec::new()
        },
        global_scale: global,
    })
}

/// Little-endian bytes as words, the last one zero-padded.
fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect()
}

/// Checks the parts of a 4-bit checkpoint weight `[K, N]` packed eight
/// values per int32 (GPTQ's and AWQ's): sizes, groups, and K and N
/// multiples of 8.
fn check_int4_parts(
    what: &str,
    [k, n]: [usize; 2],
    (qweight, qzeros, scales): (&[u8], &[u8], &[u8]),
    group: usize,
) -> Result<()> {
    if group == 0 || !k.is_multiple_of(8) || !n.is_multiple_of(8) {
        return Err(Error::InvalidArgument(format!(
            "{what}: K and N must be multiples of 8 (whole int32 words) and groups not empty"
        )));
    }
    if group > 1024 && !group.is_multiple_of(128) {
        return Err(Error::InvalidArgument(format!(
            "{what}: groups over 1024 must be a multiple of 128"
        )));
    }
    QuantFormat::Int4Zp.check_block(int4_block(group))?;
    let groups = k.div_ceil(group);
    for (part, got, want) in [
        ("qweight", qweight.len(), k * n / 2),
        ("qzeros", qzeros.len(), groups * n / 2),
        ("scales", scales.len(), groups * n * 2),
    ] {
        if got != want {
            return Err(Error::InvalidArgument(format!(
                "{what}: {part} has {got} bytes, needs {want}"
            )));
        }
    }
    Ok(())
}

/// The block of a 4-bit checkpoint's groups: the group up to 1024 (the
/// largest block), else 128, which larger groups are multiples of.
fn int4_block(group: usize) -> usize {
    if group <= 1024 { group } else { 128 }
}

/// GPTQ's code of row `k`, column `c` from `qweight` words (N per eight
/// rows, eight 4-bit values each, low bits first).
fn gptq_code(qw: &[u32], n: usize) -> impl Fn(usize, usize) -> u32 + '_ {
    move |k, c| (qw[k / 8 * n + c] >> (4 * (k % 8))) & 0xf
}

/// GPTQ's zero point of group `g`, column `c` from `qzeros` words (N / 8
/// per group, eight 4-bit values each, low bits first), plus one where the
/// checkpoint stores it less one.
fn gptq_zero(qz: &[u32], n: usize, minus_one: bool) -> impl Fn(usize, usize) -> u32 + '_ {
    move |g, c| ((qz[g * n / 8 + c / 8] >> (4 * (c % 8))) & 0xf) + u32::from(minus_one)
}

/// An [`QuantFormat::Int4Zp`] tensor `[K, N]` blocked down its columns in
/// groups of `group` along K (blocks of `group`, or of 128 for groups over
/// 1024), from `q(k, n)`, `z(group, n)` and f16 `scales` bytes
/// `[ceil(K / group), N]` (checked by `check_int4_parts`).
fn int4_zp_from(
    [k, n]: [usize; 2],
    group: usize,
    scales: &[u8],
    q: impl Fn(usize, usize) -> u32,
    z: impl Fn(usize, usize) -> u32,
) -> Result<HostQuant> {
    let block = int4_block(group);
    let lay = QuantLayout::new(&[k, n], QuantAxis::Columns, block, 4)?;
    let wpb = lay.words_per_block();
    let mut data = vec![0u32; lay.blocks() * wpb];
    let (mut block_scales, mut zeros) = (
        Vec::with_capacity(lay.blocks()),
        Vec::with_capacity(lay.blocks()),
    );
    // Block ids run j * N + c: the order of the loops.
    for j in 0..lay.blocks_per_line() {
        let g = j * block / group;
        for c in 0..n {
            let id = lay.block_id(c, j);
            for t in 0..block.min(k - j * block) {
                data[id * wpb + t / 8] |= q(j * block + t, c) << (4 * (t % 8));
            }
            zeros.push(z(g, c));
            let at = 2 * (g * n + c);
            block_scales.push(u32::from(u16::from_le_bytes([scales[at], scales[at + 1]])));
        }
    }
    let host = HostQuant {
        format: QuantFormat::Int4Zp,
        axis: QuantAxis::Columns,
        block,
        shape: vec![k, n],
        data,
        scales: pack(block_scales.into_iter(), 16, lay.blocks()),
        zeros: pack(zeros.into_iter(), 8, lay.blocks()),
        global_scale: 1.0,
    };
    host.check()?;
    Ok(host)
}

impl HostQuant {
    /// A quantised tensor from a checkpoint's bytes, as they are stored:
    /// `data` the element codes block after block in storage order
    /// ([`QuantLayout::block_id`]), one 8-bit code per byte or two 4-bit
    /// codes per byte (the first in the low nibble); `scales` one byte per
    /// block (E8M0 for the MX formats, E4M3 for NVFP4), two little-endian
    /// bytes (the integer formats' f16 scales) or four (FP8's f32 scales;
    /// [`HostQuant::fp8_from_scales`] takes them per tile); `zeros` one
    /// byte per block for [`QuantFormat::Int4Zp`], empty otherwise;
    /// `global_scale` NVFP4's per-tensor scale (1 otherwise). An OCP MX
    /// weight `[N, K]` stored as `blocks` `[N, K / 32, 16]` and `scales`
    /// `[N, K / 32]` bytes is `from_bytes(Mxfp4, Rows, 32, &[N, K], blocks,
    /// scales, &[], 1.0)`; an NVFP4 one stored as `[N, K / 2]` bytes (the
    /// even element in the low nibble), `[N, K / 16]` E4M3 block scales and
    /// an f32 per-tensor scale `g` (values `code * scale * g`) is
    /// `from_bytes(Nvfp4, Rows, 16, &[N, K], data, scales, &[], g)`. Each
    /// part must have exactly the bytes the shape needs
    /// ([`Error::InvalidArgument`] says which does not).
    #[allow(clippy::too_many_arguments)] // the parts of a checkpoint tensor, as stored
    pub fn from_bytes(
        format: QuantFormat,
        axis: QuantAxis,
        block: usize,
        shape: &[usize],
        data: &[u8],
        scales: &[u8],
        zeros: &[u8],
        global_scale: f32,
    ) -> Result<HostQuant> {
        format.check_block(block)?;
        let lay = QuantLayout::new(shape, axis, block, format.element_bits())?;
        let blocks = lay.blocks();
        let bits = |b: u32| blocks * block * b as usize / 8;
        let want = [
            ("data", data.len(), bits(format.element_bits())),
            (
                "scales",
                scales.len(),
                blocks * format.scale_bits() as usize / 8,
            ),
            (
                "zeros",
                zeros.len(),
                blocks * format.zero_bits() as usize / 8,
            ),
        ];
        for (what, got, n) in want {
            if got != n {
                return Err(Error::InvalidArgument(format!(
                    "{format} of shape {shape:?} in blocks of {block}: {what} has {got} bytes, needs {n}"
                )));
            }
        }
        let host = HostQuant {
            format,
            axis,
            block,
            shape: shape.to_vec(),
            data: words_of(data),
            scales: words_of(scales),
            zeros: words_of(zeros),
            global_scale,
        };
        host.check()?;
        Ok(host)
    }

    /// An FP8 checkpoint weight `[N, K]` as a [`QuantFormat::Fp8E4m3`] or
    /// [`QuantFormat::Fp8E5m2`] tensor in blocks of `block` along K: with
    /// `axis` [`QuantAxis::Rows`] the `[N, K]` weight as stored (`x @ Wᵀ`
    /// through the row-blocked GEMV), with [`QuantAxis::Columns`] its
    /// transpose `[K, N]` blocked down its columns (the same product, `x @
    /// Wᵀ`, through the faster column-blocked GEMV, as
    /// [`Context::quantize_transposed`](crate::Context::quantize_transposed)
    /// lays out). `codes`: one E4M3 or E5M2 byte per element, row-major
    /// (PyTorch's `float8_e4m3fn` and `float8_e5m2` bytes). `scales`: one
    /// f32 per tile of `tile = (rows, cols)` elements of `[N, K]`, row-major
    /// over `[ceil(N / rows), ceil(K / cols)]` tiles, the value of an element
    /// being its code times its tile's scale: per-tensor scales are `tile =
    /// (N, K)`, per-output-channel ones `(1, K)`, DeepSeek-V3's
    /// `weight_scale_inv` `(128, 128)`. Each block takes its tile's scale,
    /// so `block` must divide `cols` unless `cols` spans K (blocks of 128,
    /// the default, fit all three). Errors name a size that does not fit.
    pub fn fp8_from_scales(
        format: QuantFormat,
        [n, k]: [usize; 2],
        codes: &[u8],
        scales: &[f32],
        (tile_rows, tile_cols): (usize, usize),
        (axis, block): (QuantAxis, usize),
    ) -> Result<HostQuant> {
        if !matches!(format, QuantFormat::Fp8E4m3 | QuantFormat::Fp8E5m2) {
            return Err(Error::InvalidArgument(format!(
                "fp8_from_scales takes FP8 with f32 block scales, not {format}"
            )));
        }
        format.check_block(block)?;
        let what = format!("an FP8 weight [{n}, {k}] in tiles of ({tile_rows}, {tile_cols})");
        if tile_rows == 0 || tile_cols == 0 {
            return Err(Error::InvalidArgument(format!(
                "{what}: tiles must not be empty"
            )));
        }
        if tile_cols < k && !tile_cols.is_multiple_of(block) {
            return Err(Error::InvalidArgument(format!(
                "{what}: blocks of {block} straddle tiles {tile_cols} wide (the block must divide the tile)"
            )));
        }
        let (tr, tc) = (n.div_ceil(tile_rows), k.div_ceil(tile_cols));
        for (part, got, want) in [
            ("codes", codes.len(), n * k),
            ("scales", scales.len(), tr * tc),
        ] {
            if got != want {
                return Err(Error::InvalidArgument(format!(
                    "{what}: {part} has {got} values, needs {want}"
                )));
            }
        }
        // Line l of the layout is row l of [N, K] either way (a column of
        // the transpose): its blocks run along K.
        let shape = match axis {
            QuantAxis::Rows => vec![n, k],
            QuantAxis::Columns => vec![k, n],
        };
        let lay = QuantLayout::new(&shape, axis, block, format.element_bits())?;
        let wpb = lay.words_per_block();
        let mut data = vec![0u32; lay.blocks() * wpb];
        let mut block_scales = vec![0u32; lay.blocks()];
        for l in 0..n {
            for j in 0..lay.blocks_per_line() {
                let start = j * block;
                let end = (start + block).min(k);
                let mut bytes = codes[l * k + start..l * k + end].to_vec();
                bytes.resize(block, 0);
                let id = lay.block_id(l, j);
                data[id * wpb..(id + 1) * wpb].copy_from_slice(&words_of(&bytes));
                block_scales[id] = scales[(l / tile_rows) * tc + start / tile_cols].to_bits();
            }
        }
        let host = HostQuant {
            format,
            axis,
            block,
            shape,
            data,
            scales: block_scales,
            zeros: Vec::new(),
            global_scale: 1.0,
        };
        host.check()?;
        Ok(host)
    }

    /// A 4-bit GPTQ checkpoint weight (`x @ W` with `W` `[K, N]`) as an
    /// [`QuantFormat::Int4Zp`] tensor `[K, N]` blocked down its columns
    /// (groups along K), from the tensors as stored: `qweight` int32 `[K /
    /// 8, N]` (word `(r, n)` holds `q[8r + i, n]` in bits `4i..4i + 4`),
    /// `qzeros` int32 `[ceil(K / group), N / 8]` (word `(g, c)` holds the
    /// zero point of column `8c + i` in bits `4i..`), `scales` f16
    /// `[ceil(K / group), N]`, all little-endian bytes. Each value is `(q -
    /// z) * scale`. `zeros_minus_one`: the checkpoint stores each zero point
    /// less one (AutoGPTQ's `checkpoint_format: "gptq"`, most GPTQ
    /// checkpoints), not as it is (`"gptq_v2"`). Groups up to 1024 become
    /// blocks; larger ones (a multiple of 128, such as `group_size: -1`
    /// with K = 4096) become blocks of 128 sharing their group's scale.
    /// Checkpoints with `desc_act` (a `g_idx` that permutes K) take
    /// [`HostQuant::from_gptq_act_order`]. K and N must be multiples of 8;
    /// errors name a size that does not fit.
    pub fn from_gptq(
        [k, n]: [usize; 2],
        (qweight, qzeros, scales): (&[u8], &[u8], &[u8]),
        group: usize,
        zeros_minus_one: bool,
    ) -> Result<HostQuant> {
        let what = format!("a GPTQ weight [{k}, {n}] in groups of {group}");
        check_int4_parts(&what, [k, n], (qweight, qzeros, scales), group)?;
        let (qw, qz) = (words_of(qweight), words_of(qzeros));
        int4_zp_from(
            [k, n],
            group,
            scales,
            gptq_code(&qw, n),
            gptq_zero(&qz, n, zeros_minus_one),
        )
    }

    /// A 4-bit GPTQ checkpoint quantised with `desc_act` (act-order: `g_idx`
    /// int32 `[K]` names each input channel's group, in no order) as
    /// [`HostQuant::from_gptq`] does, with K reordered so that each group's
    /// channels are contiguous, and that order: row `p` of the result is
    /// row `order[p]` of `W`, so `x @ W` is `x[.., order] @ result`
    /// (`Context::index_select` along x's last axis with `order` as u32
    /// ids). Each group must hold `group` channels (the last one at most
    /// that); errors name what does not fit.
    pub fn from_gptq_act_order(
        [k, n]: [usize; 2],
        (qweight, qzeros, scales): (&[u8], &[u8], &[u8]),
        g_idx: &[i32],
        group: usize,
        zeros_minus_one: bool,
    ) -> Result<(HostQuant, Vec<u32>)> {
        let what = format!("a GPTQ weight [{k}, {n}] in groups of {group} with g_idx");
        check_int4_parts(&what, [k, n], (qweight, qzeros, scales), group)?;
        let groups = k.div_ceil(group);
        if g_idx.len() != k {
            return Err(Error::InvalidArgument(format!(
                "{what}: g_idx has {} entries, needs {k}",
                g_idx.len()
            )));
        }
        if let Some(bad) = g_idx.iter().find(|&&g| g < 0 || g as usize >= groups) {
            return Err(Error::InvalidArgument(format!(
                "{what}: g_idx holds group {bad}, outside 0..{groups}"
            )));
        }
        // Channels sorted by group (stable): group g then sits at positions
        // g * group .. if every group but the last holds `group` channels.
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by_key(|&c| g_idx[c]);
        if let Some(p) = (0..k).find(|&p| g_idx[order[p]] as usize != p / group) {
            return Err(Error::InvalidArgument(format!(
                "{what}: group {} does not hold {group} channels (position {p} of the sorted order)",
                g_idx[order[p]]
            )));
        }
        let (qw, qz) = (words_of(qweight), words_of(qzeros));
        let code = gptq_code(&qw, n);
        let host = int4_zp_from(
            [k, n],
            group,
            scales,
            |p, c| code(order[p], c),
            gptq_zero(&qz, n, zeros_minus_one),
        )?;
        Ok((host, order.into_iter().map(|c| c as u32).collect()))
    }

    /// A 4-bit AWQ checkpoint weight (`x @ W` with `W` `[K, N]`) as an
    /// [`QuantFormat::Int4Zp`] tensor `[K, N]` blocked down its columns,
    /// from the tensors as AutoAWQ stores them (`version: "gemm"`):
    /// `qweight` int32 `[K, N / 8]` and `qzeros` int32 `[ceil(K / group), N
    /// / 8]`, eight columns per word in AWQ's order (column `8c + j` in
    /// bits `4i..` where `i` is `j`'s place in 0, 2, 4, 6, 1, 3, 5, 7),
    /// `scales` f16 `[ceil(K / group), N]`, all little-endian bytes. Each
    /// value is `(q - z) * scale`. Groups as [`HostQuant::from_gptq`]'s; K
    /// and N must be multiples of 8.
    pub fn from_awq(
        [k, n]: [usize; 2],
        (qweight, qzeros, scales): (&[u8], &[u8], &[u8]),
        group: usize,
    ) -> Result<HostQuant> {
        let what = format!("an AWQ weight [{k}, {n}] in groups of {group}");
        check_int4_parts(&what, [k, n], (qweight, qzeros, scales), group)?;
        // The bit offset of column j of a word: 4 x its place in AWQ's order.
        const PLACE: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];
        let (qw, qz) = (words_of(qweight), words_of(qzeros));
        int4_zp_from(
            [k, n],
            group,
            scales,
            |kk, c| (qw[kk * n / 8 + c / 8] >> (4 * PLACE[c % 8])) & 0xf,
            |g, c| (qz[g * n / 8 + c / 8] >> (4 * PLACE[c % 8])) & 0xf,
        )
    }

    /// The parts as a checkpoint stores them: the bytes
    /// [`HostQuant::from_bytes`] takes, `(data, scales, zeros)`.
    pub fn to_bytes(&self) -> Result<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        self.check()?;
        let blocks = self.layout()?.blocks();
        let bytes = |words: &[u32], n: usize| -> Vec<u8> {
            words.iter().flat_map(|w| w.to_le_bytes()).take(n).collect()
        };
        let f = self.format;
        Ok((
            bytes(
                &self.data,
                blocks * self.block * f.element_bits() as usize / 8,
            ),
            bytes(&self.scales, blocks * f.scale_bits() as usize / 8),
            bytes(&self.zeros, blocks * f.zero_bits() as usize / 8),
        ))
    }

    /// The packed layout.
    pub fn layout(&self) -> Result<QuantLayout> {
        QuantLayout::new(
            &self.shape,
            self.axis,
            self.block,
            self.format.element_bits(),
        )
    }

    /// Checks that the parts have the sizes the shape, format and block need.
    pub fn check(&self) -> Result<()> {
        self.format.check_block(self.block)?;
        let lay = self.layout()?;
        let want = |what: &str, got: usize, n: usize| {
            if got == n {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "{} of shape {:?}: {what} has {got} words, needs {n}",
                    self.format, self.shape
                )))
            }
        };
        want(
            "data",
            self.data.len(),
            lay.blocks() * lay.words_per_block(),
        )?;
        let per_word = |bits: u32| (32 / bits) as usize;
        want(
            "scales",
            self.scales.len(),
            lay.blocks().div_ceil(per_word(self.format.scale_bits())),
        )?;
        let zeros = if self.format.zero_bits() > 0 {
            lay.blocks().div_ceil(4)
        } else {
            0
        };
        want("zeros", self.zeros.len(), zeros)?;
        if self.format == QuantFormat::Nvfp4
            && !(self.global_scale.is_finite() && self.global_scale >= 0.0)
        {
            return Err(Error::InvalidArgument(format!(
                "NVFP4 per-tensor scale must be finite and >= 0, got {}",
                self.global_scale
            )));
        }
        Ok(())
    }

    /// The values, row-major: what `Context::dequantize` gives.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        self.check()?;
        let lay = self.layout()?;
        let (lines, _) = lay.lines();
        let nb = lay.blocks_per_line();
        let bits = self.format.element_bits();
        let mut out = vec![0.0f32; self.shape.iter().product()];
        for l in 0..lines {
            for j in 0..nb {
                let id = lay.block_id(l, j);
                let s = unpack(&self.scales, self.format.scale_bits(), id);
                let z = if self.zeros.is_empty() {
                    0
                } else {
                    unpack(&self.zeros, 8, id)
                };
                for t in 0..self.block {
                    if let Some(i) = lay.element_index(l, j, t) {
                        // Block `id`'s codes are fields id * block.. of the data.
                        let q = unpack(&self.data, bits, id * self.block + t);
                        out[i] = dequantize_code(self.format, q, s, z, self.global_scale);
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite magnitude of `f` with its code, ascending.
    fn grid(f: Minifloat) -> Vec<(f64, u32)> {
        (0..=f.max_code)
            .map(|c| (f64::from(f.decode(c)), c))
            .collect()
    }

    /// The nearest grid code to `t >= 0` (ties to the even code), saturated.
    fn nearest(g: &[(f64, u32)], t: f64) -> u32 {
        let i = g.partition_point(|&(v, _)| v <= t);
        if i == 0 {
            return g[0].1;
        }
        if i == g.len() {
            return g[g.len() - 1].1;
        }
        let ((a, ca), (b, cb)) = (g[i - 1], g[i]);
        let mid = (a + b) / 2.0;
        if t < mid || (t == mid && ca & 1 == 0) {
            ca
        } else {
            cb
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        /// A finite f32 of any exponent.
        fn f32(&mut self) -> f32 {
            loop {
                let v = f32::from_bits(self.next() as u32);
                if v.is_finite() {
                    return v;
                }
            }
        }
    }

    #[test]
    fn every_code_round_trips() {
        for f in [E4M3, E5M2, E2M1, F16] {
            let sign = 1 << (f.ebits + f.mbits);
            for c in 0..(2 * sign) {
                let v = f.decode(c);
                let mag = c & (sign - 1);
                let back = f.encode_scaled(v, 0);
                if v.is_nan() {
                    assert_eq!(
                        back,
                        (c & sign) | f.nan_code.unwrap(),
                        "{f:?} NaN code {c:#x}"
                    );
                } else if v.is_infinite() {
                    assert_eq!(back & (sign - 1), f.max_code, "{f:?} inf saturates");
                } else {
                    assert_eq!(back, c, "{f:?} code {c:#x} = {v}");
                    assert!(mag <= f.max_code);
                }
            }
        }
        // The documented values.
        assert_eq!(E4M3.decode(0x7E), 448.0);
        assert!(E4M3.decode(0x7F).is_nan() && E4M3.decode(0xFF).is_nan());
        assert_eq!(E4M3.decode(0x01), 2f32.powi(-9));
        assert_eq!(E5M2.decode(0x7B), 57344.0);
        assert_eq!(E5M2.decode(0x7C), f32::INFINITY);
        assert_eq!(E5M2.decode(0x01), 2f32.powi(-16));
        let e2m1: Vec<f32> = (0..8).map(|c| E2M1.decode(c)).collect();
        assert_eq!(e2m1, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(E2M1.decode(0xF), -6.0);
        for c in 0..=0xFEu32 {
            let v = e8m0_decode(c);
            assert_eq!(f64::from(v), 2f64.powi(c as i32 - 127), "E8M0 {c}");
            assert_eq!(e8m0_encode(floor_log2(v)), c, "E8M0 {c}");
        }
        assert!(e8m0_decode(0xFF).is_nan());
        // f16 agrees with the half crate everywhere.
        for c in 0..=0xFFFFu32 {
            let h = half::f16::from_bits(c as u16).to_f32();
            let v = F16.decode(c);
            assert!(v == h || (v.is_nan() && h.is_nan()), "{c:#x}");
        }
        let mut rng = Rng(7);
        for _ in 0..200_000 {
            let x = rng.f32() * 2f32.powi(-100);
            let x = if x.abs() < 65504.0 {
                x
            } else {
                x.signum() * 1000.5
            };
            assert_eq!(
                F16.encode_scaled(x, 0),
                u32::from(half::f16::from_f32(x).to_bits()),
                "{x:e}"
            );
        }
    }

    #[test]
    fn scaled_rounding_matches_the_nearest_value() {
        let mut rng = Rng(11);
        for f in [E4M3, E5M2, E2M1, F16] {
            let g = grid(f);
            for i in 0..200_000 {
                let x = if i % 2 == 0 {
                    rng.f32()
                } else {
                    // Near the grid: a grid value times a small factor.
                    let (v, _) = g[(rng.next() as usize) % g.len()];
                    (v * (1.0 + ((rng.next() % 64) as f64 - 32.0) / 256.0)) as f32
                };
                let k = (rng.next() % 300) as i32 - 150;
                let t = f64::from(x.abs()) * 2f64.powi(-k);
                let want = nearest(&g, t)
                    | if x.is_sign_negative() {
                        1 << (f.ebits + f.mbits)
                    } else {
                        0
                    };
                assert_eq!(f.encode_scaled(x, k), want, "{f:?} x = {x:e}, k = {k}");
            }
            // Exact ties go to the even code.
            for w in g.windows(2) {
                let mid = ((w[0].0 + w[1].0) / 2.0) as f32;
                let even = if w[0].1 & 1 == 0 { w[0].1 } else { w[1].1 };
                assert_eq!(f.encode_scaled(mid, 0), even, "{f:?} tie {mid}");
            }
        }
    }

    #[test]
    fn division_rounding_is_exact() {
        let mut rng = Rng(5);
        for grid_kind in [
            Grid::Float(E4M3),
            Grid::Float(E2M1),
            Grid::Float(F16),
            Grid::Int { lo: -127, hi: 127 },
            Grid::Int { lo: 0, hi: 15 },
        ] {
            let g: Vec<(f64, u32)> = match grid_kind {
                Grid::Float(f) => grid(f),
                Grid::Int { lo, hi } => (0..=hi.max(-lo) as u32)
                    .map(|c| (f64::from(c), c))
                    .collect(),
            };
            for i in 0..100_000 {
                // y of few significant bits where the format needs it (F16's
                // divisors are the small integers 127, 15 and 7).
                let y = match grid_kind {
                    Grid::Float(F16) => [127.0f32, 15.0, 7.0][i % 3],
                    Grid::Int { .. } => {
                        half::f16::from_bits((rng.next() % 0x7BFF) as u16 + 1).to_f32()
                    }
                    _ => (rng.next() as u32 >> 8) as f32 * 2f32.powi((rng.next() % 40) as i32 - 40),
                };
                if y == 0.0 || !y.is_finite() {
                    continue;
                }
                let top = g.last().unwrap().0;
                let x = if i % 3 == 0 {
                    // An exact tie.
                    let j = (rng.next() as usize) % (g.len() - 1);
                    let mid = (g[j].0 + g[j + 1].0) / 2.0;
                    (mid * f64::from(y)) as f32
                } else {
                    ((rng.next() % 1_000_000) as f64 / 1e6 * top * 1.2 * f64::from(y)) as f32
                };
                let t = f64::from(x.abs()) / f64::from(y);
                // The exact reference: compare against midpoints in f64 (all
                // products below 53 bits).
                let want = {
                    let i = g.partition_point(|&(v, _)| v * f64::from(y) <= f64::from(x.abs()));
                    if i == 0 {
                        g[0].1
                    } else if i == g.len() {
                        g[g.len() - 1].1
                    } else {
                        let mid = (g[i - 1].0 + g[i].0) / 2.0 * f64::from(y);
                        let ax = f64::from(x.abs());
                        if ax < mid || (ax == mid && g[i - 1].1 & 1 == 0) {
                            g[i - 1].1
                        } else {
                            g[i].1
                        }
                    }
                };
                assert_eq!(
                    grid_kind.round_div(x, y),
                    want,
                    "{grid_kind:?}: {x:e} / {y:e} = {t}"
                );
            }
        }
    }

    #[test]
    fn mx_block_rules() {
        // Scale exponent floor(log2 amax) - emax; elements saturate.
        let mut x = vec![0.25f32; 32];
        x[3] = 1000.0; // log2 = 9.97 -> 9; E4M3: 9 - 8 = 1
        let b = quantize_block(QuantFormat::Mxfp8E4m3, &x, 1.0);
        assert_eq!(b.scale, 128);
        assert_eq!(
            E4M3.decode(b.codes[3]),
            448.0,
            "1000 / 2 = 500 saturates to 448"
        );
        assert_eq!(E4M3.decode(b.codes[0]), 0.125);
        let b = quantize_block(QuantFormat::Mxfp4, &x, 1.0);
        assert_eq!(b.scale, 127 + 7, "MXFP4: 9 - 2");
        assert_eq!(
            E2M1.decode(b.codes[3]),
            6.0,
            "1000 / 128 = 7.8 saturates to 6"
        );
        assert_eq!(b.codes[0], 0, "0.25 / 128 rounds to 0");
        // All zeros: the smallest scale, zero elements.
        let b = quantize_block(QuantFormat::Mxfp8E5m2, &[0.0; 32], 1.0);
        assert_eq!((b.scale, b.codes.iter().sum::<u32>()), (0, 0));
        // NaN or Inf anywhere: the NaN scale.
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = vec![1.0f32; 32];
            x[17] = bad;
            for f in [
                QuantFormat::Mxfp8E4m3,
                QuantFormat::Mxfp8E5m2,
                QuantFormat::Mxfp4,
            ] {
                assert_eq!(quantize_block(f, &x, 1.0).scale, 0xFF);
            }
        }
        // Huge and tiny blocks clamp to the E8M0 range.
        let b = quantize_block(QuantFormat::Mxfp4, &[f32::MAX; 32], 1.0);
        assert_eq!(b.scale, 127 + 125);
        let b = quantize_block(QuantFormat::Mxfp8E4m3, &[f32::from_bits(1); 32], 1.0);
        assert_eq!(b.scale, 0, "2^-149: exponent -157 clamps to -127");
        assert_eq!(
            E4M3.decode(b.codes[0]),
            0.0,
            "2^-149 / 2^-127 = 2^-22 rounds to 0"
        );
    }

    #[test]
    fn host_round_trips_are_within_half_a_step() {
        let mut rng = Rng(3);
        for format in QuantFormat::ALL {
            for (shape, axis) in [
                (vec![7usize, 45], QuantAxis::Rows),
                (vec![45, 7], QuantAxis::Columns),
                (vec![3, 2, 64], QuantAxis::Rows),
                (vec![1], QuantAxis::Rows),
                (vec![0, 5], QuantAxis::Rows),
            ] {
                let n: usize = shape.iter().product();
                let x: Vec<f32> = (0..n)
                    .map(|_| ((rng.next() % 20001) as f32 - 10000.0) / 2500.0)
                    .collect();
                let q = quantize(&x, &shape, format, axis, format.default_block()).unwrap();
                q.check().unwrap();
                let y = q.dequantize().unwrap();
                let lay = q.layout().unwrap();
                let (lines, len) = lay.lines();
                for l in 0..lines {
                    for j in 0..lay.blocks_per_line() {
                        let idx: Vec<usize> = (0..q.block)
                            .filter_map(|t| lay.element_index(l, j, t))
                            .collect();
                        let amax = idx.iter().fold(0.0f32, |a, &i| a.max(x[i].abs()));
                        let (lo, hi) = idx
                            .iter()
                            .fold((0.0f32, 0.0f32), |(a, b), &i| (a.min(x[i]), b.max(x[i])));
                        // Half a step of the coarsest spacing, plus saturation.
                        let bound = match format {
                            QuantFormat::Mxfp8E4m3 => amax / 8.0 + amax * 0.125,
                            QuantFormat::Mxfp8E5m2 => amax / 4.0 + amax * 0.125,
                            QuantFormat::Mxfp4 | QuantFormat::Nvfp4 => amax * 0.34,
                            QuantFormat::Int8 => amax / 127.0 * 0.51,
                            QuantFormat::Int4 => amax / 7.0 * 0.51,
                            QuantFormat::Int4Zp => (hi - lo) / 15.0 * 0.51 + (hi - lo) * 1e-3,
                            // amax lands on the top code: half the top
                            // binade's step (32 of 448, 8192 of 57344).
                            QuantFormat::Fp8E4m3 => amax * 16.0 / 448.0,
                            QuantFormat::Fp8E5m2 => amax * 4096.0 / 57344.0,
                        } * 1.01
                            + 1e-6;
                        for &i in &idx {
                            assert!(
                                (x[i] - y[i]).abs() <= bound,
                                "{format} {shape:?} {axis:?}: {} -> {} (bound {bound}, len {len})",
                                x[i],
                                y[i]
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn checkpoint_bytes_round_trip() {
        let mut rng = Rng(7);
        let values: Vec<f32> = (0..12 * 70)
            .map(|_| (rng.next() % 2001) as f32 / 100.0 - 10.0)
            .collect();
        for format in QuantFormat::ALL {
            for (shape, axis) in [([12, 70], QuantAxis::Rows), ([70, 12], QuantAxis::Columns)] {
                let q = quantize(&values, &shape, format, axis, format.default_block()).unwrap();
                let (data, scales, zeros) = q.to_bytes().unwrap();
                let back = HostQuant::from_bytes(
                    format,
                    axis,
                    q.block,
                    &shape,
                    &data,
                    &scales,
                    &zeros,
                    q.global_scale,
                )
                .unwrap();
                assert_eq!(back, q, "{format} {axis:?}");
                // One byte short is refused by name.
                let short = HostQuant::from_bytes(
                    format,
                    axis,
                    q.block,
                    &shape,
                    &data[..data.len() - 1],
                    &scales,
                    &zeros,
                    q.global_scale,
                );
                assert!(
                    matches!(short, Err(Error::InvalidArgument(m)) if m.contains("data")),
                    "{format}"
                );
            }
        }
        // An MXFP4 block as an OCP checkpoint stores it: codes 1 (0.5) and 2
        // (1.0) in the low and high nibble of the first byte, 6 (4.0) then
        // 15 (-6.0) in the last; scale 2^1 (E8M0 128).
        let mut blocks = [0u8; 16];
        blocks[0] = 0x21;
        blocks[15] = 0xf6;
        let q = HostQuant::from_bytes(
            QuantFormat::Mxfp4,
            QuantAxis::Rows,
            32,
            &[1, 32],
            &blocks,
            &[128],
            &[],
            1.0,
        )
        .unwrap();
        let v = q.dequantize().unwrap();
        assert_eq!(
            (v[0], v[1], v[2], v[30], v[31]),
            (1.0, 2.0, 0.0, 8.0, -12.0)
        );
    }

    #[test]
    fn bytes_per_element() {
        assert!(QuantFormat::Mxfp8E4m3.bytes_per_element(32) <= 1.04);
        assert!(QuantFormat::Mxfp4.bytes_per_element(32) <= 0.54);
        assert!(QuantFormat::Nvfp4.bytes_per_element(16) <= 0.57);
        assert!(QuantFormat::Int4.bytes_per_element(32) <= 0.57);
    }
}
