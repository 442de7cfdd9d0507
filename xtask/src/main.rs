//! Developer tasks for the `wgtile` workspace: `cargo xtask <command>`.
//!
//! Standard library only. Every external command is printed before it runs and
//! inherits stdio, so cargo's and the test runner's output shows up unchanged.

use std::env;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

mod browser;
mod deps;

const USAGE: &str = "\
Usage: cargo xtask <command> [args...]

Commands:
  tour [args...]    Run the `tour` example in release mode, passing args through
                    (cargo run --release --example tour -- [args...]).
  test [args...]    Run the workspace tests (lib unit tests, tests/, doc tests).
                    Without args and with cargo-nextest installed:
                    cargo nextest run --workspace --no-fail-fast, then
                    cargo test --workspace --doc (nextest runs no doc tests);
                    otherwise cargo test --workspace [args...],
                    e.g. `cargo xtask test -- --nocapture` or `cargo xtask test matmul`.
                    Without args it then runs the tour's quick pass and checks
                    its report (tools/check_tour_report.py: well-formed, every
                    section and figure there), and the browser suite
                    (tests/web.rs) in headless Chromium's WebGPU, installing
                    the wasm32 target, chromium, chromium-driver and the
                    wasm-bindgen-cli Cargo.lock pins where missing.
  test --browser    Only the browser suite.
  web [--port N] [--build-only]
                    Build the browser demo (examples/web: the web_demo example
                    for wasm32 and its JavaScript bindings) into
                    target/wgtile-web and serve it on http://127.0.0.1:8000/
                    (needs a browser with WebGPU; Chromium:
                    --enable-unsafe-webgpu).
  gen [--check]     Regenerate the generated shaders: python3 runs
                    tools/gen/matmul_tiled16_core.py and
                    tools/gen/matmul_broadcast_core.py, which rewrite
                    shaders/matmul_tiled16_core.wgsl and
                    shaders/matmul_broadcast_core.wgsl. With --check nothing is
                    written; it fails, printing a diff, when either committed
                    shader differs from what its generator writes.
  deps              The import rules of the library's layers (xtask/src/deps.rs):
                    data flows down, ops families do not import each other,
                    no import cycles; the edges still to move are listed in
                    xtask/deps-allowed.txt, which may only shrink.
  ci                CI's checks besides the tests: rustfmt check, the
                    generated shaders (gen --check), the import rules
                    (deps), the default build and its docs, clippy
                    (-D warnings), cross-target `cargo check` for
                    x86_64-pc-windows-msvc (DX12) and aarch64-apple-darwin
                    (Metal), and of the library for wasm32-unknown-unknown
                    (WebGPU in the browser). `.ci/run` runs this, then `cargo xtask test`.
  help              Show this text.

Before running anything, tour/test/ci make sure a Vulkan driver is available on
Linux (the Vulkan loader plus at least one ICD manifest; lavapipe is enough).
When missing and running as root on Debian/Ubuntu, they install
mesa-vulkan-drivers and libvulkan1 with apt-get (set WGTILE_NO_INSTALL=1 to
prevent that).

