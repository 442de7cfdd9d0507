//! The dispatcher: which kernel and which tiles for a given adapter and shape.
//!
//! Heuristics first: candidates are filtered by the adapter's limits, tiny
//! problems go to the naive kernel, matrix-vector shapes to the GEMV kernel, and among tile shapes the largest one
//! whose tile count fills at least one whole wave of the adapter's compute units
//! wins (wave quantisation: a grid smaller than one wave leaves units idle).
//! This module decides; it never encodes or submits.

use crate::gpu::AdapterProfile;

pub mod attention;
pub mod autotune;
pub mod cache;
pub mod gemv;
mod matmul;
pub mod matmul_cost;
pub mod pad;
pub mod quant;
pub mod route;
pub mod rows;
#[cfg(test)]
mod tests;

pub use crate::gpu::estimate_compute_units;
pub use matmul::*;
pub use matmul_cost::*;

/// Whether the adapter offers the 16x16x16 f16 -> f32 cooperative matrix the
/// coop kernel uses, with one fixed subgroup size (the kernel's layout of
/// subgroups over the tile depends on it).
pub fn has_coop_f16(p: &AdapterProfile) -> bool {
    p.cooperative_matrix
        && p.subgroups
        && p.shader_f16
        && p.subgroup_min_size == p.subgroup_max_size
        && p.subgroup_max_size > 0
        && p.coop_configs
            .iter()
            .any(|c| (c.m, c.n, c.k) == (16, 16, 16) && c.ab_type == "f16" && c.cr_type == "f32")
}
