//! The allocation ledger and the memory guard.
//!
//! Every device allocation is recorded here before the driver is asked for it: its size, the
//! source location that asked, and the [`Account`] it is charged to. That gives two things:
//!
//! - **The guard.** A request that would take the bytes in use past the budget is refused with
//!   an [`OverBudget`] error before the driver sees it, so rocmforge never drives the GPU out
//!   of memory (a desktop compositor shares it).
//! - **Exact leak checks.** An account (one per test scope) knows to the byte what it has live
//!   and where each live allocation came from, however many other threads allocate meanwhile.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::OverBudget;

/// Identifies one live allocation in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AllocationId(u64);

impl AllocationId {
    #[cfg(test)]
    pub(crate) fn for_tests(n: u64) -> Self {
        AllocationId(n)
    }
}

/// One allocation that has not been freed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAllocation {
    pub bytes: u64,
    /// Where the allocation was asked for.
    pub site: &'static Location<'static>,
    /// The element type of the buffer.
    pub type_name: &'static str,
    /// The account it is charged to, by name.
    pub account: Option<String>,
}

impl std::fmt::Display for LiveAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes of {} allocated at {}", self.bytes, self.type_name, self.site)
    }
}

#[derive(Debug)]
struct Record {
    bytes: u64,
    site: &'static Location<'static>,
    type_name: &'static str,
    account: Option<u64>,
}

#[derive(Debug, Default)]
struct Totals {
    name: String,
    allocated: u64,
    freed: u64,
}

#[derive(Debug)]
struct State {
    budget: u64,
    in_use: u64,
    peak: u64,
    live: HashMap<u64, Record>,
    accounts: HashMap<u64, Totals>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    next_id: AtomicU64,
}

/// The ledger of one backend. Cheap to clone; all clones share one state.
#[derive(Debug, Clone)]
pub struct Ledger {
    shared: Arc<Shared>,
}

impl Ledger {
    pub(crate) fn new(budget: u64) -> Self {
        let state = State { budget, in_use: 0, peak: 0, live: HashMap::new(), accounts: HashMap::new() };
        Ledger { shared: Arc::new(Shared { state: Mutex::new(state), next_id: AtomicU64::new(1) }) }
    }

    /// Whether both handles are the same ledger.
    pub(crate) fn same_as(&self, other: &Ledger) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn next_id(&self) -> u64 {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `bytes` as in use, or refuses when that would pass the budget. `memory` gives
    /// the driver's (free, total) for the refusal message; it is only called on refusal, after
    /// the ledger's lock is released.
    pub(crate) fn reserve(
        &self,
        bytes: u64,
        site: &'static Location<'static>,
        type_name: &'static str,
        account: Option<&Account>,
        memory: impl FnOnce() -> (u64, u64),
    ) -> Result<AllocationId, OverBudget> {
        let id = self.next_id();
        let refused = {
            let mut state = self.shared.state.lock();
            match state.in_use.checked_add(bytes).filter(|&total| total <= state.budget) {
                Some(total) => {
                    state.in_use = total;
                    state.peak = state.peak.max(total);
                    let account = account.map(|a| a.inner.id);
                    if let Some(totals) = account.and_then(|a| state.accounts.get_mut(&a)) {
                        totals.allocated += bytes;
                    }
                    state.live.insert(id, Record { bytes, site, type_name, account });
                    None
                }
                None => Some((state.budget, state.in_use)),
            }
        };
        match refused {
            None => Ok(AllocationId(id)),
            Some((budget, in_use)) => {
                let (free, total) = memory();
                let mut largest = self.live_allocations();
                largest.sort_by_key(|a| std::cmp::Reverse(a.bytes));
                largest.truncate(OverBudget::SITES);
                Err(OverBudget { requested: bytes, budget, in_use, free, total, largest })
            }
        }
    }

    /// Marks an allocation freed (or a reservation the driver then refused).
    pub(crate) fn release(&self, id: AllocationId) {
        let mut state = self.shared.state.lock();
        if let Some(record) = state.live.remove(&id.0) {
            state.in_use -= record.bytes;
            if let Some(totals) = record.account.and_then(|a| state.accounts.get_mut(&a)) {
                totals.freed += record.bytes;
            }
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.shared.state.lock().budget
    }

    /// Changes the budget. Allocations already made stay; later ones are checked against it.
    pub fn set_budget(&self, bytes: u64) {
        self.shared.state.lock().budget = bytes;
    }

    /// Bytes allocated through this ledger and not yet freed.
    pub fn in_use(&self) -> u64 {
        self.shared.state.lock().in_use
    }

    /// The most bytes in use at any one time.
    pub fn peak(&self) -> u64 {
        self.shared.state.lock().peak
    }

    /// Every live allocation, largest first.
    pub fn live_allocations(&self) -> Vec<LiveAllocation> {
        self.collect_live(|_| true)
    }

    /// Opens an account: allocations made on streams created for it are charged to it.
    pub fn open_account(&self, name: impl Into<String>) -> Account {
        let id = self.next_id();
        let totals = Totals { name: name.into(), ..Totals::default() };
        self.shared.state.lock().accounts.insert(id, totals);
        Account { inner: Arc::new(AccountInner { ledger: self.clone(), id }) }
    }

    fn collect_live(&self, keep: impl Fn(&Record) -> bool) -> Vec<LiveAllocation> {
        let state = self.shared.state.lock();
        let mut out: Vec<_> = state
            .live
            .values()
            .filter(|r| keep(r))
            .map(|r| LiveAllocation {
                bytes: r.bytes,
                site: r.site,
                type_name: r.type_name,
                account: r.account.and_then(|a| state.accounts.get(&a)).map(|t| t.name.clone()),
            })
            .collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.to_string().cmp(&b.site.to_string())));
        out
    }
}

