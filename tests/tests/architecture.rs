//! The layout keeps its shape: in the engine and the server, no two modules import each
//! other, directly or around a cycle — at the top level, and among the modules of each
//! folder. A module's dependencies are the `crate::…`, `super::…` and `self::…` paths its
//! files name (comments aside), folded to the module at the level looked at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module levels checked: `storage`, then `storage::wal`, then `storage::wal::writer`.
const DEPTHS: [usize; 3] = [1, 2, 3];

#[test]
fn no_two_modules_import_each_other() {
    for crate_dir in ["engine/src", "server/src", "tools/src", "bench/src"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(crate_dir);
        let modules = modules_of(&root);
        for depth in DEPTHS {
            let graph = graph_at(&modules, depth);
            if let Some(cycle) = find_cycle(&graph) {
                panic!("{crate_dir}: modules import each other around {}", cycle.join(" -> "));
            }
        }
    }
}

/// Every file's module path (`["storage", "wal", "writer"]`) and its source.
fn modules_of(root: &Path) -> Vec<(Vec<String>, String)> {
    let mut files = Vec::new();
    collect_files(root, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Vec<String> =
                relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|last| last == "mod" || last == "lib" || last == "main") {
                module.pop();
            }
            let source = std::fs::read_to_string(&path).unwrap();
            (module, source)
        })
        .collect()
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// Who imports whom, among the modules `depth` levels deep (a module's own children and
/// parents are not counted: a folder and its files are one unit).
fn graph_at(modules: &[(Vec<String>, String)], depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(module, _)| module.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in modules {
        if module.is_empty() {
            continue;
        }
        let from: Vec<String> = module.iter().take(depth).cloned().collect();
        for path in paths_named(source, module) {
            let Some(target) = (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains(p))
            else {
                continue;
            };
            let to: Vec<String> = target.iter().take(depth).cloned().collect();
            let related = to.starts_with(&from) || from.starts_with(&to);
            if !related {
                graph.entry(from.join("::")).or_default().insert(to.join("::"));
            }
        }
    }
    graph
}

/// The module paths `source` (of `module`) names, resolved to paths from the crate root.
fn paths_named(source: &str, module: &[String]) -> Vec<Vec<String>> {
    let code: String =
        source.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let mut found = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(start) {
            let preceded_by_word = rest[..at].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_');
            let tail = &rest[at..];
            rest = &rest[at + start.len()..];
            if preceded_by_word {
                continue;
            }
            for path in expand(tail) {
                found.push(resolve(&path, module));
            }
        }
    }
    found
}

/// The paths one `use`-like path names: `crate::a::{b, c::d}` is `crate::a::b` and
/// `crate::a::c::d`.
fn expand(text: &str) -> Vec<Vec<String>> {
    let end = text
        .find(|c: char| {
            !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{' || c == '}' || c == ',' || c == ' ')
        })
        .unwrap_or(text.len());
    let text = &text[..end];
    let (prefix, group) = match text.find("::{") {
        Some(at) => (&text[..at], text[at + 3..].split('}').next().unwrap_or("")),
        None => (text.split([' ', ',', '{', '}']).next().unwrap_or(""), ""),
    };
    let prefix: Vec<String> = prefix.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
    if group.is_empty() {
        return vec![prefix];
    }
    group
        .split(',')
        .map(str::trim)
        .filter(|item| item.starts_with(|c: char| c.is_lowercase()))
        .map(|item| {
            let mut path = prefix.clone();
            path.extend(item.split("::").map(str::to_string));
            path
        })
        .collect()
}

/// `path` (starting with `crate`, `super` or `self`) from the crate root, as far as it
/// names modules (lower-case segments).
fn resolve(path: &[String], module: &[String]) -> Vec<String> {
    let mut resolved: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        _ => module.to_vec(),
    };
    for segment in path {
        match segment.as_str() {
            "crate" | "self" => {}
            "super" => {
                resolved.pop();
            }
            name if name.starts_with(|c: char| c.is_lowercase()) => resolved.push(name.to_string()),
            _ => break,
        }
    }
    resolved
}

/// A cycle in `graph`, if there is one, as the modules around it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[from..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph.keys().find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn the_check_sees_a_cycle_when_there_is_one() {
    let modules = vec![
        (vec!["a".to_string()], "use crate::b::Thing;".to_string()),
        (vec!["b".to_string()], "mod inner;".to_string()),
        (vec!["b".to_string(), "inner".to_string()], "use crate::a::{self, Other};".to_string()),
        (vec!["c".to_string()], "use super::a; // use crate::b is a comment".to_string()),
    ];
    let graph = graph_at(&modules, 1);
    assert!(find_cycle(&graph).is_some(), "{graph:?}");
    let fine = vec![
        (vec!["a".to_string()], "use crate::b::{x, y::Z};".to_string()),
        (vec!["b".to_string()], "use crate::c;".to_string()),
        (vec!["c".to_string()], "// use crate::a;".to_string()),
    ];
    assert_eq!(find_cycle(&graph_at(&fine, 1)), None);
}
