//! The padding layer's copies: matrices into padded (or cropped) scratch
//! buffers and back, as dispatches of the `pad_copy` kernels. What to pad is
//! decided in `tune::pad`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::Tensor;
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;

/// One matrix copy of the padding layer: `batches` matrices of `from` (rows,
/// columns) in `src` into `dst` as `to`, zero-filled where `to` is larger
/// and cropped where it is smaller.
#[derive(Clone, Copy)]
pub(crate) struct PadCopy<'a> {
    pub src: &'a Tensor,
    pub from: (usize, usize),
    pub dst: &'a Tensor,
    pub to: (usize, usize),
    pub batches: usize,
}

impl PadCopy<'_> {
    /// Halves per element: the word kernel (`halves`) copies bits, so an f32
    /// row of c floats is a row of 2c halves to it.
    fn halves_per_elem(&self) -> usize {
        self.src.dtype().size() / 2
    }

    /// Whether the word kernel (`halves`) takes this copy: 8 halves per
    /// invocation, destination rows of whole 16-byte words (f16, or f32 rows
    /// of a multiple of 4 floats: the split kernel's operands).
    fn by_words(&self) -> bool {
        (self.to.1 * self.halves_per_elem()).is_multiple_of(8)
    }

    /// The copy's grid in x and y, or the limit it exceeds.
    fn grid(&self, max: usize) -> Result<(u32, u32)> {
        let (rows, cols) = self.to;
        let (gx, gy) = if self.by_words() {
            (
                (cols * self.halves_per_elem()).div_ceil(256),
                rows.div_ceil(8),
            )
        } else {
            (cols.div_ceil(16), rows.div_ceil(16))
        };
        if gx > max || gy > max {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: gx.max(gy) as u64,
                max: max as u64,
                what: format!("padding a {rows} x {cols} matrix"),
            });
        }
        Ok((gx as u32, gy as u32))
    }
}

impl Context {
    /// The dispatches of `copies`. Two f16 copies into rows of whole words
    /// (the padding layer's A and B) share one dispatch where their batches
    /// fit one grid; every other copy runs alone, split where its batches
    /// pass the grid's limit.
    pub(crate) fn pad_copy_dispatches(&self, copies: &[PadCopy<'_>]) -> Result<Vec<Dispatch>> {
        let max = self.profile().max_workgroups_per_dim as usize;
        let mut out = Vec::new();
        if let [a, b] = copies
            && a.by_words()
            && b.by_words()
            && a.batches + b.batches <= max
        {
            out.push(self.pad_words_dispatch((a, 0, a.batches), Some((b, 0, b.batches)))?);
            return Ok(out);
        }
        for copy in copies {
            for base in (0..copy.batches).step_by(max) {
                let count = max.min(copy.batches - base);
                out.push(if copy.by_words() {
                    self.pad_words_dispatch((copy, base, count), None)?
                } else {
                    self.pad_elements_dispatch(copy, base, count)?
                });
            }
        }
        Ok(out)
    }

    /// `halves` over matrices `base .. base + count` of `first` and, in the
    /// same grid, of `second`.
    fn pad_words_dispatch(
        &self,
        first: (&PadCopy<'_>, usize, usize),
        second: Option<(&PadCopy<'_>, usize, usize)>,
    ) -> Result<Dispatch> {
        let max = self.profile().max_workgroups_per_dim as usize;
        let (a, a_base, a_count) = first;
        let (mut gx, mut gy) = a.grid(max)?;
        let mut words = Vec::with_capacity(12);
        let shape = |c: &PadCopy<'_>| {
            let h = c.halves_per_elem();
            [c.from.0, c.from.1 * h, c.to.0, c.to.1 * h].map(|v| v as u32)
        };
        words.extend(shape(a));
        let (b_base, b_count) = match second {
            Some((b, base, count)) => {
                let (bx, by) = b.grid(max)?;
                (gx, gy) = (gx.max(bx), gy.max(by));
                words.extend(shape(b));
                (base, count)
            }
            None => {
                words.extend(shape(a));
                (0, 0)
            }
        };
        words.extend([a_base as u32, b_base as u32, a_count as u32, 0]);
        let jobs = self.uniform(&words);
        // Bit moves only: the f32 module serves f16 and f32 copies alike
        // (and needs no shader-f16).
        let spec = Spec::new(Kernel::PadCopyHalves).dtype(DType::F32);
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let (b_src, b_dst) = match second {
            Some((b, ..)) => (b.src.buffer(), b.dst.buffer()),
            None => (&self.inner.dummy, &self.inner.dummy_rw),
        };
        Ok(Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &[
                (5, &jobs),
                (3, a.src.buffer()),
                (4, a.dst.buffer()),
                (6, b_src),
                (7, b_dst),
            ],
            [gx, gy, (a_count + b_count) as u32],
        ))
    }

    /// `main` (one invocation per element) over matrices `base .. base +
    /// count` of `copy`.
    fn pad_elements_dispatch(
        &self,
        copy: &PadCopy<'_>,
        base: usize,
        count: usize,
    ) -> Result<Dispatch> {
        let (gx, gy) = copy.grid(self.profile().max_workgroups_per_dim as usize)?;
        let params = self.uniform(&[
            copy.from.0 as u32,
            copy.from.1 as u32,
            copy.to.0 as u32,
            copy.to.1 as u32,
            base as u32,
        ]);
        let spec = Spec::new(Kernel::PadCopy).dtype(copy.src.dtype());
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        Ok(Dispatch::new(
            &self.inner.device,
            pipeline,
            &[&params, &copy.src.buffer, &copy.dst.buffer],
            [gx, gy, count as u32],
        ))
    }
}
