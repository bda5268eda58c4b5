//! The layering rule of the crate docs' Layout section, checked: a module
//! uses only the modules listed before it. The list is read from `lib.rs`
//! itself and the imports from every file under `src/`, so neither can
//! drift from the other unnoticed. And clap, the command line's, stays in
//! `cli/`: the layers below take plain settings structs.
//!
//! Inside a folder the same rule runs downwards: a folder's `mod.rs` wires
//! its children, and a child does not reach back into it (or a higher
//! `mod.rs`) for a type or function; what they share lives in a file of
//! its own that both import. And no files import each other in a circle,
//! whether two that import each other or a longer ring.

use std::collections::{BTreeMap, BTreeSet};
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

/// The module path of a file under `src/`: `builder/output.rs` is
/// `builder::output`, `server/stats/mod.rs` is `server::stats`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|c| c.trim_end_matches(".rs").to_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// A file's code without its tests (`#[cfg(test)]` onwards: inside a test
/// module `super` is the file itself) and without comment lines.
fn code_outside_tests(code: &str) -> impl Iterator<Item = &str> {
    code.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .filter(|line| !line.trim_start().starts_with("//"))
}

/// Every path a line names through `crate::` or `super::`, as segments
/// from the crate root (`super` resolved against `module`); a group
/// (`super::{a::X, Y}`) gives one path per item.
fn named_paths(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = line;
    loop {
        let at_crate = rest.find("crate::");
        let at_super = rest.find("super::");
        let (at, mut base) = match (at_crate, at_super) {
            (Some(c), Some(s)) if c < s => (c + "crate::".len(), Vec::new()),
            (Some(c), None) => (c + "crate::".len(), Vec::new()),
            (_, Some(s)) => (s, module.to_vec()),
            (None, None) => return found,
        };
        // A word that merely ends in `crate`/`super` is no path.
        let before = rest[..at]
            .trim_end_matches("crate::")
            .trim_end_matches("super::");
        if before
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            rest = &rest[at + 1..];
            continue;
        }
        rest = &rest[at..];
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        let (paths, after) = path_items(rest);
        for items in paths {
            let mut path = base.clone();
            path.extend(items);
            found.push(path);
        }
        rest = after;
    }
}

/// The segments of `a::b::{c, d::e}` (one list per item) and the text
/// after them.
fn path_items(text: &str) -> (Vec<Vec<String>>, &str) {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            let after = &group[inner.len()..];
            let paths = inner
                .split(',')
                .map(|item| {
                    let mut path = segments.clone();
                    path.extend(path_items(item.trim()).0.into_iter().flatten());
                    path
                })
                .filter(|path: &Vec<String>| path.len() > segments.len())
                .collect();
            return (paths, after);
        }
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '*')
            .collect();
        if word.is_empty() {
            break;
        }
        rest = &rest[word.len()..];
        segments.push(word);
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    (vec![segments], rest)
}

/// The module that owns what `path` names: its longest prefix that is a
/// module (a file or folder under `src/`).
fn owner<'p>(path: &'p [String], modules: &BTreeSet<Vec<String>>) -> &'p [String] {
    let mut length = 0;
    while length < path.len() && modules.contains(&path[..=length].to_vec()) {
        length += 1;
    }
    &path[..length]
}

/// One import of a file, resolved: the file, its module, and the module
/// that owns what it names, with whether it names an item of that module
/// (`super::Job`) or the module itself (`super::columns`).
struct Import<'f> {
    file: &'f Path,
    module: Vec<String>,
    owner: Vec<String>,
    names_an_item: bool,
}

/// Every `crate::` and `super::` import of `files` outside their tests.
fn resolved_imports(files: &[(PathBuf, String)]) -> Vec<Import<'_>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(p, _)| module_path(p)).collect();
    let mut found = Vec::new();
    for (path, code) in files {
        let module = module_path(path);
        for line in code_outside_tests(code) {
            for named in named_paths(line, &module) {
                let owner = owner(&named, &modules).to_vec();
                found.push(Import {
                    file: path,
                    module: module.clone(),
                    names_an_item: named.len() > owner.len(),
                    owner,
                });
            }
        }
    }
    found
}

/// `(file, the ancestor module whose own items it takes)`: a child that
/// reaches back into its folder's `mod.rs` (or a higher one's) for a type,
/// function or constant, instead of a file of their own both import.
fn imports_into_parents(files: &[(PathBuf, String)]) -> BTreeSet<(PathBuf, String)> {
    resolved_imports(files)
        .into_iter()
        .filter(|i| i.names_an_item && !i.owner.is_empty() && i.owner.len() < i.module.len())
        .filter(|i| i.module.starts_with(&i.owner))
        .map(|i| (i.file.to_owned(), i.owner.join("::")))
        .collect()
}

