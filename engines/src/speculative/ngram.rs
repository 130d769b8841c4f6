//! Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last n tokens.

/// Up to `k` tokens that followed the most recent earlier occurrence of the last `n` tokens of `tokens`, trying
/// `n` from `max` down to `min`; empty when no suffix of those lengths occurred before (or `k` is 0).
pub fn propose(tokens: &[u32], min: usize, max: usize, k: usize) -> Vec<u32> {
    if k == 0 {
        return Vec::new();
    }
    let len = tokens.len();
    for n in (min.max(1)..=max).rev() {
        if n >= len {
            continue;
        }
        let suffix = &tokens[len - n..];
        // Start positions of earlier occurrences, latest first; the suffix itself (at len - n) is excluded.
        if let Some(i) = (0..len - n).rev().find(|&i| &tokens[i..i + n] == suffix) {
            let from = i + n;
            return tokens[from..(from + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continues_the_latest_longest_match() {
        // "a b c d a b c e a b" -> the suffix "a b" last occurred before "c e".
        let t = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2];
        assert_eq!(propose(&t, 1, 3, 3), vec![3, 5, 1]);
        assert_eq!(propose(&t, 2, 2, 2), vec![3, 5]);
        // Continuations stop at the end of the sequence.
        assert_eq!(propose(&[7, 8, 7], 1, 1, 5), vec![8, 7]);
        // n = 3: "5 1 2" never occurred before; n = 1 finds the latest "2".
        assert_eq!(propose(&t, 3, 3, 2), Vec::<u32>::new());
        assert_eq!(propose(&t, 1, 1, 1), vec![3]);
        assert!(propose(&t, 1, 3, 0).is_empty());
        assert!(propose(&[1, 2, 3], 1, 2, 4).is_empty());
        assert!(propose(&[1], 1, 2, 4).is_empty());
    }
}
