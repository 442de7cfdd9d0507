//! What the Vulkan driver made of our kernels: registers per invocation,
//! spills, workgroup memory and the like, from
//! `VK_KHR_pipeline_executable_properties` (NVIDIA reports them; lavapipe
//! reports a few LLVM counts). wgpu does not expose the extension, so this
//! program compiles each kernel's WGSL to SPIR-V with naga (as wgpu does for a
//! trusted module: no bounds checks, no forced loop bounds) and builds the
//! compute pipeline on its own Vulkan device through `ash`.
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin pipeline_stats                 # the matmul kernels
//! cargo run -p wgtile-dev --release --bin pipeline_stats -- --all        # every dispatcher specialisation
//! cargo run -p wgtile-dev --release --bin pipeline_stats -- --filter Coop
//! cargo run -p wgtile-dev --release --bin pipeline_stats -- --attention   # the attention kernels this adapter gets
//! cargo run -p wgtile-dev --release --bin pipeline_stats -- --quant --filter QuantGemv
//! ```
//! Why: a register count over 65536 / (workgroup size x workgroups per unit)
//! halves a kernel's occupancy without any error, and no other tool reaches
//! the driver's compiler through Vulkan on the benchmark machine.

use std::ffi::{CStr, c_char};

use ash::vk;
use clap::Parser;
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};
use wgtile::DType;
use wgtile::kernels::Spec;
use wgtile::tune::{COOP_CONFIGS, MatmulKernel, TILE_CONFIGS};

#[derive(Parser)]
struct Args {
    /// Every matmul specialisation the dispatcher can build (slow: one
    /// driver compile each), instead of the main ones.
    #[arg(long)]
    all: bool,
    /// The attention kernels the dispatcher picks on this adapter (f32 flash
    /// and f16 tensor-core forward, backward and decode at D = 128 and 64)
    /// instead of the matmul kernels.
    #[arg(long)]
    attention: bool,
    /// The quantisation kernels (quantise, dequantise, the GEMVs, the GEMM's
    /// decoding) instead of the matmul kernels; `--filter QuantGemv` for
    /// the GEMVs (labels spell the kernel as `Kernel`'s variant).
    #[arg(long)]
    quant: bool,
    /// Only kernels whose label contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Text constants set in every kernel shown, as NAME=VALUE (repeatable;
    /// e.g. a shader's experiment switch).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    wgtile::dev::set_overrides(wgtile::dev::DevOverrides::from_env());
    let args = Args::parse();
    let specs = if args.attention {
        attention_specs()?
    } else if args.quant {
        wgtile::ops::quant::quant_specs()
    } else if args.all {
        wgtile::tune::matmul_specs()
    } else {
        main_specs()
    };
    let mut sets = Vec::new();
    for kv in &args.set {
        let (name, value) = kv
            .split_once('=')
            .ok_or_else(|| format!("--set takes NAME=VALUE, got {kv}"))?;
        let value: u32 = value
            .trim()
            .parse()
            .map_err(|e| format!("--set {kv}: {e}"))?;
        // Spec::constant takes &'static str names.
        sets.push((&*Box::leak(name.trim().to_string().into_boxed_str()), value));
    }
    let specs: Vec<Spec> = specs
        .into_iter()
        .filter(|s| args.filter.as_deref().is_none_or(|f| label(s).contains(f)))
        .map(|s| sets.iter().fold(s, |s, &(name, v)| s.constant(name, v)))
        .collect();
    let vk = Vulkan::new()?;
    println!("{}", vk.name);
    for spec in &specs {
        let label = label(spec);
        match vk.stats(spec) {
            Ok(lines) => {
                println!("{label}");
                for line in lines {
                    println!("    {line}");
                }
            }
            Err(e) => println!("{label}\n    skipped: {e}"),
        }
    }
    Ok(())
}

/// The kernels the dispatcher picks on the H200: the tiled f32 shapes and
/// the tensor-core layouts (aligned, f16).
fn main_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for tile in TILE_CONFIGS {
        for vec4 in [false, true] {
            specs.push(MatmulKernel::Tiled { tile, vec4 }.spec(DType::F32));
        }
    }
    // f16, and the f32 split form (f32 output).
    let layouts = COOP_CONFIGS
        .map(|c| (c, false, DType::F16))
        .into_iter()
        .chain(wgtile::tune::COOP_SPLIT_CONFIGS.map(|c| (c, true, DType::F32)));
    for ((warps_m, warps_n, bk, frags_n), split, dtype) in layouts {
        let kernel = MatmulKernel::Coop {
            warps_m,
            warps_n,
            bk,
            frags_n,
            subgroup: 32,
            split,
        };
        specs.push(kernel.spec(dtype).dtype(dtype));
    }
    specs
}

