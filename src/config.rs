//! The user-facing configuration: the six `WGTILE_*` environment variables,
//! read once, by one parser, in this file only.
//!
//! | variable | meaning |
//! | --- | --- |
//! | `WGTILE_BACKEND` | backends to consider (`vulkan`, `metal`, `dx12`, `gl`, `webgpu`, comma-separated); falls back to wgpu's `WGPU_BACKEND` |
//! | `WGTILE_ADAPTER` | a case-insensitive substring the adapter name must contain |
//! | `WGTILE_COOPERATIVE_MATRIX` | `1` enables wgpu's experimental cooperative matrices (tensor cores) |
//! | `WGTILE_AUTOTUNE` | `off`, `fast` (default) or `full` |
//! | `WGTILE_CACHE_DIR` | where the autotune cache lives (default: the user cache dir) |
//! | `WGTILE_CHECKED_SHADERS` | `1` compiles every kernel with wgpu's runtime bounds checks |
//!
//! Switches take `0/1/true/false/on/off/yes/no` (trimmed, any case); an
//! unknown value logs a warning and leaves the default. Fields of
//! [`crate::ContextOptions`] set in code win over the environment.
//!
//! Nothing here changes what a kernel computes: experiments and probes are
//! typed overrides of the `dev` feature (`src/dev.rs`), not variables.

use std::ffi::OsString;
use std::sync::OnceLock;

/// The values of the user-facing variables (`None`: unset or empty).
#[derive(Clone, Debug, Default)]
pub(crate) struct Config {
    pub(crate) backend: Option<String>,
    pub(crate) adapter: Option<String>,
    pub(crate) cooperative_matrix: Option<bool>,
    pub(crate) autotune: Option<String>,
    pub(crate) cache_dir: Option<OsString>,
    pub(crate) checked_shaders: bool,
}

/// The configuration of this process, read from the environment on first use.
pub(crate) fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config::from_vars(|name| std::env::var_os(name)))
}

impl Config {
    /// Reads the variables through `var` (the environment, or a table in tests).
    fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let text = |name: &str| {
            let value = var(name)?;
            match value.into_string() {
                Ok(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
                Ok(_) => None,
                Err(raw) => {
                    log::warn!("{name}={raw:?} is not UTF-8; ignored");
                    None
                }
            }
        };
        let switch = |name: &str| text(name).and_then(|v| parse_switch(name, &v));
        Self {
            backend: text("WGTILE_BACKEND"),
            adapter: text("WGTILE_ADAPTER"),
            cooperative_matrix: switch("WGTILE_COOPERATIVE_MATRIX"),
            autotune: text("WGTILE_AUTOTUNE"),
            cache_dir: var("WGTILE_CACHE_DIR").filter(|d| !d.is_empty()),
            checked_shaders: switch("WGTILE_CHECKED_SHADERS").unwrap_or(false),
        }
    }
}

/// `0/1/true/false/on/off/yes/no`, any case; anything else warns and is `None`.
pub(crate) fn parse_switch(name: &str, value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => {
            log::warn!("{name}={value:?} is not one of 0/1/true/false/on/off; ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        Config::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn switches_take_every_spelling_and_ignore_the_rest() {
        for (v, want) in [
            ("1", Some(true)),
            (" on ", Some(true)),
            ("TRUE", Some(true)),
            ("yes", Some(true)),
            ("0", Some(false)),
            ("off", Some(false)),
            ("False", Some(false)),
            ("no", Some(false)),
            ("2", None),
            ("maybe", None),
        ] {
            assert_eq!(parse_switch("X", v), want, "{v:?}");
        }
        let c = config(&[
            ("WGTILE_COOPERATIVE_MATRIX", "off"),
            ("WGTILE_CHECKED_SHADERS", "on"),
        ]);
        assert_eq!(c.cooperative_matrix, Some(false));
        assert!(c.checked_shaders);
        let c = config(&[("WGTILE_CHECKED_SHADERS", "sure")]);
        assert!(!c.checked_shaders);
    }

    #[test]
    fn empty_values_are_unset() {
        let c = config(&[
            ("WGTILE_BACKEND", "  "),
            ("WGTILE_ADAPTER", ""),
            ("WGTILE_CACHE_DIR", ""),
        ]);
        assert!(c.backend.is_none() && c.adapter.is_none() && c.cache_dir.is_none());
        let c = config(&[
            ("WGTILE_ADAPTER", " llvmpipe "),
            ("WGTILE_AUTOTUNE", "full"),
        ]);
        assert_eq!(c.adapter.as_deref(), Some("llvmpipe"));
        assert_eq!(c.autotune.as_deref(), Some("full"));
    }
}
