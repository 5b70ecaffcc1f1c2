//! Merging neighbouring symbols, best pair first: the loop both tokenizer models share.
//!
//! A word starts as one symbol per character (SentencePiece) or byte (byte-level BPE). The
//! model says, for two neighbours, whether they merge and how good that merge is; the best
//! merge anywhere in the word is made first, on a tie the leftmost, and the new symbol's pairs
//! with its neighbours are weighed in turn, until no pair merges. A heap of candidate pairs
//! keeps that O(n log n) in the word's length; a candidate whose symbols have changed since it
//! was weighed is dropped when it comes up (symbols only grow to the right, so a symbol's start
//! never changes and its end tells whether it is the one that was weighed).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One symbol of a word: the byte range it covers in the word's text and its token, if the
/// vocabulary has one for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Symbol {
    pub start: usize,
    pub end: usize,
    pub id: Option<u32>,
}

/// A pair that may merge: its priority (greater merges first), the left symbol's index and
/// both symbols' ends when it was weighed, and the merged token.
struct Candidate<P> {
    priority: P,
    left: usize,
    left_end: usize,
    right_end: usize,
    id: u32,
}

impl<P: Ord> Ord for Candidate<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        // The heap pops the greatest: higher priority first, then the leftmost pair.
        self.priority.cmp(&other.priority).then_with(|| other.left.cmp(&self.left))
    }
}

impl<P: Ord> PartialOrd for Candidate<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<P: Ord> PartialEq for Candidate<P> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<P: Ord> Eq for Candidate<P> {}

/// Merges `symbols` (adjacent, in order) while `pair(left, right)` names a merge: `Some((priority,
/// merged token))`. Returns the symbols left, in order.
pub(super) fn merge_symbols<P: Ord>(
    mut symbols: Vec<Symbol>,
    pair: impl Fn(&Symbol, &Symbol) -> Option<(P, u32)>,
) -> Vec<Symbol> {
    let n = symbols.len();
    // Neighbours as a linked list over the original indices; usize::MAX for none.
    const NONE: usize = usize::MAX;
    let mut next: Vec<usize> = (1..=n).map(|i| if i < n { i } else { NONE }).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| if i > 0 { i - 1 } else { NONE }).collect();
    let mut alive = vec![true; n];
    let mut heap = BinaryHeap::new();
    let weigh = |heap: &mut BinaryHeap<Candidate<P>>, symbols: &[Symbol], left: usize, right: usize| {
        if let Some((priority, id)) = pair(&symbols[left], &symbols[right]) {
            let left_end = symbols[left].end;
            let right_end = symbols[right].end;
            heap.push(Candidate { priority, left, left_end, right_end, id });
        }
    };
    for left in 0..n.saturating_sub(1) {
        weigh(&mut heap, &symbols, left, left + 1);
    }
    while let Some(c) = heap.pop() {
        let right = next[c.left];
        let current = alive[c.left]
            && symbols[c.left].end == c.left_end
            && right != NONE
            && symbols[right].end == c.right_end;
        if !current {
            continue;
        }
        symbols[c.left].end = c.right_end;
        symbols[c.left].id = Some(c.id);
        alive[right] = false;
        next[c.left] = next[right];
        if next[right] != NONE {
            prev[next[right]] = c.left;
        }
        if prev[c.left] != NONE {
            weigh(&mut heap, &symbols, prev[c.left], c.left);
        }
        if next[c.left] != NONE {
            weigh(&mut heap, &symbols, c.left, next[c.left]);
        }
    }
    symbols.into_iter().zip(alive).filter_map(|(s, a)| a.then_some(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;

    fn chars(text: &str) -> Vec<Symbol> {
        text.char_indices().map(|(i, c)| Symbol { start: i, end: i + c.len_utf8(), id: None }).collect()
    }

    fn texts<'a>(text: &'a str, symbols: &[Symbol]) -> Vec<&'a str> {
        symbols.iter().map(|s| &text[s.start..s.end]).collect()
    }

    /// Ranked merges (lower rank first), the way byte-level BPE weighs them.
    fn ranked(text: &str, merges: &[(&str, &str)]) -> Vec<String> {
        let rank = |l: &str, r: &str| merges.iter().position(|&(a, b)| a == l && b == r);
        let out = merge_symbols(chars(text), |l, r| {
            rank(&text[l.start..l.end], &text[r.start..r.end]).map(|k| (Reverse(k), 0))
        });
        texts(text, &out).into_iter().map(str::to_string).collect()
    }

    #[test]
    fn the_best_pair_merges_first_and_ties_go_left() {
        assert_eq!(ranked("abc", &[("b", "c"), ("a", "b")]), ["a", "bc"]);
        assert_eq!(ranked("abc", &[("a", "b"), ("b", "c")]), ["ab", "c"]);
        // "a a a": the leftmost pair merges, then nothing pairs "aa" with "a".
        assert_eq!(ranked("aaa", &[("a", "a")]), ["aa", "a"]);
        assert_eq!(ranked("aaaa", &[("a", "a"), ("aa", "aa")]), ["aaaa"]);
        // A merge made later in the word than a better one still happens once it is best.
        assert_eq!(ranked("abcd", &[("c", "d"), ("a", "b"), ("ab", "cd")]), ["abcd"]);
        assert_eq!(ranked("", &[("a", "b")]), Vec::<String>::new());
        assert_eq!(ranked("é!", &[("é", "!")]), ["é!"]);
    }

    /// A stale candidate (its left symbol has grown since) must not merge.
    #[test]
    fn stale_pairs_are_dropped() {
        // "b c" is weighed first but "a b" merges before it; "ab c" is not a merge.
        assert_eq!(ranked("abc", &[("a", "b"), ("b", "c")]), ["ab", "c"]);
        assert_eq!(ranked("xabc", &[("a", "b"), ("b", "c"), ("x", "ab")]), ["xab", "c"]);
    }

    #[test]
    fn merged_ids_are_kept() {
        let text = "ab";
        let out = merge_symbols(chars(text), |_, _| Some((0, 7)));
        assert_eq!(out, [Symbol { start: 0, end: 2, id: Some(7) }]);
    }
}
