// arm: writes the grids of a plan's conditional dispatches (read by
// dispatch_workgroups_indirect): the first `when_clear` of them get their own
// grid where word 2 of the flag is clear, the rest where it is set, zero
// workgroups otherwise. The bf16 plans that stage to f16 run this way: the
// f16 kernels unless a value did not convert exactly, the f32 fallback if
// one did (src/runtime/cast.rs).
//
// Algorithm: one invocation per conditional dispatch; one workgroup of 64
//   per 64 dispatches (`count` is small: a plan's dispatches).

struct Params {
    count: u32,
    // Dispatches (from the first) that run while the flag is clear.
    when_clear: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> flag: array<u32>;
// Three words (x, y, z) per dispatch.
@group(0) @binding(2) var<storage, read> grids: array<u32>;
@group(0) @binding(3) var<storage, read_write> args: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= params.count {
        return;
    }
    let on = (flag[2] != 0u) != (i < params.when_clear);
    for (var j = 0u; j < 3u; j++) {
        args[3u * i + j] = select(0u, grids[3u * i + j], on);
    }
}
