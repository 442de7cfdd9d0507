//! Shape algebra, plain data: a checked matmul problem ([`MatmulShape`]:
//! NumPy `matmul` broadcasting, transposed and padded operands) and the
//! padding policy a caller asks for. No GPU, no choice.

use crate::error::{Error, Result};

/// Largest tensor rank.
pub const MAX_RANK: usize = 4;

/// Batch dimensions the kernels index directly (a rank-4 operand has two).
pub(crate) const MAX_BATCH_DIMS: usize = MAX_RANK - 2;

/// How the padding layer may treat shapes that are not aligned for the fastest
/// kernel (see `crate::pad`). Results are identical whichever is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Padding {
    /// Copy into aligned scratch buffers (and slice the result back) when the
    /// cost model says the aligned kernel's gain beats the copies.
    #[default]
    Auto,
    /// Never copy: run the raw shape on bounds-checked kernels.
    Never,
    /// Pad whenever the shape is not aligned for the best kernel (to measure).
    Always,
}

/// A checked matmul problem: sizes, batch broadcasting strides, output shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Rows of each output matrix.
    pub m: usize,
    /// Columns of each output matrix.
    pub n: usize,
    /// The contracted dimension.
    pub k: usize,
    /// Output batch dimensions, padded on the left to two (`[outer, inner]`).
    pub batch: [usize; MAX_BATCH_DIMS],
    /// Element strides of A per batch dimension (0 where A broadcasts).
    pub a_strides: [usize; MAX_BATCH_DIMS],
    /// Element strides of B per batch dimension (0 where B broadcasts).
    pub b_strides: [usize; MAX_BATCH_DIMS],
    /// The result's shape.
    pub out_shape: Vec<usize>,
    /// A is stored transposed (`[.., K, M]`).
    pub transpose_a: bool,
    /// B is stored transposed (`[.., N, K]`).
    pub transpose_b: bool,
    /// Elements between consecutive stored rows of A: its stored last
    /// dimension (K, or M when transposed), more for a padded tensor.
    pub a_pitch: usize,
    /// Elements between consecutive stored rows of B (N, or K when
    /// transposed, unless padded).
    pub b_pitch: usize,
}

