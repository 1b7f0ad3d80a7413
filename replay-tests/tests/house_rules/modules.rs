//! A crate's module tree, read from its files, and the resolver that follows each name to the
//! file that defines it: the edges between files, and the circles among them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::code::{code_only, is_name, tokens, without_test_items};

/// One file of a crate's module tree.
#[derive(Default)]
pub(super) struct Module {
    pub(super) file: PathBuf,
    /// The names the file defines at its top level (functions, types, inline modules, macros).
    items: BTreeSet<String>,
    /// The modules it declares with `mod x;` (each a file of its own).
    children: BTreeSet<String>,
    /// Its `#[macro_export]` macros (which live at the crate root).
    exported_macros: BTreeSet<String>,
    uses: Vec<Use>,
    /// The paths (`a::b`) its code names outside `use` declarations.
    paths: Vec<Named>,
    /// The words of that code: the names a glob import may bring in.
    words: BTreeSet<String>,
}

/// One name a `use` declaration imports (or one glob), as written.
pub(super) struct Use {
    /// The module it is written in (inline modules included).
    here: Vec<String>,
    /// The path without a trailing `*` or `self`.
    path: Vec<String>,
    /// The name it binds (`as` included); `None` for a glob.
    name: Option<String>,
    public: bool,
    /// Written at the top level of the file, so part of the module's names.
    top: bool,
}

/// A path named in code, and the module it is read in.
pub(super) struct Named {
    here: Vec<String>,
    path: Vec<String>,
}

pub(super) type Crate = BTreeMap<Vec<String>, Module>;

/// The module tree grown from `root` (`lib.rs` or `main.rs`) through `mod x;` declarations
/// outside test items, over `files` (path relative to `src` to text).
pub(super) fn read_crate(files: &BTreeMap<PathBuf, String>, root: &Path) -> Crate {
    let mut krate = Crate::new();
    add_module(files, &mut krate, Vec::new(), root);
    krate
}

pub(super) fn add_module(
    files: &BTreeMap<PathBuf, String>,
    krate: &mut Crate,
    path: Vec<String>,
    file: &Path,
) {
    let Some(text) = files.get(file) else {
        return;
    };
    let mut module = parse_module(text, &path);
    module.file = file.to_path_buf();
    for child in &module.children {
        if let Some(child_file) = child_file(files, file, child) {
            let mut child_path = path.clone();
            child_path.push(child.clone());
            add_module(files, krate, child_path, &child_file);
        }
    }
    krate.insert(path, module);
}

/// The file of module `name` declared in `parent`: `name.rs` or `name/mod.rs` beside a
/// `mod.rs`/`lib.rs`/`main.rs`, under a folder named after any other file.
pub(super) fn child_file(
    files: &BTreeMap<PathBuf, String>,
    parent: &Path,
    name: &str,
) -> Option<PathBuf> {
    let stem = parent.file_stem().unwrap_or_default();
    let dir = if ["mod", "lib", "main"].iter().any(|s| stem == *s) {
        parent.parent().unwrap_or(Path::new("")).to_path_buf()
    } else {
        parent.with_extension("")
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|f| files.contains_key(f))
}

/// What one file (module `path`) defines, declares, imports and names.
pub(super) fn parse_module(text: &str, path: &[String]) -> Module {
    let code = without_test_items(&code_only(text));
    let toks = tokens(&code);
    let inline = inline_modules(&toks);
    let here = |t: usize| -> Vec<String> {
        let mut here = path.to_vec();
        here.extend(
            inline
                .iter()
                .filter(|m| m.0 < t && t < m.1)
                .map(|m| m.2.to_string()),
        );
        here
    };
    let mut module = Module::default();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        match toks[i].1 {
            "{" => depth += 1,
            "}" => depth -= 1,
            "use" => {
                let end = (i..toks.len())
                    .find(|&k| toks[k].1 == ";")
                    .unwrap_or(toks.len());
                let text = &code[toks[i].0 + 3..toks.get(end).map_or(code.len(), |t| t.0)];
                let (public, top) = (is_public(&toks, i), depth == 0);
                for (path, name) in use_leaves(text) {
                    let here = here(i);
                    module.uses.push(Use {
                        here,
                        path,
                        name,
                        public,
                        top,
                    });
                }
                i = end + 1;
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            read_item(&code, &toks, i, &mut module);
        }
        if is_name(toks[i].1) || matches!(toks[i].1, "crate" | "self" | "super") {
            read_path(&toks, i, here(i), &mut module);
        }
        i += 1;
    }
    module
}

