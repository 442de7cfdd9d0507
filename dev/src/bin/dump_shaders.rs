//! Writes every WGSL module wgtile compiles, assembled and specialised as the
//! registry builds them, to a folder, for reading or for the naga CLI:
//!
//! ```text
//! cargo run -p wgtile-dev --bin dump_shaders -- target/shaders && for f in target/shaders/*.wgsl; do naga "$f"; done
//! ```
//!
//! Files under `shaders/` are the sources: some are parts (shared Params, the
//! epilogue, the tiled core) that only validate once assembled; these dumps
//! are what the tests validate and translate (tests/shaders/kernels.rs). Pipeline
//! `override` values are listed in a comment at the top of each dump.

use std::path::PathBuf;

use wgtile::DType;
use wgtile::kernels::{Kernel, Spec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    wgtile::dev::set_overrides(wgtile::dev::DevOverrides::from_env());
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/shaders".into()),
    );
    std::fs::create_dir_all(&dir)?;
    let mut specs: Vec<Spec> = Kernel::ALL.into_iter().map(Spec::new).collect();
    specs.extend(
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_dtype_generic())
            .map(|k| Spec::new(k).dtype(DType::F16)),
    );
    specs.extend(wgtile::tune::matmul_specs());
    specs.extend(wgtile::tune::attention::attention_specs());
    for (i, spec) in specs.iter().enumerate() {
        let mut text = format!("// {spec:?}\n");
        text.push_str(&spec.wgsl()?);
        let path = dir.join(format!("{i:03}_{}_{}.wgsl", spec.kernel.name(), spec.dtype));
        std::fs::write(&path, text)?;
    }
    println!("wrote {} modules to {}", specs.len(), dir.display());
    Ok(())
}
