// attention_coop_emulated: the matrix operations of attention_flash_coop.wgsl
// emulated without cooperative matrices, so its algorithm (staging, masking,
// online softmax, conditional rescaling, bounds) runs and is tested on any
// adapter with f16 and subgroups. A "subgroup" is SG = 16 consecutive
// invocations (not the hardware's; the kernel's row reductions then need no
// shuffles, LPR = 1); lane r holds row r of each A and C matrix (16 f32).
// A B matrix is not loaded but referenced: (element, row stride, 1 when
// column-major) into kv_sh, which `mma` reads a vec4 at a time. That holds
// because every kernel multiplies a B fragment right after taking it, before
// kv_sh changes (its loads sit between the same barriers as its products).
// Loading B into 256 private floats instead made llvmpipe take about 25 s
// per inlined product to compile. Each lane does 256 multiply-adds per 16 x
// 16 x 16 product: tests only. Products of f16 values are exact in f32, as
// on tensor cores.

enable f16;

alias MatA = array<f32, 16>;
alias MatB = vec3<u32>;
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
    return vec3<u32>(at, ld, 0u);
}

// Column-major: element (r, c) at kv_sh[at + c * ld + r].
fn load_bt_kv(at: u32, ld: u32) -> MatB {
    return vec3<u32>(at, ld, 1u);
}

// p_sh and s_sh hold vec4 of halves and of floats; `at` and `ld` count
// elements and are multiples of 4.
fn load_a_p(at: u32, ld: u32) -> MatA {
    var m: MatA;
    for (var k4 = 0u; k4 < 4u; k4++) {
        let x = vec4<f32>(p_sh[(at + emu_lane * ld) / 4u + k4]);
        m[4u * k4] = x.x;
        m[4u * k4 + 1u] = x.y;
        m[4u * k4 + 2u] = x.z;
        m[4u * k4 + 3u] = x.w;
    }
    return m;
}

fn load_c_s(at: u32, ld: u32) -> MatC {
    var m: MatC;
    for (var j4 = 0u; j4 < 4u; j4++) {
        let x = s_sh[(at + emu_lane * ld) / 4u + j4];
        m[4u * j4] = x.x;
        m[4u * j4 + 1u] = x.y;
        m[4u * j4 + 2u] = x.z;
        m[4u * j4 + 3u] = x.w;
    }
    return m;
}

fn store_c_s(m: MatC, at: u32, ld: u32) {
    for (var j4 = 0u; j4 < 4u; j4++) {
        s_sh[(at + emu_lane * ld) / 4u + j4] =
            vec4<f32>(m[4u * j4], m[4u * j4 + 1u], m[4u * j4 + 2u], m[4u * j4 + 3u]);
    }
}

// Row emu_lane of a b + c, b read from kv_sh (its layout is a constant
// after inlining, so one branch remains per call site).
fn mma(a: MatA, b: MatB, c: MatC) -> MatC {
    var r = c;
    if b.z == 0u {
        // Row-major: b[k][j] at b.x + k * b.y + j.
        for (var k = 0u; k < 16u; k++) {
            let ak = a[k];
            for (var j4 = 0u; j4 < 4u; j4++) {
                let x = kv_row(b.x, b.y, k, j4);
                r[4u * j4] = fma(ak, x.x, r[4u * j4]);
                r[4u * j4 + 1u] = fma(ak, x.y, r[4u * j4 + 1u]);
                r[4u * j4 + 2u] = fma(ak, x.z, r[4u * j4 + 2u]);
                r[4u * j4 + 3u] = fma(ak, x.w, r[4u * j4 + 3u]);
            }
        }
    } else {
        // Column-major: b[k][j] at b.x + j * b.y + k.
        for (var j = 0u; j < 16u; j++) {
            var acc = r[j];
            for (var k4 = 0u; k4 < 4u; k4++) {
                let x = kv_row(b.x, b.y, j, k4);
                acc = fma(a[4u * k4], x.x, acc);
                acc = fma(a[4u * k4 + 1u], x.y, acc);
                acc = fma(a[4u * k4 + 2u], x.z, acc);
                acc = fma(a[4u * k4 + 3u], x.w, acc);
            }
            r[j] = acc;
        }
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
