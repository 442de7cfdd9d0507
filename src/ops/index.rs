//! Integer-indexed ops: [`Context::gather`] (embedding lookup, NumPy's
//! `take` along an axis), [`Context::index_select`] and
//! [`Context::arange`]. Kernels: `shaders/gather.wgsl`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor, grid};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;

/// Invocations per workgroup, and most workgroups per launch (a
/// grid-stride loop covers the rest).
const WG: u32 = 256;
const GROUPS: u64 = 4096;

/// The bit pattern an out-of-range id writes: the dtype's quiet NaN, zero
/// for the integer dtypes.
fn poison(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0x7fc0_0000,
        DType::F16 => 0x7e00,
        DType::BF16 => 0x7fc0,
        DType::I32 | DType::U32 => 0,
    }
}

fn u32_of(what: &str, v: usize) -> Result<u32> {
    Error::u32_index("gather indices (u32)", what, v)
}

impl Context {
    /// `table` indexed along `axis` by `ids` (i32 or u32, any shape):
    /// the result has shape `table.shape[..axis] ++ ids.shape ++
    /// table.shape[axis + 1..]`, NumPy's `take(table, ids, axis)`. With
    /// `axis = 0` and a `[vocab, hidden]` table it is an embedding lookup:
    /// `[batch, seq]` token ids give `[batch, seq, hidden]`.
    ///
    /// The table may have any dtype (its elements are copied as bits).
    /// Ids outside `[0, table.shape[axis])`, negative ones included, give
    /// rows of NaN (zeros for an integer table), never a read outside the
    /// table: a GPU kernel cannot raise an error without a round trip to
    /// the host, and a NaN row shows in every result computed from it.
    pub fn gather(&self, table: &Tensor, ids: &Tensor, axis: usize) -> Result<Tensor> {
        let plan = self.gather_plan(table, ids, axis)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::gather`] as a plan.
    pub fn gather_plan(&self, table: &Tensor, ids: &Tensor, axis: usize) -> Result<Plan> {
        self.check_owned_any(table, "the gathered table")?;
        table.require_contiguous("gather (the table)")?;
        let shape = table.shape();
        if axis >= shape.len() {
            return Err(Error::InvalidArgument(format!(
                "gather: axis {axis} is out of range for a table of shape {shape:?}"
            )));
        }
        let rows = shape[axis];
        self.check_gather_ids(ids, rows, "gather")?;
        let inner: usize = shape[axis + 1..].iter().product();
        let mut out_shape = shape[..axis].to_vec();
        out_shape.extend_from_slice(ids.shape());
        out_shape.extend_from_slice(&shape[axis + 1..]);
        let out = self.alloc(&out_shape, table.dtype(), "wgtile gather")?;
        let elements = out.numel();
        u32_of("the gathered table's elements", table.numel())?;
        let mut dispatches = Vec::new();
        if elements > 0 {
            let half = table.dtype().size() == 2;
            let elements = u32_of("the gather's output elements", elements)?;
            let words = if half { elements.div_ceil(2) } else { elements };
            // Whole words per row unless 2-byte rows are odd.
            let by_rows = !half || inner.is_multiple_of(2);
            let (mut row_words, poison_word) = if half {
                (inner / 2, poison(table.dtype()) * 0x1_0001)
            } else {
                (inner, poison(table.dtype()))
            };
            // 16-byte units where the rows divide into them.
            let units = by_rows && row_words.is_multiple_of(4);
            let words = if units {
                row_words /= 4;
                words / 4
            } else {
                words
            };
            let out_rows = elements as usize / inner.max(1);
            let lpr = row_words.max(1).next_power_of_two().min(WG as usize);
            let groups = if by_rows {
                out_rows.div_ceil(WG as usize / lpr) as u64
            } else {
                u64::from(words.div_ceil(WG))
            };
            let g = grid(self.profile(), groups.min(GROUPS), "a gather")?;
            let params = self.uniform(&[
                if by_rows { words } else { elements },
                words,
                u32_of("the gathered rows' length", if by_rows { row_words } else { inner })?,
                u32_of("the ids", ids.numel())?,
                // Ids are compared as u32 (a negative i32 is 2^31 or
                // more): the table's elements fit a u32, so its rows do.
                u32_of("the table's rows", rows)?,
                if by_rows { poison_word } else { poison(table.dtype()) },
                g[0],
                lpr as u32,
            ]);
            let kernel = match (by_rows, units) {
                (true, true) => Kernel::GatherUnits,
                (true, false) => Kernel::Gather,
                _ => Kernel::GatherWords,
            };
            let (table_binding, out_binding) = if units { (4, 5) } else { (1, 3) };
            let spec = Spec::new(kernel).override_("WG", WG);
            let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
            dispatches.push(Dispatch::with_bindings(
                &self.inner.device,
                pipeline,
                &[
                    (0, &params),
                    (table_binding, table.buffer()),
                    (2, ids.buffer()),
                    (out_binding, out.buffer()),
                ],
                g,
            ));
        }
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("gather {shape:?} along axis {axis} by {:?} ids", ids.shape()),
            dispatches,
            flops: 0,
            bytes: 2 * out.size_bytes() + ids.size_bytes(),
            output: out,
            scratch: Vec::new(),
        })
    }

    /// Checks gather ids for a table of `rows` rows along the gathered axis:
    /// a contiguous i32 or u32 tensor of this device, and i32 ids only
    /// where they reach every row.
    pub(crate) fn check_gather_ids(&self, ids: &Tensor, rows: usize, op: &'static str) -> Result<()> {
        self.check_owned_any(ids, op)?;
        if !matches!(ids.dtype(), DType::I32 | DType::U32) {
            return Err(Error::DTypeMismatch {
                op: "gather ids (i32 or u32)",
                expected: DType::I32,
                got: ids.dtype(),
            });
        }
        ids.require_contiguous(op)?;
        if ids.dtype() == DType::I32 && rows > 1 << 31 {
            return Err(Error::LimitExceeded {
                limit: "rows gathered by i32 ids",
                requested: rows as u64,
                max: 1 << 31,
                what: format!("{op} along an axis of more rows than i32 ids reach (use u32 ids)"),
            });
        }
        Ok(())
    }

    /// The entries of `t` at positions `ids` (rank 1, i32 or u32) along
    /// `axis`: PyTorch's `index_select`; [`Context::gather`] with
    /// one-dimensional ids (the same rule for ids out of range).
    pub fn index_select(&self, t: &Tensor, axis: usize, ids: &Tensor) -> Result<Tensor> {
        if ids.rank() != 1 {
            return Err(Error::InvalidArgument(format!(
                "index_select takes rank-1 ids, not shape {:?} (gather takes any)",
                ids.shape()
            )));
        }
        self.gather(t, ids, axis)
    }

    /// `[0, 1, ..., n - 1]` as `dtype`: i32, u32, or f32 (exact, so `n`
    /// at most 2^24), written on the GPU.
    pub fn arange(&self, n: usize, dtype: DType) -> Result<Tensor> {
        let limit: u64 = match dtype {
            DType::I32 => 1 << 31,
            DType::U32 => 1 << 32,
            DType::F32 => 1 << 24,
            other => {
                return Err(Error::DTypeMismatch {
                    op: "arange (i32, u32 or f32)",
                    expected: DType::I32,
                    got: other,
                });
            }
        };
        if n as u64 > limit {
            return Err(Error::InvalidArgument(format!(
                "arange: {n} values do not fit {dtype} exactly (at most {limit})"
            )));
        }
        let out = self.alloc(&[n], dtype, "wgtile arange")?;
        if n > 0 {
            let words = u32_of("arange", n)?;
            let g = grid(self.profile(), u64::from(words.div_ceil(WG)).min(GROUPS), "arange")?;
            let params = self.uniform(&[words, words, 1, 1, 0, 0, g[0], 1]);
            let spec = Spec::new(Kernel::Iota)
                .constant("IOTA_F32", u32::from(dtype == DType::F32))
                .override_("WG", WG);
            let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
            let d = Dispatch::with_bindings(&self.inner.device, pipeline, &[(0, &params), (3, out.buffer())], g);
            self.run_dispatches("arange", std::slice::from_ref(&d))?;
        }
        Ok(out)
    }
}

/// Every specialisation gather and arange compile (for the shader tests).
pub fn index_specs() -> Vec<Spec> {
    let mut out: Vec<Spec> = [Kernel::Gather, Kernel::GatherUnits, Kernel::GatherWords]
        .map(|k| Spec::new(k).override_("WG", WG))
        .to_vec();
    out.extend([0, 1].map(|f| Spec::new(Kernel::Iota).constant("IOTA_F32", f).override_("WG", WG)));
    out
}