#[derive(Debug)]
struct AccountInner {
    ledger: Ledger,
    id: u64,
}

impl Drop for AccountInner {
    fn drop(&mut self) {
        self.ledger.shared.state.lock().accounts.remove(&self.id);
    }
}

/// A named share of the ledger (one per test scope, say) that knows exactly what it has live.
/// Cheap to clone; closed when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Account {
    inner: Arc<AccountInner>,
}

impl Account {
    fn totals<R>(&self, f: impl FnOnce(&Totals) -> R) -> R {
        let state = self.inner.ledger.shared.state.lock();
        f(state.accounts.get(&self.inner.id).expect("an account's totals live as long as it does"))
    }

    pub fn name(&self) -> String {
        self.totals(|t| t.name.clone())
    }

    /// Bytes ever allocated on this account.
    pub fn allocated_bytes(&self) -> u64 {
        self.totals(|t| t.allocated)
    }

    /// Bytes freed of those.
    pub fn freed_bytes(&self) -> u64 {
        self.totals(|t| t.freed)
    }

    /// Bytes allocated on this account and still live.
    pub fn live_bytes(&self) -> u64 {
        self.totals(|t| t.allocated - t.freed)
    }

    /// This account's live allocations, largest first, with the places they were made.
    pub fn live_allocations(&self) -> Vec<LiveAllocation> {
        let id = self.inner.id;
        self.inner.ledger.collect_live(|r| r.account == Some(id))
    }

    pub(crate) fn ledger(&self) -> &Ledger {
        &self.inner.ledger
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here() -> &'static Location<'static> {
        Location::caller()
    }

    #[test]
    fn the_guard_refuses_past_the_budget_and_keeps_working() {
        let ledger = Ledger::new(1000);
        let here_a = here();
        let a = ledger.reserve(600, here_a, "f32", None, || (0, 0)).unwrap();
        let refused = ledger.reserve(401, here(), "f32", None, || (7, 9)).unwrap_err();
        assert_eq!(
            (refused.requested, refused.budget, refused.in_use, refused.free, refused.total),
            (401, 1000, 600, 7, 9)
        );
        // The refusal names where the budget went.
        assert_eq!(refused.largest.len(), 1);
        assert_eq!((refused.largest[0].bytes, refused.largest[0].site), (600, here_a));
        assert!(refused.to_string().contains("largest live: 600 bytes of f32 allocated at"), "{refused}");
        let b = ledger.reserve(400, here(), "f32", None, || (0, 0)).unwrap();
        assert_eq!(ledger.in_use(), 1000);
        ledger.release(a);
        ledger.release(b);
        assert_eq!(ledger.in_use(), 0);
        assert_eq!(ledger.peak(), 1000);
    }

    #[test]
    fn a_huge_request_does_not_wrap() {
        let ledger = Ledger::new(u64::MAX);
        let _a = ledger.reserve(10, here(), "u8", None, || (0, 0)).unwrap();
        assert!(ledger.reserve(u64::MAX, here(), "u8", None, || (0, 0)).is_err());
    }

    #[test]
    fn accounts_count_only_their_own_bytes_and_name_the_sites() {
        let ledger = Ledger::new(1 << 20);
        let mine = ledger.open_account("mine");
        let theirs = ledger.open_account("theirs");
        let a = ledger.reserve(100, here(), "f32", Some(&mine), || (0, 0)).unwrap();
        let b = ledger.reserve(50, here(), "u8", Some(&theirs), || (0, 0)).unwrap();
        let _c = ledger.reserve(7, here(), "u8", None, || (0, 0)).unwrap();
        assert_eq!(mine.live_bytes(), 100);
        assert_eq!(theirs.live_bytes(), 50);
        let live = mine.live_allocations();
        assert_eq!(live.len(), 1);
        assert!(live[0].to_string().contains("ledger.rs"), "{}", live[0]);
        assert_eq!(live[0].account.as_deref(), Some("mine"));
        ledger.release(a);
        ledger.release(b);
        assert_eq!((mine.live_bytes(), mine.allocated_bytes(), mine.freed_bytes()), (0, 100, 100));
        assert_eq!(theirs.live_bytes(), 0);
        assert_eq!(ledger.in_use(), 7);
    }

    #[test]
    fn accounts_are_exact_under_concurrent_use() {
        let ledger = Ledger::new(u64::MAX);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let ledger = ledger.clone();
                s.spawn(move || {
                    let account = ledger.open_account(format!("t{t}"));
                    let mut held = Vec::new();
                    for i in 0..500u64 {
                        held.push(ledger.reserve(i + t, here(), "u8", Some(&account), || (0, 0)).unwrap());
                        if i % 3 == 0 {
                            ledger.release(held.swap_remove(0));
                        }
                    }
                    let expected: u64 = account.live_allocations().iter().map(|a| a.bytes).sum();
                    assert_eq!(account.live_bytes(), expected);
                    held.into_iter().for_each(|id| ledger.release(id));
                    assert_eq!(account.live_bytes(), 0);
                });
            }
        });
        assert_eq!(ledger.in_use(), 0);
    }
}
