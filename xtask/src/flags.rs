//! The command-line flags of xtask's commands, one small parser for all of them instead of a
//! hand-written loop each (and no argument-parsing dependency: xtask builds before anything else
//! and should stay quick to build).
//!
//! A command asks for each flag it knows by name, then calls [`Flags::finish`], which rejects
//! whatever is left. Every error names the argument and carries the command's usage text.
//!
//! ```text
//! let mut flags = Flags::new(args, USAGE);
//! let out = flags.value("--out")?;          // --out DIR or --out=DIR
//! let check = flags.switch("--check");      // --check
//! flags.finish()?;
//! ```
//!
//! - A flag given twice takes its last value, as the shell's later word overrides the earlier.
//! - `--` ends the flags: what follows is passed on untouched ([`Flags::rest_after_dashdash`]),
//!   and is an error for a command that does not take it.
//! - `--name VALUE` takes the next argument whatever it looks like (`--out -x` is the folder
//!   `-x`), so ask for value flags before switches: a switch asked for first would take a
//!   value that happens to spell it.

use crate::Result;

#[derive(Debug)]
pub struct Flags<'u> {
    usage: &'u str,
    /// The arguments before the first `--`; `None` where a method has taken one.
    args: Vec<Option<String>>,
    /// The arguments after the first `--`, if there was one, until taken.
    passthrough: Option<Vec<String>>,
}

impl<'u> Flags<'u> {
    pub fn new(args: &[String], usage: &'u str) -> Self {
        let (flags, passthrough) = match args.iter().position(|a| a == "--") {
            Some(at) => (&args[..at], Some(args[at + 1..].to_vec())),
            None => (args, None),
        };
        Flags { usage, args: flags.iter().cloned().map(Some).collect(), passthrough }
    }

    /// `-h` or `--help` anywhere: the command prints its usage and does nothing else.
    pub fn help(&mut self) -> bool {
        let short = self.switch("-h");
        self.switch("--help") || short
    }

    /// Whether `name` (e.g. `--check`) was given. `--check=x` is not it, and is left for
    /// [`Flags::finish`] to reject.
    pub fn switch(&mut self, name: &str) -> bool {
        let mut given = false;
        for slot in &mut self.args {
            if slot.as_deref() == Some(name) {
                *slot = None;
                given = true;
            }
        }
        given
    }

    /// The value of `name VALUE` or `name=VALUE`; the last one when given more than once. An
    /// error when `name` ends the arguments (or stands just before `--`).
    pub fn value(&mut self, name: &str) -> Result<Option<String>> {
        let mut value = None;
        let mut i = 0;
        while i < self.args.len() {
            let Some(arg) = self.args[i].take() else {
                i += 1;
                continue;
            };
            if arg == name {
                let next = self.args.get_mut(i + 1).and_then(Option::take);
                value = Some(next.ok_or_else(|| self.invalid(name, "needs a value"))?);
                i += 2;
                continue;
            }
            match arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                Some(inline) => value = Some(inline.to_string()),
                None => self.args[i] = Some(arg),
            }
            i += 1;
        }
        Ok(value)
    }

    /// `name` or `name=VALUE`, for a flag whose value is optional (`--sanitize[=TOOLS]`):
    /// `None` when absent, `Some(None)` when given bare, `Some(Some(VALUE))` otherwise; the last
    /// one when given more than once. `name VALUE` leaves VALUE as an argument of its own.
    pub fn optional_value(&mut self, name: &str) -> Option<Option<String>> {
        let mut found = None;
        for slot in &mut self.args {
            let Some(arg) = slot.as_deref() else { continue };
            let this = if arg == name {
                None
            } else if let Some(inline) = arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                Some(inline.to_string())
            } else {
                continue;
            };
            found = Some(this);
            *slot = None;
        }
        found
    }

    /// The arguments after `--`, to pass on untouched (empty without `--`).
    pub fn rest_after_dashdash(&mut self) -> Vec<String> {
        self.passthrough.take().unwrap_or_default()
    }

    /// An error about `name`'s value (`--gpus: ...`), with the usage text.
    pub fn invalid(&self, name: &str, why: impl std::fmt::Display) -> Box<dyn std::error::Error> {
        format!("{name}: {why}\n{}", self.usage).into()
    }

    /// Ends parsing: an error for the first argument no method took, or an unwanted `--`.
    pub fn finish(self) -> Result<()> {
        let left = self.args.into_iter().flatten().next();
        let left = left.or_else(|| self.passthrough.map(|_| "--".to_string()));
        match left {
            Some(arg) => Err(format!("unexpected argument `{arg}`\n{}", self.usage).into()),
            None => Ok(()),
        }
    }
}