impl MatmulShape {
    /// Like [`MatmulShape::new`] for operands stored transposed: `a` is
    /// `[.., K, M]` when `transpose_a`, `b` is `[.., N, K]` when `transpose_b`.
    /// Transposing a 1-D operand is an error (it has no second dimension).
    pub fn with_transposes(
        a: &[usize],
        b: &[usize],
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Self> {
        let logical = |dims: &[usize], transpose: bool, which: &str| -> Result<Vec<usize>> {
            let mut d = dims.to_vec();
            if transpose {
                if d.len() < 2 {
                    return Err(Error::InvalidArgument(format!(
                        "cannot transpose the {which} operand of shape {dims:?}: it needs 2 or more dimensions"
                    )));
                }
                let len = d.len();
                d.swap(len - 2, len - 1);
            }
            Ok(d)
        };
        let mut shape = Self::new(
            &logical(a, transpose_a, "A")?,
            &logical(b, transpose_b, "B")?,
        )?;
        shape.transpose_a = transpose_a;
        shape.transpose_b = transpose_b;
        shape.a_pitch = if transpose_a { shape.m } else { shape.k };
        shape.b_pitch = if transpose_b { shape.k } else { shape.n };
        Ok(shape)
    }

    /// Element strides (row, column) of A's and B's logical matrices in
    /// their buffers: row-major `(k, 1)` / `(n, 1)`, transposed `(1, m)` / `(1, k)`.
    pub fn operand_strides(&self) -> [u32; 4] {
        let (ap, bp) = (self.a_pitch as u32, self.b_pitch as u32);
        let (a_rs, a_cs) = if self.transpose_a { (1, ap) } else { (ap, 1) };
        let (b_rs, b_cs) = if self.transpose_b { (1, bp) } else { (bp, 1) };
        [a_rs, a_cs, b_rs, b_cs]
    }

    /// The same product with operands stored in rows of `a_pitch` and
    /// `b_pitch` elements (padded tensors): batch strides follow. A pitch
    /// shorter than the stored row is an error.
    pub fn with_pitches(mut self, a_pitch: usize, b_pitch: usize) -> Result<Self> {
        let (a_rows, a_len) = if self.transpose_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        };
        let (b_rows, b_len) = if self.transpose_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        };
        if a_pitch < a_len || b_pitch < b_len {
            return Err(Error::InvalidArgument(format!(
                "row pitches {a_pitch} (A) and {b_pitch} (B) are shorter than the stored rows ({a_len}, {b_len})"
            )));
        }
        let rescale = |strides: [usize; MAX_BATCH_DIMS], old: usize, new: usize| {
            strides.map(|s| s.checked_div(old).map_or(s, |q| q * new))
        };
        self.a_strides = rescale(self.a_strides, a_rows * a_len, a_rows * a_pitch);
        self.b_strides = rescale(self.b_strides, b_rows * b_len, b_rows * b_pitch);
        self.a_pitch = a_pitch;
        self.b_pitch = b_pitch;
        Ok(self)
    }

    /// The same product with the batches of A folded into its rows where
    /// that reads and writes the same memory: B shared by every batch (a
    /// linear layer's weight), A not transposed and its batches packed one
    /// after another. `[B, S, K] x [K, N]` becomes one `[B * S, K] x [K, N]`
    /// product, so the kernel is chosen for B * S rows instead of S (and a
    /// GEMV of batches of one row becomes a matmul). The output's shape and
    /// layout are unchanged.
    pub fn folded(mut self) -> Self {
        let [outer, inner] = self.batch;
        let matrix = self.m * self.a_pitch;
        let packed = (inner == 1 || self.a_strides[1] == matrix)
            && (outer == 1 || self.a_strides[0] == inner * matrix);
        if self.transpose_a || self.b_strides != [0, 0] || outer * inner == 1 || !packed {
            return self;
        }
        self.m *= outer * inner;
        self.batch = [1, 1];
        self.a_strides = [0, 0];
        self
    }

    /// Checks two shapes as NumPy's `matmul` does.
    pub fn new(a: &[usize], b: &[usize]) -> Result<Self> {
        if a.is_empty() || b.is_empty() {
            return Err(Error::shape(
                "matmul",
                a,
                b,
                "matmul needs operands of rank >= 1, not scalars",
            ));
        }
        // 1-D operands: [K] acts as [1, K] on the left and [K, 1] on the right.
        let a2: Vec<usize> = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b2: Vec<usize> = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (m, ka) = (a2[a2.len() - 2], a2[a2.len() - 1]);
        let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
        if ka != kb {
            return Err(Error::shape(
                "matmul",
                a,
                b,
                format!("contracted dimensions differ: A has K = {ka}, B has K = {kb}"),
            ));
        }
        let a_batch = &a2[..a2.len() - 2];
        let b_batch = &b2[..b2.len() - 2];
        if a_batch.len() > MAX_BATCH_DIMS || b_batch.len() > MAX_BATCH_DIMS {
            return Err(Error::InvalidArgument(format!(
                "matmul supports at most {MAX_BATCH_DIMS} batch dimensions: {a:?} x {b:?}"
            )));
        }
        let pad = |dims: &[usize]| {
            let mut p = [1usize; MAX_BATCH_DIMS];
            p[MAX_BATCH_DIMS - dims.len()..].copy_from_slice(dims);
            p
        };
        let (ap, bp) = (pad(a_batch), pad(b_batch));
        let mut batch = [1usize; MAX_BATCH_DIMS];
        for i in 0..MAX_BATCH_DIMS {
            batch[i] = match (ap[i], bp[i]) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                (x, y) => {
                    return Err(Error::shape(
                        "matmul",
                        a,
                        b,
                        format!("batch dimensions {x} and {y} do not broadcast"),
                    ));
                }
            };
        }
        let strides = |p: [usize; MAX_BATCH_DIMS], matrix: usize| {
            let inner = if p[1] == 1 { 0 } else { matrix };
            let outer = if p[0] == 1 { 0 } else { matrix * p[1] };
            [outer, inner]
        };
        let out_batch_rank = a_batch.len().max(b_batch.len());
        let mut out_shape: Vec<usize> = batch[MAX_BATCH_DIMS - out_batch_rank..].to_vec();
        if a.len() > 1 {
            out_shape.push(m);
        }
        if b.len() > 1 {
            out_shape.push(n);
        }
        Ok(Self {
            m,
            n,
            k: ka,
            batch,
            a_strides: strides(ap, m * ka),
            b_strides: strides(bp, ka * n),
            out_shape,
            transpose_a: false,
            transpose_b: false,
            a_pitch: ka,
            b_pitch: n,
        })
    }

    /// Number of output matrices.
    pub fn batch_count(&self) -> usize {
        self.batch.iter().product()
    }

    /// Multiply-add count times two.
    pub fn flops(&self) -> u64 {
        2 * (self.m * self.n * self.k * self.batch_count()) as u64
    }
}
