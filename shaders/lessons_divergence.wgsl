// lessons_divergence: the lecture's control divergence, measured. Every
// element runs `steps` iterations of one of two loops that differ only in
// their constants; which one is chosen by the sign of the element.
//
// Algorithm: FORM 0 (branch): `if x >= 0 { loop A } else { loop B }`. When
//   the lanes of a subgroup disagree (alternating signs), the subgroup runs
//   both loops with half its lanes masked: twice the time of a subgroup
//   whose lanes agree (signs in blocks of a subgroup or more). FORM 1
//   (select): the same choice made on the constants with `select`, then
//   one loop for every lane: no divergence whatever the signs.
// Iteration: z <- a z^2 + c with (a, c) = (0.5, 0.25) for x >= 0 and
//   (-0.5, 0.5) otherwise, from z = x / 2 (|x| <= 1): contractive (the
//   derivative |2 a z| stays below 1/2), so rounding errors do not grow
//   and the result is checked against an f64 reference.
// Workgroup: WG invocations (override), one element each; a 2-D grid of
//   groups_x workgroups per row.
// Why: docs/perf/lessons.md.

const FORM: u32 = 0u;

struct Params {
    n: u32,
    steps: u32,
    groups_x: u32,
    pad: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

fn iterate(x: f32, a: f32, c: f32) -> f32 {
    var z = 0.5 * x;
    for (var s = 0u; s < params.steps; s++) {
        z = fma(a * z, z, c);
    }
    return z;
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * params.groups_x + wid.x) * WG + lid;
    if i >= params.n {
        return;
    }
    let x = src[i];
    let positive = x >= 0.0;
    var z: f32;
    if FORM == 1u {
        z = iterate(x, select(-0.5, 0.5, positive), select(0.5, 0.25, positive));
    } else if positive {
        z = iterate(x, 0.5, 0.25);
    } else {
        z = iterate(x, -0.5, 0.5);
    }
    dst[i] = z;
}