/// The attention kernels this adapter's dispatcher picks (a wgtile context
/// supplies its profile; tensor cores with `WGTILE_COOPERATIVE_MATRIX=1`).
fn attention_specs() -> Result<Vec<Spec>, Box<dyn std::error::Error>> {
    use wgtile::tune::attention as ta;
    let ctx = wgtile::Context::new_blocking(Default::default())?;
    let p = ctx.profile();
    let sg = p.subgroup_max_size;
    let mut specs = Vec::new();
    for d in [128usize, 64] {
        if let Some(t) = ta::flash_tiles_for(p, 4096, d) {
            specs.push(t.spec(DType::F32, false));
            specs.push(t.spec(DType::F16, false));
        }
        for dtype in [DType::F16, DType::F32] {
            if let Some(t) = ta::flash_coop_tiles(p, d, d, dtype) {
                specs.push(t.spec(d, d, sg, dtype));
            }
        }
        if let Some(t) = ta::backward_coop_tiles(p, d, d) {
            for pass in [ta::BackwardCoopPass::DkDv, ta::BackwardCoopPass::Dq] {
                specs.push(t.spec(pass, d, d, sg, false, true));
            }
        }
    }
    // Decode: B 1, Hq 32, Hkv 8 (4 packed rows per KV head), D 128.
    for dtype in [DType::F32, DType::F16] {
        let t = ta::decode_kernel_tiles(dtype, 128);
        let shuffle = ta::decode_shuffle_fits(p, t);
        specs.push(ta::decode_spec(dtype, 4, 128, 128, t, shuffle));
        // The f16 tile at LK 8 (fewer K registers), the f32 default's shape.
        if dtype == DType::F16 {
            let t8 = ta::decode_kernel_tiles(DType::F32, 128);
            specs.push(ta::decode_spec(dtype, 4, 128, 128, t8, shuffle));
        }
    }
    Ok(specs)
}

fn label(spec: &Spec) -> String {
    let consts: Vec<String> = spec
        .consts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{:?} {:?} {}", spec.kernel, spec.dtype, consts.join(" "))
}

struct Vulkan {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    exec: ash::khr::pipeline_executable_properties::Device,
    name: String,
}

