//! The dispatcher: which kernel and which tiles for a given adapter and shape.
//!
//! Heuristic only for now: candidates are filtered by the adapter's limits,
//! tiny problems go to the naive kernel, and among tile shapes the largest one
//! whose tile count fills at least one whole wave of the adapter's compute units
//! wins (wave quantisation: a grid smaller than one wave leaves units idle).
//! This module decides; it never encodes or submits.

use std::fmt;

use crate::context::AdapterProfile;
use crate::dtype::DType;
use crate::kernels::{Kernel, Spec};

/// Tile shape of the `matmul_tiled` kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// Rows of C per workgroup.
    pub bm: u32,
    /// Columns of C per workgroup.
    pub bn: u32,
    /// K step staged through workgroup memory.
    pub bk: u32,
    /// Rows of C per invocation (register tile).
    pub tm: u32,
    /// Columns of C per invocation (register tile).
    pub tn: u32,
}

impl TileConfig {
    /// Invocations per workgroup.
    pub const fn threads(self) -> u32 {
        (self.bm / self.tm) * (self.bn / self.tn)
    }

    /// Workgroup memory in bytes (f32 tiles of A and B).
    pub const fn workgroup_bytes(self) -> u32 {
        (self.bm + self.bn) * self.bk * 4
    }

    /// Whether the adapter can run this tile shape.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        self.threads() <= p.max_invocations
            && self.bn / self.tn <= p.max_workgroup_size_x
            && self.bm / self.tm <= p.max_workgroup_size_y
            && self.workgroup_bytes() <= p.max_workgroup_storage
    }

    /// The kernel specialisation for `dtype`.
    pub fn spec(self, dtype: DType) -> Spec {
        Spec::new(Kernel::MatmulTiled)
            .dtype(dtype)
            .constant("BM", self.bm)
            .constant("BN", self.bn)
            .constant("BK", self.bk)
            .constant("TM", self.tm)
            .constant("TN", self.tn)
    }
}

impl fmt::Display for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}x{} ({}x{} per invocation)",
            self.bm, self.bn, self.bk, self.tm, self.tn
        )
    }
}

/// Tile shapes the dispatcher may choose, largest first.
pub const TILE_CONFIGS: [TileConfig; 3] = [
    TileConfig {
        bm: 128,
        bn: 128,
        bk: 8,
        tm: 8,
        tn: 8,
    },
    TileConfig {
        bm: 64,
        bn: 64,
        bk: 16,
        tm: 4,
        tn: 4,
    },
    TileConfig {
        bm: 32,
        bn: 32,
        bk: 16,
        tm: 2,
        tn: 2,
    },
];

/// Workgroup shapes of the naive kernel: 16 x 16, or 8 x 8 on adapters with
/// fewer than 256 invocations.
pub const NAIVE_WORKGROUPS: [(u32, u32); 2] = [(16, 16), (8, 8)];

/// Problems with at most this many multiply-adds (M * N * K * batch) use the
/// naive kernel: its lack of reuse costs less than the tiled kernel's tile
/// staging and barriers.
pub const TINY_MACS: u64 = 32 * 32 * 32;

/// A matmul kernel and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulKernel {
    /// One invocation per output; workgroup `(x, y)`.
    Naive {
        /// Workgroup width (along N).
        wg_x: u32,
        /// Workgroup height (along M).
        wg_y: u32,
    },
    /// Workgroup-memory and register tiling.
    Tiled(TileConfig),
}

impl MatmulKernel {
    /// The naive kernel with the largest workgroup the adapter allows.
    pub fn naive_for(p: &AdapterProfile) -> Self {
        let (wg_x, wg_y) = NAIVE_WORKGROUPS
            .into_iter()
            .find(|&(x, y)| x * y <= p.max_invocations)
            .unwrap_or((1, 1));
        MatmulKernel::Naive { wg_x, wg_y }
    }