/// The inline modules (`mod x { … }`) of a file: the token range of each body, and its name.
pub(super) fn inline_modules<'a>(toks: &[(usize, &'a str)]) -> Vec<(usize, usize, &'a str)> {
    let mut out = Vec::new();
    for i in 0..toks.len().saturating_sub(2) {
        if toks[i].1 == "mod" && toks[i + 2].1 == "{" {
            let mut depth = 0;
            let close = (i + 2..toks.len()).find(|&k| {
                match toks[k].1 {
                    "{" => depth += 1,
                    "}" => depth -= 1,
                    _ => {}
                }
                depth == 0
            });
            out.push((i + 2, close.unwrap_or(toks.len()), toks[i + 1].1));
        }
    }
    out
}

/// Whether the `use` at token `i` has a visibility (`pub`, `pub(crate)`, …).
pub(super) fn is_public(toks: &[(usize, &str)], i: usize) -> bool {
    match toks[..i].last().map(|t| t.1) {
        Some("pub") => true,
        Some(")") => toks[..i].iter().rev().take(6).any(|t| t.1 == "pub"),
        _ => false,
    }
}

/// The top-level item (if any) that starts at token `i`: a definition, a `mod x;`, a macro.
pub(super) fn read_item(code: &str, toks: &[(usize, &str)], i: usize, module: &mut Module) {
    const ITEMS: &[&str] = &[
        "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
    ];
    let next = |k: usize| toks.get(i + k).map_or("", |t| t.1);
    let keyword = toks[i].1;
    if keyword == "macro_rules" && next(1) == "!" && is_name(next(2)) {
        module.items.insert(next(2).to_string());
        if code[..toks[i].0].trim_end().ends_with("#[macro_export]") {
            module.exported_macros.insert(next(2).to_string());
        }
    } else if ITEMS.contains(&keyword) && i.checked_sub(1).is_none_or(|p| toks[p].1 != "&") {
        let name = if next(1) == "mut" { next(2) } else { next(1) };
        if keyword == "mod" && next(2) == ";" {
            module.children.insert(name.to_string());
        } else if is_name(name) {
            module.items.insert(name.to_string());
        }
    }
}

/// The path (`a::b::c`) starting at token `i`, if one starts there; and its first word.
pub(super) fn read_path(toks: &[(usize, &str)], i: usize, here: Vec<String>, module: &mut Module) {
    if i > 0 && matches!(toks[i - 1].1, "::" | ".") {
        return;
    }
    if is_name(toks[i].1) {
        module.words.insert(toks[i].1.to_string());
    }
    let mut path = vec![toks[i].1.to_string()];
    let mut k = i;
    while k + 2 < toks.len() && toks[k + 1].1 == "::" && is_path_word(toks[k + 2].1) {
        path.push(toks[k + 2].1.to_string());
        k += 2;
    }
    if path.len() > 1 {
        module.paths.push(Named { here, path });
    }
}

pub(super) fn is_path_word(token: &str) -> bool {
    is_name(token) || matches!(token, "self" | "super")
}

/// The leaves of a `use` tree (the text after `use`): each path, and the name it binds
/// (`None` for a glob). `a::{b, c::{self, d as e}, f::*}` gives `a::b` (b), `a::c` (c),
/// `a::c::d` (e) and the glob `a::f`.
pub(super) fn use_leaves(text: &str) -> Vec<(Vec<String>, Option<String>)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let compact = words.join(" ").replace(" as ", "@").replace(' ', "");
    expand(&compact)
        .into_iter()
        .map(|leaf| {
            let (path, alias) = match leaf.split_once('@') {
                Some((p, a)) => (p.to_string(), Some(a.to_string())),
                None => (leaf, None),
            };
            let mut segs: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if segs.last().is_some_and(|s| s == "*") {
                segs.pop();
                return (segs, None);
            }
            if segs.last().is_some_and(|s| s == "self") && segs.len() > 1 {
                segs.pop();
            }
            let name = alias.or_else(|| segs.last().cloned());
            (segs, name)
        })
        .collect()
}

