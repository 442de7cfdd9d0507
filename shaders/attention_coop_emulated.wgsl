// attention_coop_emulated: the matrix operations of attention_flash_coop.wgsl
// emulated without cooperative matrices, so its algorithm (staging, masking,
// online softmax, conditional rescaling, bounds) runs and is tested on any
// adapter with f16 and subgroups. A "subgroup" is SG = 16 consecutive
// invocations (not the hardware's; the kernel's row reductions then need no
// shuffles, LPR = 1); lane r holds row r of each A and C matrix (16 f32) and
// reads whole B matrices (256 f32) from workgroup memory when it needs them.
// Each lane does 256 multiply-adds per 16 x 16 x 16 product: tests only.
// Products of f16 values are exact in f32, as on tensor cores.

enable f16;

alias MatA = array<f32, 16>;
alias MatB = array<f32, 256>;
alias MatC = array<f32, 16>;

// This invocation's lane in its virtual subgroup (set by lane_of).
var<private> emu_lane: u32;

// Half i of kv_sh (vec4 of halves).
fn kv_at(i: u32) -> f32 {
    return f32(kv_sh[i / 4u][i % 4u]);
}

fn load_a_kv(at: u32, ld: u32) -> MatA {
    var m: MatA;
    for (var k = 0u; k < 16u; k++) {
        m[k] = kv_at(at + emu_lane * ld + k);
    }
    return m;
}

fn load_b_kv(at: u32, ld: u32) -> MatB {
    var m: MatB;
    for (var e = 0u; e < 256u; e++) {
        m[e] = kv_at(at + (e / 16u) * ld + e % 16u);
    }
    return m;
}

// Column-major: element (r, c) at kv_sh[at + c * ld + r].
fn load_bt_kv(at: u32, ld: u32) -> MatB {
    var m: MatB;
    for (var e = 0u; e < 256u; e++) {
        m[e] = kv_at(at + (e % 16u) * ld + e / 16u);
    }
    return m;
}

fn load_a_p(at: u32, ld: u32) -> MatA {
    var m: MatA;
    for (var k = 0u; k < 16u; k++) {
        m[k] = f32(p_sh[at + emu_lane * ld + k]);
    }
    return m;
}

fn load_c_s(at: u32, ld: u32) -> MatC {
    var m: MatC;
    for (var j = 0u; j < 16u; j++) {
        m[j] = s_sh[at + emu_lane * ld + j];
    }
    return m;
}

fn store_c_s(m: MatC, at: u32, ld: u32) {
    for (var j = 0u; j < 16u; j++) {
        s_sh[at + emu_lane * ld + j] = m[j];
    }
}

// Row emu_lane of a b + c.
fn mma(a: MatA, b: MatB, c: MatC) -> MatC {
    var r = c;
    for (var j = 0u; j < 16u; j++) {
        var acc = r[j];
        for (var k = 0u; k < 16u; k++) {
            acc = fma(a[k], b[k * 16u + j], acc);
        }
        r[j] = acc;
    }
    return r;
}

fn subgroup_of(tid: u32, sg_id: u32) -> u32 {
    return tid / SG;
}

fn lane_of(tid: u32, sg_lane: u32) -> u32 {
    emu_lane = tid % SG;
    return emu_lane;
}