    /// The kernel specialisation for `dtype`.
    pub fn spec(self, dtype: DType) -> Spec {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => Spec::new(Kernel::MatmulNaive)
                .dtype(dtype)
                .override_("WG_X", wg_x)
                .override_("WG_Y", wg_y),
            MatmulKernel::Tiled(t) => t.spec(dtype),
        }
    }

    /// Rows and columns of C one workgroup covers.
    pub fn block(self) -> (u32, u32) {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => (wg_y, wg_x),
            MatmulKernel::Tiled(t) => (t.bm, t.bn),
        }
    }

    /// Whether the adapter can run it.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => {
                wg_x * wg_y <= p.max_invocations
                    && wg_x <= p.max_workgroup_size_x
                    && wg_y <= p.max_workgroup_size_y
            }
            MatmulKernel::Tiled(t) => t.fits(p),
        }
    }
}

impl fmt::Display for MatmulKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => write!(f, "naive ({wg_x}x{wg_y} workgroup)"),
            MatmulKernel::Tiled(t) => write!(f, "tiled {t}"),
        }
    }
}

/// The dispatcher's decision for one matmul, with its reasoning.
#[derive(Clone, Debug)]
pub struct MatmulChoice {
    /// The kernel to run.
    pub kernel: MatmulKernel,
    /// Workgroups the grid has (over all batches).
    pub workgroups: u64,
    /// Workgroups over compute units: how many waves the grid takes.
    pub waves: f64,
    /// Why this kernel.
    pub reason: String,
}

impl fmt::Display for MatmulChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} workgroups = {:.2} waves; {}",
            self.kernel, self.workgroups, self.waves, self.reason
        )
    }
}

/// Workgroups a kernel's grid has for an `m x n` output over `batch` matrices.
pub fn workgroup_count(kernel: MatmulKernel, m: usize, n: usize, batch: usize) -> u64 {
    let (bm, bn) = kernel.block();
    (m.div_ceil(bm as usize) * n.div_ceil(bn as usize) * batch) as u64
}

/// Picks the matmul kernel for `[batch] x [m, k] x [k, n]` on this adapter.
pub fn choose_matmul(
    p: &AdapterProfile,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
) -> MatmulChoice {
    let units = p.compute_units.max(1) as f64;
    let describe = |kernel: MatmulKernel, reason: String| {
        let workgroups = workgroup_count(kernel, m, n, batch);
        MatmulChoice {
            kernel,
            workgroups,
            waves: workgroups as f64 / units,
            reason,
        }
    };
    let macs = (m as u64)
        .saturating_mul(n as u64)
        .saturating_mul(k as u64)
        .saturating_mul(batch as u64);
    let fitting: Vec<TileConfig> = TILE_CONFIGS.into_iter().filter(|t| t.fits(p)).collect();
    if macs <= TINY_MACS || fitting.is_empty() {
        let why = if fitting.is_empty() {
            "no tile shape fits this adapter's workgroup limits".to_string()
        } else {
            format!(
                "tiny problem ({macs} multiply-adds <= {TINY_MACS}): tiling cannot pay for its barriers"
            )
        };
        return describe(MatmulKernel::naive_for(p), why);
    }
    for t in &fitting {
        let kernel = MatmulKernel::Tiled(*t);
        if workgroup_count(kernel, m, n, batch) as f64 >= units {
            return describe(
                kernel,
                format!(
                    "largest tile whose grid fills at least one wave of {} compute units",
                    p.compute_units
                ),
            );
        }
    }
    let smallest = *fitting.last().expect("non-empty");
    describe(
        MatmulKernel::Tiled(smallest),
        format!(
            "no tile shape fills a wave of {} compute units; the smallest gives the most workgroups",
            p.compute_units
        ),
    )
}

/// Every matmul specialisation the dispatcher can produce, for validation.
pub fn matmul_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for dtype in DType::ALL {
        for (wg_x, wg_y) in NAIVE_WORKGROUPS {
            specs.push(MatmulKernel::Naive { wg_x, wg_y }.spec(dtype));
        }
        for t in TILE_CONFIGS {
            specs.push(t.spec(dtype));
        }
    }
    specs
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
