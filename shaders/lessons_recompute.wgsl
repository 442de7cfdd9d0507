// lessons_recompute: the lecture's recomputation, measured on its chain of
// three sigmoids y = s(s(s(x))), forward and backward.
//
// Entries (one invocation per element, WG per workgroup, 2-D grid):
// - forward_store: reads x, writes y and the activations a1 = s(x) and
//   a2 = s(a1) for the backward (4 global accesses per element);
// - backward_stored: reads dy, a1, a2, writes dx (4): y = s(a2) is
//   recomputed from a2, so 8 accesses in all, the lecture's count;
// - forward: reads x, writes y (2);
// - backward_recompute: reads dy and x, recomputes a1, a2 and y in
//   registers, writes dx (3): 5 accesses in all, trading 3 sigmoids per
//   element (cheap FLOPs) for 3 global accesses (bytes).
// dx = dy * y (1 - y) * a2 (1 - a2) * a1 (1 - a1).
// Why: docs/perf/lessons.md.

struct Params {
    n: u32,
    groups_x: u32,
    pad0: u32,
    pad1: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x_in: array<f32>;
@group(0) @binding(2) var<storage, read> dy_in: array<f32>;
@group(0) @binding(3) var<storage, read> a1_in: array<f32>;
@group(0) @binding(4) var<storage, read> a2_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> a1_out: array<f32>;
@group(0) @binding(7) var<storage, read_write> a2_out: array<f32>;

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

fn index(wid: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * params.groups_x + wid.x) * WG + lid;
}

// The chain's three derivatives from its activations.
fn grad(dy: f32, a1: f32, a2: f32, y: f32) -> f32 {
    return dy * y * (1.0 - y) * a2 * (1.0 - a2) * a1 * (1.0 - a1);
}

@compute @workgroup_size(WG, 1, 1)
fn forward_store(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, lid);
    if i < params.n {
        let a1 = sigmoid(x_in[i]);
        let a2 = sigmoid(a1);
        a1_out[i] = a1;
        a2_out[i] = a2;
        out[i] = sigmoid(a2);
    }
}

@compute @workgroup_size(WG, 1, 1)
fn backward_stored(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, lid);
    if i < params.n {
        let a1 = a1_in[i];
        let a2 = a2_in[i];
        out[i] = grad(dy_in[i], a1, a2, sigmoid(a2));
    }
}

@compute @workgroup_size(WG, 1, 1)
fn forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, lid);
    if i < params.n {
        out[i] = sigmoid(sigmoid(sigmoid(x_in[i])));
    }
}

@compute @workgroup_size(WG, 1, 1)
fn backward_recompute(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = index(wid, lid);
    if i < params.n {
        let a1 = sigmoid(x_in[i]);
        let a2 = sigmoid(a1);
        out[i] = grad(dy_in[i], a1, a2, sigmoid(a2));
    }
}