Environment passed to child commands:
  WGPU_BACKEND=vulkan     on Linux, unless WGPU_BACKEND or WGTILE_BACKEND is set
  XDG_RUNTIME_DIR=/tmp    when unset (silences Mesa's warning)
  WGTILE_AUTOTUNE=off     for the tests, when unset
";

/// Targets whose backends must keep compiling, and whether their examples
/// are checked too (the browser's cannot block on the GPU, as they do).
const CROSS_TARGETS: &[(&str, &str, bool)] = &[
    ("x86_64-pc-windows-msvc", "DX12", true),
    ("aarch64-apple-darwin", "Metal", true),
    ("wasm32-unknown-unknown", "WebGPU", false),
];

/// The shader generators (Python 3, standard library only), run from the
/// workspace root; each rewrites its shader, or compares it with `--check`.
const GENERATORS: &[&str] = &[
    "tools/gen/matmul_tiled16_core.py",
    "tools/gen/matmul_broadcast_core.py",
];

const APT_PACKAGES: &[&str] = &["mesa-vulkan-drivers", "libvulkan1"];

/// A failure that ends the task with a message and an exit code.
struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

type Result<T = ()> = std::result::Result<T, Failure>;

fn main() -> ExitCode {
    let mut args = env::args_os().skip(1);
    let command = args.next();
    let rest: Vec<OsString> = args.collect();

    let result = match command.as_ref().and_then(|c| c.to_str()) {
        None | Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some("tour") => tour(&rest),
        Some("test") => test(&rest),
        Some("gen") => generate(&rest),
        Some("web") => browser::web(&rest),
        Some("deps") if rest.is_empty() => deps::check(&workspace_root()).map_err(Failure::new),
        Some("deps") => Err(Failure::new("`cargo xtask deps` takes no arguments")),
        Some("ci") if rest.is_empty() => ci(),
        Some("ci") => Err(Failure::new("`cargo xtask ci` takes no arguments")),
        Some(other) => {
            eprint!("{USAGE}");
            Err(Failure::new(format!("unknown command `{other}`")))
        }
    };

    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("xtask: error: {}", failure.message);
            ExitCode::from(failure.code.max(1))
        }
    }
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

fn tour(args: &[OsString]) -> Result {
    ensure_vulkan_driver()?;
    let mut cmd = cargo();
    cmd.args(["run", "--release", "--example", "tour", "--"])
        .args(args);
    run(&mut cmd)
}

fn test(args: &[OsString]) -> Result {
    if args.len() == 1 && args[0] == "--browser" {
        return browser::run_browser_tests();
    }
    ensure_vulkan_driver()?;
    run_tests(args)?;
    if args.is_empty() {
        browser::run_browser_tests_if_possible()?;
    }
    Ok(())
}

fn run_tests(args: &[OsString]) -> Result {
    let tests = |cmd: &mut Command| {
        if env::var_os("WGTILE_AUTOTUNE").is_none() {
            cmd.env("WGTILE_AUTOTUNE", "off");
        }
    };
    // The whole suite under nextest where it is installed (CI's machines
    // have it): each test is its own process and both cores stay busy
    // across all test binaries, where libtest runs the binaries one after
    // another and idles a core behind each binary's slowest test. On 2
    // cores with a cold shader cache: 430 s of tests instead of about 720.
    if args.is_empty() && nextest_available() {
        let mut cmd = cargo();
        cmd.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
        tests(&mut cmd);
        run(&mut cmd)?;
        let mut doc = cargo();
        doc.args(["test", "--workspace", "--doc"]);
        tests(&mut doc);
        run(&mut doc)?;
        return check_tour_report();
    }
    if args.is_empty() {
        let mut cmd = cargo();
        cmd.args(["test", "--workspace"]);
        tests(&mut cmd);
        run(&mut cmd)?;
        return check_tour_report();
    }
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"]).args(args);
    tests(&mut cmd);
    run(&mut cmd)
}

/// The tour's quick run (debug build: the library's compile is the tests')
/// writes its report, which `tools/check_tour_report.py` checks: well-formed
/// XHTML, every section there and run, every section's figure drawn.
fn check_tour_report() -> Result {
    let dir = "target/wgtile-tour-check";
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--example",
        "tour",
        "--",
        "--quick",
        "--repeats",
        "1",
        "--html",
        dir,
    ]);
    run(&mut cmd)?;
    let mut check = Command::new("python3");
    check
        .current_dir(workspace_root())
        .args(["tools/check_tour_report.py", dir]);
    run(&mut check)
}

/// Whether `cargo nextest` runs here.
fn nextest_available() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn generate(args: &[OsString]) -> Result {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => {
            return Err(Failure::new(
                "`cargo xtask gen` takes no arguments or `--check`",
            ));
        }
    };
    run_generators(check)
}

