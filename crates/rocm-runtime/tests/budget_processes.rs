//! The kernel, not the process, gives a shared budget back: a reservation held by a process
//! that is killed outright (SIGKILL, as a test timeout does) is free again once it is gone.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rocm_runtime::{BudgetError, BudgetFigure, SLOT_BYTES, SharedBudget};

/// Set to a budget root, it makes this test binary the child that holds the whole budget.
const CHILD_ENV: &str = "ROCMFORGE_BUDGET_TEST_CHILD";
const SLOTS: u64 = 4;

fn join(root: &Path) -> SharedBudget {
    SharedBudget::join_in(root, "test-device", || {
        Ok(BudgetFigure { bytes: SLOTS * SLOT_BYTES, how: "four slots for a test".into() })
    })
    .unwrap()
}

/// Takes every slot, says so, then holds them until killed. It also leaves when its stdin
/// closes, so that it never outlives a parent that failed before killing it.
fn act_as_child(root: &Path) {
    let budget = join(root);
    let _all = budget.reserve(budget.budget_bytes(), "budget_processes child", Duration::ZERO).unwrap();
    println!("reserved");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// Kills the child however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_killed_process_gives_its_reservation_back() {
    if let Some(root) = std::env::var_os(CHILD_ENV) {
        return act_as_child(Path::new(&root));
    }
    let start = Instant::now();
    let root: PathBuf =
        std::env::temp_dir().join(format!("rocmforge-budget-processes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    // This very test, run again by name in a process of its own.
    let mut child = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args(["a_killed_process_gives_its_reservation_back", "--exact", "--nocapture"])
            .env(CHILD_ENV, &root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child_pid = child.0.id();
    // libtest prints its own lines around ours, and may start a line with the test's name.
    let reserved = BufReader::new(child.0.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|line| line.trim_end().ends_with("reserved"));
    assert!(reserved, "the child ended without reserving the budget");

    let budget = join(&root);
    assert_eq!(budget.slot_count(), SLOTS);
    let error = budget.reserve(1, "parent", Duration::from_millis(50)).unwrap_err();
    assert!(matches!(error, BudgetError::Timeout { .. }), "{error}");
    let text = error.to_string();
    let needle = format!("pid {child_pid} `budget_processes child`");
    assert!(text.contains(&needle), "`{needle}` missing from: {text}");

    child.0.kill().unwrap();
    let status = child.0.wait().unwrap();
    #[cfg(unix)]
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status}");
    let all = budget.reserve(budget.budget_bytes(), "parent", Duration::ZERO).unwrap();
    assert_eq!(all.slot_count(), SLOTS);

    drop((all, budget));
    std::fs::remove_dir_all(&root).unwrap();
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
}
