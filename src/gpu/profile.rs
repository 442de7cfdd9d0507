//! [`AdapterProfile`]: what wgtile knows of an adapter (identity, features,
//! limits, an estimate of its compute units from a table of known GPUs).
//! Plain facts: it makes no choice.

use std::fmt;

/// One cooperative-matrix (tensor core) shape the adapter supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopMatrixConfig {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Input element type (e.g. `f16`).
    pub ab_type: &'static str,
    /// Accumulator and result element type.
    pub cr_type: &'static str,
}

/// What wgtile knows about the adapter: identity, features and the limits the
/// dispatcher filters kernels by. `Display` prints it as a readable block.
#[derive(Clone, Debug)]
pub struct AdapterProfile {
    /// Adapter name as the driver reports it.
    pub name: String,
    /// Backend (Vulkan, Metal, Dx12, Gl, BrowserWebGpu).
    pub backend: wgpu::Backend,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: wgpu::DeviceType,
    /// PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel, 0x10005 Mesa...).
    pub vendor: u32,
    /// PCI device id.
    pub device: u32,
    /// Driver name.
    pub driver: String,
    /// Driver version / details.
    pub driver_info: String,
    /// Smallest subgroup size the adapter may use (0 when unknown).
    pub subgroup_min_size: u32,
    /// Largest subgroup size the adapter may use (0 when unknown).
    pub subgroup_max_size: u32,
    /// `shader-f16` enabled on the device.
    pub shader_f16: bool,
    /// Subgroup operations enabled on the device.
    pub subgroups: bool,
    /// The subgroup barrier (`subgroupBarrier()`) enabled on the device.
    pub subgroup_barrier: bool,
    /// Timestamp queries enabled (GPU timing of passes).
    pub timestamps: bool,
    /// Cooperative-matrix operations enabled (opt-in, experimental).
    pub cooperative_matrix: bool,
    /// Cooperative-matrix shapes the adapter reports (empty when disabled or absent).
    pub coop_configs: Vec<CoopMatrixConfig>,
    /// `max_compute_workgroup_storage_size` in bytes.
    pub max_workgroup_storage: u32,
    /// `max_compute_invocations_per_workgroup`.
    pub max_invocations: u32,
    /// `max_compute_workgroup_size_x`.
    pub max_workgroup_size_x: u32,
    /// `max_compute_workgroup_size_y`.
    pub max_workgroup_size_y: u32,
    /// `max_compute_workgroups_per_dimension`.
    pub max_workgroups_per_dim: u32,
    /// `max_storage_buffer_binding_size` in bytes.
    pub max_storage_binding: u64,
    /// `max_buffer_size` in bytes.
    pub max_buffer_size: u64,
    /// `max_storage_buffers_per_shader_stage`.
    pub max_storage_buffers_per_stage: u32,
    /// Estimated parallel compute units (SMs / CUs / cores), used for wave
    /// quantisation; see `estimate_compute_units`.
    pub compute_units: u32,
}

impl AdapterProfile {
    pub(crate) fn new(adapter: &wgpu::Adapter, device: &wgpu::Device) -> Self {
        let info = adapter.get_info();
        let features = device.features();
        let limits = device.limits();
        let cooperative_matrix = features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        let coop_configs = if cooperative_matrix {
            adapter
                .cooperative_matrix_properties()
                .into_iter()
                .map(|p| CoopMatrixConfig {
                    m: p.m_size,
                    n: p.n_size,
                    k: p.k_size,
                    ab_type: scalar_name(p.ab_type),
                    cr_type: scalar_name(p.cr_type),
                })
                .collect()
        } else {
            Vec::new()
        };
        let compute_units = estimate_compute_units(&info.name, info.device_type, info.vendor);
        Self {
            name: info.name,
            backend: info.backend,
            device_type: info.device_type,
            vendor: info.vendor,
            device: info.device,
            driver: info.driver,
            driver_info: info.driver_info,
            subgroup_min_size: info.subgroup_min_size,
            subgroup_max_size: info.subgroup_max_size,
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            subgroup_barrier: features.contains(wgpu::Features::SUBGROUP_BARRIER),
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            cooperative_matrix,
            coop_configs,
            max_workgroup_storage: limits.max_compute_workgroup_storage_size,
            max_invocations: limits.max_compute_invocations_per_workgroup,
            max_workgroup_size_x: limits.max_compute_workgroup_size_x,
            max_workgroup_size_y: limits.max_compute_workgroup_size_y,
            max_workgroups_per_dim: limits.max_compute_workgroups_per_dimension,
            max_storage_binding: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffers_per_stage: limits.max_storage_buffers_per_shader_stage,
            compute_units,
        }
    }

