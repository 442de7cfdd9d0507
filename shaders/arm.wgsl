// arm: writes the grids of a plan's conditional dispatches (read by
// dispatch_workgroups_indirect): each one's own grid where word 2 of the
// flag is set, zero workgroups otherwise. The f32 fallbacks of the bf16
// plans that stage to f16 run this way (src/runtime/cast.rs).
//
// Algorithm: one invocation per conditional dispatch; one workgroup of 64
//   per 64 dispatches (`count` is small: a plan's dispatches).

struct Params {
    count: u32,
    pad0: u32,
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
    let on = flag[2] != 0u;
    for (var j = 0u; j < 3u; j++) {
        args[3u * i + j] = select(0u, grids[3u * i + j], on);
    }
}
