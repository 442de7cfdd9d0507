//! Casts between f32, f16 and bf16 (`shaders/cast.wgsl`), and the bf16
//! staging the ops use: bf16 operands become scratch tensors of a compute
//! dtype in front of an op's plan, and a bf16 result is rounded behind it
//! (where the op's kernel does not write bf16 itself).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Dispatch, Plan, Tensor, grid, last_dim};
use crate::kernels::cast::{
    CAST_FLAG_BINDING, CAST_GROUPS, CAST_WG, FLAG_WORDS, RANGE_SLOTS, cast_spec, cast_vec,
};
use crate::kernels::{Kernel, Spec};
use crate::runtime::Context;

/// bf16 operands staged for an op's kernels: the tensors the kernels read
/// (bf16 ones replaced by casts), the cast dispatches that make them and
/// the scratch they write.
pub(crate) struct Staged {
    pub(crate) tensors: Vec<Tensor>,
    pub(crate) dispatches: Vec<Dispatch>,
    pub(crate) scratch: Vec<Tensor>,
}

impl Staged {
    /// `plan` with the casts run first and the scratch kept alive; the
    /// memory floor counts the bf16 operands, not their staged copies.
    pub(crate) fn before(self, mut plan: Plan, originals: &[&Tensor]) -> Plan {
        for (t, o) in self.tensors.iter().zip(originals) {
            if t.dtype() != o.dtype() {
                plan.bytes = plan.bytes.saturating_sub(t.size_bytes()) + o.size_bytes();
            }
        }
        let mut dispatches = self.dispatches;
        dispatches.append(&mut plan.dispatches);
        plan.dispatches = dispatches;
        plan.scratch.extend(self.scratch);
        plan
    }
}

impl Context {
    /// `dispatches` made conditional on word 2 of `flag` (set by an earlier
    /// dispatch of the same run): a first dispatch writes each one's grid,
    /// or zero workgroups while the flag is clear, into an indirect-argument
    /// buffer they read when they run.
    pub(crate) fn armed(
        &self,
        flag: &wgpu::Buffer,
        dispatches: Vec<Dispatch>,
    ) -> Result<Vec<Dispatch>> {
        self.armed_either((flag, 0), Vec::new(), dispatches)
    }

    /// A zeroed flag buffer for the range test of bf16 operands staged to
    /// f16 ([`FLAG_WORDS`] words) and the dispatch that clears it again at
    /// the start of each run.
    pub(crate) fn range_flag(&self) -> Result<(wgpu::Buffer, Dispatch)> {
        let flag = self.storage_words(&[0; FLAG_WORDS]);
        let clear = self.fill_dispatch(&flag, 0)?;
        Ok((flag, clear))
    }

