//! The browser suite (`tests/web.rs`): wgtile compiled to
//! wasm32-unknown-unknown and run by wasm-bindgen-test in headless
//! Chromium, whose WebGPU is SwiftShader on a machine without a GPU. Gets
//! what it needs first: the wasm32 target (rustup), Debian's chromium and
//! chromium-driver (apt-get, as root, unless WGTILE_NO_INSTALL is set) and
//! a wasm-bindgen-cli of exactly the wasm-bindgen version Cargo.lock pins
//! (cargo install); `webdriver.json` in the workspace root turns WebGPU on.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Failure, Result, cargo, is_root, run, workspace_root};

pub const TARGET: &str = "wasm32-unknown-unknown";

/// The browser suite after the native one: where its tools cannot be had
/// (no root for apt-get, another OS), a warning outside CI and a failure
/// under CI (`CI` set), which must run it.
pub fn run_browser_tests_if_possible() -> Result {
    match tools() {
        Ok((driver, runner)) => run_suite(&driver, &runner),
        Err(failure) if !under_ci() => {
            eprintln!(
                "xtask: warning: skipping the browser suite: {} (`cargo xtask test --browser` runs it alone)",
                failure.message
            );
            Ok(())
        }
        Err(failure) => Err(failure),
    }
}

pub fn run_browser_tests() -> Result {
    let (driver, runner) = tools()?;
    run_suite(&driver, &runner)
}

fn under_ci() -> bool {
    env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// chromedriver and wasm-bindgen-test-runner, installed where missing.
fn tools() -> Result<(PathBuf, PathBuf)> {
    if !super::add_rustup_target(TARGET) {
        return Err(Failure::new(format!(
            "the browser suite needs the {TARGET} target"
        )));
    }
    let driver = ensure_chromium()?;
    let version = locked_wasm_bindgen_version()?;
    Ok((driver, ensure_test_runner(&version)?))
}

fn run_suite(driver: &Path, runner: &Path) -> Result {
    let mut cmd = cargo();
    cmd.args(["test", "-p", "wgtile", "--target", TARGET, "--test", "web"])
        .env("CHROMEDRIVER", driver)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER", runner)
        // The runner waits this long (seconds) for the page's tests;
        // SwiftShader compiles each kernel on the CPU.
        .env("WASM_BINDGEN_TEST_TIMEOUT", "600");
    run(&mut cmd)
}

/// A program of that name on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    env::var_os("PATH").and_then(|paths| {
        env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// chromedriver's path, after installing Chromium and its driver with
/// apt-get where they are missing and that is allowed.
fn ensure_chromium() -> Result<PathBuf> {
    let found = || on_path("chromium").and(on_path("chromedriver"));
    if let Some(driver) = found() {
        return Ok(driver);
    }
    let debian = Path::new("/etc/debian_version").exists();
    if is_root() && debian && env::var_os("WGTILE_NO_INSTALL").is_none() {
        println!("xtask: installing Chromium and ChromeDriver with apt-get");
        let apt = |args: &[&str]| {
            let mut cmd = Command::new("apt-get");
            cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            run(&mut cmd)
        };
        if apt(&[
            "install",
            "-y",
            "--no-install-recommends",
            "chromium",
            "chromium-driver",
        ])
        .is_err()
        {
            apt(&["update"])?;
            apt(&[
                "install",
                "-y",
                "--no-install-recommends",
                "chromium",
                "chromium-driver",
            ])?;
        }
        if let Some(driver) = found() {
            return Ok(driver);
        }
    }
    Err(Failure::new(
        "the browser suite needs Chromium and ChromeDriver on PATH (Debian: apt-get install \
         chromium chromium-driver)",
    ))
}

/// The wasm-bindgen version Cargo.lock pins (the test runner must match it).
fn locked_wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock"))
        .map_err(|e| Failure::new(format!("reading Cargo.lock: {e}")))?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"wasm-bindgen\""
            && let Some(v) = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    Err(Failure::new("Cargo.lock pins no wasm-bindgen"))
}