    /// The vendor's name for the PCI vendor id, or `"unknown"`.
    pub fn vendor_name(&self) -> &'static str {
        match self.vendor {
            0x10de => "NVIDIA",
            0x1002 | 0x1022 => "AMD",
            0x8086 => "Intel",
            0x106b => "Apple",
            0x13b5 => "ARM",
            0x5143 => "Qualcomm",
            0x10005 => "Mesa",
            0x1ae0 => "Google",
            _ => "unknown",
        }
    }

    /// True for software adapters (lavapipe, SwiftShader, WARP).
    pub fn is_cpu(&self) -> bool {
        self.device_type == wgpu::DeviceType::Cpu
    }

    /// The largest storage buffer a tensor may occupy: the smaller of
    /// `max_storage_buffer_binding_size` and `max_buffer_size`.
    pub fn max_tensor_bytes(&self) -> (u64, &'static str) {
        if self.max_storage_binding <= self.max_buffer_size {
            (self.max_storage_binding, "max_storage_buffer_binding_size")
        } else {
            (self.max_buffer_size, "max_buffer_size")
        }
    }
}

fn scalar_name(t: wgpu::CooperativeScalarType) -> &'static str {
    match t {
        wgpu::CooperativeScalarType::F16 => "f16",
        wgpu::CooperativeScalarType::F32 => "f32",
        _ => "other",
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes / (1 << 20))
}

impl fmt::Display for AdapterProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "adapter        {}", self.name)?;
        writeln!(
            f,
            "backend        {:?} ({:?}), vendor {} (0x{:04x}), device 0x{:04x}",
            self.backend,
            self.device_type,
            self.vendor_name(),
            self.vendor,
            self.device
        )?;
        writeln!(f, "driver         {} {}", self.driver, self.driver_info)?;
        writeln!(
            f,
            "subgroups      {} (size {}..{})",
            yes(self.subgroups),
            self.subgroup_min_size,
            self.subgroup_max_size
        )?;
        writeln!(
            f,
            "features       shader-f16 {}, timestamps {}, cooperative-matrix {}",
            yes(self.shader_f16),
            yes(self.timestamps),
            yes(self.cooperative_matrix)
        )?;
        if !self.coop_configs.is_empty() {
            let shapes: Vec<String> = self
                .coop_configs
                .iter()
                .map(|c| format!("{}x{}x{} {}->{}", c.m, c.n, c.k, c.ab_type, c.cr_type))
                .collect();
            writeln!(f, "coop-matrix    {}", shapes.join(", "))?;
        }
        writeln!(
            f,
            "workgroups     {} KiB storage, {} invocations (x<={}, y<={}), {} per dimension",
            self.max_workgroup_storage / 1024,
            self.max_invocations,
            self.max_workgroup_size_x,
            self.max_workgroup_size_y,
            self.max_workgroups_per_dim
        )?;
        writeln!(
            f,
            "buffers        {} per storage binding, {} per buffer, {} storage buffers per stage",
            mib(self.max_storage_binding),
            mib(self.max_buffer_size),
            self.max_storage_buffers_per_stage
        )?;
        write!(f, "compute units  {} (estimated)", self.compute_units)
    }
}

/// Estimated parallel compute units (SMs, CUs, cores) of an adapter, for wave
/// quantisation. Known devices come from a table; otherwise a documented default
/// per vendor and type:
///
/// | adapter | units |
/// | --- | --- |
/// | NVIDIA H100 / H200 | 132 SMs |
/// | NVIDIA A100 | 108 SMs |
/// | NVIDIA L4 / L40(S) | 58 / 142 SMs |
/// | NVIDIA RTX 4090 / 3090 | 128 / 82 SMs |
/// | other NVIDIA / AMD discrete | 64 |
/// | Apple | 10 |
/// | integrated GPUs | 24 |
/// | CPU adapters (lavapipe, SwiftShader, WARP) | host threads |
/// | anything else | 32 |
pub fn estimate_compute_units(name: &str, device_type: wgpu::DeviceType, vendor: u32) -> u32 {
    let name = name.to_lowercase();
    const TABLE: [(&str, u32); 8] = [
        ("h200", 132),
        ("h100", 132),
        ("a100", 108),
        ("l40", 142),
        ("l4", 58),
        ("4090", 128),
        ("3090", 82),
        ("apple", 10),
    ];
    if let Some(&(_, units)) = TABLE.iter().find(|(key, _)| name.contains(key)) {
        return units;
    }
    match device_type {
        wgpu::DeviceType::Cpu => host_threads(),
        wgpu::DeviceType::IntegratedGpu => 24,
        wgpu::DeviceType::DiscreteGpu if matches!(vendor, 0x10de | 0x1002) => 64,
        _ => 32,
    }
}

fn host_threads() -> u32 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::available_parallelism().map_or(4, |n| n.get() as u32)
    }
    #[cfg(target_arch = "wasm32")]
    {
        4
    }
}