    /// `unless` made conditional on `flag` being clear and `set` on it
    /// being set (one first dispatch writes both groups' grids): the f16
    /// kernels of a bf16 plan and its f32 fallback, exactly one of which
    /// runs. The flag is set where its word 2 is, or where one of its first
    /// `slots` operand slots failed the range test (`shaders/arm.wgsl`).
    pub(crate) fn armed_either(
        &self,
        (flag, slots): (&wgpu::Buffer, u32),
        unless: Vec<Dispatch>,
        set: Vec<Dispatch>,
    ) -> Result<Vec<Dispatch>> {
        let n_unless = u32::try_from(unless.len()).unwrap_or(u32::MAX);
        let mut dispatches = unless;
        dispatches.extend(set);
        if dispatches.is_empty() {
            return Ok(dispatches);
        }
        if dispatches.iter().any(|d| d.indirect.is_some()) {
            // One flag per dispatch: a conditional one inside would lose its own.
            return Err(Error::InvalidArgument(
                "internal: a conditional dispatch cannot be made conditional again".into(),
            ));
        }
        // The grids reach the GPU through an indirect buffer, past wgpu's
        // own check of direct dispatches: checked here.
        let max = self.profile().max_workgroups_per_dim;
        if let Some(&big) = dispatches
            .iter()
            .flat_map(|d| d.workgroups.iter())
            .find(|&&g| g > max)
        {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: u64::from(big),
                max: u64::from(max),
                what: "a conditional dispatch".into(),
            });
        }
        let grids: Vec<u32> = dispatches.iter().flat_map(|d| d.workgroups).collect();
        let args = std::sync::Arc::new(self.inner.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgtile conditional grids"),
            size: (grids.len() * 4).next_multiple_of(16) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT,
            mapped_at_creation: false,
        }));
        let grids_buffer = self.storage_words(&grids);
        let params = self.uniform(&[dispatches.len() as u32, n_unless, slots, 0]);
        let pipeline = self
            .inner
            .pipelines
            .get(&self.inner.device, &Spec::new(crate::kernels::Kernel::Arm))?;
        let count = u32::try_from(dispatches.len().div_ceil(64)).unwrap_or(u32::MAX);
        let mut out = vec![Dispatch::new(
            &self.inner.device,
            pipeline,
            &[&params, flag, &grids_buffer, &args],
            [count, 1, 1],
        )];
        out.extend(dispatches.into_iter().enumerate().map(|(i, mut d)| {
            d.indirect = Some((args.clone(), (i * 12) as u64));
            d
        }));
        Ok(out)
    }

    /// bf16 `tensors` (at most [`RANGE_SLOTS`]) cast to new f16 tensors by
    /// the checked cast, tensor i publishing its range test as slot i of
    /// `flag` (a [`Context::range_flag`]): the casts and the f16 tensors.
    pub(crate) fn checked_halves(
        &self,
        tensors: &[&Tensor],
        flag: &wgpu::Buffer,
    ) -> Result<(Vec<Dispatch>, Vec<Tensor>)> {
        if tensors.len() > RANGE_SLOTS as usize {
            return Err(Error::InvalidArgument(format!(
                "the range test takes at most {RANGE_SLOTS} operands, not {}",
                tensors.len()
            )));
        }
        let mut dispatches = Vec::new();
        let mut halves = Vec::new();
        for (slot, &t) in (0..RANGE_SLOTS).zip(tensors) {
            let h = self.alloc(t.shape(), DType::F16, "wgtile bf16 staging")?;
            dispatches.extend(self.cast_dispatch_with(
                t,
                &h,
                crate::kernels::cast::cast_checked_spec(),
                Some((flag, slot)),
            )?);
            halves.push(h);
        }
        Ok((dispatches, halves))
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// The checked cast of bf16 `tensors` (1 to 4 of them) alone: whether
    /// their range test arms the f32 fallback, as the arm pass decides it.
    /// For tests of the staging that bf16 attention takes on tensor cores.
    #[doc(hidden)]
    pub fn bf16_cast_check(&self, tensors: &[&Tensor]) -> Result<bool> {
        for t in tensors {
            self.check_operand(t, DType::BF16, "bf16_cast_check")?;
        }
        self.arms_fallback(tensors.len() as u32, |flag| {
            self.checked_halves(tensors, flag)
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Runs the range test that `test` builds into a fresh flag (`slots`
    /// operand slots; the tensors it returns are kept until it has run) and
    /// then an arm pass choosing between two marker fills: whether it picks
    /// the fallback.
    pub(crate) fn arms_fallback(
        &self,
        slots: u32,
        test: impl FnOnce(&wgpu::Buffer) -> Result<(Vec<Dispatch>, Vec<Tensor>)>,
    ) -> Result<bool> {
        let (flag, clear) = self.range_flag()?;
        // `_kept` (the casts' outputs) stays out of the buffer pool until the
        // dispatches that write it have run.
        let (tested, _kept) = test(&flag)?;
        let mut dispatches = vec![clear];
        dispatches.extend(tested);
        let marker = self.alloc(&[4], DType::U32, "wgtile arm marker")?;
        let on_f16 = self.fill_dispatch(&marker.buffer, 1)?;
        let fallback = self.fill_dispatch(&marker.buffer, 2)?;
        dispatches.extend(self.armed_either((&flag, slots), vec![on_f16], vec![fallback])?);
        self.run_dispatches("the range test", &dispatches)?;
        match marker.to_vec_blocking::<u32>()?[0] {
            1 => Ok(false),
            2 => Ok(true),
            w => Err(Error::InvalidArgument(format!(
                "internal: the arm pass ran neither group (marker {w})"
            ))),
        }
    }

    /// `t` converted to `dtype`, in a new contiguous tensor (`t` itself
    /// when it already has that dtype and is contiguous).
    ///
    /// Widening (f16 or bf16 to f32) is exact, NaN payloads included.
    /// Narrowing rounds to nearest
    /// even from the exact value: f32 to f16 or bf16, f16 to bf16 (8
    /// significant bits of f16's 11) and bf16 to f16 (exact within f16's
    /// range; bf16's wider range rounds to f16 subnormals, zero or
    /// infinity). Values beyond the target's largest finite value round to
    /// infinity, as IEEE rounding does; NaN stays NaN (its quiet bit set,
    /// its top payload bits kept). The kernel works on bit patterns, so it
    /// needs no `shader-f16` and flushes no subnormal; the results equal the
    /// `half` crate's `from_f32` / `to_f32` bit for bit. A padded source
    /// ([`Context::tensor_padded`]) is read in place.
    ///
    /// Integers: i32 and u32 to a float dtype round to nearest even
    /// through f32 (exact up to 2^24 in magnitude; beyond, bf16 and f16
    /// round the rounded f32 again), floats to integers truncate toward
    /// zero and saturate at the type's range with NaN giving 0, and i32
    /// to u32 or back keeps the bits: Rust's `as` in every case.
    pub fn cast(&self, t: &Tensor, dtype: DType) -> Result<Tensor> {
        self.check_owned_any(t, "cast")?;
        if t.dtype() == dtype && t.is_contiguous() {
            return Ok(t.clone());
        }
        let plan = self.cast_plan(t, dtype)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::cast`] as a plan (always a copy into a new tensor).
    pub fn cast_plan(&self, t: &Tensor, dtype: DType) -> Result<Plan> {
        self.check_owned_any(t, "cast")?;
        let output = self.alloc(t.shape(), dtype, "wgtile cast")?;
        let dispatches = self.cast_dispatch(t, &output)?.into_iter().collect();
        Ok(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("cast {} -> {dtype} {:?}", t.dtype(), t.shape()),
            dispatches,
            flops: 0,
            bytes: (t.numel() * (t.dtype().size() + dtype.size())) as u64,
            output,
            scratch: Vec::new(),
        })
    }

    /// The dispatch writing `src` converted into `dst` (contiguous, same
    /// shape, any dtype); `None` for an empty tensor.
    pub(crate) fn cast_dispatch(&self, src: &Tensor, dst: &Tensor) -> Result<Option<Dispatch>> {
        self.cast_dispatch_with(src, dst, cast_spec(src.dtype(), dst.dtype()), None)
    }

    /// [`Context::cast_dispatch`] with a given specialisation of the cast
    /// kernel and its flag buffer and operand slot (the checked cast of
    /// [`Context::checked_halves`], which keeps slots below
    /// [`RANGE_SLOTS`]).
    pub(crate) fn cast_dispatch_with(
        &self,
        src: &Tensor,
        dst: &Tensor,
        spec: Spec,
        flag: Option<(&wgpu::Buffer, u32)>,
    ) -> Result<Option<Dispatch>> {
        debug_assert_eq!(src.shape(), dst.shape());
        let n = src.numel();
        if n == 0 {
            return Ok(None);
        }
        let too_big = |what: &str, v: usize| Error::LimitExceeded {
            limit: "cast element count (u32 indices)",
            requested: v as u64,
            max: u64::from(u32::MAX),
            what: format!("a cast of a {:?} tensor ({what})", src.shape()),
        };
        let stored = src.storage_len();
        let n32 = u32::try_from(n).map_err(|_| too_big("elements", n))?;
        u32::try_from(stored).map_err(|_| too_big("stored elements", stored))?;
        let row = last_dim(src.shape()) as u32;
        // Contiguous and whole units of 8: 16-byte loads and stores.
        let vec =
            spec.kernel == Kernel::Cast && src.row_stride() == row as usize && n.is_multiple_of(8);
        let words = if vec {
            n32 / 8
        } else if dst.dtype().size() == 4 {
            n32
        } else {
            n32.div_ceil(2)
        };
        let groups = grid(
            self.profile(),
            u64::from(words.div_ceil(CAST_WG)).min(CAST_GROUPS),
            "a cast",
        )?;
        let spec = if vec { cast_vec(spec) } else { spec };
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        let params = self.uniform(&[
            n32,
            words,
            row,
            src.row_stride() as u32,
            groups[0],
            groups[1],
            0,
            flag.map_or(0, |(_, slot)| slot),
        ]);
        let (src_at, dst_at) = if vec { (7, 8) } else { (1, 2) };
        let mut binds = vec![(0, &params), (src_at, src.buffer()), (dst_at, dst.buffer())];
        binds.extend(flag.map(|(f, _)| (CAST_FLAG_BINDING, f)));
        Ok(Some(Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &binds,
            groups,
        )))
    }

    /// The range test of bf16 `a` and `b` over their stored values (one
    /// dispatch), published as operand slots 0 and 1 of `flag` (a
    /// [`Context::range_flag`]).
    pub(crate) fn check_f16_dispatch(
        &self,
        (a, b): (&Tensor, &Tensor),
        flag: &wgpu::Buffer,
    ) -> Result<Option<Dispatch>> {
        let stored = |t: &Tensor| {
            let stored = t.storage_len();
            u32::try_from(stored).map_err(|_| Error::LimitExceeded {
                limit: "cast element count (u32 indices)",
                requested: stored as u64,
                max: u64::from(u32::MAX),
                what: format!("the check of a bf16 {:?} tensor", t.shape()),
            })
        };
        let (na, nb) = (stored(a)?, stored(b)?);
        let (wa, wb) = (na.div_ceil(8), nb.div_ceil(8));
        if wa == 0 && wb == 0 {
            return Ok(None);
        }
        let groups = grid(
            self.profile(),
            u64::from(wa.max(wb).div_ceil(CAST_WG)).min(CAST_GROUPS),
            "a bf16 check",
        )?;
        let pipeline = self
            .inner
            .pipelines
            .get(&self.inner.device, &crate::kernels::cast::cast_check_spec())?;
        let params = self.uniform(&[na, wa, 1, 1, groups[0], groups[1], wb, nb]);
        Ok(Some(Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &[
                (0, &params),
                (5, a.buffer()),
                (6, b.buffer()),
                (CAST_FLAG_BINDING, flag),
            ],
            groups,
        )))
    }

    /// Each bf16 tensor of `inputs` cast to `to` (contiguous scratch);
    /// the others as they are.
    pub(crate) fn stage_bf16(&self, inputs: &[&Tensor], to: DType) -> Result<Staged> {
        let mut staged = Staged {
            tensors: Vec::with_capacity(inputs.len()),
            dispatches: Vec::new(),
            scratch: Vec::new(),
        };
        for &t in inputs {
            if t.dtype() != DType::BF16 {
                staged.tensors.push(t.clone());
                continue;
            }
            self.check_owned(t, "a bf16 operand")?;
            let s = self.alloc(t.shape(), to, "wgtile bf16 staging")?;
            staged.dispatches.extend(self.cast_dispatch(t, &s)?);
            staged.scratch.push(s.clone());
            staged.tensors.push(s);
        }
        Ok(staged)
    }

    /// `plan` (whose output is f32) followed by its output rounded into
    /// `into` (a bf16 tensor of its shape) or a new bf16 tensor, which
    /// becomes the plan's output; `plan` as it is where its kernel wrote
    /// bf16 itself and there is no `into`.
    pub(crate) fn round_output_bf16(&self, mut plan: Plan, into: Option<&Tensor>) -> Result<Plan> {
        if plan.output.dtype() == DType::BF16 {
            // The kernel wrote bf16 itself (into `into` where given).
            return Ok(plan);
        }
        let wide = plan.output.clone();
        let out = match into {
            Some(o) => o.clone(),
            None => self.alloc(wide.shape(), DType::BF16, "wgtile bf16 result")?,
        };
        plan.dispatches.extend(self.cast_dispatch(&wide, &out)?);
        plan.bytes = plan.bytes.saturating_sub(wide.size_bytes()) + out.size_bytes();
        plan.scratch.push(wide);
        plan.output = out;
        Ok(plan)
    }
}
