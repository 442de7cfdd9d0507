//! Throughput of f32 atomic adds to a storage buffer, in the pattern a
//! FlashAttention-2 backward would use for dQ (each workgroup owning a block
//! of keys adds a BQ x D tile into dQ for every block of BQ query rows), to
//! judge whether that design could replace wgtile's separate dQ pass.
//! Needs wgpu's native `SHADER_FLOAT32_ATOMIC` (Vulkan with
//! VK_EXT_shader_atomic_float); not part of the library.
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin atomics_probe -- --heads 64 --seq 4096 --key-block 128
//! ```
//!
//! Three kernels over the same grid ((S / key block, heads) workgroups of
//! 256 invocations, each walking S / 16 query blocks of 16 x D floats, 8
//! per invocation): `atomic` (atomicAdd, every workgroup starting at query
//! block 0, so the key blocks of a head collide), `rotated` (each starting
//! at its own block, as a scheduler could stagger them) and `store` (plain
//! stores of the same addresses: the traffic without the atomics). Times
//! are wall clock around a submit and a wait, best of the repeats.

use clap::Parser;
use wgtile::wgpu;

#[derive(Parser, Debug)]
struct Args {
    /// Heads (B x H).
    #[arg(long, default_value_t = 64)]
    heads: u32,
    /// Sequence length (queries and keys).
    #[arg(long, default_value_t = 4096)]
    seq: u32,
    /// Head dim.
    #[arg(long, default_value_t = 128)]
    dim: u32,
    /// Keys per workgroup (one workgroup per key block and head).
    #[arg(long, default_value_t = 128)]
    key_block: u32,
    /// Repeats per kernel (the best is reported).
    #[arg(long, default_value_t = 5)]
    repeats: u32,
}

const SHADER: &str = r#"
struct P { seq: u32, dim: u32, key_blocks: u32, rotate: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> dq: array<atomic<f32>>;
@group(0) @binding(2) var<storage, read_write> plain: array<f32>;

// 8 floats per invocation of a 16 x D tile (D = 128: 2048 floats, 256
// invocations), consecutive invocations on consecutive columns.
fn tile_index(head: u32, q0: u32, t: u32, e: u32) -> u32 {
    let flat = e * 256u + t;
    let r = flat / p.dim;
    let c = flat % p.dim;
    return (head * p.seq + q0 + r) * p.dim + c;
}

@compute @workgroup_size(256)
fn atomic_add(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let blocks = p.seq / 16u;
    let per = 16u * p.dim / 256u;
    for (var n = 0u; n < blocks; n++) {
        let qb = (n + select(0u, w.x * blocks / p.key_blocks, p.rotate == 1u)) % blocks;
        for (var e = 0u; e < per; e++) {
            atomicAdd(&dq[tile_index(w.y, qb * 16u, t, e)], f32(w.x + 1u) * 0.5);
        }
    }
}

@compute @workgroup_size(256)
fn store(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let blocks = p.seq / 16u;
    let per = 16u * p.dim / 256u;
    for (var n = 0u; n < blocks; n++) {
        let qb = (n + w.x * blocks / p.key_blocks) % blocks;
        for (var e = 0u; e < per; e++) {
            plain[tile_index(w.y, qb * 16u, t, e)] = f32(w.x + 1u) * 0.5;
        }
    }
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // After the logger: a variable that does not parse logs a warning.
    wgtile::dev::set_overrides(wgtile::dev::DevOverrides::from_env());
    let args = Args::parse();
    if args.seq % 16 != 0 || (16 * args.dim) % 256 != 0 || args.seq % args.key_block != 0 {
        return Err("seq must be a multiple of 16 and of --key-block, 16 x dim of 256".into());
    }
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))?;
    let info = adapter.get_info();
    if !adapter
        .features()
        .contains(wgpu::Features::SHADER_FLOAT32_ATOMIC)
    {
        return Err(format!("{} has no SHADER_FLOAT32_ATOMIC", info.name).into());
    }
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("atomics probe"),
        required_features: wgpu::Features::SHADER_FLOAT32_ATOMIC,
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("atomics probe"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let elems = u64::from(args.heads) * u64::from(args.seq) * u64::from(args.dim);
    let buffer = |label| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: elems * 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let (dq, plain) = (buffer("dq"), buffer("plain"));
    let key_blocks = args.seq / args.key_block;
    let params = |rotate: u32| {
        let words = [args.seq, args.dim, key_blocks, rotate];
        let buf = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&buf, 0, bytemuck::cast_slice(&words));
        buf
    };
    let adds = elems as f64 * f64::from(key_blocks);
    println!(
        "{} ({:?}): {} heads x {} queries x D {}, {} key blocks of {}: {:.2}G adds of f32",
        info.name,
        info.backend,
        args.heads,
        args.seq,
        args.dim,
        key_blocks,
        args.key_block,
        adds / 1e9
    );
    for (name, entry, rotate) in [
        ("atomic", "atomic_add", 0u32),
        ("rotated", "atomic_add", 1),
        ("store", "store", 1),
    ] {
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        let p = params(rotate);
        let layout = pipeline.get_bind_group_layout(0);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: p.as_entire_binding(),
        }];
        entries.push(if entry == "store" {
            wgpu::BindGroupEntry {
                binding: 2,
                resource: plain.as_entire_binding(),
            }
        } else {
            wgpu::BindGroupEntry {
                binding: 1,
                resource: dq.as_entire_binding(),
            }
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(name),
            layout: &layout,
            entries: &entries,
        });
        let mut best = f64::INFINITY;
        for _ in 0..args.repeats.max(1) + 1 {
            let mut encoder = device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(key_blocks, args.heads, 1);
            }
            let start = std::time::Instant::now();
            queue.submit([encoder.finish()]);
            device.poll(wgpu::PollType::wait_indefinitely())?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "  {name:<8} {:>9.3} ms  {:>8.1} G adds/s",
            best * 1e3,
            adds / best / 1e9
        );
    }
    Ok(())
}
