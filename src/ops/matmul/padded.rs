//! The padded matmul plan: operands copied into aligned scratch, the
//! aligned kernel, the last rows apart, the result cropped back.

use super::*;

impl Context {
    /// The padding layer's plan: copy A and B into zero-padded scratch
    /// buffers, run the aligned kernel, copy the result back into the output.
    // Long on purpose: the copies in, the aligned kernel, the last rows apart as GEMVs and the
    // copy out, in run order, each with its scratch.
    pub(crate) fn padded_matmul_plan(
        &self,
        a: &Tensor,
        b: &Tensor,
        shape: &MatmulShape,
        pad: PadChoice,
        epilogue: &Epilogue,
        mut plan: Plan,
    ) -> Result<Plan> {
        let dtype = a.dtype();
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let (kp, np) = (pad.k, pad.n);
        // Each operand as a batch of matrices of its own (1-D operands promoted).
        let a_dims = matrix_dims(a.shape(), true);
        let b_dims = matrix_dims(b.shape(), false);
        let a_batch: usize = a_dims[..a_dims.len() - 2].iter().product();
        let b_batch: usize = b_dims[..b_dims.len() - 2].iter().product();
        let with_last_two = |dims: &[usize], r: usize, c: usize| {
            let mut d = dims.to_vec();
            let len = d.len();
            d[len - 2] = r;
            d[len - 1] = c;
            d
        };
        // A with rows of kp elements, B with rows of np (zero-filled past the
        // logical end), only where the row is not aligned already; both
        // copies in one dispatch where they can share it.
        let a_pad = (kp != k)
            .then(|| self.alloc(&with_last_two(&a_dims, m, kp), dtype, "wgtile pad A"))
            .transpose()?;
        // B's rows: K, or the padded K' where the kernel runs K' (its rows
        // past K zero, as A's columns past K are).
        let kk = if pad.full_k { kp } else { k };
        let b_pad = (np != n || kk != k)
            .then(|| self.alloc(&with_last_two(&b_dims, kk, np), dtype, "wgtile pad B"))
            .transpose()?;
        let mut copies = Vec::new();
        for (src, pad, from, to, batches, what) in [
            (
                a,
                &a_pad,
                (m, k),
                (m, kp),
                a_batch,
                "padded matmul operand A",
            ),
            (
                b,
                &b_pad,
                (k, n),
                (kk, np),
                b_batch,
                "padded matmul operand B",
            ),
        ] {
            if let Some(dst) = pad {
                u32_of(dst.numel(), what)?;
                copies.push(PadCopy {
                    src,
                    from,
                    dst,
                    to,
                    batches,
                });
            }
        }
        let mut dispatches = self.pad_copy_dispatches(&copies)?;
        let a_buf = a_pad.as_ref().map_or(&a.buffer, |t| &t.buffer).clone();
        let b_buf = b_pad.as_ref().map_or(&b.buffer, |t| &t.buffer).clone();
        let mut scratch: Vec<Tensor> = a_pad.into_iter().chain(b_pad).collect();
        // The kernel's logical N: rounded up when its stores need aligned rows
        // (the padded B columns are zero, and so are those columns of C).
        // With the last r rows apart it runs rows 0 .. M - r of C (A's rows
        // keep their pitch; C's rows, of N, are where they were).
        let kernel_n = if pad.crop { np } else { n };
        let kernel_m = m - pad.fringe_rows;
        let padded = MatmulShape::new(
            &with_last_two(&a_dims, kernel_m, kk),
            &with_last_two(&b_dims, kk, kernel_n),
        )?
        .with_pitches(kp, np)?;
        let batches = padded.batch_count();
        let c_pad = if pad.crop {
            let c = self.alloc(&[batches, m, np], dtype, "wgtile pad C")?;
            u32_of(c.numel(), "padded matmul output")?;
            Some(c)
        } else {
            None
        };
        let c_buf = c_pad.as_ref().map_or(&plan.output.buffer, |c| &c.buffer);
        dispatches.extend(self.matmul_dispatches(
            pad.kernel,
            (dtype, dtype),
            &padded,
            (&a_buf, &b_buf, c_buf),
            (epilogue, None),
            &mut scratch,
        )?);
        if let Some(c_pad) = c_pad {
            dispatches.extend(self.pad_copy_dispatches(&[PadCopy {
                src: &c_pad,
                from: (kernel_m, np),
                dst: &plan.output,
                to: (kernel_m, n),
                batches,
            }])?);
            scratch.push(c_pad);
        }
        if pad.fringe_rows > 0 {
            // The last rows: batches M - r .. M of A (pitch K') viewed as
            // [M, 1, K] times B (pitch N') on the GEMV kernels, which write
            // them straight into rows M - r .. M of C (batch z of [M, 1, N]
            // is row z; one matrix).
            let rows = MatmulShape::new(&[m, 1, k], &[k, n])?.with_pitches(kp, np)?;
            dispatches.extend(self.gemv_dispatches(
                (dtype, dtype),
                &rows,
                (&a_buf, &b_buf, &plan.output.buffer),
                epilogue,
                &mut scratch,
                kernel_m..m,
                false,
            )?);
        }
        plan.label = format!(
            "matmul {dtype} {m}x{n}x{k} x{batches}{}{}{}: {}",
            if pad.copies {
                format!(" rows padded to K = {kp}, N = {np}")
            } else {
                String::new()
            },
            if pad.crop { " (cropped)" } else { "" },
            match pad.fringe_rows {
                0 => String::new(),
                1 => ", last row as a GEMV".into(),
                r => format!(", last {r} rows as GEMVs"),
            },
            pad.kernel
        );
        plan.dispatches = dispatches;
        plan.scratch = scratch;
        Ok(plan)
    }
}
