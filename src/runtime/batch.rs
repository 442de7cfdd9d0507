//! [`Context::batch`]: many ops in a few command buffers and pairs of error
//! scopes, instead of a submission per op.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::runtime::Context;

/// Closes the batch level when `batch` unwinds (a panic in its closure).
struct Close<'a> {
    gpu: &'a Gpu,
    done: bool,
}

impl Drop for Close<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.gpu.end_batch();
        }
    }
}

impl Context {
    /// Command buffers this context has submitted so far (how many
    /// submissions a sequence of ops took: for tests and benchmarks).
    #[doc(hidden)]
    pub fn submissions(&self) -> u64 {
        self.inner
            .gpu
            .submissions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `plans` in order in one command buffer: a forward pass built
    /// once as plans (each op's `*_plan`, later plans reading earlier
    /// plans' outputs) and replayed, with no plan building, bind groups or
    /// parameter buffers per run, and one submission. The plans must be of
    /// this context.
    pub fn run_plans(&self, plans: &[&crate::gpu::Plan]) -> Result<()> {
        for p in plans {
            if !std::sync::Arc::ptr_eq(&p.gpu, &self.inner.gpu) {
                return Err(crate::error::Error::InvalidArgument(format!(
                    "run_plans: the plan `{}` belongs to another context",
                    p.label()
                )));
            }
        }
        let dispatches: Vec<crate::gpu::Dispatch> = plans
            .iter()
            .flat_map(|p| p.dispatches.iter().cloned())
            .collect();
        self.inner.gpu.run_dispatches("run_plans", &dispatches)
    }

    /// Runs `f` with every op it starts on this thread recorded instead of
    /// submitted, and submits the recorded work in command buffers of
    /// [`BATCH_CHUNK`](crate::BATCH_CHUNK) steps (dispatches and buffer
    /// clears) and a last one at the end: a submit and a pair of error
    /// scopes per chunk instead of per op (each costs tens of microseconds
    /// of host time), while the GPU starts on the first chunks as later ops
    /// are still being built (one submission at the end left it idle
    /// meanwhile: 0.77-0.93x of op by op on the H200, against 1.12-1.21x).
    ///
    /// Ops inside return their output tensors at once; the work runs, in
    /// the order the ops were called, when its chunk submits. A read-back
    /// (`to_vec`), a [`Context::write`] or a [`Context::synchronize`]
    /// inside submits what was recorded so far first, so results are those
    /// of running op by op. Argument errors come back from the op at once;
    /// errors a submission reports (validation, out of memory) come back
    /// from the op whose recording filled the chunk, or from `batch` for
    /// the last chunk, after `f`'s own. For one submission of a whole
    /// forward pass, build it as plans and replay them with
    /// [`Context::run_plans`]. Batches nest (the outermost submits);
    /// other threads' ops submit as usual; [`Context::time`] refuses to
    /// run inside one.
    ///
    /// ```no_run
    /// # fn main() -> wgtile::Result<()> {
    /// # let ctx = wgtile::Context::new_blocking(Default::default())?;
    /// # let x = ctx.zeros([1, 384], wgtile::DType::F32)?;
    /// # let w = ctx.zeros([384, 384], wgtile::DType::F32)?;
    /// let y = ctx.batch(|| {
    ///     let h = ctx.matmul(&x, &w)?;
    ///     ctx.matmul(&h, &w)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn batch<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let gpu = &*self.inner.gpu;
        gpu.begin_batch();
        let mut close = Close { gpu, done: false };
        let out = f();
        close.done = true;
        let submitted = gpu.end_batch();
        let out = out?;
        submitted?;
        Ok(out)
    }
}
