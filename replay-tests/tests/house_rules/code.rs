//! Reading Rust source as the compiler's tokens see it: comments, literals and test items
//! blanked, tokens with their offsets, and the functions of a file with their lengths.

/// `src` with comments and the contents of string and char literals blanked (newlines kept, so
/// line numbers hold; anything not ASCII becomes a space): what brackets and paths are read in.
pub(super) fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        match literal_end(&chars, i) {
            Some(end) => {
                for &c in &chars[i..end.min(chars.len())] {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                }
                i = end;
            }
            None => {
                out.push(if chars[i].is_ascii() { chars[i] } else { ' ' });
                i += 1;
            }
        }
    }
    out
}

/// Where the comment or literal starting at `i` ends (exclusive), if one starts there.
pub(super) fn literal_end(chars: &[char], i: usize) -> Option<usize> {
    let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
    let in_word = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let find = |from: usize, c: char| (from..chars.len()).find(|&k| chars[k] == c);
    match at(i) {
        '/' if at(i + 1) == '/' => Some(find(i, '\n').unwrap_or(chars.len())),
        '/' if at(i + 1) == '*' => Some(block_comment_end(chars, i)),
        '"' => Some(string_end(chars, i + 1)),
        'b' if !in_word && at(i + 1) == '"' => Some(string_end(chars, i + 2)),
        'r' | 'b' if !in_word => raw_string_end(chars, i),
        '\'' if at(i + 1) == '\\' => Some(find(i + 3, '\'').map_or(chars.len(), |k| k + 1)),
        '\'' if at(i + 2) == '\'' => Some(i + 3),
        _ => None,
    }
}

pub(super) fn block_comment_end(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => depth += 1,
            ('*', '/') => depth -= 1,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
        if depth == 0 {
            return i;
        }
    }
    chars.len()
}

pub(super) fn string_end(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// `r"…"`, `r#"…"#`, `br"…"`: where it ends, if one starts at `i`.
pub(super) fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let mut k = i + usize::from(chars[i] == 'b');
    if chars.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let hashes = chars[k..].iter().take_while(|&&c| c == '#').count();
    k += hashes;
    if chars.get(k) != Some(&'"') {
        return None;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let end = (k + 1..chars.len()).find(|&j| chars[j..].starts_with(&closing));
    Some(end.map_or(chars.len(), |j| j + closing.len()))
}

/// `code` (from [`code_only`]) with each `#[cfg(test)]` or `#[cfg(all(test, …))]` item
/// blanked, newlines kept: test modules may name anything and are not part of the build.
pub(super) fn without_test_items(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(at) = ["#[cfg(test)]", "#[cfg(all(test"]
        .iter()
        .filter_map(|a| code[from..].find(a).map(|k| from + k))
        .min()
    {
        let end = item_end(code.as_bytes(), at);
        for b in &mut out[at..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The end (exclusive) of the item whose attributes start at `at`: its `;` or closing brace.
pub(super) fn item_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < b.len() {
        match b[i] {
            b'#' if depth == 0 && b.get(i + 1) == Some(&b'[') => {
                i = matching(b, i + 1);
            }
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return i + 1,
            b'{' if depth == 0 => return matching(b, i) + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// The index of the bracket closing the one at `at` (`{`, `[` or `(`).
pub(super) fn matching(b: &[u8], at: usize) -> usize {
    let (open, close) = match b[at] {
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        _ => (b'(', b')'),
    };
    let mut depth = 0;
    for (k, &c) in b.iter().enumerate().skip(at) {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    b.len().saturating_sub(1)
}

/// The tokens of `code` with their offsets: words, lifetimes, `::`, and single characters.
pub(super) fn tokens(code: &str) -> Vec<(usize, &str)> {
    let b = code.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if word(b[i]) || (b[i] == b'\'' && b.get(i + 1).is_some_and(|&c| word(c))) {
            i += 1;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
        } else if b[i] == b':' && b.get(i + 1) == Some(&b':') {
            i += 2;
        } else {
            i += 1;
        }
        out.push((start, &code[start..i]));
    }
    out
}

pub(super) const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type", "union",
    "unsafe", "use", "where", "while",
];

/// Whether a token is a name (not a keyword, a number, a lifetime or punctuation).
pub(super) fn is_name(token: &str) -> bool {
    token
        .bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && !KEYWORDS.contains(&token)
}

/// The functions of `code` (from [`code_only`], test items blanked) with a body: name, first
/// line (1-based) and length in lines.
pub(super) fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let toks = tokens(code);
    let line = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (i, &(at, token)) in toks.iter().enumerate() {
        let Some(&(_, name)) = toks.get(i + 1) else {
            continue;
        };
        if token != "fn" || !is_name(name) {
            continue;
        }
        if let Some(open) = body_of(&toks, i) {
            let close = matching(code.as_bytes(), open);
            out.push((name.to_string(), line(at), line(close) - line(at) + 1));
        }
    }
    out
}

/// The offset of the `{` opening the body of the `fn` at token `i`; `None` for a declaration
/// without one (`fn f();` in a trait).
pub(super) fn body_of(toks: &[(usize, &str)], i: usize) -> Option<usize> {
    let mut depth = 0;
    for &(at, t) in &toks[i..] {
        match t {
            "(" | "[" => depth += 1,
            ")" | "]" => depth -= 1,
            ";" if depth == 0 => return None,
            "{" if depth == 0 => return Some(at),
            _ => {}
        }
    }
    None
}