/// Runs every shader generator: each rewrites its shader or, with `check`,
/// compares it (printing a diff on a mismatch). All of them run even after a
/// failure, so one pass shows every stale shader.
fn run_generators(check: bool) -> Result {
    let mut failed = Vec::new();
    for &script in GENERATORS {
        let mut cmd = Command::new("python3");
        cmd.current_dir(workspace_root()).arg(script);
        if check {
            cmd.arg("--check");
        }
        if let Err(failure) = run(&mut cmd) {
            eprintln!("xtask: error: {}", failure.message);
            failed.push(script);
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    let scripts = failed.join(", ");
    Err(Failure::new(if check {
        format!("generated shaders out of date ({scripts}); run `cargo xtask gen` to rewrite them")
    } else {
        format!("shader generators failed: {scripts}")
    }))
}

fn ci() -> Result {
    let total = Instant::now();
    // Fail fast (or install the driver) before the long compiles.
    step("vulkan driver", ensure_vulkan_driver)?;

    step("rustup components", || {
        // Minimal rustup profiles lack rustfmt and clippy; best effort only,
        // a real absence then shows up in the steps below.
        let mut cmd = Command::new("rustup");
        cmd.args(["component", "add", "rustfmt", "clippy"]);
        print_command(&cmd);
        match cmd.status() {
            Ok(status) if status.success() => {}
            Ok(status) => eprintln!("xtask: warning: `rustup component add` failed ({status})"),
            Err(err) => eprintln!("xtask: warning: could not run rustup ({err})"),
        }
        Ok(())
    })?;

    step("rustfmt", || {
        run(cargo().args(["fmt", "--all", "--", "--check"]))
    })?;

    // Before clippy: a stale generated shader fails in seconds, without a compile.
    step("generated shaders", || run_generators(true))?;
    step("import rules", || {
        deps::check(&workspace_root()).map_err(Failure::new)
    })?;

    // The tests turn the `dev` feature on; the library as users build it
    // (internals private, no experiment overrides) must compile and
    // document cleanly on its own.
    step("default build", || {
        run(cargo().args(["check", "-p", "wgtile", "--lib"]))
    })?;
    step("docs", || {
        run(cargo()
            .args(["doc", "--no-deps", "-p", "wgtile"])
            .env("RUSTDOCFLAGS", "-D warnings"))
    })?;

    step("clippy", || {
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;

    for &(target, backend, examples) in CROSS_TARGETS {
        step(&format!("check {target} ({backend})"), || {
            if !add_rustup_target(target) {
                return Ok(());
            }
            let mut cmd = cargo();
            if target == browser::TARGET {
                // The browser suite and the demo compile only there: lint
                // them with the library.
                cmd.args(["clippy", "-p", "wgtile", "--lib", "--test", "web"]);
                cmd.args(["--example", "web_demo", "--target", target]);
                cmd.args(["--", "-D", "warnings"]);
                return run(&mut cmd);
            }
            cmd.args(["check", "-p", "wgtile", "--lib", "--target", target]);
            if examples {
                cmd.arg("--examples");
            }
            run(&mut cmd)
        })?;
    }

    println!(
        "xtask: ci checks passed in {:.1}s (the tests are `cargo xtask test`)",
        total.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs one CI step and prints how long it took, pass or fail.
fn step(name: &str, f: impl FnOnce() -> Result) -> Result {
    println!("\n==> {name}");
    let start = Instant::now();
    let result = f();
    let secs = start.elapsed().as_secs_f64();
    match &result {
        Ok(()) => println!("==> {name}: ok ({secs:.1}s)"),
        Err(_) => println!("==> {name}: FAILED ({secs:.1}s)"),
    }
    result
}

/// `rustup target add <target>`; on any problem prints a warning and returns
/// false so the caller skips that target instead of failing.
fn add_rustup_target(target: &str) -> bool {
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", target]);
    print_command(&cmd);
    match cmd.status() {
        Ok(status) if status.success() => true,
        Ok(status) => {
            eprintln!(
                "xtask: warning: `rustup target add {target}` failed ({status}); \
                 skipping the {target} check"
            );
            false
        }
        Err(err) => {
            eprintln!("xtask: warning: could not run rustup ({err}); skipping the {target} check");
            false
        }
    }
}

// ---------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------

fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// A `cargo` command (the `CARGO` that launched us, else `cargo` from PATH),
/// run from the workspace root with the common environment.
fn cargo() -> Command {
    let program = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.current_dir(workspace_root());
    apply_common_env(&mut cmd);
    cmd
}

/// WGPU_BACKEND=vulkan on Linux (unless a backend is chosen already) and
/// XDG_RUNTIME_DIR=/tmp when unset.
fn apply_common_env(cmd: &mut Command) {
    if cfg!(target_os = "linux")
        && env::var_os("WGPU_BACKEND").is_none()
        && env::var_os("WGTILE_BACKEND").is_none()
    {
        cmd.env("WGPU_BACKEND", "vulkan");
    }
    if env::var_os("XDG_RUNTIME_DIR").is_none_or(|v| v.is_empty()) {
        cmd.env("XDG_RUNTIME_DIR", "/tmp");
    }
}

/// Prints the command (with the environment it adds) and runs it with
/// inherited stdio; a non-zero exit becomes a failure with the same code.
fn run(cmd: &mut Command) -> Result {
    print_command(cmd);
    let status = cmd.status().map_err(|err| {
        Failure::new(format!(
            "could not start `{}`: {err}",
            cmd.get_program().to_string_lossy()
        ))
    })?;
    if status.success() {
        return Ok(());
    }
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .filter(|&c| c != 0)
        .unwrap_or(1);
    Err(Failure {
        message: format!("`{}` failed ({status})", describe(cmd)),
        code,
    })
}

fn print_command(cmd: &Command) {
    let mut env_part = String::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            env_part.push_str(&format!("{}={} ", key.to_string_lossy(), quote(value)));
        }
    }
    match cmd.get_current_dir() {
        Some(dir) => println!("$ (cd {}) {env_part}{}", dir.display(), describe(cmd)),
        None => println!("$ {env_part}{}", describe(cmd)),
    }
}

/// The program (by file name, as typed by a user) and its arguments.
fn describe(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program())
        .file_name()
        .unwrap_or(cmd.get_program());
    let mut text = quote(program);
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&quote(arg));
    }
    text
}

fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=+./:,@%".contains(c));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

// ---------------------------------------------------------------------------
// Vulkan driver check
// ---------------------------------------------------------------------------

/// On Linux, makes sure a Vulkan loader and at least one ICD are installed,
/// installing Mesa's drivers (lavapipe) with apt-get when allowed. Elsewhere
/// wgpu uses Metal or DX12 and there is nothing to check.
fn ensure_vulkan_driver() -> Result {
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    if let Some(backend) = chosen_non_vulkan_backend() {
        println!("xtask: backend `{backend}` requested; skipping the Vulkan driver check");
        return Ok(());
    }

    let missing = missing_vulkan_parts();
    if missing.is_empty() {
        return Ok(());
    }
    let what = missing.join(" and ");
    eprintln!("xtask: no usable Vulkan driver: {what} not found");

    let root = is_root();
    let debian = Path::new("/etc/debian_version").exists();
    let no_install = env::var_os("WGTILE_NO_INSTALL").is_some();

    if root && debian && !no_install {
        println!("xtask: installing Mesa's Vulkan drivers (lavapipe) with apt-get");
        let mut update = Command::new("apt-get");
        update
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut update)?;
        let mut install = Command::new("apt-get");
        install
            .args(["install", "-y", "--no-install-recommends"])
            .args(APT_PACKAGES)
            .env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut install)?;

        let still_missing = missing_vulkan_parts();
        if still_missing.is_empty() {
            println!("xtask: Vulkan driver installed");
            return Ok(());
        }
        return Err(Failure::new(format!(
            "installed {} but still no usable Vulkan driver: {} not found",
            APT_PACKAGES.join(" "),
            still_missing.join(" and ")
        )));
    }

    let sudo = if root { "" } else { "sudo " };
    let mut help = String::from("a Vulkan driver is required (Mesa's lavapipe runs on any CPU).\n");
    if debian {
        help.push_str("Install it with:\n");
        help.push_str(&format!("    {sudo}apt-get update\n"));
        help.push_str(&format!(
            "    {sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}\n",
            APT_PACKAGES.join(" ")
        ));
        if root && no_install {
            help.push_str("(not installing automatically because WGTILE_NO_INSTALL is set)\n");
        }
    } else {
        help.push_str(
            "Install your distribution's Mesa Vulkan drivers and Vulkan loader, e.g.:\n\
             \x20   sudo dnf install mesa-vulkan-drivers vulkan-loader    # Fedora\n\
             \x20   sudo pacman -S vulkan-swrast vulkan-icd-loader        # Arch\n",
        );
    }
    help.push_str("or pick another backend with WGTILE_BACKEND (e.g. WGTILE_BACKEND=gl).");
    Err(Failure::new(help))
}

