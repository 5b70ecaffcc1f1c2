//! Token ids back to text (issue 21). Control and unused tokens (`<s>`, `</s>`, `<|eot_id|>`)
//! print nothing and user-defined tokens print their text as it is. The bytes of all tokens are
//! concatenated and decoded as UTF-8 once, at the end, so a character whose bytes are split over
//! tokens comes out whole; invalid UTF-8 becomes U+FFFD.

use super::{BYTE, CONTROL, Style, TOKENS_KEY, UNUSED, USER_DEFINED, Vocabulary, byte_of_char, byte_token};
use crate::gguf::{GgufFile, Metadata};
use crate::model::error::{ModelError, Result};

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
        let Some(vocab) = Vocabulary::read(metadata)? else {
            return Ok(None);
        };
        let style = vocab.style;
        let pieces = vocab
            .tokens
            .iter()
            .enumerate()
            .map(|(id, text)| {
                piece(style, vocab.ty(id), text).ok_or_else(|| ModelError::BadMetadata {
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

    /// Text as the ids come, for a generation loop that prints while it samples: each
    /// [`TextStream::push`] gives the text its token completes, holding back the bytes of a
    /// character the next token may finish. Everything a stream gives, [`TextStream::finish`]
    /// included, is exactly what [`Detokenizer::decode`] gives for the same ids.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream { detok: self, pending: Vec::new(), pushed: 0 }
    }
}

/// Incremental detokenization ([`Detokenizer::stream`]).
#[derive(Debug)]
pub struct TextStream<'d> {
    detok: &'d Detokenizer,
    /// Bytes of a character not yet complete (at most 3).
    pending: Vec<u8>,
    /// Ids pushed so far, for messages.
    pushed: usize,
}

impl TextStream<'_> {
    /// The text `id` completes: the bytes held back and the token's, up to the last complete
    /// character (an invalid sequence becomes U+FFFD, as in [`Detokenizer::decode`]). An id past
    /// the vocabulary is refused, naming it and its position, and changes nothing.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let at = self.pushed;
        let piece = self.detok.token_bytes(id).map_err(|_| {
            ModelError::BadInput(format!(
                "token id {id} (at {at}) is out of range: the vocabulary has {} tokens",
                self.detok.len()
            ))
        })?;
        self.pushed += 1;
        self.pending.extend_from_slice(piece);
        let mut text = String::new();
        let mut rest = self.pending.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    text.push_str(std::str::from_utf8(valid).expect("valid up to here"));
                    match e.error_len() {
                        // A character the next token may complete: held back.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        Ok(text)
    }

    /// What is left: a character the ids ended inside of, as U+FFFD; empty otherwise.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;
    use crate::model::vocabulary::{MODEL_KEY, TOKEN_TYPE_KEY, char_of_byte};

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

    /// Every byte as its own token decodes back to the bytes.
    #[test]
    fn every_byte_of_gpt2s_table_decodes() {
        let texts: Vec<String> = (0..=255u8).map(|b| char_of_byte(b).to_string()).collect();
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

    /// Pushed one at a time, ids give exactly what decoding them together gives: characters
    /// split over byte tokens held back until whole, cut or invalid sequences as U+FFFD.
    #[test]
    fn a_stream_gives_what_decode_gives() {
        let tokens =
            ["<unk>", "<s>", "▁Hello", "<0xE2>", "<0x82>", "<0xAC>", "<0xC3>", "<0xFF>", "!", "<0x41>"];
        let types = vec![2, 3, 1, 6, 6, 6, 6, 6, 1, 6];
        let d = detok("llama", &tokens, Some(types));
        let mut s = d.stream();
        let got: Vec<String> = [1, 2, 3, 4, 5, 8].iter().map(|&id| s.push(id).unwrap()).collect();
        assert_eq!(got, ["", " Hello", "", "", "€", "!"]);
        assert_eq!(s.finish(), "");
        // Every sequence of up to 4 ids from a set with cut, invalid and control tokens.
        let ids = [1u32, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut seqs: Vec<Vec<u32>> = vec![vec![]];
        for _ in 0..4 {
            let longer: Vec<Vec<u32>> = seqs
                .iter()
                .filter(|s| s.len() == seqs.last().unwrap().len())
                .flat_map(|s| ids.iter().map(move |&i| [s.clone(), vec![i]].concat()))
                .collect();
            seqs.extend(longer);
        }
        for seq in &seqs {
            let mut s = d.stream();
            let mut text: String = seq.iter().map(|&id| s.push(id).unwrap()).collect();
            text.push_str(&s.finish());
            assert_eq!(text, d.decode(seq).unwrap(), "{seq:?}");
        }
        let mut s = d.stream();
        s.push(3).unwrap();
        let msg = s.push(99).unwrap_err().to_string();
        assert!(msg.contains("token id 99 (at 1)") && msg.contains("10 tokens"), "{msg}");
        assert_eq!(s.push(4).unwrap(), "", "a refused id changes nothing");
        assert_eq!(s.finish(), "\u{FFFD}", "the ids ended inside a character");
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
