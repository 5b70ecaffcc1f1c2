//! `cargo xtask lint`: project rules a compiler cannot check.
//!
//! Every source file git knows about (tracked, or new and not ignored; without git, the tree less
//! `target/` and `.git/`) is read with its comments blanked out, so a rule can be explained in a
//! comment without tripping itself, while string literals still count: a symbol looked up by name
//! is still a call. Rules are a list; each names the identifiers it forbids and where.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;
use crate::flags::Flags;

/// Extensions of the files that are checked.
const EXTENSIONS: &[&str] = &["rs", "hip", "h", "hpp", "cpp", "cu", "py", "sh"];

/// A forbidden use of an identifier.
struct Rule {
    /// Identifiers this rule forbids. A use is the name not preceded by an identifier character;
    /// anything may follow, so versioned variants (`name_v2`, `name_ptsz`) are caught too.
    names: Vec<String>,
    /// Printed after the name: what is wrong and what to do instead.
    why: &'static str,
    /// Path prefixes (relative to the workspace root, `/`-separated) where the rule does not apply.
    exempt: &'static [&'static str],
}

/// The project's rules.
fn rules() -> Vec<Rule> {
    // The names are assembled at run time so this file does not contain them.
    let sync = "Synchronize";
    let device_wide = vec![
        format!("hipDevice{sync}"),
        "hipDevice".to_string() + "Reset",
        format!("cuCtx{sync}"),
        format!("cudaDevice{sync}"),
        "cudaDevice".to_string() + "Reset",
    ];
    vec![Rule {
        names: device_wide,
        why: "is device-wide synchronisation (docs/architecture.md says why it is banned); synchronise the stream you own instead",
        exempt: &["crates/rocm-sys/"],
    }]
}

/// One rule violation.
#[derive(Debug, PartialEq, Eq)]
struct Finding {
    line: usize,
    name: String,
    why: &'static str,
}

pub fn run(args: &[String]) -> Result<()> {
    Flags::new(args, "usage: cargo xtask lint").finish()?;
    let root = crate::workspace_root();
    let rules = rules();
    let files = source_files(&root)?;
    let mut count = 0;
    for rel in &files {
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else {
            continue; // deleted from the work tree but still in the index, or not UTF-8
        };
        let rel_str = rel.to_string_lossy().replace('\\', "/");
        for f in check(&rel_str, &text, &rules) {
            println!("{rel_str}:{}: {} {}", f.line, f.name, f.why);
            count += 1;
        }
    }
    if count > 0 {
        return Err(format!("{count} finding(s) in {} files checked", files.len()).into());
    }
    println!("lint: {} files checked, no findings", files.len());
    Ok(())
}

