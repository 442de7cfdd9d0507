// arm: writes the grids of a plan's conditional dispatches (read by
// dispatch_workgroups_indirect): the first `when_clear` of them get their own
// grid where the flag is clear, the rest where it is set, zero workgroups
// otherwise. The flag is set where word 2 is (a value beyond f16's range,
// a weight scale f16 cannot carry), or where an operand slot s < `slots`
// has word 4 + 2 s set (a value f16 cannot hold) and word 5 + 2 s clear
// (nothing of 2^-10 or more: cast.wgsl's range test). The bf16 plans that
// stage to f16 run this way: the f16 kernels unless the range test fails,
// the f32 fallback if it does (src/runtime/cast.rs).
//
// Algorithm: one invocation per conditional dispatch; one workgroup of 64
//   per 64 dispatches (`count` is small: a plan's dispatches).

struct Params {
    count: u32,
    // Dispatches (from the first) that run while the flag is clear.
    when_clear: u32,
    // Operand slots of the range test (0: word 2 alone).
    slots: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> flag: array<u32>;
// Three words (x, y, z) per dispatch.
@group(0) @binding(2) var<storage, read> grids: array<u32>;
@group(0) @binding(3) var<storage, read_write> args: array<u32>;

fn flag_set() -> bool {
    if flag[2] != 0u {
        return true;
    }
    for (var s = 0u; s < params.slots; s++) {
        if flag[4u + 2u * s] != 0u && flag[5u + 2u * s] == 0u {
            return true;
        }
    }
    return false;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= params.count {
        return;
    }
    let on = flag_set() != (i < params.when_clear);
    for (var j = 0u; j < 3u; j++) {
        args[3u * i + j] = select(0u, grids[3u * i + j], on);
    }
}
