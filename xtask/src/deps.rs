//! `cargo xtask deps`: the import rules of the library's layers, checked over
//! every `crate::` path in `src/` (use statements and inline paths; comments
//! skipped).
//!
//! Data flows down: a module may name only modules of its own layer or
//! below. The layers, top first:
//!
//! | rank | layer | modules |
//! | --- | --- | --- |
//! | 7 | api | `api` |
//! | 6 | ops | `ops` (one folder per family) |
//! | 5 | runtime | `runtime`, `context` (the context: device, pipeline caches, autotuner) |
//! | 4 | tune | `tune`, `pad` |
//! | 3 | kernels | `kernels` |
//! | 2 | expr | `expr` (the elementwise tree, whose leaves are tensors) |
//! | 1 | gpu | `gpu` (device, queue, tensors, dispatches, plans) |
//! | 0 | plain data | `problem`, `quant`, `config`, `dev`, `dtype`, `error` |
//!
//! Two more rules: `gpu` and `kernels` never name `ops` or `tune` (they make
//! no choice and know no op), and the families under `ops/` never name each
//! other. Every import cycle between files is reported.
//!
//! `xtask/deps-allowed.txt` lists the edges (`from -> to`, by file module)
//! that break a rule today and are still to be moved; the check fails on
//! any other breach and on a listed edge that no longer exists, so the list
//! only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ALLOWED: &str = "xtask/deps-allowed.txt";

/// The layer of a top-level module: (rank, name); `None` for the crate root
/// and test-only modules, which the rules do not cover.
fn layer(top: &str) -> Option<(u8, &'static str)> {
    Some(match top {
        "api" => (7, "api"),
        "ops" => (6, "ops"),
        "runtime" | "context" => (5, "runtime"),
        "tune" | "pad" => (4, "tune"),
        "kernels" => (3, "kernels"),
        "expr" => (2, "expr"),
        "gpu" | "tensor" | "plan" | "timing" => (1, "gpu"),
        "problem" | "quant" | "config" | "dev" | "dtype" | "error" => (0, "plain data"),
        _ => return None,
    })
}

/// One source file as a module path (`ops::matmul`, `kernels`, `` for lib.rs).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::a::b::...` paths a file names, outside comments.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            let tail = &rest[i + "crate::".len()..];
            rest = tail;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut path = Vec::new();
            let mut t = tail;
            loop {
                let end = t
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(t.len());
                if end == 0 {
                    break;
                }
                path.push(t[..end].to_string());
                t = &t[end..];
                match t.strip_prefix("::") {
                    Some(next) => t = next,
                    None => break,
                }
            }
            // `use crate::{a, b::c}`: each group member is a path of its own.
            if path.is_empty() {
                if let Some(group) = t.strip_prefix('{') {
                    let inner = group.split('}').next().unwrap_or("");
                    for item in inner.split(',') {
                        let item: Vec<String> = item
                            .trim()
                            .split("::")
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .collect();
                        if !item.is_empty() {
                            paths.push(item);
                        }
                    }
                }
                continue;
            }
            paths.push(path);
        }
    }
    paths
}

/// The longest prefix of `path` that is a module of the crate; a name the
/// crate root re-exports (`crate::Context`) stands for its module.
fn target_module(
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
    path: &[String],
) -> Option<String> {
    if let Some(m) = reexports.get(&path[0]) {
        return Some(m.clone());
    }
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// The names `lib.rs` re-exports (`pub use a::b::{C, D};`), each with the
/// longest module prefix of its path.
fn root_reexports(modules: &BTreeSet<String>, lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let code: String = lib
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    for stmt in code.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (base, names): (&str, Vec<&str>) = match rest.split_once("::{") {
            Some((base, group)) => (base, group.trim_end_matches('}').split(',').collect()),
            None => match rest.rsplit_once("::") {
                Some((base, name)) => (base, vec![name]),
                None => continue,
            },
        };
        let parts: Vec<String> = base
            .trim()
            .split("::")
            .map(|s| s.trim().to_string())
            .collect();
        let Some(module) = (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|m| modules.contains(m))
        else {
            continue;
        };
        for name in names {
            let name = name.trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            let name = name.split(" as ").last().unwrap_or(name).trim();
            if !name.is_empty() && !modules.contains(name) {
                map.insert(name.to_string(), module.clone());
            }
        }
    }
    map
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or("")
}