/// `a::{b, c::d}` into `a::b`, `a::c::d` (nested groups too).
pub(super) fn expand(text: &str) -> Vec<String> {
    let Some(open) = text.find('{') else {
        return vec![text.to_string()];
    };
    let prefix = &text[..open];
    let inner = &text[open + 1..text.rfind('}').unwrap_or(text.len())];
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Resolving a name to the file that defines it.

/// What a path names: a module of the crate, an item defined in a module's file, or something
/// of another crate (`std`, a dependency, or this crate's name imported from one).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Target {
    Module(Vec<String>),
    Item(Vec<String>),
    Outside,
}

/// What `path`, read in module `here`, names; `None` when it cannot be followed (a name a
/// macro makes, say).
pub(super) fn resolve(
    krate: &Crate,
    here: &[String],
    path: &[String],
    depth: usize,
) -> Option<Target> {
    let (start, segs, anchored) = start_of(krate, here, path);
    match walk(krate, &start, segs, depth) {
        None if !anchored && walk(krate, &start, &segs[..segs.len().min(1)], depth).is_none() => {
            Some(Target::Outside)
        }
        found => found,
    }
}

/// The module a path starts in (the longest prefix of it that is a file of the crate), the
/// rest of the path, and whether it is anchored in the crate (`crate::`, `self::`, `super::`,
/// or a child module's name).
pub(super) fn start_of<'p>(
    krate: &Crate,
    here: &[String],
    path: &'p [String],
) -> (Vec<String>, &'p [String], bool) {
    let mut start = here.to_vec();
    let mut segs = path;
    match segs.first().map(String::as_str) {
        Some("crate") => {
            start.clear();
            segs = &segs[1..];
        }
        Some("self") => segs = &segs[1..],
        _ => {}
    }
    while segs.first().is_some_and(|s| s == "super") {
        start.pop();
        segs = &segs[1..];
    }
    while !start.is_empty() && !krate.contains_key(&start) {
        start.pop();
    }
    let anchored = segs.len() < path.len()
        || segs
            .first()
            .is_some_and(|s| krate[&start].children.contains(s));
    (start, segs, anchored)
}

/// What `segs`, read in module `m`, names: through `m`'s child modules, its own items, its
/// imports (following each `use` to where that name is defined), then its glob imports.
pub(super) fn walk(krate: &Crate, m: &[String], segs: &[String], depth: usize) -> Option<Target> {
    let Some((first, rest)) = segs.split_first() else {
        return Some(Target::Module(m.to_vec()));
    };
    let module = krate.get(m)?;
    if depth > 24 {
        return None;
    }
    let found = if module.children.contains(first) {
        let mut child = m.to_vec();
        child.push(first.clone());
        Target::Module(child)
    } else if module.items.contains(first) {
        return Some(Target::Item(m.to_vec()));
    } else if let Some(u) = import_of(module, first) {
        resolve(krate, &u.here, &u.path, depth + 1)?
    } else if let Some(defining) = exported_macro(krate, first).filter(|_| m.is_empty()) {
        return Some(Target::Item(defining));
    } else {
        return through_globs(krate, module, segs, depth);
    };
    match found {
        Target::Module(target) => walk(krate, &target, rest, depth + 1),
        other => Some(other),
    }
}

/// The top-level `use` of `module` that binds `name` (not a `use x;` naming itself).
pub(super) fn import_of<'m>(module: &'m Module, name: &String) -> Option<&'m Use> {
    module
        .uses
        .iter()
        .find(|u| u.top && u.name.as_ref() == Some(name) && u.path != [name.clone()])
}

/// `segs` looked up through the glob imports (`use x::*`) of `module`.
pub(super) fn through_globs(
    krate: &Crate,
    module: &Module,
    segs: &[String],
    depth: usize,
) -> Option<Target> {
    module
        .uses
        .iter()
        .filter(|u| u.top && u.name.is_none())
        .find_map(|u| match resolve(krate, &u.here, &u.path, depth + 1)? {
            Target::Module(g) => walk(krate, &g, segs, depth + 1).filter(|t| *t != Target::Outside),
            _ => None,
        })
}

/// The module defining the `#[macro_export]` macro `name`.
pub(super) fn exported_macro(krate: &Crate, name: &str) -> Option<Vec<String>> {
    krate
        .iter()
        .find(|(_, m)| m.exported_macros.contains(name))
        .map(|(p, _)| p.clone())
}

