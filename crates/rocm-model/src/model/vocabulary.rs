//! Token ids back to text, from the GGUF file's own vocabulary (issue 21).
//!
//! Two tokenizer models are understood, as llama.cpp names them in `tokenizer.ggml.model`:
//!
//! - `llama` (SentencePiece): a token's text uses `▁` (U+2581) for a space; byte-fallback tokens
//!   (type BYTE) are written `<0xNN>` and stand for the raw byte `NN`.
//! - `gpt2` (byte-level BPE: Llama 3, Qwen2, GLM-4): every character of a token stands for one
//!   byte through GPT-2's `bytes_to_unicode` table ([`byte_of_char`]).
//!
//! In both, control and unused tokens (`<s>`, `</s>`, `<|eot_id|>`) print nothing and
//! user-defined tokens print their text as it is. The bytes of all tokens are concatenated and
//! decoded as UTF-8 once, at the end, so a character whose bytes are split over tokens comes out
//! whole; invalid UTF-8 becomes U+FFFD. Other tokenizer models are refused.

use super::error::{ModelError, Result};
use crate::gguf::{Array, GgufFile, Metadata};

/// The token strings, one per id.
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
/// The tokenizer model: `llama` or `gpt2` here.
pub const MODEL_KEY: &str = "tokenizer.ggml.model";
/// One type per token (gguf-py's `TokenType`); optional, all NORMAL without it.
pub const TOKEN_TYPE_KEY: &str = "tokenizer.ggml.token_type";

// Token types as gguf-py's `TokenType` numbers them.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

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

/// How a tokenizer model writes a token's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `llama`: `▁` for space, `<0xNN>` byte tokens.
    SentencePiece,
    /// `gpt2`: one character per byte through GPT-2's table.
    ByteLevel,
}

/// Turns token ids into text with the vocabulary of a GGUF file.
///
/// ```
/// use rocm_model::model::Detokenizer;
/// use rocm_model::{GgufFile, GgufWriter};
///
/// let mut w = GgufWriter::new();
/// w.add_metadata("tokenizer.ggml.model", "gpt2")?;
/// w.add_metadata("tokenizer.ggml.tokens", vec!["Hello", "Ġworld", "!"])?;
/// let file = GgufFile::from_bytes(w.to_bytes())?;
/// let detok = Detokenizer::from_file(&file)?.expect("the file has a vocabulary");
/// assert_eq!(detok.decode(&[0, 1, 2])?, "Hello world!");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Detokenizer {
    style: Style,
    /// The bytes each token prints (empty for control tokens).
    pieces: Vec<Vec<u8>>,
}

impl Detokenizer {
    /// The detokenizer of `file`'s vocabulary; `None` when the file has no
    /// `tokenizer.ggml.tokens`. Refuses a missing or unknown `tokenizer.ggml.model`, a
    /// `tokenizer.ggml.token_type` of the wrong type or length, and a malformed byte token.
    pub fn from_file(file: &GgufFile) -> Result<Option<Detokenizer>> {
        Self::from_metadata(file.metadata())
    }

    /// As [`Detokenizer::from_file`], from the metadata alone.
    pub fn from_metadata(metadata: &Metadata) -> Result<Option<Detokenizer>> {
        let Some(tokens) = vocabulary_tokens(metadata)? else {
            return Ok(None);
        };
        let model = match metadata.get(MODEL_KEY) {
            None => return Err(ModelError::MissingKey { key: MODEL_KEY.into() }),
            Some(value) => value.as_str().ok_or_else(|| ModelError::BadMetadata {
                key: MODEL_KEY.into(),
                reason: format!("not a string: {}", value.preview(4, 40)),
            })?,
        };
        let style = match model {
            "llama" => Style::SentencePiece,
            "gpt2" => Style::ByteLevel,
            other => {
                return Err(ModelError::BadMetadata {
                    key: MODEL_KEY.into(),
                    reason: format!("tokenizer model `{other}` is not supported (supported: llama, gpt2)"),
                });
            }
        };
        let types = token_types(metadata, tokens.len())?;
        let pieces = tokens
            .iter()
            .enumerate()
            .map(|(id, text)| {
                let ty = types.as_ref().map_or(NORMAL, |t| t[id]);
                piece(style, ty, text).ok_or_else(|| ModelError::BadMetadata {
                    key: TOKENS_KEY.into(),
                    reason: format!("token {id} {text:?} has type BYTE but is not written <0xNN>"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Detokenizer { style, pieces }))
    }

    /// How many tokens the vocabulary has.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Whether this is a byte-level BPE (`gpt2`) vocabulary rather than a SentencePiece one.
    pub fn is_byte_level(&self) -> bool {
        self.style == Style::ByteLevel
    }

    /// The bytes token `id` prints: empty for control tokens, and possibly part of a UTF-8
    /// character. An error for an id past the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        self.pieces.get(id as usize).map(Vec::as_slice).ok_or_else(|| {
            ModelError::BadInput(format!(
                "token id {id} is out of range: the vocabulary has {} tokens",
                self.pieces.len()
            ))
        })
    }