/// What is wrong with the edge `from -> to`, if anything.
fn breach(from: &str, to: &str) -> Option<String> {
    let (Some((rf, lf)), Some((rt, lt))) = (layer(top(from)), layer(top(to))) else {
        return None;
    };
    if rt > rf {
        return Some(format!("{lf} names {lt}, a layer above it"));
    }
    if matches!(lf, "gpu" | "kernels") && matches!(lt, "ops" | "tune") {
        return Some(format!("{lf} names {lt}"));
    }
    let family = |m: &str| {
        let mut parts = m.split("::");
        (parts.next() == Some("ops"))
            .then(|| parts.next())
            .flatten()
            .map(str::to_string)
    };
    if let (Some(a), Some(b)) = (family(from), family(to))
        && a != b
    {
        return Some(format!("ops family {a} names ops family {b}"));
    }
    None
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(edges) = s.graph.get(v) {
            for w in edges {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Checks the rules; `Err` lists every new breach and stale allowance.
pub fn check(root: &Path) -> Result<(), String> {
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let reexports = root_reexports(&modules, &lib);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(&src, file);
        if from.is_empty() || from == "snapshot_tests" {
            continue;
        }
        let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let edges = graph.entry(from.clone()).or_default();
        for path in crate_paths(&text) {
            if let Some(to) = target_module(&modules, &reexports, &path)
                && to != from
                && !to.is_empty()
            {
                edges.insert(to);
            }
        }
    }
    let allowed_text = fs::read_to_string(root.join(ALLOWED)).unwrap_or_default();
    let allowed: BTreeSet<(String, String)> = allowed_text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let (a, b) = l.split_once("->")?;
            Some((a.trim().to_string(), b.trim().to_string()))
        })
        .collect();
    let mut bad = Vec::new();
    let mut listed = BTreeSet::new();
    let mut breaches = 0;
    for (from, tos) in &graph {
        for to in tos {
            if let Some(why) = breach(from, to) {
                breaches += 1;
                let key = (from.clone(), to.clone());
                if allowed.contains(&key) {
                    listed.insert(key);
                } else {
                    bad.push(format!("{from} -> {to}: {why}"));
                }
            }
        }
    }
    let sccs = cycles(&graph);
    for scc in &sccs {
        // A cycle is tolerated only while one of its edges is listed (the
        // move that breaks it is known).
        let members: BTreeSet<&String> = scc.iter().collect();
        let listed_edge = scc.iter().any(|a| {
            graph[a].iter().any(|b| {
                members.contains(b) && {
                    let key = (a.clone(), b.clone());
                    let hit = allowed.contains(&key);
                    if hit {
                        listed.insert(key);
                    }
                    hit
                }
            })
        });
        if !listed_edge {
            bad.push(format!("import cycle: {}", scc.join(", ")));
        }
    }
    for key in allowed.difference(&listed) {
        bad.push(format!(
            "{} -> {} is listed in {ALLOWED} but breaks no rule now: delete the line",
            key.0, key.1
        ));
    }
    println!(
        "deps: {} modules, {} edges, {breaches} edges against the layer rules ({} listed as still to move), {} import cycles",
        graph.len(),
        graph.values().map(BTreeSet::len).sum::<usize>(),
        listed.len(),
        sccs.len()
    );
    for scc in &sccs {
        println!("  cycle: {}", scc.join(", "));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("import rules broken:\n  {}", bad.join("\n  ")))
    }
}
