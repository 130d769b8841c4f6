//! Character classes as llama.cpp's pre-tokenizers see them (Unicode general categories and
//! `White_Space`), and GPT-2's byte-to-character mapping for byte-level BPE.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

const LETTER: u8 = 1;
const NUMBER: u8 = 2;
const PUNCTUATION: u8 = 4;
const WHITESPACE: u8 = 8;
const MARK: u8 = 16;
const SYMBOL: u8 = 32;
const CONTROL: u8 = 64;

/// The class of one code point: at most one of letter (`\p{L}`), number (`\p{N}`), punctuation
/// (`\p{P}`), mark (`\p{M}`), symbol (`\p{S}`) and control (`\p{C}` but unassigned), plus whether it
/// is whitespace (`\s`, Unicode `White_Space`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CharClass(u8);

impl CharClass {
    /// `\p{L}`.
    pub(super) fn is_letter(self) -> bool {
        self.0 & LETTER != 0
    }

    /// `\p{N}`.
    pub(super) fn is_number(self) -> bool {
        self.0 & NUMBER != 0
    }

    /// `\p{P}`.
    pub(super) fn is_punctuation(self) -> bool {
        self.0 & PUNCTUATION != 0
    }

    /// `\p{M}`.
    pub(super) fn is_mark(self) -> bool {
        self.0 & MARK != 0
    }

    /// `\p{S}`.
    pub(super) fn is_symbol(self) -> bool {
        self.0 & SYMBOL != 0
    }

    /// `\p{Cc}`, `\p{Cf}` or `\p{Co}`: llama.cpp's control flag (unassigned code points are not).
    pub(super) fn is_control(self) -> bool {
        self.0 & CONTROL != 0
    }

    /// `\s`.
    pub(super) fn is_whitespace(self) -> bool {
        self.0 & WHITESPACE != 0
    }

    /// `[^\s\p{L}\p{N}]`: anything that is neither whitespace, a letter nor a number.
    pub(super) fn is_other(self) -> bool {
        self.0 & (LETTER | NUMBER | WHITESPACE) == 0
    }
}

/// The class of `c`.
pub(super) fn class(c: char) -> CharClass {
    CharClass(table()[c as usize])
}

/// One byte of flags per code point, built once from regex-syntax's Unicode tables.
fn table() -> &'static [u8] {
    static TABLE: OnceLock<Box<[u8]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![0u8; 0x11_0000].into_boxed_slice();
        let classes = [
            (r"\p{L}", LETTER),
            (r"\p{N}", NUMBER),
            (r"\p{P}", PUNCTUATION),
            (r"\p{M}", MARK),
            (r"\p{S}", SYMBOL),
            (r"\s", WHITESPACE),
            (r"[\p{Cc}\p{Cf}\p{Co}]", CONTROL),
        ];
        for (pattern, flag) in classes {
            let hir = regex_syntax::parse(pattern).expect("built-in Unicode class parses");
            let HirKind::Class(Class::Unicode(set)) = hir.kind() else {
                unreachable!("{pattern} is a Unicode class");
            };
            for range in set.ranges() {
                for cp in range.start() as usize..=range.end() as usize {
                    table[cp] |= flag;
                }
            }
        }
        table
    })
}

/// Whether `c` is a Han character, by llama.cpp's ranges (`unicode_cpt_is_han`: the CJK unified
/// ideographs, their extensions A-F and the compatibility ideographs).
pub(super) fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF | 0x2CEB0..=0x2EBEF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// GPT-2's printable stand-in for every byte: printable Latin-1 bytes stand for themselves, the
/// others (controls, space, 0x7F-0xA0, 0xAD) become U+0100 onwards in byte order.
const BYTE_CHARS: [char; 256] = {
    let mut chars = ['\0'; 256];
    let mut next = 0x100;
    let mut b = 0;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        let cp = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        chars[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => panic!("byte stand-ins are valid chars"),
        };
        b += 1;
    }
    chars
};

/// The character standing for byte `b` in byte-level BPE vocabularies.
pub(super) fn byte_char(b: u8) -> char {
    BYTE_CHARS[b as usize]
}

/// The byte that `c` stands for in byte-level BPE vocabularies, if any.
pub(super) fn char_byte(c: char) -> Option<u8> {
    match c as u32 {
        cp @ (0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF) => Some(cp as u8),
        cp @ 0x100..=0x143 => BYTE_CHARS.iter().position(|&s| s as u32 == cp).map(|b| b as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_unicode_categories() {
        assert!(class('a').is_letter() && class('Ж').is_letter() && class('我').is_letter());
        assert!(class('3').is_number() && class('½').is_number() && class('٣').is_number());
        assert!(class('!').is_punctuation() && class('、').is_punctuation());
        assert!(!class('$').is_punctuation() && class('$').is_other() && class('$').is_symbol());
        assert!(class('\u{301}').is_mark() && !class('\u{301}').is_letter() && class('🦙').is_symbol());
        assert!(is_han('我') && is_han('\u{20000}') && !is_han('ア') && !is_han('a'));
        assert!(class('🦙').is_other() && class('\u{0378}').is_other());
        assert!(class('\u{7}').is_control() && class('\u{200B}').is_control() && class('\u{E000}').is_control());
        assert!(!class('\u{0378}').is_control() && !class('a').is_control());
        for ws in [' ', '\t', '\n', '\u{0B}', '\u{0C}', '\r', '\u{85}', '\u{A0}', '\u{3000}'] {
            assert!(class(ws).is_whitespace(), "{ws:?}");
        }
        for not_ws in ['\u{1C}', '\u{200B}', 'x'] {
            assert!(!class(not_ws).is_whitespace(), "{not_ws:?}");
        }
    }

    #[test]
    fn byte_chars_round_trip() {
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_char(0xAD), '\u{143}');
        for b in 0..=255u8 {
            assert_eq!(char_byte(byte_char(b)), Some(b));
        }
        assert_eq!(char_byte(' '), None);
        assert_eq!(char_byte('\u{144}'), None);
    }
}
