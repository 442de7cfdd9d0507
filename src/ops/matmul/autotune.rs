//! The autotuner's measurements of matmul candidates: tuning inputs,
//! plans built on threads while the first candidate is timed.

use super::*;

/// Seconds of GPU work before the autotuner measures its first candidate.
const TUNING_WARMUP_SECONDS: f64 = 0.2;

impl Context {
    /// The autotuner's pick for this shape bucket: the heuristic's kernel
    /// when tuning is off or not worth it, the cached winner when there is
    /// one, else the fastest of the top candidates timed now on fresh random
    /// inputs of the same shapes, generated on the GPU (never the caller's
    /// data: zeros or special values would time differently).
    pub(crate) fn autotuned_kernel(
        &self,
        dtype: DType,
        shape: &MatmulShape,
        a: &Tensor,
        b: &Tensor,
        heuristic: MatmulKernel,
    ) -> Result<MatmulKernel> {
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let batches = shape.batch_count();
        let profile = self.profile();
        let tuner = self.autotuner();
        if tuner.mode() == AutotuneMode::Off || !Autotuner::worth_tuning(profile, m, n, k, batches)
        {
            return Ok(heuristic);
        }
        let layout = tune::Layout::of(shape);
        let transposes = (shape.transpose_a, shape.transpose_b);
        let candidates = tune::matmul_candidates_layout(profile, dtype, (m, n, k), batches, layout);
        let mut inputs: Option<(Tensor, Tensor)> = None;
        let decision = tuner.decide_transposed(
            profile,
            ("matmul", dtype),
            (m, n, k, batches),
            transposes,
            &candidates,
            heuristic,
            |candidate| {
                let first = inputs.is_none();
                if first {
                    let ta = self.alloc(a.shape(), dtype, "wgtile tuning A")?;
                    let tb = self.alloc(b.shape(), dtype, "wgtile tuning B")?;
                    self.fill_random(&ta, 0x5eed_0a0a)?;
                    self.fill_random(&tb, 0x5eed_0b0b)?;
                    inputs = Some((ta, tb));
                }
                let (ta, tb) = inputs.as_ref().expect("just filled");
                let plan_of = |kernel: MatmulKernel| {
                    let options =
                        MatmulOptions::with_kernel(kernel).transposed(transposes.0, transposes.1);
                    self.matmul_plan(ta, tb, None, &options)
                };
                let elapsed = crate::kernels::stopwatch();
                if !first {
                    let plan = plan_of(candidate)?;
                    let built = elapsed();
                    let t = self.time(&plan, &tuner.mode().timing_options())?.median();
                    log::debug!(
                        "autotune: {candidate}: built in {:.0} ms, timed in {:.0} ms",
                        built * 1e3,
                        (elapsed() - built) * 1e3
                    );
                    return Ok(t);
                }
                // The first candidate (the heuristic's pick) is timed while
                // threads compile the other timed candidates' pipelines. The
                // GPU may be idling at a low clock: its warm-up brings it up
                // before it is measured, or it reads slow and loses unfairly
                // (seen on the H200: 64x64 tiles chosen over faster 128x128
                // ones).
                let timed = candidates.len().min(tuner.mode().max_candidates());
                let others: Vec<MatmulKernel> = candidates[..timed]
                    .iter()
                    .copied()
                    .filter(|&c| c != candidate)
                    .collect();
                let first_time = || -> Result<f64> {
                    let plan = plan_of(candidate)?;
                    let options = TimingOptions {
                        warmup: 1,
                        warmup_seconds: TUNING_WARMUP_SECONDS,
                        ..tuner.mode().timing_options()
                    };
                    Ok(self.time(&plan, &options)?.median())
                };
                let t = if cfg!(target_arch = "wasm32") {
                    first_time()?
                } else {
                    std::thread::scope(|scope| {
                        for &kernel in &others {
                            let plan_of = &plan_of;
                            scope.spawn(move || {
                                // A failure shows again (and is reported)
                                // when this candidate is measured.
                                if let Err(e) = plan_of(kernel) {
                                    log::debug!("autotune: building {kernel} failed: {e}");
                                }
                            });
                        }
                        first_time()
                    })?
                };
                log::debug!(
                    "autotune: {candidate} built and timed (and {} others built) in {:.0} ms",
                    others.len(),
                    elapsed() * 1e3
                );
                Ok(t)
            },
        )?;
        Ok(decision.kernel)
    }
}
