//! The merge loop shared by SentencePiece-style and byte-level BPE: symbols in a linked list,
//! candidate pairs in a priority queue, the best valid pair merged until none is left.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A run of bytes of the text being merged, linked to its neighbours.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    /// Bytes covered; 0 once merged into its left neighbour.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbol `left` with its right neighbour.
#[derive(Debug)]
struct Pair<P> {
    priority: P,
    left: usize,
    right: usize,
    /// Bytes of both symbols when queued; the pair is stale if this changed.
    len: usize,
}

impl<P: PartialOrd> PartialEq for Pair<P> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<P: PartialOrd> Eq for Pair<P> {}

impl<P: PartialOrd> PartialOrd for Pair<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<P: PartialOrd> Ord for Pair<P> {
    /// Higher priority first; among equals the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.partial_cmp(&other.priority).unwrap_or(Ordering::Equal).then(other.left.cmp(&self.left))
    }
}

/// Splits `text` into its characters and merges adjacent symbols while `priority(left, right,
/// joined)` offers a merge, always the highest priority (leftmost among equals) first. Returns the final
/// symbols as byte ranges of `text`, in order.
pub(super) fn merge<P: PartialOrd>(
    text: &str,
    mut priority: impl FnMut(&str, &str, &str) -> Option<P>,
) -> Vec<std::ops::Range<usize>> {
    let mut symbols: Vec<Symbol> = text
        .char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: (start + c.len_utf8() < text.len()).then_some(i + 1),
        })
        .collect();
    let mut queue = BinaryHeap::new();
    let mut offer = |symbols: &[Symbol], queue: &mut BinaryHeap<Pair<P>>, left: Option<usize>, right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (symbols[left], symbols[right]);
        let left_text = &text[l.start..l.start + l.len];
        let right_text = &text[r.start..r.start + r.len];
        let joined = &text[l.start..r.start + r.len];
        if let Some(priority) = priority(left_text, right_text, joined) {
            queue.push(Pair { priority, left, right, len: l.len + r.len });
        }
    };
    for i in 1..symbols.len() {
        offer(&symbols, &mut queue, Some(i - 1), Some(i));
    }
    while let Some(pair) = queue.pop() {
        let (l, r) = (symbols[pair.left], symbols[pair.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != pair.len {
            continue;
        }
        symbols[pair.left].len += r.len;
        symbols[pair.right].len = 0;
        symbols[pair.left].next = r.next;
        if let Some(next) = r.next {
            symbols[next].prev = Some(pair.left);
        }
        offer(&symbols, &mut queue, l.prev, Some(pair.left));
        offer(&symbols, &mut queue, Some(pair.left), r.next);
    }
    symbols.iter().filter(|s| s.len > 0).map(|s| s.start..s.start + s.len).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str, ranks: &[(&str, &str)]) -> Vec<String> {
        let ranges = merge(text, |l, r, joined| {
            assert_eq!(format!("{l}{r}"), joined);
            // Lower rank merges first.
            ranks.iter().position(|&(a, b)| a == l && b == r).map(std::cmp::Reverse)
        });
        ranges.into_iter().map(|r| text[r].to_owned()).collect()
    }

    #[test]
    fn merges_by_priority_then_leftmost() {
        assert_eq!(pieces("aaa", &[("a", "a")]), ["aa", "a"]);
        assert_eq!(pieces("abc", &[("b", "c"), ("a", "b")]), ["a", "bc"]);
        assert_eq!(pieces("abc", &[("a", "b"), ("b", "c"), ("ab", "c")]), ["abc"]);
        assert_eq!(pieces("hello", &[]), ["h", "e", "l", "l", "o"]);
        assert!(pieces("", &[("a", "a")]).is_empty());
    }

    #[test]
    fn keeps_multibyte_characters_whole() {
        assert_eq!(pieces("▁ü▁", &[("ü", "▁")]), ["▁", "ü▁"]);
    }
}