/// A backend explicitly requested through WGTILE_BACKEND / WGPU_BACKEND
/// (comma list, as `wgpu::Backends::from_comma_list` parses it) that names
/// only known non-Vulkan backends: then no Vulkan driver is needed.
fn chosen_non_vulkan_backend() -> Option<String> {
    let value = ["WGTILE_BACKEND", "WGPU_BACKEND"]
        .iter()
        .find_map(|var| env::var(var).ok().filter(|v| !v.trim().is_empty()))?;
    let lower = value.to_ascii_lowercase();
    let only_others = lower.split(',').all(|part| {
        matches!(
            part.trim(),
            "dx12" | "d3d12" | "metal" | "mtl" | "opengl" | "gles" | "gl" | "webgpu" | "noop"
        )
    });
    only_others.then_some(value)
}

/// Which parts of a Vulkan setup are missing (empty when usable).
fn missing_vulkan_parts() -> Vec<&'static str> {
    let mut missing = Vec::new();
    if !vulkan_loader_present() {
        missing.push("the Vulkan loader (libvulkan.so.1)");
    }
    if !vulkan_icd_present() {
        missing.push("a Vulkan ICD manifest (e.g. /usr/share/vulkan/icd.d/lvp_icd.x86_64.json)");
    }
    missing
}

