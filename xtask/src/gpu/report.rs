//! The runs of `gpu-test`: how many (`--repeat`), which share of the suite (`--partition`), each
//! run's per-test results, read from the JUnit report nextest writes (`[profile.gpu.junit]` in
//! `.config/nextest.toml`) and kept where `--junit` says, and the table of the tests that failed
//! in some of the runs.
//!
//! The report is scanned by hand rather than with an XML crate: xtask builds before anything else
//! and takes no dependency it can do without, and nextest's reports are regular. Text inside
//! them has `<` escaped, so a `<failure` in a test's captured output cannot pass for an element.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::Result;

/// `--repeat N`: a positive number of runs.
pub(super) fn parse_repeat(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{text}` is not a positive number of runs")),
    }
}

/// `--partition K/N`: share K (from 1) of N.
pub(super) fn parse_partition(text: &str) -> std::result::Result<(usize, usize), String> {
    let bad = || format!("`{text}` is not K/N with 1 <= K <= N (this host's share K of N)");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n) =
        (k.trim().parse::<usize>().map_err(|_| bad())?, n.trim().parse::<usize>().map_err(|_| bad())?);
    if k == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// nextest's arguments for `--partition`, before the user's `nextest` ones: hash partitioning,
/// so a test stays in the same share however the others come and go (nextest's `count:` shares
/// shift when a test is added). A share with no tests (few tests, or a narrow `-E`) is this
/// host's part done, not a failure, unless the user's own `--no-tests` says otherwise.
pub(super) fn partition_args(partition: Option<(usize, usize)>, nextest: &[String]) -> Vec<String> {
    let Some((k, n)) = partition else { return Vec::new() };
    let mut args = vec!["--partition".to_string(), format!("hash:{k}/{n}")];
    if !nextest.iter().any(|a| a.starts_with("--no-tests")) {
        args.push("--no-tests=warn".into());
    }
    args
}

/// One `<testcase>` of a JUnit report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TestCase {
    /// `<binary id> <test name>`, as nextest shows a test (`rocm-kernels::gpu_kernels gemm::x`).
    pub(super) id: String,
    /// It holds a `<failure>` or `<error>` element.
    pub(super) failed: bool,
}

/// The test cases of a JUnit report.
pub(super) fn parse_junit(xml: &str) -> Vec<TestCase> {
    let mut cases = Vec::new();
    let mut rest = xml;
    while let Some(at) = find_element(rest, "testcase") {
        rest = &rest[at..];
        let Some(end) = tag_end(rest) else { break };
        let tag = &rest["<testcase".len()..end];
        rest = &rest[end + 1..];
        // `<testcase .../>` passed and holds nothing; otherwise the body runs to `</testcase>`.
        let (attrs, body) = match tag.strip_suffix('/') {
            Some(attrs) => (attrs, ""),
            None => {
                let close = rest.find("</testcase>").unwrap_or(rest.len());
                let body = &rest[..close];
                rest = &rest[close..];
                (tag, body)
            }
        };
        let attr = |key| attribute(attrs, key).unwrap_or_default();
        cases.push(TestCase {
            id: format!("{} {}", attr("classname"), attr("name")),
            failed: find_element(body, "failure").is_some() || find_element(body, "error").is_some(),
        });
    }
    cases
}

/// Where an element `<name ...>` starts in `text`; not one whose name merely begins with `name`
/// (`<failure` is not `<failures`; nextest's `<flakyFailure>` is another name altogether).
fn find_element(text: &str, name: &str) -> Option<usize> {
    let open = format!("<{name}");
    let mut from = 0;
    while let Some(found) = text[from..].find(&open) {
        let at = from + found;
        match text[at + open.len()..].chars().next() {
            Some(c) if c.is_whitespace() || c == '>' || c == '/' => return Some(at),
            _ => from = at + open.len(),
        }
    }
    None
}

/// The index of the `>` that ends the tag `text` starts with (a `>` inside a quoted attribute
/// value does not).
fn tag_end(text: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// The value of attribute `key` among `attrs` (`name="a" classname='b'`), unescaped.
fn attribute(attrs: &str, key: &str) -> Option<String> {
    let mut rest = attrs.trim_start();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        let value = rest[eq + 1..].trim_start();
        let quote = value.chars().next().filter(|q| *q == '"' || *q == '\'')?;
        let close = value[1..].find(quote)? + 1;
        if name == key {
            return Some(unescape(&value[1..close]));
        }
        rest = value[close + 1..].trim_start();
    }
    None
}

fn unescape(text: &str) -> String {
    // `&amp;` last, so that `&amp;lt;` becomes `&lt;` and no further.
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// What the runs of `--repeat` found so far.
#[derive(Debug, Default)]
pub(super) struct Repeats {
    runs: usize,
    /// Runs with a failing test or a non-zero exit.
    failed_runs: usize,
    /// For each test that failed in any run, the number of runs it failed in.
    failures: BTreeMap<String, usize>,
    /// Runs (numbered from 1) that failed with no JUnit report to say which tests failed.
    unreported: Vec<usize>,
}

impl Repeats {
    /// Counts one run: nextest's exit code and the test cases of its report, if it wrote one.
    pub(super) fn record(&mut self, exit_code: i32, cases: Option<&[TestCase]>) {
        self.runs += 1;
        let failed: BTreeSet<&str> =
            cases.unwrap_or_default().iter().filter(|c| c.failed).map(|c| c.id.as_str()).collect();
        for id in &failed {
            *self.failures.entry((*id).to_string()).or_default() += 1;
        }
        if exit_code != 0 || !failed.is_empty() {
            self.failed_runs += 1;
            if cases.is_none() {
                self.unreported.push(self.runs);
            }
        }
    }

    pub(super) fn any_failed(&self) -> bool {
        self.failed_runs > 0
    }

    /// The flake table: each test that failed in some run, most often first, then the totals.
    pub(super) fn render(&self) -> String {
        let n = self.runs;
        let mut out = String::new();
        if !self.failures.is_empty() {
            out.push_str("gpu-test: tests that failed:\n");
            let mut rows: Vec<(&String, &usize)> = self.failures.iter().collect();
            rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let width = n.to_string().len();
            for (id, k) in rows {
                out.push_str(&format!("  failed {k:>width$} of {n} runs  {id}\n"));
            }
        }
        if !self.unreported.is_empty() {
            let runs: Vec<String> = self.unreported.iter().map(usize::to_string).collect();
            out.push_str(&format!(
                "gpu-test: run(s) {} failed without a JUnit report (nextest stopped before the tests ran?)\n",
                runs.join(", ")
            ));
        }
        let clean = n - self.failed_runs;
        out.push_str(&format!("gpu-test: {n} runs: {clean} clean, {} with failures\n", self.failed_runs));
        out
    }
}

/// Reads the JUnit report run `run` of `runs` left at `report`, and copies it where `--junit`
/// asked ([`junit_copies`]). `None` when nextest wrote none (it stopped before running tests).
pub(super) fn collect_run(
    report: &Path,
    keep: Option<&Path>,
    run: usize,
    runs: usize,
) -> Result<Option<Vec<TestCase>>> {
    let xml = match fs::read_to_string(report) {
        Ok(xml) => xml,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if keep.is_some() || runs > 1 {
                println!(
                    "gpu-test: no JUnit report at {} (did nextest stop before running tests? does \
                     .config/nextest.toml have [profile.gpu.junit]?)",
                    report.display()
                );
            }
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot read {}: {e}", report.display()).into()),
    };
    for to in keep.map(|keep| junit_copies(keep, run, runs)).unwrap_or_default() {
        if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        fs::write(&to, &xml).map_err(|e| format!("cannot write {}: {e}", to.display()))?;
        println!("gpu-test: JUnit report written to {}", to.display());
    }
    Ok(Some(parse_junit(&xml)))
}

/// Where `--junit PATH` puts run `run`'s report: `PATH` for a single run; with `--repeat`,
/// `PATH.<run>` for every run and `PATH` for the last too, so `PATH` always holds the latest.
pub(super) fn junit_copies(path: &Path, run: usize, runs: usize) -> Vec<PathBuf> {
    if runs <= 1 {
        return vec![path.to_path_buf()];
    }
    let mut numbered = OsString::from(path.as_os_str());
    numbered.push(format!(".{run}"));
    let mut out = vec![PathBuf::from(numbered)];
    if run == runs {
        out.push(path.to_path_buf());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from a real nextest report: a self-closing passed test, a failed one whose output
    /// mentions the element names, an error, a flaky pass and a skipped test.
    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="5" failures="1" errors="1">
    <testsuite name="rocm-kernels::gpu_kernels" tests="3" failures="1">
        <testcase name="gemm::square" classname="rocm-kernels::gpu_kernels" time="0.016"/>
        <testcase name="softmax::rows&lt;f16&gt;" classname="rocm-kernels::gpu_kernels" time="0.111">
            <failure message="thread &apos;x&apos; panicked" type="test failure with exit code 101">boom</failure>
            <system-out>expected &lt;failure&gt; here, no &lt;error</system-out>
        </testcase>
        <testcase classname='rocm-kernels::gpu_kernels' name="rope::long">
            <system-out>&lt;failure/&gt;</system-out>
        </testcase>
    </testsuite>
    <testsuite name="rocm-runtime::gpu_runtime" tests="2" errors="1">
        <testcase name="streams" classname="rocm-runtime::gpu_runtime"><error type="exec failure"/></testcase>
        <testcase name="flaky" classname="rocm-runtime::gpu_runtime"><flakyFailure message="x"/></testcase>
        <testcase name="ignored" classname="rocm-runtime::gpu_runtime"><skipped/></testcase>
    </testsuite>
</testsuites>
"#;

    #[test]
    fn junit_reports_give_each_test_and_whether_it_failed() {
        let cases = parse_junit(REPORT);
        let got: Vec<(&str, bool)> = cases.iter().map(|c| (c.id.as_str(), c.failed)).collect();
        assert_eq!(
            got,
            [
                ("rocm-kernels::gpu_kernels gemm::square", false),
                ("rocm-kernels::gpu_kernels softmax::rows<f16>", true),
                ("rocm-kernels::gpu_kernels rope::long", false),
                ("rocm-runtime::gpu_runtime streams", true),
                ("rocm-runtime::gpu_runtime flaky", false),
                ("rocm-runtime::gpu_runtime ignored", false),
            ]
        );
        assert!(parse_junit("").is_empty());
        assert!(parse_junit("<testsuites><testcase name=\"cut off").is_empty());
    }

    #[test]
    fn attributes_are_found_by_whole_name_and_unescaped() {
        // `classname` contains `name=`: the scan goes attribute by attribute.
        assert_eq!(attribute(r#" classname="a" name="b""#, "name").as_deref(), Some("b"));
        assert_eq!(attribute(r#" name = 'x &amp;lt; y' "#, "name").as_deref(), Some("x &lt; y"));
        assert_eq!(attribute(r#" name="a""#, "classname"), None);
        assert_eq!(tag_end(r#"<testcase name="a>b">"#), Some(20));
    }

    #[test]
    fn partitions_go_to_nextest_as_hash_shares() {
        assert_eq!(parse_partition("2/3"), Ok((2, 3)));
        assert_eq!(partition_args(Some((1, 1)), &[]), ["--partition", "hash:1/1", "--no-tests=warn"]);
        let own = ["--no-tests".to_string(), "fail".to_string()];
        assert_eq!(partition_args(Some((2, 3)), &own), ["--partition", "hash:2/3"]);
        assert!(partition_args(None, &[]).is_empty());
    }

    fn case(id: &str, failed: bool) -> TestCase {
        TestCase { id: id.into(), failed }
    }

    #[test]
    fn the_flake_table_counts_the_runs_each_test_failed_in() {
        let mut repeats = Repeats::default();
        repeats.record(0, Some(&[case("b t1", false), case("b t2", false)]));
        repeats.record(100, Some(&[case("b t1", true), case("b t2", true)]));
        repeats.record(100, Some(&[case("b t1", false), case("b t2", true)]));
        repeats.record(101, None);
        for _ in 0..6 {
            repeats.record(0, Some(&[]));
        }
        assert!(repeats.any_failed());
        assert_eq!(
            repeats.render(),
            "gpu-test: tests that failed:\n\
             \x20 failed  2 of 10 runs  b t2\n\
             \x20 failed  1 of 10 runs  b t1\n\
             gpu-test: run(s) 4 failed without a JUnit report (nextest stopped before the tests ran?)\n\
             gpu-test: 10 runs: 7 clean, 3 with failures\n"
        );
    }

    #[test]
    fn clean_runs_make_a_one_line_table() {
        let mut repeats = Repeats::default();
        repeats.record(0, Some(&[case("b t", false)]));
        repeats.record(0, None);
        assert!(!repeats.any_failed());
        assert_eq!(repeats.render(), "gpu-test: 2 runs: 2 clean, 0 with failures\n");
    }

    #[test]
    fn repeated_runs_keep_a_numbered_report_each_and_the_last_unnumbered() {
        let path = Path::new("out/junit.xml");
        assert_eq!(junit_copies(path, 1, 1), [PathBuf::from("out/junit.xml")]);
        assert_eq!(junit_copies(path, 1, 3), [PathBuf::from("out/junit.xml.1")]);
        assert_eq!(
            junit_copies(path, 3, 3),
            [PathBuf::from("out/junit.xml.3"), PathBuf::from("out/junit.xml")]
        );
    }

    #[test]
    fn a_run_report_is_read_and_kept() {
        let dir = std::env::temp_dir().join(format!("xtask-report-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let report = dir.join("junit.xml");
        let keep = dir.join("kept/junit.xml");
        assert_eq!(collect_run(&report, Some(&keep), 1, 2).unwrap(), None);
        fs::write(&report, REPORT).unwrap();
        let cases = collect_run(&report, Some(&keep), 2, 2).unwrap().unwrap();
        assert_eq!(cases.len(), 6);
        assert_eq!(fs::read_to_string(&keep).unwrap(), REPORT);
        assert_eq!(fs::read_to_string(dir.join("kept/junit.xml.2")).unwrap(), REPORT);
        let _ = fs::remove_dir_all(&dir);
    }
}
