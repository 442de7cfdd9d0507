//! Layout ops: [`Context::permute`], [`Context::transpose`],
//! [`Context::narrow`], [`Context::split`] and [`Context::concat`]. Each
//! result is a new contiguous tensor written by one strided block copy
//! per input (`shaders/copy.wgsl`): wgtile's tensors have no offset or
//! arbitrary strides, so a view would be a silent reinterpretation for
//! most kernels. Any dtype; padded sources are read in place.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{MAX_RANK, Plan, Tensor, grid};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;

const WG: u32 = 256;
/// Most workgroups per copy (a grid-stride loop covers the rest).
const GROUPS: u64 = 4096;

/// A block of `shape` read at `src_base + i . src` and written at
/// `dst_base + i . dst` (element strides, rank `MAX_RANK`, leading 1s).
struct Block {
    shape: [usize; MAX_RANK],
    src: [usize; MAX_RANK],
    dst: [usize; MAX_RANK],
    src_base: usize,
    dst_base: usize,
}

/// The element strides of `t` as stored (its rows `row_stride` apart).
fn strides_of(t: &Tensor) -> Vec<usize> {
    let shape = t.shape();
    let r = shape.len();
    let mut s = vec![1; r];
    if r >= 2 {
        s[r - 2] = t.row_stride();
        for k in (0..r - 2).rev() {
            s[k] = s[k + 1] * shape[k + 1];
        }
    }
    s
}

/// Row-major strides of a contiguous `shape`.
fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// `v` padded on the left to `MAX_RANK` with `fill`.
fn padded(v: &[usize], fill: usize) -> [usize; MAX_RANK] {
    let mut out = [fill; MAX_RANK];
    out[MAX_RANK - v.len()..].copy_from_slice(v);
    out
}

fn u32_of(what: &str, v: usize) -> Result<u32> {
    Error::u32_index("copy indices (u32)", what, v)
}

fn check_axis(op: &str, axis: usize, shape: &[usize]) -> Result<()> {
    if axis >= shape.len() {
        return Err(Error::InvalidArgument(format!(
            "{op}: axis {axis} is out of range for shape {shape:?}"
        )));
    }
    Ok(())
}

impl Context {
    /// The dispatch copying `block` from `src` into `dst` (same dtype);
    /// `None` for an empty block.
    fn copy_dispatch(&self, src: &Tensor, dst: &Tensor, b: &Block) -> Result<Option<Dispatch>> {
        let elements: usize = b.shape.iter().product();
        if elements == 0 {
            return Ok(None);
        }
        let reach = |base: usize, strides: &[usize; MAX_RANK]| {
            base + b.shape.iter().zip(strides).map(|(&n, &s)| (n - 1) * s).sum::<usize>()
        };
        u32_of("the copy's source positions", reach(b.src_base, &b.src) + 1)?;
        u32_of("the copy's destination positions", reach(b.dst_base, &b.dst) + 1)?;
        u32_of("the copy's elements", elements)?;
        let last = MAX_RANK - 1;
        let half = src.dtype().size() == 2;
        // A transpose: the source's contiguous axis is not the block's
        // last, the destination's is: through tiles (2-byte elements where
        // each pair along the last axis is one destination word).
        let contiguous_in_src = (0..last).find(|&q| b.src[q] == 1 && b.shape[q] > 1);
        let transpose = b.src[last] != 1 && b.dst[last] == 1 && b.shape[last] > 1;
        let whole_pairs = b.shape[last].is_multiple_of(2) && b.dst_base.is_multiple_of(2) && b.dst[..last].iter().all(|s| s.is_multiple_of(2));
        if let (true, Some(q)) = (transpose && (!half || whole_pairs), contiguous_in_src) {
            let mut t = Block { ..*b };
            t.shape.swap(q, 2);
            t.src.swap(q, 2);
            t.dst.swap(q, 2);
            return self.tiled_dispatch(src, dst, &t, half).map(Some);
        }
        // Contiguous runs on both sides: 16-byte units where the last axis,
        // every other stride and both offsets divide.
        let unit = 16 / src.dtype().size();
        let divides = |v: usize| v.is_multiple_of(unit);
        if b.src[last] == 1
            && b.dst[last] == 1
            && divides(b.shape[last])
            && divides(b.src_base)
            && divides(b.dst_base)
            && b.src[..last].iter().chain(&b.dst[..last]).all(|&s| divides(s))
        {
            let mut v = Block { ..*b };
            v.shape[last] /= unit;
            for k in 0..last {
                v.src[k] /= unit;
                v.dst[k] /= unit;
            }
            v.src_base /= unit;
            v.dst_base /= unit;
            return self.rows_dispatch(src, dst, &v, Kernel::CopyVec4, v.shape[last]).map(Some);
        }
        // 2-byte elements in whole words where every pair along the last
        // axis lands on one destination word.
        let pairs = half && whole_pairs && b.dst[last] == 1;
        let cols = if pairs { b.shape[last] / 2 } else { b.shape[last] };
        let kernel = if half && !pairs {
            Kernel::CopyHalves
        } else {
            Kernel::Copy
        };
        self.rows_dispatch(src, dst, b, kernel, cols).map(Some)
    }