/// The path of a wasm-bindgen-test-runner of `version`, installed with
/// `cargo install` when missing or of another version.
fn ensure_test_runner(version: &str) -> Result<PathBuf> {
    let matches = || {
        let runner = on_path("wasm-bindgen-test-runner")?;
        let out = Command::new(&runner)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .any(|w| w == version)
            .then_some(runner)
    };
    if let Some(runner) = matches() {
        return Ok(runner);
    }
    println!("xtask: installing wasm-bindgen-cli {version} (the runner of the browser suite)");
    let install = |locked: bool| {
        let mut cmd = cargo();
        cmd.args(["install", "wasm-bindgen-cli", "--version", version]);
        if locked {
            cmd.arg("--locked");
        }
        run(&mut cmd)
    };
    // Its own lock file can name a version the registry no longer has.
    if install(true).is_err() {
        install(false)?;
    }
    let cargo_bin = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .map(|home| home.join("bin").join("wasm-bindgen-test-runner"));
    matches()
        .or(cargo_bin.filter(|p| p.is_file()))
        .ok_or_else(|| Failure::new("wasm-bindgen-test-runner is not on PATH after installing it"))
}

/// `cargo xtask web [--port N] [--build-only]`: builds the demo
/// (`examples/web`: the `web_demo` example for wasm32, its JavaScript
/// bindings by wasm-bindgen, `index.html`) into `target/wgtile-web` and
/// serves that folder on 127.0.0.1 until interrupted.
pub fn web(args: &[std::ffi::OsString]) -> Result {
    let mut port = 8000u16;
    let mut serve = true;
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--port" => {
                port = it
                    .next()
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| Failure::new("--port takes a number"))?;
            }
            "--build-only" => serve = false,
            other => {
                return Err(Failure::new(format!(
                    "`cargo xtask web`: unknown argument `{other}`"
                )));
            }
        }
    }
    let out = build_demo()?;
    if serve {
        serve_folder(&out, port)?;
    }
    Ok(())
}

/// Builds the demo page into `target/wgtile-web` and returns that folder.
pub fn build_demo() -> Result<PathBuf> {
    if !super::add_rustup_target(TARGET) {
        return Err(Failure::new(format!("the demo needs the {TARGET} target")));
    }
    let version = locked_wasm_bindgen_version()?;
    let runner = ensure_test_runner(&version)?;
    let bindgen = runner.with_file_name("wasm-bindgen");
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "wgtile",
        "--example",
        "web_demo",
        "--target",
        TARGET,
    ]))?;
    let root = workspace_root();
    let target_dir =
        env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let wasm = target_dir
        .join(TARGET)
        .join("release/examples/web_demo.wasm");
    let out = root.join("target/wgtile-web");
    let mut cmd = Command::new(&bindgen);
    cmd.args(["--target", "web", "--no-typescript", "--out-dir"])
        .arg(&out)
        .arg(&wasm);
    run(&mut cmd)?;
    std::fs::copy(root.join("examples/web/index.html"), out.join("index.html"))
        .map_err(|e| Failure::new(format!("copying index.html: {e}")))?;
    println!("xtask: the demo is in {}", out.display());
    Ok(out)
}

/// Serves the files of `dir` over HTTP on 127.0.0.1:`port` (GET only, one
/// request per connection), with the MIME types a module and its wasm need.
fn serve_folder(dir: &Path, port: u16) -> Result {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| Failure::new(format!("listening on 127.0.0.1:{port}: {e}")))?;
    println!(
        "xtask: serving {} on http://127.0.0.1:{port}/ (Ctrl-C stops)",
        dir.display()
    );
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut line = String::new();
        if BufReader::new(&stream).read_line(&mut line).is_err() {
            continue;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/");
        let path = path
            .split('?')
            .next()
            .unwrap_or("/")
            .trim_start_matches('/');
        let path = if path.is_empty() { "index.html" } else { path };
        let file = (!path.contains("..")).then(|| dir.join(path));
        let (status, body, mime) = match file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b))) {
            Some((f, body)) => {
                let mime = match f.extension().and_then(|e| e.to_str()) {
                    Some("html") => "text/html; charset=utf-8",
                    Some("js") => "text/javascript",
                    Some("wasm") => "application/wasm",
                    _ => "application/octet-stream",
                };
                ("200 OK", body, mime)
            }
            None => ("404 Not Found", b"not found".to_vec(), "text/plain"),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {mime}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(&body));
    }
    Ok(())
}