/// The circles among modules: each group of modules that reach each other
/// through their imports (two that import each other, or a longer ring such
/// as a → b → c → a), its names sorted.
fn circles(files: &[(PathBuf, String)]) -> BTreeSet<Vec<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for import in resolved_imports(files) {
        if !import.owner.is_empty() && import.owner != import.module {
            edges
                .entry(import.module.join("::"))
                .or_default()
                .insert(import.owner.join("::"));
        }
    }
    let reach: BTreeMap<&String, BTreeSet<&String>> = edges
        .keys()
        .map(|module| (module, reachable_from(module, &edges)))
        .collect();
    reach
        .iter()
        .map(|(module, reached)| {
            reached
                .iter()
                .filter(|other| reach.get(*other).is_some_and(|back| back.contains(module)))
                .map(|other| (*other).clone())
                .collect::<Vec<String>>()
        })
        .filter(|circle| circle.len() > 1)
        .collect()
}

/// Every module `start` reaches through imports, itself included when a
/// ring leads back to it.
fn reachable_from<'e>(
    start: &str,
    edges: &'e BTreeMap<String, BTreeSet<String>>,
) -> BTreeSet<&'e String> {
    let mut reached = BTreeSet::new();
    let mut next: Vec<&String> = edges.get(start).into_iter().flatten().collect();
    while let Some(module) = next.pop() {
        if reached.insert(module) {
            next.extend(edges.get(module).into_iter().flatten());
        }
    }
    reached
}

#[test]
fn children_do_not_reach_into_their_parents_and_no_rooms_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    files.retain(|(path, _)| path != Path::new("lib.rs") && path != Path::new("main.rs"));
    // A test file (`mod x_tests;` under `#[cfg(test)]`) is its parent's
    // test module in a file of its own: it tests the parent's items.
    files.retain(|(path, _)| {
        !path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .is_some_and(|stem| stem == "tests" || stem.ends_with("_tests"))
    });
    let parents = imports_into_parents(&files);
    assert!(
        parents.is_empty(),
        "children that import their parent's own items (file, parent): {parents:?}; \
         move the item into a file of its own that both import"
    );
    let circles = circles(&files);
    assert!(
        circles.is_empty(),
        "modules in a circle of imports: {circles:?}; move what they share into a file of its own"
    );
}

#[test]
fn a_child_reaching_into_its_parent_and_rooms_in_a_circle_are_found() {
    let files = vec![
        (PathBuf::from("builder/mod.rs"), "mod output;\npub struct Job;\nuse output::Sink;\n".to_owned()),
        (
            PathBuf::from("builder/output.rs"),
            "use super::{Job, columns::Plan};\n// use super::Comment;\nfn f() { crate::store::links::x(); }\n#[cfg(test)]\nmod tests { use super::*; }\n".to_owned(),
        ),
        (PathBuf::from("builder/columns.rs"), "pub struct Plan;\n".to_owned()),
        (PathBuf::from("server/stats/auth.rs"), "use crate::server::stats::Settings;\nuse super::super::AppState;\n".to_owned()),
        (PathBuf::from("server/stats/mod.rs"), "pub struct Settings;\n".to_owned()),
        (PathBuf::from("server/mod.rs"), "pub struct AppState;\n".to_owned()),
        (PathBuf::from("store/links.rs"), "use crate::store::cluster::Router;\n".to_owned()),
        (PathBuf::from("store/cluster/mod.rs"), "use super::links::NewLink;\n".to_owned()),
        (PathBuf::from("store/mod.rs"), "pub mod links;\n".to_owned()),
        (PathBuf::from("store/error.rs"), "use super::cluster::node_failure::NodeFailure;\n".to_owned()),
        (PathBuf::from("store/cluster/node_failure.rs"), "use super::node::NodeAddress;\n".to_owned()),
        (PathBuf::from("store/cluster/node.rs"), "use crate::store::error::StoreError;\n".to_owned()),
    ];
    let found: Vec<(PathBuf, String)> = imports_into_parents(&files).into_iter().collect();
    assert_eq!(
        found,
        vec![
            (PathBuf::from("builder/output.rs"), "builder".to_owned()),
            (PathBuf::from("server/stats/auth.rs"), "server".to_owned()),
            (
                PathBuf::from("server/stats/auth.rs"),
                "server::stats".to_owned()
            ),
        ]
    );
    let found: Vec<Vec<String>> = circles(&files).into_iter().collect();
    let names = |list: &[&str]| list.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        found,
        vec![
            names(&["store::cluster", "store::links"]),
            names(&[
                "store::cluster::node",
                "store::cluster::node_failure",
                "store::error"
            ]),
        ]
    );
}