    /// The text of token `id` alone (lossy where it holds part of a UTF-8 character).
    pub fn token_text(&self, id: u32) -> Result<String> {
        Ok(String::from_utf8_lossy(self.token_bytes(id)?).into_owned())
    }

    /// The text of `ids`: their bytes concatenated, then decoded as UTF-8 (invalid sequences
    /// become U+FFFD). An id past the vocabulary is refused, naming it and its position.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut bytes = Vec::new();
        for (at, &id) in ids.iter().enumerate() {
            let piece = self.pieces.get(id as usize).ok_or_else(|| {
                ModelError::BadInput(format!(
                    "token id {id} (at {at}) is out of range: the vocabulary has {} tokens",
                    self.pieces.len()
                ))
            })?;
            bytes.extend_from_slice(piece);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
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

/// The bytes one token prints; `None` for a BYTE token not written `<0xNN>`.
fn piece(style: Style, ty: i32, text: &str) -> Option<Vec<u8>> {
    Some(match ty {
        CONTROL | UNUSED => Vec::new(),
        USER_DEFINED => text.as_bytes().to_vec(),
        BYTE => vec![byte_token(text)?],
        _ => match style {
            Style::SentencePiece => text.replace('\u{2581}', " ").into_bytes(),
            Style::ByteLevel => byte_level_bytes(text),
        },
    })
}

/// The byte of a SentencePiece byte-fallback token `<0xNN>`.
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A byte-level BPE token's bytes. A character outside GPT-2's table (an added token typed
/// NORMAL) stands for its own UTF-8 bytes.
fn byte_level_bytes(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len());
    for c in text.chars() {
        match byte_of_char(c) {
            Some(b) => bytes.push(b),
            None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    bytes
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
    use crate::GgufWriter;

    fn file(model: Option<&str>, tokens: &[&str], types: Option<Vec<i32>>) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "llama").unwrap();
        if let Some(model) = model {
            w.add_metadata(MODEL_KEY, model).unwrap();
        }
        w.add_metadata(TOKENS_KEY, tokens.to_vec()).unwrap();
        if let Some(types) = types {
            w.add_metadata(TOKEN_TYPE_KEY, types).unwrap();
        }
        GgufFile::from_bytes(w.to_bytes()).unwrap()
    }

    fn detok(model: &str, tokens: &[&str], types: Option<Vec<i32>>) -> Detokenizer {
        Detokenizer::from_file(&file(Some(model), tokens, types)).unwrap().expect("a vocabulary")
    }

    fn err(model: Option<&str>, tokens: &[&str], types: Option<Vec<i32>>) -> String {
        Detokenizer::from_file(&file(model, tokens, types)).unwrap_err().to_string()
    }

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

        // Every byte as its own token decodes back to the bytes.
        let texts: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
        let d = detok("gpt2", &texts.iter().map(String::as_str).collect::<Vec<_>>(), None);
        let all: Vec<u32> = (0..256).collect();
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(d.decode(&all).unwrap(), String::from_utf8_lossy(&bytes));
        assert_eq!(d.decode(&[0x68, 0xC3, 0xA9]).unwrap(), "hé");
    }

    #[test]
    fn sentencepiece_spaces_bytes_and_control_tokens() {
        let tokens = [
            "<unk>", "<s>", "</s>", "▁Hello", "▁world", "<0xE2>", "<0x82>", "<0xAC>", "!", "<0x0A>", "<|x|>",
        ];
        let types = vec![2, 3, 3, 1, 1, 6, 6, 6, 1, 6, 4];
        let d = detok("llama", &tokens, Some(types));
        assert!(!d.is_byte_level());
        assert_eq!(d.len(), tokens.len());
        // '€' is E2 82 AC, split over three byte tokens.
        assert_eq!(d.decode(&[1, 3, 4, 5, 6, 7, 8, 9, 2]).unwrap(), " Hello world€!\n");
        assert_eq!(d.decode(&[10, 3]).unwrap(), "<|x|> Hello", "user-defined tokens print as they are");
        assert_eq!(d.token_text(1).unwrap(), "");
        assert_eq!(d.token_text(3).unwrap(), " Hello");
        assert_eq!(d.token_bytes(6).unwrap(), &[0x82]);
        assert_eq!(d.token_text(6).unwrap(), "\u{FFFD}", "a lone continuation byte");
        assert_eq!(d.decode(&[5, 8]).unwrap(), "\u{FFFD}!", "a cut sequence is lossy");

        let msg = err(Some("llama"), &["<0xZZ>"], Some(vec![6]));
        assert!(msg.contains("token 0") && msg.contains("<0xZZ>") && msg.contains("BYTE"), "{msg}");
    }

    #[test]
    fn byte_level_bpe_tokens() {
        let tokens = ["<|begin_of_text|>", "Hello", "Ġworld", ",", "ĠÃ©", "tÃ©", "Ċ", "Ġ", "<|eot_id|>"];
        let types = vec![3, 1, 1, 1, 1, 1, 1, 1, 3];
        let d = detok("gpt2", &tokens, Some(types));
        assert!(d.is_byte_level());
        assert_eq!(d.decode(&[0, 1, 2, 3, 4, 5, 6, 8]).unwrap(), "Hello world, été\n");
        assert_eq!(d.decode(&[7, 7]).unwrap(), "  ");
        // Without token types every token is normal: the control token's text prints.
        let d = detok("gpt2", &tokens, None);
        assert_eq!(d.decode(&[0, 1]).unwrap(), "<|begin_of_text|>Hello");
    }

    #[test]
    fn out_of_range_ids_are_refused() {
        let d = detok("gpt2", &["a", "b"], None);
        let msg = d.decode(&[0, 1, 2]).unwrap_err().to_string();
        assert!(msg.contains("token id 2 (at 2) is out of range") && msg.contains("2 tokens"), "{msg}");
        let msg = d.token_text(7).unwrap_err().to_string();
        assert!(msg.contains("token id 7"), "{msg}");
        assert_eq!(d.decode(&[]).unwrap(), "");
    }

    #[test]
    fn bad_vocabularies_are_refused() {
        let msg = err(Some("bert"), &["a"], None);
        assert!(msg.contains(MODEL_KEY) && msg.contains("`bert`") && msg.contains("not supported"), "{msg}");
        let msg = err(None, &["a"], None);
        assert!(msg.contains(MODEL_KEY) && msg.contains("missing"), "{msg}");
        let msg = err(Some("llama"), &["a", "b"], Some(vec![1]));
        assert!(msg.contains(TOKEN_TYPE_KEY) && msg.contains("1 types") && msg.contains("2 tokens"), "{msg}");

        let mut w = GgufWriter::new();
        w.add_metadata(MODEL_KEY, "gpt2").unwrap();
        w.add_metadata(TOKENS_KEY, vec![1u32, 2]).unwrap();
        let msg =
            Detokenizer::from_file(&GgufFile::from_bytes(w.to_bytes()).unwrap()).unwrap_err().to_string();
        assert!(msg.contains(TOKENS_KEY) && msg.contains("not an array of strings"), "{msg}");

        // No vocabulary at all: no detokenizer, and no error.
        let w = GgufWriter::new();
        assert!(Detokenizer::from_file(&GgufFile::from_bytes(w.to_bytes()).unwrap()).unwrap().is_none());
    }
}
