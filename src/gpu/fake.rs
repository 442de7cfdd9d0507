//! Hand-built adapter profiles for tests that need no GPU: the dispatcher's
//! decisions and the shaders it would compile, on adapters this machine does
//! not have. Built for tests and the `dev` feature only.

use super::{AdapterProfile, CoopMatrixConfig};

impl AdapterProfile {
    /// A discrete NVIDIA-like GPU: subgroups of 32, f16, subgroup barriers,
    /// timestamps, no cooperative matrix, 48 KiB of workgroup memory, 1024
    /// invocations, 132 compute units.
    pub fn fake_gpu() -> Self {
        AdapterProfile {
            name: "fake-gpu".into(),
            backend: wgpu::Backend::Vulkan,
            device_type: wgpu::DeviceType::DiscreteGpu,
            vendor: 0x10de,
            device: 0,
            driver: String::new(),
            driver_info: String::new(),
            subgroup_min_size: 32,
            subgroup_max_size: 32,
            shader_f16: true,
            subgroups: true,
            subgroup_barrier: true,
            timestamps: true,
            cooperative_matrix: false,
            coop_configs: Vec::new(),
            max_workgroup_storage: 48 << 10,
            max_invocations: 1024,
            max_workgroup_size_x: 1024,
            max_workgroup_size_y: 1024,
            max_workgroups_per_dim: 65535,
            max_storage_binding: 1 << 31,
            max_buffer_size: 1 << 31,
            max_storage_buffers_per_stage: 8,
            compute_units: 132,
        }
    }

    /// [`AdapterProfile::fake_gpu`] with the H200's tensor cores.
    pub fn fake_h200() -> Self {
        Self::fake_gpu().named("h200-like").with_tensor_cores()
    }

    /// A lavapipe-like CPU adapter: subgroups of 8, no f16, 32 KiB of
    /// workgroup memory, 256 invocations, 2 cores.
    pub fn fake_lavapipe() -> Self {
        let mut p = Self::fake_gpu()
            .named("lavapipe-like")
            .with_units(2)
            .with_subgroups(8, 8)
            .with_invocations(256)
            .with_workgroup_storage(32 << 10);
        p.device_type = wgpu::DeviceType::Cpu;
        p.vendor = 0x10005;
        p.shader_f16 = false;
        p
    }

    /// A SwiftShader-like browser adapter: WebGPU, subgroups of 4, no f16,
    /// no subgroup barrier, no timestamps, 32 KiB, 256 invocations, 4 cores.
    pub fn fake_swiftshader() -> Self {
        let mut p = Self::fake_gpu()
            .named("swiftshader-like")
            .with_units(4)
            .with_subgroups(4, 4)
            .with_invocations(256)
            .with_workgroup_storage(32 << 10);
        p.device_type = wgpu::DeviceType::Cpu;
        p.backend = wgpu::Backend::BrowserWebGpu;
        p.vendor = 0x1ae0;
        p.shader_f16 = false;
        p.subgroup_barrier = false;
        p.timestamps = false;
        p
    }

    /// An AMD-like GPU: subgroups of 32 or 64, 64 KiB, 96 compute units.
    pub fn fake_amd() -> Self {
        let mut p = Self::fake_gpu()
            .named("amd-like")
            .with_units(96)
            .with_subgroups(32, 64)
            .with_workgroup_storage(64 << 10);
        p.vendor = 0x1002;
        p
    }

    /// The same profile under another name.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// The same profile with `units` compute units.
    pub fn with_units(mut self, units: u32) -> Self {
        self.compute_units = units;
        self
    }

    /// The same profile allowing `invocations` per workgroup (and as wide in
    /// x and y).
    pub fn with_invocations(mut self, invocations: u32) -> Self {
        self.max_invocations = invocations;
        self.max_workgroup_size_x = invocations;
        self.max_workgroup_size_y = invocations;
        self
    }

    /// The same profile with `bytes` of workgroup memory.
    pub fn with_workgroup_storage(mut self, bytes: u32) -> Self {
        self.max_workgroup_storage = bytes;
        self
    }

    /// The same profile with subgroups of `min..=max` lanes.
    pub fn with_subgroups(mut self, min: u32, max: u32) -> Self {
        self.subgroup_min_size = min;
        self.subgroup_max_size = max;
        self
    }

    /// The same profile with the H200's 16x16x16 f16 -> f32 cooperative
    /// matrix (and its Vulkan binding limit: 524288 storage buffers per
    /// stage).
    pub fn with_tensor_cores(mut self) -> Self {
        self.cooperative_matrix = true;
        self.max_storage_buffers_per_stage = 524_288;
        self.coop_configs = vec![CoopMatrixConfig {
            m: 16,
            n: 16,
            k: 16,
            ab_type: "f16",
            cr_type: "f32",
        }];
        self
    }
}