fn vulkan_loader_present() -> bool {
    const LIB: &str = "libvulkan.so.1";
    for ldconfig in ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"] {
        let Ok(output) = Command::new(ldconfig)
            .arg("-p")
            .stderr(Stdio::null())
            .output()
        else {
            continue;
        };
        if output.status.success() {
            let listed = String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|line| line.split_whitespace().next() == Some(LIB));
            if listed {
                return true;
            }
            break;
        }
    }
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ]
    .iter()
    .any(|dir| Path::new(dir).join(LIB).exists())
}

fn vulkan_icd_present() -> bool {
    // Explicit driver lists replace (VK_DRIVER_FILES, legacy VK_ICD_FILENAMES)
    // or extend (VK_ADD_DRIVER_FILES) the search; entries may be files or dirs.
    for var in ["VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"] {
        if let Some(list) = env::var_os(var) {
            let found =
                env::split_paths(&list).any(|p| (p.is_file()) || (p.is_dir() && dir_has_json(&p)));
            if found {
                return true;
            }
        }
    }
    [
        "/usr/share/vulkan/icd.d",
        "/etc/vulkan/icd.d",
        "/usr/local/share/vulkan/icd.d",
    ]
    .iter()
    .any(|dir| dir_has_json(Path::new(dir)))
}

fn dir_has_json(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let path = entry.path();
            path.extension() == Some(OsStr::new("json")) && path.is_file()
        })
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0")
}
