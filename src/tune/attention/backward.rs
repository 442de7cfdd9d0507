//! The backward kernels' tiles (dK/dV and dQ by recomputation).

use super::*;

/// Tile shape of the backward kernels (`shaders/attention_backward.wgsl`):
/// a workgroup owns `br` keys (dK/dV) or `br` query rows (dQ) and walks the
/// other side `4 * nc` at a time; each of its `br / 4 * nc` invocations owns
/// a 4 x 4 tile of S (and dP) and 4 rows x `td` columns of each gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackwardTiles {
    /// Keys (dK/dV) or query rows (dQ) per workgroup, a multiple of 4.
    pub br: u32,
    /// Column groups: the other side advances 4 * nc per step.
    pub nc: u32,
    /// Gradient columns per invocation (a power of two >= 4): `nc * td >= max(D, Dv)`.
    pub td: u32,
    /// Head-dimension chunk staged per step of the S and dP products.
    pub dk: u32,
    /// Rows of dO / Q / K staged at a time for the gradient products.
    pub vk: u32,
}

impl BackwardTiles {
    /// Why these tiles cannot be the backward kernels', naming the field
    /// (`td` and `vk` are derived from the head dims and not checked).
    pub fn invalid_reason(self) -> Option<String> {
        if self.br == 0 || !self.br.is_multiple_of(4) {
            return Some(format!("backward tiles br = {} (must be a positive multiple of 4)", self.br));
        }
        if self.nc == 0 {
            return Some("backward tiles nc = 0 (must be at least 1)".into());
        }
        if self.dk == 0 || !self.dk.is_multiple_of(4) {
            return Some(format!("backward tiles dk = {} (must be a positive multiple of 4)", self.dk));
        }
        None
    }

    /// Invocations per workgroup.
    pub const fn threads(self) -> u32 {
        self.br / 4 * self.nc
    }

    /// vec4 words of the staging buffer.
    pub const fn stage_vec4(self) -> u32 {
        let qk = self.dk * (self.br / 4 + 1 + self.nc + 1);
        let v = self.vk * self.nc * self.td / 4;
        if qk > v { qk } else { v }
    }

    /// Workgroup memory in bytes (staging plus the P and dS tiles).
    pub const fn workgroup_bytes(self) -> u32 {
        16 * (self.stage_vec4() + 2 * self.br * self.nc)
    }

    /// The specialisation of one of the backward kernels.
    pub fn spec(self, kernel: Kernel, dtype: DType) -> Spec {
        Spec::new(kernel)
            .dtype(dtype)
            .constant("BR", self.br)
            .constant("NC", self.nc)
            .constant("TD", self.td)
            .constant("DK", self.dk)
            .constant("VK", self.vk)
            .constant("STAGE4", self.stage_vec4())
    }

    /// `self` with `td` and `vk` set for head dims `d` and `dv`.
    pub fn for_dims(mut self, d: usize, dv: usize) -> Self {
        self.td = (d.max(dv).max(1) as u32)
            .div_ceil(self.nc)
            .next_power_of_two()
            .max(4);
        let qk = self.dk * (self.br / 4 + 1 + self.nc + 1);
        let mut vk = 4 * self.nc;
        while vk > 4 && vk * self.nc * self.td / 4 > qk {
            vk /= 2;
        }
        self.vk = vk;
        self
    }

    /// Whether the adapter can run this tile shape.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        self.threads() <= p.max_invocations
            && self.threads() <= p.max_workgroup_size_x
            && self.workgroup_bytes() <= p.max_workgroup_storage
    }
}

impl fmt::Display for BackwardTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rows x {} per step, 4x4 S + 4x{} gradient per invocation, {} invocations",
            self.br,
            4 * self.nc,
            self.td,
            self.threads()
        )
    }
}

/// Backward tile candidates, preferred first (`td`/`vk` set per head dims).
pub const BACKWARD_CANDIDATES: [BackwardTiles; 2] = [
    BackwardTiles {
        br: 32,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 8,
    },
    BackwardTiles {
        br: 16,
        nc: 8,
        td: 16,
        dk: 16,
        vk: 8,
    },
];

/// The backward tiles for this adapter and head dims, or `None` when none fits.
pub fn backward_tiles(p: &AdapterProfile, d: usize, dv: usize) -> Option<BackwardTiles> {
    BACKWARD_CANDIDATES
        .iter()
        .map(|t| t.for_dims(d, dv))
        .find(|t| t.fits(p))
}
