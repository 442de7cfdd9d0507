//! [`Plan`]: an operation checked, its output allocated and its dispatches
//! encoded once, ready to run (and to time) any number of times.

use std::fmt;

use super::Dispatch;
use super::Gpu;
use super::Tensor;
use crate::error::Result;
use std::sync::Arc;

/// Prepared GPU work for one operation.
///
/// Ops build plans after checking shapes, dtypes and limits, so running a plan
/// does no validation work: this is what benchmarks and the tour time.
#[derive(Clone)]
pub struct Plan {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) label: String,
    pub(crate) dispatches: Vec<Dispatch>,
    pub(crate) output: Tensor,
    pub(crate) flops: u64,
    pub(crate) bytes: u64,
    /// Scratch tensors the dispatches use (padded copies), kept alive with the plan.
    pub(crate) scratch: Vec<Tensor>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("label", &self.label)
            .field("dispatches", &self.dispatches.len())
            .field("output", &self.output)
            .field("flops", &self.flops)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Plan {
    /// This plan run after `earlier` (in order), whose outputs feed it:
    /// their dispatches first, their outputs and scratch kept alive as this
    /// plan's scratch, their FLOPs and bytes added.
    pub(crate) fn after(mut self, earlier: Vec<Plan>) -> Plan {
        let mut dispatches = Vec::new();
        let mut scratch = Vec::new();
        for p in earlier {
            dispatches.extend(p.dispatches);
            scratch.extend(p.scratch);
            scratch.push(p.output);
            self.flops += p.flops;
            self.bytes += p.bytes;
        }
        dispatches.append(&mut self.dispatches);
        self.dispatches = dispatches;
        scratch.append(&mut self.scratch);
        self.scratch = scratch;
        self
    }

    /// Submits the work (it runs asynchronously; reading the output waits for it).
    pub fn run(&self) -> Result<()> {
        self.gpu.run_dispatches(&self.label, &self.dispatches)
    }

    /// The tensor the work writes.
    pub fn output(&self) -> &Tensor {
        &self.output
    }

    /// Consumes the plan, returning its output tensor.
    pub fn into_output(self) -> Tensor {
        self.output
    }

    /// What the plan runs (kernel and parameters).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Useful floating-point operations per run (a multiply-add counts 2).
    pub fn flops(&self) -> u64 {
        self.flops
    }

    /// The fewest bytes one run must move through device memory (every input
    /// read once, the output written once): the memory floor.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes of scratch memory the plan holds (the padding layer's copies).
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch.iter().map(|t| t.size_bytes()).sum()
    }

    /// Number of compute dispatches per run.
    pub fn dispatch_count(&self) -> usize {
        self.dispatches.len()
    }

    /// Each dispatch as a plan of its own, in run order, to see where a
    /// multi-kernel plan's time goes (time each with
    /// [`Context::time`](crate::Context::time)). A stage reads what the
    /// stages before it wrote, so run the whole plan once first for
    /// meaningful inputs; stages count no FLOPs or bytes of their own.
    pub fn stages(&self) -> Vec<Plan> {
        let n = self.dispatches.len();
        self.dispatches
            .iter()
            .enumerate()
            .map(|(i, d)| Plan {
                gpu: self.gpu.clone(),
                label: format!("{} [stage {} of {n}]", self.label, i + 1),
                dispatches: vec![d.clone()],
                output: self.output.clone(),
                flops: 0,
                bytes: 0,
                scratch: self.scratch.clone(),
            })
            .collect()
    }
}