impl Vulkan {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        // SAFETY: plain Vulkan setup; every handle is destroyed in Drop.
        unsafe {
            let entry = ash::Entry::load()?;
            let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
            let instance = entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )?;
            let physical = instance
                .enumerate_physical_devices()?
                .into_iter()
                .max_by_key(|&p| {
                    let t = instance.get_physical_device_properties(p).device_type;
                    (t == vk::PhysicalDeviceType::DISCRETE_GPU) as u8
                })
                .ok_or("no Vulkan device")?;
            let props = instance.get_physical_device_properties(physical);
            let name = CStr::from_ptr(props.device_name.as_ptr())
                .to_string_lossy()
                .into_owned();
            let family = instance
                .get_physical_device_queue_family_properties(physical)
                .iter()
                .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
                .ok_or("no compute queue")? as u32;
            let available: Vec<String> = instance
                .enumerate_device_extension_properties(physical)?
                .iter()
                .map(|e| {
                    CStr::from_ptr(e.extension_name.as_ptr())
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            let has = |n: &CStr| available.iter().any(|a| a.as_bytes() == n.to_bytes());
            let exec_ext = ash::khr::pipeline_executable_properties::NAME;
            if !has(exec_ext) {
                return Err(format!("{name} lacks VK_KHR_pipeline_executable_properties").into());
            }
            let has_coop = has(ash::khr::cooperative_matrix::NAME);
            let mut extensions: Vec<*const c_char> = vec![exec_ext.as_ptr()];
            if has_coop {
                extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
            }
            // Every feature the device has, the cooperative matrix and
            // pipeline statistics included.
            let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
            let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
            let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
            let mut execf = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
            let mut features = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut f11)
                .push_next(&mut f12)
                .push_next(&mut f13)
                .push_next(&mut execf);
            if has_coop {
                features = features.push_next(&mut coop);
            }
            instance.get_physical_device_features2(physical, &mut features);
            let priorities = [1.0f32];
            let queue = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&priorities)];
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queue)
                .enabled_extension_names(&extensions)
                .push_next(&mut features);
            let device = instance.create_device(physical, &info, None)?;
            let exec = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
            Ok(Self {
                _entry: entry,
                instance,
                device,
                exec,
                name,
            })
        }
    }

    /// The driver's statistics for `spec`'s pipeline, one line each.
    fn stats(&self, spec: &Spec) -> Result<Vec<String>, Box<dyn std::error::Error>> {
        let source = spec.wgsl()?;
        let entry = spec.kernel.entry_point();
        let module =
            naga::front::wgsl::parse_str(&source).map_err(|e| e.emit_to_string(&source))?;
        let info = Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&module)
            .map_err(|e| e.emit_to_string(&source))?;
        let mut constants = naga::back::PipelineConstants::default();
        for &(name, value) in &spec.overrides {
            constants.insert(name.to_string(), f64::from(value));
        }
        let (module, info) = naga::back::pipeline_constants::process_overrides(
            &module,
            &info,
            Some((naga::ShaderStage::Compute, entry)),
            &constants,
        )?;
        let options = spv::Options {
            lang_version: (1, 5),
            bounds_check_policies: naga::proc::BoundsCheckPolicies::default(),
            zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
            force_loop_bounding: false,
            ..Default::default()
        };
        let words = spv::write_vec(
            &module,
            &info,
            &options,
            Some(&spv::PipelineOptions {
                shader_stage: naga::ShaderStage::Compute,
                entry_point: entry.to_string(),
            }),
        )?;
        // One descriptor set layout per group, every binding a buffer.
        let mut groups: Vec<Vec<vk::DescriptorSetLayoutBinding>> = Vec::new();
        for (_, var) in module.global_variables.iter() {
            let Some(binding) = &var.binding else {
                continue;
            };
            let kind = match var.space {
                naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
                naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
                _ => continue,
            };
            let g = binding.group as usize;
            if groups.len() <= g {
                groups.resize(g + 1, Vec::new());
            }
            groups[g].push(
                vk::DescriptorSetLayoutBinding::default()
                    .binding(binding.binding)
                    .descriptor_type(kind)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE),
            );
        }
        // SAFETY: the objects are created and destroyed here, on one device.
        unsafe {
            let d = &self.device;
            let shader =
                d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)?;
            let mut set_layouts = Vec::new();
            for bindings in &groups {
                set_layouts.push(d.create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(bindings),
                    None,
                )?);
            }
            let layout = d.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts),
                None,
            )?;
            let name = std::ffi::CString::new(entry)?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(shader)
                .name(&name);
            let create = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(layout)
                .flags(
                    vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                        | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR,
                );
            let result = d.create_compute_pipelines(vk::PipelineCache::null(), &[create], None);
            let mut lines = Vec::new();
            if let Ok(pipelines) = &result {
                let pipeline = pipelines[0];
                let executables = self.exec.get_pipeline_executable_properties(
                    &vk::PipelineInfoKHR::default().pipeline(pipeline),
                )?;
                for (i, e) in executables.iter().enumerate() {
                    let ename = CStr::from_ptr(e.name.as_ptr())
                        .to_string_lossy()
                        .into_owned();
                    lines.push(format!(
                        "executable {i}: {ename} (subgroup {})",
                        e.subgroup_size
                    ));
                    let exe = vk::PipelineExecutableInfoKHR::default()
                        .pipeline(pipeline)
                        .executable_index(i as u32);
                    for s in self.exec.get_pipeline_executable_statistics(&exe)? {
                        let sname = CStr::from_ptr(s.name.as_ptr())
                            .to_string_lossy()
                            .into_owned();
                        let value = match s.format {
                            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                                s.value.b32.to_string()
                            }
                            vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                                s.value.i64.to_string()
                            }
                            vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                                s.value.u64.to_string()
                            }
                            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => {
                                s.value.f64.to_string()
                            }
                            _ => "?".into(),
                        };
                        let what = CStr::from_ptr(s.description.as_ptr()).to_string_lossy();
                        lines.push(format!("{sname}: {value} ({:?}; {what})", s.format));
                    }
                    // Internal representations: names and sizes only.
                    let reps = self
                        .exec
                        .get_pipeline_executable_internal_representations(&exe)
                        .unwrap_or_default();
                    for r in reps {
                        let rname = CStr::from_ptr(r.name.as_ptr())
                            .to_string_lossy()
                            .into_owned();
                        lines.push(format!("representation {rname}: {} bytes", r.data_size));
                    }
                }
                d.destroy_pipeline(pipeline, None);
            }
            d.destroy_pipeline_layout(layout, None);
            for l in set_layouts {
                d.destroy_descriptor_set_layout(l, None);
            }
            d.destroy_shader_module(shader, None);
            result.map_err(|(_, e)| format!("pipeline: {e}"))?;
            Ok(lines)
        }
    }
}

impl Drop for Vulkan {
    fn drop(&mut self) {
        // SAFETY: nothing created from them is alive.
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}
