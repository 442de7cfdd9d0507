// attention_coop_mma: the matrix operations of attention_flash_coop.wgsl on
// cooperative matrices (wgpu's experimental `wgpu_cooperative_matrix`; 16 x
// 16 f16 A/B, f32 accumulators). Only the row-major forms coopLoadT and
// coopStoreT are used, and the column-major coopLoad for K^T. Pointers are
// into the kernel's workgroup tiles kv_sh, p_sh, s_sh at element `at`, rows
// `ld` elements apart (16-byte multiples); kv_sh holds vec4 of halves, so
// its loads take `at` and `ld` in units of 4. Vulkan only.

enable f16;
enable wgpu_cooperative_matrix;

alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias MatC = coop_mat16x16<f32, C>;

// The 16 x 16 A fragment at kv_sh[at], row-major.
fn load_a_kv(at: u32, ld: u32) -> MatA {
    return coopLoadT<MatA>(&kv_sh[at / 4u], ld / 4u);
}

// The B fragment at kv_sh[at], column-major: K^T from K as stored.
fn load_bt_kv(at: u32, ld: u32) -> MatB {
    return coopLoad<MatB>(&kv_sh[at / 4u], ld / 4u);
}

// The B fragment at kv_sh[at], row-major (V).
fn load_b_kv(at: u32, ld: u32) -> MatB {
    return coopLoadT<MatB>(&kv_sh[at / 4u], ld / 4u);
}

// The A fragment at half p_sh[at], row-major (P). p_sh holds vec4 of
// halves and s_sh vec4 of floats: `at` and `ld` count elements and are
// multiples of 4.
fn load_a_p(at: u32, ld: u32) -> MatA {
    return coopLoadT<MatA>(&p_sh[at / 4u], ld / 4u);
}

fn load_c_s(at: u32, ld: u32) -> MatC {
    return coopLoadT<MatC>(&s_sh[at / 4u], ld / 4u);
}

fn store_c_s(m: MatC, at: u32, ld: u32) {
    // (Named index and stride: naga 30's SPIR-V writer panics on
    // expressions computed in the coopStoreT call itself.)
    let i = at / 4u;
    let stride = ld / 4u;
    coopStoreT(m, &s_sh[i], stride);
}

fn mma(a: MatA, b: MatB, c: MatC) -> MatC {
    return coopMultiplyAdd(a, b, c);
}

// The subgroup and lane the cooperative operations run on: the hardware's.
fn subgroup_of(tid: u32, sg_id: u32) -> u32 {
    return sg_id;
}

fn lane_of(tid: u32, sg_lane: u32) -> u32 {
    return sg_lane;
}
