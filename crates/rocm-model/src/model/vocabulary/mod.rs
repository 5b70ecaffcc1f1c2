//! The GGUF file's own vocabulary (issue 21): token ids back to text ([`Detokenizer`]) and text
//! to token ids ([`Tokenizer`]).
//!
//! Two tokenizer models are understood, as llama.cpp names them in `tokenizer.ggml.model`:
//!
//! - `llama` (SentencePiece, Llama 2, Mistral, Phi-3): a token's text uses `▁` (U+2581) for a
//!   space; byte-fallback tokens (type BYTE) are written `<0xNN>` and stand for the raw byte `NN`;
//!   `tokenizer.ggml.scores` decides which pieces merge first.
//! - `gpt2` (byte-level BPE: Llama 3, Qwen2, GLM-4): every character of a token stands for one
//!   byte through GPT-2's `bytes_to_unicode` table ([`byte_of_char`]); `tokenizer.ggml.merges`
//!   ranks the merges and `tokenizer.ggml.pre` names how text is cut into words first.
//!
//! Layout: this module reads what both directions share (the token strings, their types, the
//! byte table); `detokenize` turns ids into text, `tokenize` text into ids through `spm`
//! (SentencePiece) or `bpe` (byte-level BPE, cutting words with `pretokenize`), which both merge
//! symbols with `merge`.

mod bpe;
mod detokenize;
mod merge;
mod pretokenize;
mod spm;
mod tokenize;

pub use detokenize::{Detokenizer, TextStream};
pub use tokenize::{Encode, Tokenizer};

use super::error::{ModelError, Result};
use crate::gguf::{Array, Metadata};

/// The token strings, one per id.
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
/// The tokenizer model: `llama` or `gpt2` here.
pub const MODEL_KEY: &str = "tokenizer.ggml.model";
/// One type per token (gguf-py's `TokenType`); optional, all NORMAL without it.
pub const TOKEN_TYPE_KEY: &str = "tokenizer.ggml.token_type";
/// SentencePiece: one score per token; the pair whose merge has the higher score merges first.
pub const SCORES_KEY: &str = "tokenizer.ggml.scores";
/// Byte-level BPE: the merges, `"left right"`, in the order they apply.
pub const MERGES_KEY: &str = "tokenizer.ggml.merges";
/// Byte-level BPE: the name of the pre-tokenizer (`llama-bpe`, `qwen2`, `gpt-2`, ...).
pub const PRE_KEY: &str = "tokenizer.ggml.pre";

// Token types as gguf-py's `TokenType` numbers them.
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

/// How a tokenizer model writes a token's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `llama`: `▁` for space, `<0xNN>` byte tokens.
    SentencePiece,
    /// `gpt2`: one character per byte through GPT-2's table.
    ByteLevel,
}

impl Style {
    /// `tokenizer.ggml.model`, which a file with a vocabulary must state.
    fn of(metadata: &Metadata) -> Result<Style> {
        match required_str(metadata, MODEL_KEY)? {
            "llama" => Ok(Style::SentencePiece),
            "gpt2" => Ok(Style::ByteLevel),
            other => Err(ModelError::BadMetadata {
                key: MODEL_KEY.into(),
                reason: format!("tokenizer model `{other}` is not supported (supported: llama, gpt2)"),
            }),
        }
    }
}

/// What both directions read first: the token strings, the tokenizer model and the token types.
struct Vocabulary<'m> {
    tokens: &'m [String],
    style: Style,
    /// One a token; `None` where the file has none (every token is then NORMAL).
    types: Option<Vec<i32>>,
}

impl<'m> Vocabulary<'m> {
    /// `None` when the file has no `tokenizer.ggml.tokens`; refuses a missing or unknown
    /// tokenizer model and token types of the wrong type or length.
    fn read(metadata: &'m Metadata) -> Result<Option<Vocabulary<'m>>> {
        let Some(tokens) = vocabulary_tokens(metadata)? else {
            return Ok(None);
        };
        let style = Style::of(metadata)?;
        let types = token_types(metadata, tokens.len())?;
        Ok(Some(Vocabulary { tokens, style, types }))
    }

    /// The type of token `id` (NORMAL where the file states no types).
    fn ty(&self, id: usize) -> i32 {
        self.types.as_ref().map_or(NORMAL, |t| t[id])
    }
}

/// The vocabulary's token strings: `None` when the file states none, an error when
/// `tokenizer.ggml.tokens` is something other than an array of strings.
pub(crate) fn vocabulary_tokens(metadata: &Metadata) -> Result<Option<&[String]>> {
    let Some(value) = metadata.get(TOKENS_KEY) else {
        return Ok(None);
    };
    match value.as_array().and_then(Array::as_strings) {
        Some(tokens) => Ok(Some(tokens)),
        None => Err(ModelError::BadMetadata {
            key: TOKENS_KEY.into(),
            reason: format!("not an array of strings: {}", value.preview(4, 40)),
        }),
    }
}

/// A string-valued key the vocabulary needs.
fn required_str<'m>(metadata: &'m Metadata, key: &str) -> Result<&'m str> {
    let value = metadata.get(key).ok_or_else(|| ModelError::MissingKey { key: key.into() })?;
    value.as_str().ok_or_else(|| ModelError::BadMetadata {
        key: key.into(),
        reason: format!("not a string: {}", value.preview(4, 40)),
    })
}