/// Each numbered item of the Layout section: its module and its whole text
/// (the item's lines up to the next item), where the files of the module
/// are named.
fn layout_items(lib_rs: &str) -> BTreeMap<String, String> {
    let section = lib_rs.split("//! # Layout").nth(1).unwrap_or_default();
    let mut items = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    // The first line is the rest of the heading's own line.
    let lines = section.lines().skip(1);
    for line in lines.take_while(|line| line.starts_with("//!")) {
        let text = line.trim_start_matches("//!").trim_start();
        let numbered = text
            .split_once(". ")
            .filter(|(number, _)| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()));
        if let Some((_, rest)) = numbered {
            items.extend(current.take());
            if let Some(name) = rest.split('`').nth(1) {
                current = Some((name.to_owned(), String::new()));
            }
        }
        if let Some((_, body)) = current.as_mut() {
            body.push_str(text);
            body.push('\n');
        }
    }
    items.extend(current);
    items
}

/// The paths an item names in backticks: a file (`x.rs`, `stats/x.rs`,
/// `server/stats/x.rs`) or a folder (`server/stats/`).
fn named_in(item: &str) -> BTreeSet<String> {
    item.split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| name.ends_with(".rs") || name.ends_with('/'))
        .map(|name| name.trim_start_matches("src/").to_owned())
        .collect()
}

/// Whether an item's names name `file`, a path under `src/{module}/`: by
/// its path within the module or from `src/`, or by its last components
/// (a bare `x.rs` where the item's sentence gives the folder); a folder's
/// `mod.rs` is named with its folder.
fn names_file(names: &BTreeSet<String>, module: &str, within: &str) -> bool {
    let full = format!("{module}/{within}");
    let folder_of_mod = within
        .strip_suffix("mod.rs")
        .map(|folder| (folder.to_owned(), format!("{module}/{folder}")));
    names.iter().any(|name| {
        let suffix = |path: &str| path == name || path.ends_with(&format!("/{name}"));
        suffix(&full)
            || folder_of_mod
                .as_ref()
                .is_some_and(|(inner, outer)| name == inner || name == outer)
    })
}

/// Every file under `src/{module}/` that the module's Layout item does not
/// name: `(module, path within it)`.
fn unnamed_files(lib_rs: &str, files: &[PathBuf]) -> Vec<String> {
    let items = layout_items(lib_rs);
    let mut unnamed = Vec::new();
    for path in files {
        let mut parts = path.components().map(|c| c.as_os_str().to_string_lossy());
        let Some(module) = parts.next() else {
            continue;
        };
        let within: Vec<String> = parts.map(|p| p.into_owned()).collect();
        if within.is_empty() {
            continue; // `src/x.rs` is its module: the item is its name
        }
        let within = within.join("/");
        let named = items
            .get(module.as_ref())
            .is_some_and(|item| names_file(&named_in(item), &module, &within));
        if !named {
            unnamed.push(format!("{module}/{within}"));
        }
    }
    unnamed.sort();
    unnamed
}

#[test]
fn the_layout_names_every_file_under_its_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    let paths: Vec<PathBuf> = files.into_iter().map(|(path, _)| path).collect();
    assert!(
        paths.len() > 300,
        "only {} files read: the reader is broken",
        paths.len()
    );
    let unnamed = unnamed_files(&lib_rs, &paths);
    assert!(
        unnamed.is_empty(),
        "files of src/ the Layout section of src/lib.rs does not name in their module's item \
         (name each in backticks, by its path within the module or a folder's `mod.rs` by its folder):\n{unnamed:#?}"
    );
}

#[test]
fn a_file_the_layout_does_not_name_is_found() {
    let lib_rs = "//! # Layout\n//!\n//! 1. [`store`]: links (`links.rs`), the cluster in\n//!    `store/cluster/` (routing, `routing.rs`).\n//! 2. [`server`]: `server/stats/chart.rs`.\n";
    let files: Vec<PathBuf> = [
        "store/links.rs",
        "store/cluster/mod.rs",
        "store/cluster/routing.rs",
        "store/cluster/ids.rs",
        "store/events.rs",
        "server/stats/chart.rs",
        "server/stats/mod.rs",
        "kind.rs",
    ]
    .map(PathBuf::from)
    .to_vec();
    assert_eq!(
        unnamed_files(lib_rs, &files),
        [
            "server/stats/mod.rs",
            "store/cluster/ids.rs",
            "store/events.rs"
        ]
    );
}