/// Source files to check, relative to `root`, sorted.
fn source_files(root: &Path) -> Result<Vec<PathBuf>> {
    let listed = Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    let mut files: Vec<PathBuf> = match listed {
        Some(out) => String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .filter(|p| root.join(p).is_file())
            .collect(),
        None => {
            let mut found = Vec::new();
            walk(root, root, &mut found)?;
            found
        }
    };
    files.retain(|p| p.extension().and_then(|e| e.to_str()).is_some_and(|e| EXTENSIONS.contains(&e)));
    files.sort();
    files.dedup();
    Ok(files)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if !matches!(entry.file_name().to_str(), Some("target" | ".git")) {
                walk(root, &path, out)?;
            }
        } else if kind.is_file() {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// The findings of `rules` in `text`, the contents of `path` (relative, `/`-separated).
fn check(path: &str, text: &str, rules: &[Rule]) -> Vec<Finding> {
    let applicable: Vec<&Rule> =
        rules.iter().filter(|r| !r.exempt.iter().any(|e| path.starts_with(e))).collect();
    if applicable.is_empty() {
        return Vec::new();
    }
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    let code = strip_comments(text, Syntax::for_extension(ext));
    let mut findings = Vec::new();
    for (i, line) in code.lines().enumerate() {
        for rule in &applicable {
            for name in &rule.names {
                if uses(line, name) {
                    findings.push(Finding { line: i + 1, name: name.clone(), why: rule.why });
                }
            }
        }
    }
    findings
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `line` contains `name` at the start of an identifier.
fn uses(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(at, _)| !line[..at].chars().next_back().is_some_and(is_ident_char))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Syntax {
    /// C, C++, HIP, CUDA: `//`, `/* */`, `"..."`, `'.'`.
    C,
    /// Rust: as C, plus nested block comments, raw strings and lifetimes.
    Rust,
    /// Python: `#` comments; `'...'`, `"..."` and triple-quoted strings.
    Python,
    /// Shell: `#` comments where a word starts; `'...'` and `"..."`.
    Shell,
}

impl Syntax {
    fn for_extension(ext: &str) -> Syntax {
        match ext {
            "rs" => Syntax::Rust,
            "py" => Syntax::Python,
            "sh" => Syntax::Shell,
            _ => Syntax::C,
        }
    }
}

/// `text` with every comment character replaced by a space (newlines kept, so line numbers hold).
/// String and character literals are kept as they are. A lexer just good enough for the lint:
/// it never has to be exact about what a literal means, only where it ends.
fn strip_comments(text: &str, syntax: Syntax) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, c)| chars.get(i + k) == Some(&c));
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev = if i > 0 { Some(chars[i - 1]) } else { None };
        // Comments.
        let line_comment = match syntax {
            Syntax::C | Syntax::Rust => at(i, "//"),
            Syntax::Python => c == '#',
            // `#` starts a comment only at the start of a word (`$#`, `${#x}` are not comments).
            Syntax::Shell => c == '#' && prev.is_none_or(|p| p.is_whitespace() || ";&|()".contains(p)),
        };
        if line_comment {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
            continue;
        }
        if matches!(syntax, Syntax::C | Syntax::Rust) && at(i, "/*") {
            let mut depth = 0;
            while i < chars.len() {
                if at(i, "/*") && (depth == 0 || syntax == Syntax::Rust) {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            continue;
        }
        // Literals, copied through.
        let end = match (syntax, c) {
            (Syntax::Rust, 'r') if !prev.is_some_and(|p| is_ident_char(p) && p != 'b' && p != 'c') => {
                raw_string_end(&chars, i)
            }
            (Syntax::Python, '"' | '\'') if at(i, &c.to_string().repeat(3)) => {
                Some(quoted_end(&chars, i + 3, &c.to_string().repeat(3), true))
            }
            (Syntax::Shell, '\'') => Some(quoted_end(&chars, i + 1, "'", false)),
            (Syntax::Rust, '\'') => char_literal_end(&chars, i),
            (Syntax::C, '\'') | (_, '"') => Some(quoted_end(&chars, i + 1, &c.to_string(), true)),
            (Syntax::Python, '\'') => Some(quoted_end(&chars, i + 1, "'", true)),
            _ => None,
        };
        match end {
            Some(end) => {
                out.extend(&chars[i..end]);
                i = end;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Index just past the closing `close` of a literal whose body starts at `i` (or the end of text).
fn quoted_end(chars: &[char], mut i: usize, close: &str, escapes: bool) -> usize {
    let close: Vec<char> = close.chars().collect();
    while i < chars.len() {
        if escapes && chars[i] == '\\' {
            i += 2;
        } else if chars[i..].starts_with(&close) {
            return i + close.len();
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// A Rust raw string `r"..."` / `r#"..."#` starting at `i` (the `r`): index past its end.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
    if chars.get(i + 1 + hashes) != Some(&'"') {
        return None;
    }
    let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    Some(quoted_end(chars, i + 2 + hashes, &close, false))
}

/// A Rust char literal at `i` (`'x'`, `'\n'`, `'\u{..}'`): index past it. `None` for a lifetime
/// or label (`'a`), which is left as code.
fn char_literal_end(chars: &[char], i: usize) -> Option<usize> {
    match chars.get(i + 1)? {
        '\\' => Some(quoted_end(chars, i + 1, "'", true)),
        _ if chars.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forbidden name, built at run time like the rule's.
    fn forbidden() -> String {
        format!("hipDevice{}", "Synchronize")
    }

    fn lines(path: &str, text: &str) -> Vec<usize> {
        check(path, text, &rules()).into_iter().map(|f| f.line).collect()
    }

    #[test]
    fn use_in_code_is_flagged() {
        let n = forbidden();
        assert_eq!(lines("crates/x/src/a.rs", &format!("fn f() {{\n    unsafe {{ {n}() }};\n}}\n")), [2]);
        assert_eq!(lines("kernels/a.hip", &format!("void f() {{ {n}(); }}")), [1]);
        assert_eq!(lines("crates/x/src/a.rs", &format!("rocm_sys::{n}_v2();")), [1], "versioned variant");
        let reset = "cudaDevice".to_string() + "Reset";
        assert_eq!(lines("tools/a.py", &format!("lib.{reset}()\n")), [1]);
        assert_eq!(lines("tools/a.sh", &format!("echo x\nnm lib.so | grep {reset}\n")), [2]);
    }

    #[test]
    fn string_literals_count() {
        let n = forbidden();
        assert_eq!(lines("a.rs", &format!("let s = lib.get(b\"{n}\\0\");")), [1]);
        assert_eq!(lines("a.rs", &format!("let s = r#\"{n}\"#;")), [1]);
        assert_eq!(lines("a.py", &format!("s = '''\n{n}\n'''")), [2]);
        assert_eq!(lines("a.cpp", &format!("const char* s = \"// {n}\";")), [1], "`//` inside a string");
    }

    #[test]
    fn comments_are_not_uses() {
        let n = forbidden();
        for (path, text) in [
            ("a.rs", format!("// never call {n}\nfn f() {{}}\n")),
            ("a.rs", format!("/// Unlike {n}, this waits for one stream.\n")),
            ("a.rs", format!("/* outer /* nested */ {n} */ fn f() {{}}")),
            ("a.hip", format!("/*\n * {n}\n */\n")),
            ("a.h", format!("int x; // {n}")),
            ("a.py", format!("x = 1  # {n}\n")),
            ("a.sh", format!("# {n}\necho ok\n")),
        ] {
            assert_eq!(lines(path, &text), Vec::<usize>::new(), "{path}: {text:?}");
        }
    }

    #[test]
    fn line_numbers_survive_block_comments() {
        let n = forbidden();
        assert_eq!(lines("a.c", &format!("/* one\ntwo */\n{n}();")), [3]);
        assert_eq!(lines("a.rs", &format!("let c = '\"'; let l: &'static str = \"\";\n{n}();")), [2]);
    }

    #[test]
    fn identifier_boundaries() {
        let n = forbidden();
        assert!(uses(&format!("x.{n}()"), &n));
        assert!(!uses(&format!("my_{n}()"), &n), "part of another identifier");
    }

    #[test]
    fn rocm_sys_is_exempt() {
        let n = forbidden();
        assert!(lines("crates/rocm-sys/src/hip.rs", &format!("pub fn {n}();")).is_empty());
        assert_eq!(lines("crates/rocm-runtime/src/lib.rs", &format!("{n}();")), [1]);
    }

    #[test]
    fn shell_hash_inside_words() {
        let n = forbidden();
        assert_eq!(lines("a.sh", &format!("echo $# {n}\n")), [1]);
        assert_eq!(lines("a.sh", &format!("echo '#' {n}\n")), [1]);
    }

    #[test]
    fn this_file_passes_its_own_lint() {
        let text = include_str!("lint.rs");
        assert_eq!(check("xtask/src/lint.rs", text, &rules()), []);
    }
}