/// `["a", "b"]` as the owned arguments commands receive.
#[cfg(test)]
pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: &str = "usage: cargo xtask demo [--out DIR] [--check]";

    fn flags(args: &[&str]) -> Flags<'static> {
        Flags::new(&strings(args), USAGE)
    }

    #[test]
    fn values_come_separate_or_after_an_equals_sign() {
        assert_eq!(flags(&["--out", "d"]).value("--out").unwrap().as_deref(), Some("d"));
        assert_eq!(flags(&["--out=d"]).value("--out").unwrap().as_deref(), Some("d"));
        assert_eq!(flags(&["--out="]).value("--out").unwrap().as_deref(), Some(""));
        // Taken whatever it looks like, as a shell user would expect of `--out -x`.
        assert_eq!(flags(&["--out", "-x"]).value("--out").unwrap().as_deref(), Some("-x"));
        assert_eq!(flags(&[]).value("--out").unwrap(), None);
        // A longer flag is not this one.
        let mut f = flags(&["--outer=d"]);
        assert_eq!(f.value("--out").unwrap(), None);
        assert!(f.finish().is_err());
    }

    #[test]
    fn a_missing_value_is_an_error_naming_the_flag() {
        let e = flags(&["--out"]).value("--out").unwrap_err().to_string();
        assert!(e.starts_with("--out: needs a value") && e.ends_with(USAGE), "{e}");
        // `--` ends the flags, so it is no value either.
        assert!(flags(&["--out", "--", "d"]).value("--out").is_err());
    }

    #[test]
    fn unknown_arguments_are_errors_with_the_usage() {
        let mut f = flags(&["--check", "--bogus", "x"]);
        assert!(f.switch("--check"));
        let e = f.finish().unwrap_err().to_string();
        assert_eq!(e, format!("unexpected argument `--bogus`\n{USAGE}"));
        assert!(flags(&["x"]).finish().is_err());
        // A switch takes no value: `--check=yes` is not `--check`.
        let mut f = flags(&["--check=yes"]);
        assert!(!f.switch("--check"));
        assert!(f.finish().is_err());
        assert!(flags(&[]).finish().is_ok());
    }

    #[test]
    fn what_follows_dashdash_passes_through_untouched() {
        let mut f = flags(&["--check", "--", "--out", "-E", "--check"]);
        assert_eq!(f.value("--out").unwrap(), None);
        assert!(f.switch("--check"));
        assert_eq!(f.rest_after_dashdash(), strings(&["--out", "-E", "--check"]));
        assert!(f.finish().is_ok());
        assert_eq!(flags(&["--"]).rest_after_dashdash(), Vec::<String>::new());
        assert_eq!(flags(&[]).rest_after_dashdash(), Vec::<String>::new());
        // A command that passes nothing on rejects `--`.
        let e = flags(&["--"]).finish().unwrap_err().to_string();
        assert!(e.starts_with("unexpected argument `--`"), "{e}");
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let mut f = flags(&["--out", "a", "--check", "--out=b", "--check"]);
        assert_eq!(f.value("--out").unwrap().as_deref(), Some("b"));
        assert!(f.switch("--check"));
        assert!(f.finish().is_ok());
        let mut f = flags(&["--sanitize=a", "--sanitize"]);
        assert_eq!(f.optional_value("--sanitize"), Some(None));
        assert!(f.finish().is_ok());
    }

    #[test]
    fn an_optional_value_is_bare_or_after_an_equals_sign() {
        assert_eq!(flags(&[]).optional_value("--sanitize"), None);
        assert_eq!(flags(&["--sanitize"]).optional_value("--sanitize"), Some(None));
        assert_eq!(flags(&["--sanitize=a,b"]).optional_value("--sanitize"), Some(Some("a,b".into())));
        // A separate word is not its value.
        let mut f = flags(&["--sanitize", "memcheck"]);
        assert_eq!(f.optional_value("--sanitize"), Some(None));
        assert!(f.finish().is_err());
    }

    #[test]
    fn help_is_either_spelling() {
        assert!(flags(&["-h"]).help());
        assert!(flags(&["--out", "d", "--help"]).help());
        assert!(!flags(&["--out", "d"]).help());
    }

    #[test]
    fn invalid_values_name_the_flag_and_show_the_usage() {
        let e = flags(&[]).invalid("--gpus", "`0` is not a positive number of GPUs").to_string();
        assert_eq!(e, format!("--gpus: `0` is not a positive number of GPUs\n{USAGE}"));
    }
}
