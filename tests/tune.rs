//! Dispatcher rules on synthetic adapter profiles (no GPU needed): filtering
//! by limits and wave arithmetic.

use wgtile::tune::{self, MatmulKernel, TILE_CONFIGS};
use wgtile::{AdapterProfile, wgpu};

fn profile(units: u32, invocations: u32, storage: u32) -> AdapterProfile {
    AdapterProfile {
        name: "synthetic".into(),
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
        timestamps: true,
        cooperative_matrix: false,
        coop_configs: Vec::new(),
        max_workgroup_storage: storage,
        max_invocations: invocations,
        max_workgroup_size_x: invocations,
        max_workgroup_size_y: invocations,
        max_workgroups_per_dim: 65535,
        max_storage_binding: 1 << 31,
        max_buffer_size: 1 << 31,
        max_storage_buffers_per_stage: 8,
        compute_units: units,
    }
}

#[test]
fn tiny_problems_use_the_naive_kernel() {
    let p = profile(132, 1024, 48 << 10);
    let c = tune::choose_matmul(&p, 8, 8, 8, 1);
    assert!(
        matches!(c.kernel, MatmulKernel::Naive { wg_x: 16, wg_y: 16 }),
        "{c}"
    );
}

#[test]
fn large_problems_take_the_largest_tile_that_fills_a_wave() {
    let p = profile(132, 1024, 48 << 10);
    // 4096^2 in 128x128 tiles: 1024 workgroups = 7.76 waves of 132.
    let c = tune::choose_matmul(&p, 4096, 4096, 4096, 1);
    assert_eq!(c.kernel, MatmulKernel::Tiled(TILE_CONFIGS[0]), "{c}");
    assert_eq!(c.workgroups, 1024);
    assert!((c.waves - 1024.0 / 132.0).abs() < 1e-9);
    // 512^2: 16 tiles of 128 < 132 units, 64 tiles of 64 < 132, so 256 of 32.
    let c = tune::choose_matmul(&p, 512, 512, 512, 1);
    assert_eq!(c.kernel, MatmulKernel::Tiled(TILE_CONFIGS[2]), "{c}");
    // 1024^2: 64 tiles of 128 < 132, 256 tiles of 64 >= 132.
    let c = tune::choose_matmul(&p, 1024, 1024, 1024, 1);
    assert_eq!(c.kernel, MatmulKernel::Tiled(TILE_CONFIGS[1]), "{c}");
    // Batching multiplies the grid: 8 x 512^2 in 128 tiles = 128 < 132; in 64 tiles 512.
    let c = tune::choose_matmul(&p, 512, 512, 512, 8);
    assert_eq!(c.kernel, MatmulKernel::Tiled(TILE_CONFIGS[1]), "{c}");
}

#[test]
fn lecture_example_wave_counts() {
    // The lecture: 256x128 tiles on 108 SMs, N = 1792 -> 98 tiles (one wave),
    // 1793 -> 120 tiles (a full wave plus 12). Our arithmetic on our own tiles:
    let t = MatmulKernel::Tiled(TILE_CONFIGS[0]);
    assert_eq!(tune::workgroup_count(t, 1792, 1792, 1), 14 * 14);
    assert_eq!(tune::workgroup_count(t, 1793, 1793, 1), 15 * 15);
}

#[test]
fn limits_filter_the_candidates() {
    // 128 invocations: no 256-invocation tile fits, and the naive kernel drops to 8x8.
    let p = profile(132, 128, 48 << 10);
    let c = tune::choose_matmul(&p, 2048, 2048, 2048, 1);
    assert_eq!(c.kernel, MatmulKernel::Naive { wg_x: 8, wg_y: 8 }, "{c}");
    assert!(c.reason.contains("no tile shape fits"));
    // 4 KiB of workgroup memory: only the 32x32x16 tile (4 KiB) fits.
    let p = profile(1, 1024, 4 << 10);
    let c = tune::choose_matmul(&p, 2048, 2048, 2048, 1);
    assert_eq!(c.kernel, MatmulKernel::Tiled(TILE_CONFIGS[2]), "{c}");
    for t in TILE_CONFIGS {
        assert_eq!(t.fits(&p), t.workgroup_bytes() <= 4 << 10);
    }
}

#[test]
fn compute_unit_table() {
    use wgpu::DeviceType::{Cpu, DiscreteGpu};
    assert_eq!(
        tune::estimate_compute_units("NVIDIA H200", DiscreteGpu, 0x10de),
        132
    );
    assert_eq!(
        tune::estimate_compute_units("NVIDIA A100-SXM4-80GB", DiscreteGpu, 0x10de),
        108
    );
    assert_eq!(
        tune::estimate_compute_units("Some New GPU", DiscreteGpu, 0x10de),
        64
    );
    let cpu = tune::estimate_compute_units("llvmpipe (LLVM 15.0.6, 256 bits)", Cpu, 0x10005);
    assert!(cpu >= 1);
}
