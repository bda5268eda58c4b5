//! The layering rule of the crate docs' Layout section, checked: a module
//! uses only the modules listed before it. The list is read from `lib.rs`
//! itself and the imports from every file under `src/`, so neither can
//! drift from the other unnoticed. And clap, the command line's, stays in
//! `cli/`: the layers below take plain settings structs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The modules of the Layout section, ground first: the name in each
/// numbered item's first backticks (`1. [`kind`]: …`).
fn layout_order(lib_rs: &str) -> Vec<String> {
    let section = lib_rs
        .split("//! # Layout")
        .nth(1)
        .unwrap_or_default()
        .split("\n\n")
        .next()
        .unwrap_or_default();
    let mut order = Vec::new();
    for line in section.lines() {
        let text = line.trim_start_matches("//!").trim_start();
        let Some((number, rest)) = text.split_once(". ") else {
            continue;
        };
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Some(name) = rest.split('`').nth(1) {
            order.push(name.to_owned());
        }
    }
    order
}

/// The modules `lib.rs` declares (`pub mod x;`, `pub(crate) mod x;`).
fn declared_modules(lib_rs: &str) -> BTreeSet<String> {
    lib_rs
        .lines()
        .filter(|line| !line.starts_with("//"))
        .filter_map(|line| {
            let (prefix, name) = line.trim().strip_suffix(';')?.rsplit_once("mod ")?;
            matches!(prefix.trim(), "pub" | "pub(crate)" | "").then(|| name.to_owned())
        })
        .filter(|name| name != "layers")
        .collect()
}

/// The top-level modules a file's code names through `crate::` (comments
/// left out: a doc link is no import).
fn imported_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a::X, b};`: each item's first segment.
                let inner = group.split('}').next().unwrap_or_default();
                for item in inner.split(',') {
                    found.extend(first_segment(item.trim()));
                }
            } else {
                found.extend(first_segment(rest));
            }
        }
    }
    found
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The top-level module a file under `src/` belongs to.
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// `(file, its module, the higher module it imports)` for every import
/// that points up the order.
fn upward_imports(files: &[(PathBuf, String)], order: &[String]) -> Vec<(PathBuf, String, String)> {
    let rank = |name: &str| order.iter().position(|m| m == name);
    let mut found = Vec::new();
    for (path, code) in files {
        let Some(module) = module_of(path) else {
            continue;
        };
        let Some(own) = rank(&module) else {
            continue;
        };
        for imported in imported_modules(code) {
            if rank(&imported).is_some_and(|theirs| theirs > own) {
                found.push((path.clone(), module.clone(), imported));
            }
        }
    }
    found
}

fn source_files(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    let entries = std::fs::read_dir(dir).expect("src/ is readable");
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under src/").to_owned();
            let code = std::fs::read_to_string(&path).expect("a source file is readable");
            out.push((relative, code));
        }
    }
}

#[test]
fn lower_modules_never_import_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let order = layout_order(&lib_rs);
    let listed: BTreeSet<String> = order.iter().cloned().collect();
    assert_eq!(
        order.len(),
        listed.len(),
        "a module is listed twice: {order:?}"
    );
    assert_eq!(
        listed,
        declared_modules(&lib_rs),
        "the Layout section of src/lib.rs must list every module lib.rs declares"
    );
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    files.retain(|(path, _)| path != Path::new("lib.rs") && path != Path::new("main.rs"));
    let imports: usize = files
        .iter()
        .map(|(_, code)| imported_modules(code).len())
        .sum();
    assert!(
        imports > 100,
        "only {imports} imports read: the reader is broken"
    );
    let upward = upward_imports(&files, &order);
    assert!(
        upward.is_empty(),
        "imports that point up the Layout order of src/lib.rs (file, its module, the higher one):\n{upward:#?}"
    );
}

#[test]
fn an_import_that_points_up_is_found() {
    let order: Vec<String> = ["kind", "store", "server"].map(String::from).to_vec();
    let files = vec![
        (
            PathBuf::from("store/links.rs"),
            "use crate::kind::LinkKind;\n// crate::server in a comment is no import\n".to_owned(),
        ),
        (
            PathBuf::from("kind.rs"),
            "fn f() { crate::store::links::insert(); }\n".to_owned(),
        ),
        (
            PathBuf::from("store/mod.rs"),
            "use crate::{kind, server::App};\n".to_owned(),
        ),
    ];
    let found = upward_imports(&files, &order);
    assert_eq!(
        found,
        vec![
            (
                PathBuf::from("kind.rs"),
                "kind".to_owned(),
                "store".to_owned()
            ),
            (
                PathBuf::from("store/mod.rs"),
                "store".to_owned(),
                "server".to_owned()
            ),
        ]
    );
}

#[test]
fn the_layout_order_is_read_from_numbered_items() {
    let lib_rs = "//! # Layout\n//!\n//! Ground:\n//! 1. [`kind`]: kinds.\n//! 2. `timestamp`: times.\n//! 10. [`bots`]: bots,\n//!     continued.\n\npub mod kind;\n";
    assert_eq!(layout_order(lib_rs), ["kind", "timestamp", "bots"]);
    assert_eq!(
        declared_modules(lib_rs),
        BTreeSet::from(["kind".to_owned()])
    );
}

#[test]
fn clap_stops_at_the_command_line() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    let below_cli: Vec<&PathBuf> = files
        .iter()
        .filter(|(path, _)| !path.starts_with("cli") && path != Path::new("main.rs"))
        // This file names what it looks for.
        .filter(|(path, _)| path != Path::new("layers.rs"))
        .filter(|(_, code)| {
            code.lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .any(|line| line.contains("clap::") || line.contains("use clap"))
        })
        .map(|(path, _)| path)
        .collect();
    assert!(files.len() > 50, "only {} files read", files.len());
    assert!(
        below_cli.is_empty(),
        "clap is used below the command line (cli/): {below_cli:?}"
    );
}