    /// `kernel` (one of the rows-by-lanes copies) over `b`, `cols` steps
    /// per row.
    fn rows_dispatch(&self, src: &Tensor, dst: &Tensor, b: &Block, kernel: Kernel, cols: usize) -> Result<Dispatch> {
        let rows: usize = b.shape[..MAX_RANK - 1].iter().product();
        let lpr = cols.next_power_of_two().min(WG as usize);
        let per_group = WG as usize / lpr;
        let g = grid(self.profile(), (rows.div_ceil(per_group) as u64).min(GROUPS), "a copy")?;
        let mut words = self.block_words(b)?;
        words.extend([u32_of("a copy's row", cols)?, lpr as u32, g[0], 0, 0, 0]);
        let params = self.uniform(&words);
        let (spec, dst_binding, src_binding) = match kernel {
            Kernel::CopyHalves => (Spec::new(kernel), 3, 1),
            Kernel::CopyVec4 => (Spec::new(kernel), 5, 4),
            _ => (
                Spec::new(kernel).constant("HALF", u32::from(src.dtype().size() == 2)),
                2,
                1,
            ),
        };
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec.override_("WG", WG))?;
        Ok(Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &[(0, &params), (src_binding, src.buffer()), (dst_binding, dst.buffer())],
            g,
        ))
    }

    /// The block's shape, strides and offsets as parameter words.
    fn block_words(&self, b: &Block) -> Result<Vec<u32>> {
        let u = |v: &[usize; MAX_RANK]| -> Result<Vec<u32>> {
            v.iter().map(|&x| u32_of("a copy stride", x)).collect()
        };
        let mut words = u(&b.shape)?;
        words.extend(u(&b.src)?);
        words.extend(u(&b.dst)?);
        words.extend([
            u32_of("the copy's source offset", b.src_base)?,
            u32_of("the copy's destination offset", b.dst_base)?,
        ]);
        Ok(words)
    }

    /// The tiled transpose of a block whose axis 2 is contiguous in the
    /// source and axis 3 in the destination (`half`: 2-byte elements, in
    /// whole destination words).
    fn tiled_dispatch(&self, src: &Tensor, dst: &Tensor, b: &Block, half: bool) -> Result<Dispatch> {
        let max = self.profile().max_workgroups_per_dim as usize;
        let (gx, gy) = (b.shape[3].div_ceil(32), b.shape[2].div_ceil(32));
        if gx.max(gy) > max {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: gx.max(gy) as u64,
                max: max as u64,
                what: format!("a tiled transpose of a {:?} block", b.shape),
            });
        }
        let gz = (b.shape[0] * b.shape[1]).min(max).max(1);
        let mut words = self.block_words(b)?;
        words.extend([0, 0, 0, 0, 0, 0]);
        let params = self.uniform(&words);
        let spec = Spec::new(Kernel::CopyTiled).constant("HALF", u32::from(half));
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        Ok(Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &[(0, &params), (1, src.buffer()), (2, dst.buffer())],
            [gx as u32, gy as u32, gz as u32],
        ))
    }

    fn layout_plan(&self, label: String, output: Tensor, dispatches: Vec<Dispatch>, bytes: u64) -> Plan {
        self.plan(label, dispatches, output, 0, bytes)
    }

    /// The axes of `t` reordered: axis `j` of the result is axis
    /// `axes[j]` of `t` (NumPy's `transpose(t, axes)`, PyTorch's
    /// `permute`), copied into a new contiguous tensor.
    pub fn permute(&self, t: &Tensor, axes: &[usize]) -> Result<Tensor> {
        let plan = self.permute_plan(t, axes)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::permute`] as a plan.
    pub fn permute_plan(&self, t: &Tensor, axes: &[usize]) -> Result<Plan> {
        self.check_owned_any(t, "permute")?;
        let shape = t.shape();
        let mut seen = vec![false; shape.len()];
        if axes.len() != shape.len() || axes.iter().any(|&a| a >= shape.len() || std::mem::replace(&mut seen[a], true)) {
            return Err(Error::InvalidArgument(format!(
                "permute: {axes:?} is not a permutation of the {} axes of shape {shape:?}",
                shape.len()
            )));
        }
        let out_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        let out = self.alloc(&out_shape, t.dtype(), "wgtile permute")?;
        let src = strides_of(t);
        let block = Block {
            shape: padded(&out_shape, 1),
            src: padded(&axes.iter().map(|&a| src[a]).collect::<Vec<_>>(), 0),
            dst: padded(&contiguous_strides(&out_shape), 0),
            src_base: 0,
            dst_base: 0,
        };
        let dispatches = self.copy_dispatch(t, &out, &block)?.into_iter().collect();
        let bytes = 2 * out.size_bytes();
        Ok(self.layout_plan(format!("permute {shape:?} by {axes:?}"), out, dispatches, bytes))
    }

    /// `t` with axes `a` and `b` swapped (a copy).
    pub fn transpose(&self, t: &Tensor, a: usize, b: usize) -> Result<Tensor> {
        for axis in [a, b] {
            check_axis("transpose", axis, t.shape())?;
        }
        let mut axes: Vec<usize> = (0..t.rank()).collect();
        axes.swap(a, b);
        self.permute(t, &axes)
    }

    /// `len` entries of `t` along `axis` from `start` (PyTorch's `narrow`,
    /// the slice `start..start + len`), copied into a new contiguous tensor.
    pub fn narrow(&self, t: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor> {
        let plan = self.narrow_plan(t, axis, start, len)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::narrow`] as a plan.
    pub fn narrow_plan(&self, t: &Tensor, axis: usize, start: usize, len: usize) -> Result<Plan> {
        self.check_owned_any(t, "narrow")?;
        let shape = t.shape();
        check_axis("narrow", axis, shape)?;
        if start.checked_add(len).is_none_or(|end| end > shape[axis]) {
            return Err(Error::InvalidArgument(format!(
                "narrow: {start}..{start}+{len} is out of range for axis {axis} of shape {shape:?}"
            )));
        }
        let mut out_shape = shape.to_vec();
        out_shape[axis] = len;
        let out = self.alloc(&out_shape, t.dtype(), "wgtile narrow")?;
        let src = strides_of(t);
        let block = Block {
            shape: padded(&out_shape, 1),
            src: padded(&src, 0),
            dst: padded(&contiguous_strides(&out_shape), 0),
            src_base: start * src[axis],
            dst_base: 0,
        };
        let dispatches = self.copy_dispatch(t, &out, &block)?.into_iter().collect();
        let bytes = 2 * out.size_bytes();
        Ok(self.layout_plan(
            format!("narrow {shape:?} axis {axis} {start}..{}", start + len),
            out,
            dispatches,
            bytes,
        ))
    }

    /// `t` cut along `axis` into consecutive pieces of `sizes` (which must
    /// add up to the axis' length): q, k and v from one fused projection.
    /// One submission for all pieces.
    pub fn split(&self, t: &Tensor, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
        check_axis("split", axis, t.shape())?;
        let total: usize = sizes.iter().sum();
        if total != t.shape()[axis] {
            return Err(Error::InvalidArgument(format!(
                "split: sizes {sizes:?} add up to {total}, axis {axis} of shape {:?} has {}",
                t.shape(),
                t.shape()[axis]
            )));
        }
        let mut start = 0;
        let mut plans = Vec::with_capacity(sizes.len());
        for &len in sizes {
            plans.push(self.narrow_plan(t, axis, start, len)?);
            start += len;
        }
        let dispatches: Vec<Dispatch> = plans.iter().flat_map(|p| p.dispatches.iter().cloned()).collect();
        self.run_dispatches("split", &dispatches)?;
        Ok(plans.into_iter().map(Plan::into_output).collect())
    }

    /// `tensors` joined along `axis` (equal shapes elsewhere, one dtype),
    /// in a new contiguous tensor.
    pub fn concat(&self, tensors: &[&Tensor], axis: usize) -> Result<Tensor> {
        let plan = self.concat_plan(tensors, axis)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::concat`] as a plan (one copy per input).
    pub fn concat_plan(&self, tensors: &[&Tensor], axis: usize) -> Result<Plan> {
        let Some(first) = tensors.first() else {
            return Err(Error::InvalidArgument("concat needs at least one tensor".into()));
        };
        let shape = first.shape();
        check_axis("concat", axis, shape)?;
        let dtype: DType = first.dtype();
        let mut out_shape = shape.to_vec();
        out_shape[axis] = 0;
        for t in tensors {
            self.check_owned_any(t, "concat")?;
            if t.dtype() != dtype {
                return Err(Error::DTypeMismatch {
                    op: "concat",
                    expected: dtype,
                    got: t.dtype(),
                });
            }
            let same = t.rank() == shape.len()
                && t.shape().iter().zip(shape).enumerate().all(|(k, (a, b))| k == axis || a == b);
            if !same {
                return Err(Error::shape(
                    "concat",
                    shape,
                    t.shape(),
                    format!("the tensors must match in every axis but {axis}"),
                ));
            }
            out_shape[axis] += t.shape()[axis];
        }
        let out = self.alloc(&out_shape, dtype, "wgtile concat")?;
        let dst = contiguous_strides(&out_shape);
        let mut dispatches = Vec::new();
        let mut offset = 0;
        for t in tensors {
            let block = Block {
                shape: padded(t.shape(), 1),
                src: padded(&strides_of(t), 0),
                dst: padded(&dst, 0),
                src_base: 0,
                dst_base: offset * dst[axis],
            };
            dispatches.extend(self.copy_dispatch(t, &out, &block)?);
            offset += t.shape()[axis];
        }
        let bytes = 2 * out.size_bytes();
        Ok(self.layout_plan(
            format!("concat of {} tensors along axis {axis} into {out_shape:?}", tensors.len()),
            out,
            dispatches,
            bytes,
        ))
    }
}

/// Every specialisation the layout ops compile (for the shader tests).
pub fn layout_specs() -> Vec<Spec> {
    vec![
        Spec::new(Kernel::Copy).constant("HALF", 0).override_("WG", WG),
        Spec::new(Kernel::Copy).constant("HALF", 1).override_("WG", WG),
        Spec::new(Kernel::CopyHalves).override_("WG", WG),
        Spec::new(Kernel::CopyVec4).override_("WG", WG),
        Spec::new(Kernel::CopyTiled).constant("HALF", 0),
        Spec::new(Kernel::CopyTiled).constant("HALF", 1),
    ]
}