/// A bool-valued key, `default` where absent.
fn flag(metadata: &Metadata, key: &str, default: bool) -> Result<bool> {
    match metadata.get(key) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| ModelError::BadMetadata {
            key: key.into(),
            reason: format!("not a bool: {}", v.preview(4, 40)),
        }),
    }
}

/// A key naming a token (`tokenizer.ggml.bos_token_id`), checked against the `n_tokens` of the
/// vocabulary; `None` where absent.
fn token_id(metadata: &Metadata, key: &str, n_tokens: usize) -> Result<Option<u32>> {
    let Some(v) = metadata.get(key) else {
        return Ok(None);
    };
    match v.as_u64() {
        Some(id) if (id as usize) < n_tokens => Ok(Some(id as u32)),
        _ => Err(ModelError::BadMetadata {
            key: key.into(),
            reason: format!("{v} is not a token id below {n_tokens}"),
        }),
    }
}

/// `tokenizer.ggml.token_type`, checked: integers, one per token. `None` when absent.
fn token_types(metadata: &Metadata, n_tokens: usize) -> Result<Option<Vec<i32>>> {
    let Some(value) = metadata.get(TOKEN_TYPE_KEY) else {
        return Ok(None);
    };
    let bad = |reason: String| ModelError::BadMetadata { key: TOKEN_TYPE_KEY.into(), reason };
    let array = value.as_array().ok_or_else(|| bad(format!("not an array: {}", value.preview(4, 40))))?;
    if array.len() != n_tokens {
        return Err(bad(format!("{} types for the {n_tokens} tokens of {TOKENS_KEY}", array.len())));
    }
    (0..array.len())
        .map(|i| {
            let v = array.get(i).and_then(|v| v.as_i64());
            v.and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| bad(format!("element {i} is not a 32-bit integer: {}", array.preview(4, 40))))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The byte of a SentencePiece byte-fallback token `<0xNN>`.
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Whether GPT-2's `bytes_to_unicode` maps byte `b` to the character of the same code point:
/// `'!'..='~'`, `'¡'..='¬'` and `'®'..='ÿ'`.
fn is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2's `bytes_to_unicode`: printable bytes are their own character; the other 68 bytes, in
/// increasing order, are U+0100, U+0101, ...
pub fn char_of_byte(b: u8) -> char {
    if is_printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !is_printable(x)).count() as u32;
    char::from_u32(0x100 + n).expect("U+0100..U+0143 are characters")
}

/// The inverse of [`char_of_byte`]; `None` for a character outside the table.
pub fn byte_of_char(c: char) -> Option<u8> {
    let code = c as u32;
    if let Ok(b) = u8::try_from(code) {
        return is_printable(b).then_some(b);
    }
    let n = code.checked_sub(0x100)?;
    (0..=255u8).filter(|&b| !is_printable(b)).nth(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2's table is a bijection of the 256 bytes onto 256 characters, printable bytes map
    /// to themselves and the others to U+0100.., in order.
    #[test]
    fn the_gpt2_byte_table_round_trips() {
        let chars: Vec<char> = (0..=255u8).map(char_of_byte).collect();
        for b in 0..=255u8 {
            assert_eq!(byte_of_char(chars[b as usize]), Some(b), "byte {b}");
        }
        let mut sorted = chars.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
        assert_eq!(char_of_byte(b'A'), 'A');
        assert_eq!(char_of_byte(0), '\u{100}');
        assert_eq!(char_of_byte(b' '), 'Ġ');
        assert_eq!(char_of_byte(b'\n'), 'Ċ');
        assert_eq!(char_of_byte(0xAD), '\u{143}', "the last of the 68");
        assert_eq!(chars.iter().filter(|&&c| c as u32 >= 0x100).count(), 68);
        assert_eq!(byte_of_char('\u{144}'), None);
        assert_eq!(byte_of_char(' '), None);
        assert_eq!(byte_of_char('é'), Some(0xE9));
    }

    #[test]
    fn byte_tokens_are_two_hex_digits() {
        assert_eq!(byte_token("<0x0A>"), Some(10));
        assert_eq!(byte_token("<0xff>"), Some(255));
        for bad in ["<0xZZ>", "<0x0>", "<0x100>", "0x0A", "<0x0A"] {
            assert_eq!(byte_token(bad), None, "{bad}");
        }
    }
}
