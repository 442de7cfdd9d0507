//! [`Dispatch`]: one compute pipeline with its bind group and grid, ready
//! to encode.

use std::sync::Arc;

/// One compute dispatch, ready to encode.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub(crate) pipeline: Arc<wgpu::ComputePipeline>,
    pub(crate) bind_group: wgpu::BindGroup,
    pub(crate) workgroups: [u32; 3],
    /// Grid read from this buffer at this byte offset when it runs (a
    /// conditional dispatch: `Context::armed` writes its `workgroups` there,
    /// or zeros).
    pub(crate) indirect: Option<(Arc<wgpu::Buffer>, u64)>,
    /// The bound buffers, kept from reuse by the buffer pool while this
    /// dispatch (or a clone) lives.
    pub(crate) _bound: Arc<super::pool::Bindings>,
}

impl Dispatch {
    /// Binds `buffers` in order at group 0, bindings 0.. (auto layout).
    pub(crate) fn new(
        device: &wgpu::Device,
        pipeline: Arc<wgpu::ComputePipeline>,
        buffers: &[&wgpu::Buffer],
        workgroups: [u32; 3],
    ) -> Self {
        let numbered: Vec<(u32, &wgpu::Buffer)> = (0u32..).zip(buffers.iter().copied()).collect();
        Self::with_bindings(device, pipeline, &numbered, workgroups)
    }

    /// Binds each buffer at its own binding index of group 0 (for entry
    /// points that use only some of a module's bindings: wgpu derives each
    /// entry point's layout from the bindings it uses).
    pub(crate) fn with_bindings(
        device: &wgpu::Device,
        pipeline: Arc<wgpu::ComputePipeline>,
        buffers: &[(u32, &wgpu::Buffer)],
        workgroups: [u32; 3],
    ) -> Self {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|&(binding, b)| wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        let bound = super::pool::Bindings::new(buffers.iter().map(|&(_, b)| b.clone()).collect());
        Self {
            pipeline,
            bind_group,
            workgroups,
            indirect: None,
            _bound: Arc::new(bound),
        }
    }

    pub(crate) fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        if let Some((args, offset)) = &self.indirect {
            pass.dispatch_workgroups_indirect(args, *offset);
            return;
        }
        let [x, y, z] = self.workgroups;
        pass.dispatch_workgroups(x, y, z);
    }
}

/// A 2-D grid of `groups` workgroups (x first), within the adapter's limit.
pub(crate) fn grid(
    profile: &crate::gpu::AdapterProfile,
    groups: u64,
    what: &str,
) -> crate::error::Result<[u32; 3]> {
    let max = u64::from(profile.max_workgroups_per_dim.max(1));
    let gx = groups.clamp(1, max);
    let gy = groups.div_ceil(gx).max(1);
    if gy > max {
        return Err(crate::error::Error::LimitExceeded {
            limit: "max_compute_workgroups_per_dimension",
            requested: gy,
            max,
            what: format!("{what}: {groups} workgroups"),
        });
    }
    Ok([gx as u32, gy as u32, 1])
}
