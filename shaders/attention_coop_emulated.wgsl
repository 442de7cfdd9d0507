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

// kv_sh holds vec4 of halves and every fragment row starts on a multiple
// of 4 halves: rows are read a vec4 at a time with constant components
// (a variable component index makes llvmpipe's compile several times
// slower).
fn kv_row(at: u32, ld: u32, r: u32, k4: u32) -> vec4<f32> {
    return vec4<f32>(kv_sh[(at + r * ld) / 4u + k4]);
}

fn load_a_kv(at: u32, ld: u32) -> MatA {
    var m: MatA;
    for (var k4 = 0u; k4 < 4u; k4++) {
        let x = kv_row(at, ld, emu_lane, k4);
        m[4u * k4] = x.x;
        m[4u * k4 + 1u] = x.y;
        m[4u * k4 + 2u] = x.z;
        m[4u * k4 + 3u] = x.w;
    }
    return m;
}

fn load_b_kv(at: u32, ld: u32) -> MatB {
    var m: MatB;
    for (var r = 0u; r < 16u; r++) {
        for (var k4 = 0u; k4 < 4u; k4++) {
            let x = kv_row(at, ld, r, k4);
            let e = r * 16u + 4u * k4;
            m[e] = x.x;
            m[e + 1u] = x.y;
            m[e + 2u] = x.z;
            m[e + 3u] = x.w;
        }
    }
    return m;
}

// Column-major: element (r, c) at kv_sh[at + c * ld + r].
fn load_bt_kv(at: u32, ld: u32) -> MatB {
    var m: MatB;
    for (var c = 0u; c < 16u; c++) {
        for (var k4 = 0u; k4 < 4u; k4++) {
            let x = kv_row(at, ld, c, k4);
            let r = 4u * k4;
            m[r * 16u + c] = x.x;
            m[(r + 1u) * 16u + c] = x.y;
            m[(r + 2u) * 16u + c] = x.z;
            m[(r + 3u) * 16u + c] = x.w;
        }
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