/// The module whose file defines what `path` (read in `here`) names. An anchored path the
/// resolver cannot follow (a name made by a macro, say) lands in the deepest module it names;
/// a path into another crate is `None`.
pub(super) fn defining_module(
    krate: &Crate,
    here: &[String],
    path: &[String],
) -> Option<Vec<String>> {
    match resolve(krate, here, path, 0) {
        Some(Target::Module(m)) | Some(Target::Item(m)) => return Some(m),
        Some(Target::Outside) => return None,
        None => {}
    }
    let (start, segs, anchored) = start_of(krate, here, path);
    if !anchored {
        return None;
    }
    let mut full = start;
    full.extend(segs.iter().cloned());
    while !krate.contains_key(&full) {
        full.pop();
    }
    Some(full)
}

/// The edges between files: for each file, the files defining what it names (its own file
/// and a parent's `mod child;` declarations aside), each with the names that lead there.
pub(super) fn file_edges(krate: &Crate) -> BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>> {
    let mut edges: BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>> = BTreeMap::new();
    for (m, module) in krate {
        let mut add = |target: Vec<String>, name: String| {
            if &target != m {
                edges.entry((m.clone(), target)).or_default().insert(name);
            }
        };
        for u in &module.uses {
            let text = u.path.join("::");
            match &u.name {
                Some(_) => {
                    if let Some(target) = defining_module(krate, &u.here, &u.path) {
                        add(target, text);
                    }
                }
                None => {
                    for (target, name) in glob_targets(krate, module, u) {
                        add(target, name);
                    }
                }
            }
        }
        for named in &module.paths {
            if let Some(target) = defining_module(krate, &named.here, &named.path) {
                add(target, named.path.join("::"));
            }
        }
    }
    edges
}

/// What a glob import leads to: the module it names when it re-exports (`pub use x::*`), and
/// the defining module of each word of the file the glob brings in.
pub(super) fn glob_targets(krate: &Crate, module: &Module, u: &Use) -> Vec<(Vec<String>, String)> {
    let Some(Target::Module(glob)) = resolve(krate, &u.here, &u.path, 0) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if u.public {
        out.push((glob.clone(), format!("{}::*", u.path.join("::"))));
    }
    let own = |w: &String| {
        module.items.contains(w) || module.uses.iter().any(|u| u.name.as_ref() == Some(w))
    };
    for word in module.words.iter().filter(|w| !own(w)) {
        match walk(krate, &glob, std::slice::from_ref(word), 0) {
            Some(Target::Module(target)) | Some(Target::Item(target)) => {
                out.push((target, word.clone()))
            }
            _ => {}
        }
    }
    out
}

/// The crates `src` holds: the module tree of `lib.rs` and that of `main.rs` (each its own).
pub(super) fn crates_of(files: &BTreeMap<PathBuf, String>) -> Vec<Crate> {
    ["lib.rs", "main.rs"]
        .iter()
        .filter(|r| files.contains_key(Path::new(r)))
        .map(|r| read_crate(files, Path::new(r)))
        .collect()
}

/// The circles among the files of a crate (strongly connected sets of more than one file),
/// each as its files and the edges between them (`from -> to: names`).
pub(super) fn import_circles(krate: &Crate) -> Vec<(Vec<PathBuf>, Vec<String>)> {
    let nodes: Vec<&Vec<String>> = krate.keys().collect();
    let index_of: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges = file_edges(krate);
    let mut adjacency = vec![Vec::new(); nodes.len()];
    for (from, to) in edges.keys() {
        adjacency[index_of[from]].push(index_of[to]);
    }
    let file = |i: usize| krate[nodes[i]].file.clone();
    strongly_connected(&adjacency)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut files: Vec<PathBuf> = c.iter().map(|&i| file(i)).collect();
            files.sort();
            let inside = |m: &Vec<String>| c.contains(&index_of[m]);
            let lines = edges
                .iter()
                .filter(|((f, t), _)| inside(f) && inside(t))
                .map(|((f, t), names)| {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    format!(
                        "{} -> {}: {}",
                        krate[f].file.display(),
                        krate[t].file.display(),
                        names.join(", ")
                    )
                })
                .collect();
            (files, lines)
        })
        .collect()
}
pub(super) fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = adjacency.len();
    let mut s = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}
