//! The runtime's module table (`docs/design.md`, "Modules of the runtime") held against the code:
//! every `crate::` path in a module's files (its `use` lines, grouped or not, and paths written
//! inline, a name `lib.rs` re-exports counting as its module's; tests and comments aside) must
//! name a module its row allows, and every module of `src/` must have a row. A rule broken in the code, or a table that no longer says what the code
//! does, fails here the day it is written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The backticked words of a table cell.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The table: each module with the modules it may use (`None`: any).
fn table() -> BTreeMap<String, Option<BTreeSet<String>>> {
    let design = std::fs::read_to_string(root().join("../docs/design.md")).expect("design.md");
    let start = design
        .find("### Modules of the runtime")
        .expect("the module table's heading");
    let mut rows = BTreeMap::new();
    for line in design[start..].lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').collect();
        let (modules, may_use) = (cells[1], cells[cells.len() - 2]);
        let allowed = if may_use.trim() == "any module" {
            None
        } else {
            Some(backticked(may_use).into_iter().collect())
        };
        for m in backticked(modules) {
            rows.insert(m, allowed.clone());
        }
    }
    rows
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level names of a `use crate::{...}` group (`a`, `b::{c, d}` -> `a`, `b`).
fn group_heads(group: &str) -> Vec<String> {
    let (mut depth, mut heads, mut current) = (0, Vec::new(), String::new());
    for ch in group.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    heads.push(current);
    heads
        .iter()
        .filter_map(|h| {
            let h = h.trim();
            let name: String = h
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// The crate's modules a file names: `crate::x` anywhere, the heads of `crate::{...}` groups,
/// and, in a file at the top of `src/`, `super::x`. Comments and the test modules at the end
/// are left out.
fn names(text: &str, top_level: bool) -> BTreeSet<String> {
    let end = ["#[cfg(test)]\nmod tests", "#[cfg(test)]\nmod contract"]
        .iter()
        .filter_map(|m| text.find(m))
        .min()
        .unwrap_or(text.len());
    let code: String = text[..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let prefixes: &[&str] = if top_level {
        &["crate::", "super::"]
    } else {
        &["crate::"]
    };
    for prefix in prefixes {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let close = group.find("};").unwrap_or(group.len());
                found.extend(group_heads(&group[..close]));
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// The names `lib.rs` re-exports from the crate's modules (`pub use api::{Dsm, ...}`), with
/// their modules: `crate::Dsm` is a use of `api`.
fn reexports() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("lib.rs");
    let mut map = BTreeMap::new();
    for line in lib.lines() {
        let Some(path) = line.strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim_end_matches(';');
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        let names: Vec<&str> = match rest.rfind('{') {
            Some(open) => rest[open + 1..].trim_end_matches('}').split(',').collect(),
            None => vec![rest.rsplit("::").next().unwrap_or(rest)],
        };
        for n in names {
            map.insert(n.trim().to_owned(), module.to_owned());
        }
    }
    map
}

#[test]
fn every_module_uses_only_what_its_row_of_the_design_allows() {
    let table = table();
    let reexported = reexports();
    assert!(
        reexported.get("Dsm").map(String::as_str) == Some("api"),
        "lib.rs's re-exports were not read: {reexported:?}"
    );
    assert!(
        table.len() >= 15,
        "the module table was not read: {table:?}"
    );
    let src = root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).ok()?;
            let first = rel.components().next()?.as_os_str().to_str()?;
            let m = first.trim_end_matches(".rs");
            (m != "lib" && m != "bin").then(|| m.to_owned())
        })
        .collect();
    let mut broken = Vec::new();
    for m in &modules {
        let Some(allowed) = table.get(m) else {
            broken.push(format!("module `{m}` has no row in the table"));
            continue;
        };
        for f in &files {
            let rel = f.strip_prefix(&src).expect("under src");
            let first = rel
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .unwrap_or("");
            if first.trim_end_matches(".rs") != m {
                continue;
            }
            let text = std::fs::read_to_string(f).expect("read a source");
            let top_level = rel.components().count() == 1;
            for used in names(&text, top_level) {
                let used = reexported.get(&used).cloned().unwrap_or(used);
                let ours = modules.contains(&used);
                let fine =
                    used == *m || !ours || allowed.as_ref().is_none_or(|a| a.contains(&used));
                if !fine {
                    broken.push(format!(
                        "{}: uses `{used}`, which the row of `{m}` does not allow",
                        rel.display()
                    ));
                }
            }
        }
    }
    for m in table.keys() {
        if !modules.contains(m) {
            broken.push(format!("the table has a row for `{m}`, which is no module"));
        }
    }
    assert!(
        broken.is_empty(),
        "docs/design.md's module table and the code disagree:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_inline_and_super_paths_and_skips_comments() {
    let text = "use crate::{door::{self, SLOTS}, sys};\nfn f() { crate::job::x(); }\n// crate::api\nuse super::config;\n#[cfg(test)]\nmod tests { use crate::races; }\n";
    let got: Vec<String> = names(text, true).into_iter().collect();
    assert_eq!(got, ["config", "door", "job", "sys"]);
    let got: Vec<String> = names(text, false).into_iter().collect();
    assert_eq!(got, ["door", "job", "sys"]);
}
