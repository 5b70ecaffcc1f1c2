//! Text to token ids through the GGUF file's own vocabulary (issue 21).
//!
//! Special tokens come out of the text first: user-defined tokens (type USER_DEFINED, e.g.
//! Phi-3's `<|user|>`) wherever their text appears, control tokens (`<|begin_of_text|>`,
//! `<s>`) only when asked to ([`Encode::parse_special`]; otherwise their text is ordinary text),
//! the longest one first where several start at the same place. The text between them goes
//! through the vocabulary's model: SentencePiece (`spm`) or byte-level BPE (`bpe`). With
//! [`Encode::add_special`] the beginning-of-sequence token goes in front where the file asks for
//! it (`tokenizer.ggml.add_bos_token`; SentencePiece vocabularies by default) and the
//! end-of-sequence token at the end where it asks for that.
//!
//! Checked against Hugging Face `tokenizers` on llama.cpp's vocabulary test files
//! (`tests/host/llama_vocabs.rs`): Llama 2 and Phi-3 (SentencePiece), Llama 3, Qwen2 and GPT-2
//! (byte-level BPE), 46 texts each.

use std::collections::HashMap;

use super::bpe::Bpe;
use super::spm::Spm;
use super::{CONTROL, Style, USER_DEFINED, Vocabulary, flag, token_id};
use crate::gguf::{GgufFile, Metadata};
use crate::model::error::{ModelError, Result};

const BOS_KEY: &str = "tokenizer.ggml.bos_token_id";
const EOS_KEY: &str = "tokenizer.ggml.eos_token_id";
const ADD_BOS_KEY: &str = "tokenizer.ggml.add_bos_token";
const ADD_EOS_KEY: &str = "tokenizer.ggml.add_eos_token";
/// End-of-turn and end-of-message tokens, where the converter names them.
const EOT_KEY: &str = "tokenizer.ggml.eot_token_id";
const EOM_KEY: &str = "tokenizer.ggml.eom_token_id";

/// Control tokens that end a model's turn by their text, from the models' generation configs:
/// Llama 3's `<|eot_id|>` and `<|eom_id|>`, Qwen2's `<|im_end|>`, Phi-3's `<|end|>`, Gemma's
/// `<end_of_turn>`, `<|endoftext|>` and `<|end_of_text|>`, and GLM-4's `<|user|>` and
/// `<|observation|>` (it stops when it would hand the turn back).
const END_OF_TURN_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|user|>",
    "<|observation|>",
];

/// How [`Tokenizer::encode`] treats special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encode {
    /// Put the beginning (and end) of sequence tokens around the text where the file asks for
    /// them.
    pub add_special: bool,
    /// Control tokens written in the text (`<|eot_id|>`) become those tokens.
    pub parse_special: bool,
}

impl Encode {
    /// Plain text: no tokens added, control tokens' text is text (Hugging Face's
    /// `encode(text, add_special_tokens=False)` on text without special tokens).
    pub const TEXT: Encode = Encode { add_special: false, parse_special: false };
    /// A prompt: the beginning-of-sequence token as the file asks, control tokens parsed (so a
    /// chat template's markers become their tokens).
    pub const PROMPT: Encode = Encode { add_special: true, parse_special: true };
}

#[derive(Debug)]
enum Model {
    SentencePiece(Spm),
    ByteLevel(Bpe),
}

/// A special token that text can name.
#[derive(Debug)]
struct Special {
    text: String,
    id: u32,
    control: bool,
}

/// Turns text into token ids with the vocabulary of a GGUF file.
///
/// ```
/// use rocm_model::model::{Encode, Tokenizer};
/// use rocm_model::{GgufFile, GgufWriter};
///
/// let mut w = GgufWriter::new();
/// w.add_metadata("tokenizer.ggml.model", "gpt2")?;
/// w.add_metadata("tokenizer.ggml.pre", "llama-bpe")?;
/// w.add_metadata("tokenizer.ggml.tokens", vec!["H", "i", "Hi", "!", "Ġ", "Ġ!"])?;
/// w.add_metadata("tokenizer.ggml.merges", vec!["H i", "Ġ !"])?;
/// let file = GgufFile::from_bytes(w.to_bytes())?;
/// let tok = Tokenizer::from_file(&file)?.expect("the file has a vocabulary");
/// assert_eq!(tok.encode("Hi !", Encode::TEXT)?, [2, 5]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Tokenizer {
    model: Model,
    /// Token text to id (the first id where two tokens share a text).
    ids: HashMap<String, u32>,
    /// Longest first.
    specials: Vec<Special>,
    n_tokens: usize,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    /// The tokens that end a generation, ascending.
    end_of_generation: Vec<u32>,
}

impl Tokenizer {
    /// The tokenizer of `file`'s vocabulary; `None` when the file has no
    /// `tokenizer.ggml.tokens`. Refuses an unknown tokenizer model or pre-tokenizer (named),
    /// missing merges or scores, and malformed ones.
    pub fn from_file(file: &GgufFile) -> Result<Option<Tokenizer>> {
        Self::from_metadata(file.metadata())
    }

    /// As [`Tokenizer::from_file`], from the metadata alone.
    pub fn from_metadata(metadata: &Metadata) -> Result<Option<Tokenizer>> {
        let Some(vocab) = Vocabulary::read(metadata)? else {
            return Ok(None);
        };
        let (tokens, style) = (vocab.tokens, vocab.style);
        let mut ids = HashMap::with_capacity(tokens.len());
        for (id, text) in tokens.iter().enumerate() {
            ids.entry(text.clone()).or_insert(id as u32);
        }
        let model = match style {
            Style::SentencePiece => Model::SentencePiece(Spm::new(metadata, &vocab)?),
            Style::ByteLevel => Model::ByteLevel(Bpe::new(metadata, &ids)?),
        };
        let mut specials: Vec<Special> = (0..tokens.len())
            .filter(|&id| matches!(vocab.ty(id), CONTROL | USER_DEFINED))
            .filter(|&id| !tokens[id].is_empty())
            .map(|id| Special { text: tokens[id].clone(), id: id as u32, control: vocab.ty(id) == CONTROL })
            .collect();
        specials.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let n = tokens.len();
        // SentencePiece vocabularies start with BOS unless they say not to; byte-level ones
        // as their pre-tokenizer's default (llama.cpp's: Tekken yes, the others no).
        let bos_by_default = match &model {
            Model::SentencePiece(_) => true,
            Model::ByteLevel(bpe) => bpe.bos_by_default(),
        };
        let eos = token_id(metadata, EOS_KEY, n)?;
        let mut end_of_generation: Vec<u32> =
            [eos, token_id(metadata, EOT_KEY, n)?, token_id(metadata, EOM_KEY, n)?]
                .into_iter()
                .flatten()
                .chain(
                    specials
                        .iter()
                        .filter(|s| s.control && END_OF_TURN_TEXTS.contains(&s.text.as_str()))
                        .map(|s| s.id),
                )
                .collect();
        end_of_generation.sort_unstable();
        end_of_generation.dedup();
        Ok(Some(Tokenizer {
            model,
            ids,
            specials,
            n_tokens: n,
            bos: token_id(metadata, BOS_KEY, n)?,
            eos,
            end_of_generation,
            add_bos: flag(metadata, ADD_BOS_KEY, bos_by_default)?,
            add_eos: flag(metadata, ADD_EOS_KEY, false)?,
        }))
    }

    /// How many tokens the vocabulary has.
    pub fn len(&self) -> usize {
        self.n_tokens
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.n_tokens == 0
    }

    /// The beginning-of-sequence token, where the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, where the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The tokens that end a generation, ascending: the end-of-sequence token, the file's
    /// end-of-turn and end-of-message tokens (`tokenizer.ggml.eot_token_id`, `eom_token_id`),
    /// and the control tokens models end their turn with (`<|eot_id|>`, `<|im_end|>`,
    /// `<|end|>`, ...). A generation loop stops a sequence at the first of them.
    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    /// The id of a token by its exact text (`"<|eot_id|>"`), if the vocabulary has it.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The words a byte-level vocabulary's pre-tokenizer cuts `text` into before any merge
    /// (special tokens are not split out here); a SentencePiece vocabulary has no
    /// pre-tokenizer: `text` whole. Together they are `text`.
    pub fn words<'t>(&self, text: &'t str) -> Vec<&'t str> {
        match &self.model {
            Model::SentencePiece(_) => vec![text],
            Model::ByteLevel(bpe) => bpe.words(text),
        }
    }

    /// The token ids of `text`. An error where the file asks for a beginning or end token it
    /// does not name, or where the vocabulary cannot spell a character (no token, no byte
    /// tokens, no unknown token).
    pub fn encode(&self, text: &str, how: Encode) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if how.add_special && self.add_bos {
            out.push(self.bos.ok_or_else(|| missing_special(BOS_KEY, "add_bos_token"))?);
        }
        // A text after the start or a special token gets SentencePiece's space prefix.
        let mut after_special = true;
        // Where each special token next occurs at or after `at` (`None`: not looked for yet),
        // so the text is searched once per special token, not once per occurrence of any.
        let mut found: Vec<Option<Option<usize>>> = vec![None; self.specials.len()];
        let mut at = 0;
        while at < text.len() {
            let (next, special) = self.next_special(text, at, how.parse_special, &mut found);
            if next > at {
                self.encode_plain(&text[at..next], after_special, &mut out)?;
                after_special = false;
            }
            match special {
                Some(s) => {
                    out.push(s.id);
                    after_special = true;
                    at = next + s.text.len();
                }
                None => at = next,
            }
        }
        if how.add_special && self.add_eos {
            out.push(self.eos.ok_or_else(|| missing_special(EOS_KEY, "add_eos_token"))?);
        }
        Ok(out)
    }

    /// The first special token at or after byte `from` of `text` (the longest where several
    /// start at one place), and where it starts; `(text.len(), None)` when there is none.
    /// `found` caches each special token's next occurrence between calls on one text.
    fn next_special(
        &self,
        text: &str,
        from: usize,
        parse_control: bool,
        found: &mut [Option<Option<usize>>],
    ) -> (usize, Option<&Special>) {
        let mut best: Option<(usize, &Special)> = None;
        for (s, cached) in self.specials.iter().zip(found.iter_mut()) {
            if s.control && !parse_control {
                continue;
            }
            let at = match *cached {
                Some(Some(i)) if i >= from => Some(i),
                Some(None) => None,
                _ => {
                    let i = text[from..].find(s.text.as_str()).map(|i| i + from);
                    *cached = Some(i);
                    i
                }
            };
            // Longest first: a later special wins only by starting earlier.
            if let Some(i) = at
                && best.is_none_or(|(b, _)| i < b)
            {
                best = Some((i, s));
            }
        }
        match best {
            Some((i, s)) => (i, Some(s)),
            None => (text.len(), None),
        }
    }

    fn encode_plain(&self, text: &str, after_special: bool, out: &mut Vec<u32>) -> Result<()> {
        match &self.model {
            Model::SentencePiece(spm) => {
                spm.encode(&self.ids, text, spm.add_space_prefix && after_special, out)
            }
            Model::ByteLevel(bpe) => bpe.encode(&self.ids, text, out),
        }
    }
}

fn missing_special(key: &str, flag: &str) -> ModelError {
    ModelError::BadMetadata {
        key: key.into(),
        reason: format!("missing, but tokenizer.ggml.{flag} asks for the token"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;
    use crate::model::vocabulary::{MERGES_KEY, MODEL_KEY, PRE_KEY, SCORES_KEY, TOKEN_TYPE_KEY, TOKENS_KEY};

    use crate::model::vocabulary::{BYTE, NORMAL};

    fn tokenizer(f: impl FnOnce(&mut GgufWriter)) -> Result<Tokenizer> {
        let mut w = GgufWriter::new();
        f(&mut w);
        Tokenizer::from_file(&GgufFile::from_bytes(w.to_bytes()).unwrap()).map(|t| t.expect("a vocabulary"))
    }

    /// A small SentencePiece vocabulary: `▁` words, byte tokens, control and user tokens.
    fn spm(extra: impl FnOnce(&mut GgufWriter)) -> Result<Tokenizer> {
        let tokens = [
            "<unk>", "<s>", "</s>", "▁", "▁H", "▁He", "ll", "▁Hell", "▁Hello", "▁w", "or", "▁wor", "ld",
            "▁world", "H", "e", "l", "o", "w", "r", "d", "<0x0A>", "<0xE2>", "<0x82>", "<0xAC>", "<|user|>",
            "▁▁",
        ];
        let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
        let mut types = vec![NORMAL; tokens.len()];
        types[0] = super::super::UNKNOWN;
        types[1] = CONTROL;
        types[2] = CONTROL;
        for t in &mut types[21..25] {
            *t = BYTE;
        }
        types[25] = USER_DEFINED;
        tokenizer(|w| {
            w.add_metadata(MODEL_KEY, "llama").unwrap();
            w.add_metadata(TOKENS_KEY, tokens.to_vec()).unwrap();
            w.add_metadata(SCORES_KEY, scores).unwrap();
            w.add_metadata(TOKEN_TYPE_KEY, types).unwrap();
            w.add_metadata(BOS_KEY, 1u32).unwrap();
            w.add_metadata(EOS_KEY, 2u32).unwrap();
            extra(w);
        })
    }

    #[test]
    fn sentencepiece_merges_by_score_and_falls_back_to_bytes() {
        let t = spm(|_| {}).unwrap();
        assert_eq!(t.encode("Hello world", Encode::TEXT).unwrap(), [8, 13]);
        assert_eq!(t.encode("Hello", Encode { add_special: true, parse_special: false }).unwrap(), [1, 8]);
        // '\n' and '€' (E2 82 AC) have no tokens of their own: their bytes.
        assert_eq!(t.encode("\n€", Encode::TEXT).unwrap(), [3, 21, 22, 23, 24]);
        // 'z' has neither a token nor byte tokens: the unknown token.
        assert_eq!(t.encode("z", Encode::TEXT).unwrap(), [3, 0]);
        assert_eq!(t.encode(" ", Encode::TEXT).unwrap(), [26]);
        assert_eq!(t.encode("", Encode::TEXT).unwrap(), Vec::<u32>::new());
        assert_eq!(t.encode("", Encode::PROMPT).unwrap(), [1]);
    }

    #[test]
    fn special_tokens_split_the_text() {
        let t = spm(|_| {}).unwrap();
        // A user-defined token always; a text after it gets the space prefix again.
        assert_eq!(t.encode("Hello<|user|>world", Encode::TEXT).unwrap(), [8, 25, 13]);
        // Control tokens only when parsed; otherwise "<s>" is text ('<', 's', '>' have no
        // tokens nor byte tokens here: three unknowns after the prefix).
        assert_eq!(t.encode("<s>Hello", Encode::PROMPT).unwrap(), [1, 1, 8]);
        assert_eq!(t.encode("<s>", Encode::TEXT).unwrap(), [3, 0, 0, 0]);
        assert_eq!(t.token_id("<|user|>"), Some(25));
        // </s> is the end-of-sequence token; <|user|> is user-defined here, not a control token.
        assert_eq!(t.end_of_generation(), [2]);
        assert_eq!((t.bos(), t.eos(), t.len()), (Some(1), Some(2), 27));

        let t = spm(|w| {
            w.add_metadata(ADD_BOS_KEY, false).unwrap();
            w.add_metadata(ADD_EOS_KEY, true).unwrap();
            w.add_metadata(super::super::spm::ADD_SPACE_PREFIX_KEY, false).unwrap();
        })
        .unwrap();
        // No prefix: "He" is no token, so "H", "e", "ll", "o".
        assert_eq!(t.encode("Hello", Encode::PROMPT).unwrap(), [14, 15, 6, 17, 2]);
    }

    fn bpe(pre: &str, tokens: &[&str], merges: &[&str]) -> Result<Tokenizer> {
        tokenizer(|w| {
            w.add_metadata(MODEL_KEY, "gpt2").unwrap();
            w.add_metadata(PRE_KEY, pre).unwrap();
            w.add_metadata(TOKENS_KEY, tokens.to_vec()).unwrap();
            w.add_metadata(MERGES_KEY, merges.to_vec()).unwrap();
        })
    }

    #[test]
    fn byte_level_bpe_merges_by_rank_within_words() {
        let tokens = ["a", "b", "c", "Ġ", "ab", "bc", "Ġa", "Ġab", "abc", "Ċ"];
        let merges = ["Ġ a", "Ġa b", "a b", "b c"];
        let t = bpe("gpt-2", &tokens, &merges).unwrap();
        // " abc": "Ġ a" ranks first, then "Ġa b"; "ab" alone merges by "a b".
        assert_eq!(t.encode("ab abc", Encode::TEXT).unwrap(), [4, 7, 2]);
        assert_eq!(t.encode("bc\n", Encode::TEXT).unwrap(), [5, 9]);
        // Llama 3's pre-tokenizer takes a word that is a token whole ("abc" has no merge path).
        let t = bpe("llama-bpe", &tokens, &merges).unwrap();
        assert_eq!(t.encode("abc", Encode::TEXT).unwrap(), [8]);
        // No BOS for byte-level vocabularies unless asked.
        assert_eq!(t.encode("a", Encode::PROMPT).unwrap(), [0]);
        // A byte without a token is an error that names it.
        let msg = t.encode("z", Encode::TEXT).unwrap_err().to_string();
        assert!(msg.contains("0x7A") && msg.contains("no token"), "{msg}");
    }

    #[test]
    fn tekken_starts_with_bos_unless_the_file_says_not_to() {
        // llama.cpp's default for Tekken vocabularies.
        let tekken = |add_bos: Option<bool>| {
            tokenizer(|w| {
                w.add_metadata(MODEL_KEY, "gpt2").unwrap();
                w.add_metadata(PRE_KEY, "tekken").unwrap();
                w.add_metadata(TOKENS_KEY, vec!["<s>", "a"]).unwrap();
                w.add_metadata(MERGES_KEY, Vec::<String>::new()).unwrap();
                w.add_metadata(BOS_KEY, 0u32).unwrap();
                if let Some(add) = add_bos {
                    w.add_metadata(ADD_BOS_KEY, add).unwrap();
                }
            })
            .unwrap()
        };
        assert_eq!(tekken(None).encode("a", Encode::PROMPT).unwrap(), [0, 1]);
        assert_eq!(tekken(None).encode("a", Encode::TEXT).unwrap(), [1]);
        assert_eq!(tekken(Some(false)).encode("a", Encode::PROMPT).unwrap(), [1]);
    }

    /// The eos and eot keys, and control tokens by their text (not a normal token that happens
    /// to read the same, nor a control token of another name).
    #[test]
    fn the_end_of_generation_tokens() {
        let t = tokenizer(|w| {
            w.add_metadata(MODEL_KEY, "gpt2").unwrap();
            w.add_metadata(PRE_KEY, "llama-bpe").unwrap();
            w.add_metadata(
                TOKENS_KEY,
                vec!["a", "<|im_end|>", "<|end|>", "<|x|>", "<|eot_id|>", "<eos>", "<|y|>"],
            )
            .unwrap();
            w.add_metadata(TOKEN_TYPE_KEY, vec![1i32, 3, 1, 3, 3, 3, 3]).unwrap();
            w.add_metadata(MERGES_KEY, Vec::<String>::new()).unwrap();
            w.add_metadata(EOS_KEY, 5u32).unwrap();
            w.add_metadata(EOT_KEY, 3u32).unwrap();
        })
        .unwrap();
        assert_eq!(t.end_of_generation(), [1, 3, 4, 5]);
    }

    #[test]
    fn bad_tokenizer_metadata_is_refused() {
        let msg = bpe("bloom", &["a"], &[]).unwrap_err().to_string();
        assert!(msg.contains(PRE_KEY) && msg.contains("`bloom`") && msg.contains("not supported"), "{msg}");
        let msg = bpe("gpt-2", &["a", "b"], &["a b"]).unwrap_err().to_string();
        assert!(msg.contains(MERGES_KEY) && msg.contains("\"ab\" is not a token"), "{msg}");
        let msg = bpe("gpt-2", &["a", "b"], &["ab"]).unwrap_err().to_string();
        assert!(msg.contains("merge 0") && msg.contains("two tokens and a space"), "{msg}");
        let msg = tokenizer(|w| {
            w.add_metadata(MODEL_KEY, "gpt2").unwrap();
            w.add_metadata(TOKENS_KEY, vec!["a"]).unwrap();
        })
        .unwrap_err()
        .to_string();
        assert!(msg.contains(PRE_KEY) && msg.contains("missing"), "{msg}");
        let msg = tokenizer(|w| {
            w.add_metadata(MODEL_KEY, "llama").unwrap();
            w.add_metadata(TOKENS_KEY, vec!["a", "b"]).unwrap();
            w.add_metadata(SCORES_KEY, vec![0.0f32]).unwrap();
        })
        .unwrap_err()
        .to_string();
        assert!(msg.contains(SCORES_KEY) && msg.contains("1 scores for 2 tokens"), "{msg}");
        let msg = spm(|w| {
            w.add_metadata("tokenizer.ggml.unknown_token_id", 99u32).unwrap();
        })
        .unwrap_err()
        .to_string();
        assert!(msg.contains("unknown_token_id") && msg.contains("99 is not a token id below 27"), "{msg}");
        let one_token = |w: &mut GgufWriter| {
            w.add_metadata(MODEL_KEY, "llama").unwrap();
            w.add_metadata(TOKENS_KEY, vec!["▁a"]).unwrap();
            w.add_metadata(SCORES_KEY, vec![0.0f32]).unwrap();
        };
        let msg = tokenizer(|w| {
            one_token(w);
            w.add_metadata(EOS_KEY, 1u32).unwrap();
        })
        .unwrap_err()
        .to_string();
        assert!(msg.contains(EOS_KEY) && msg.contains("1 is not a token id below 1"), "{msg}");
        // A file asking for a BOS it does not name fails when encoding, saying so.
        let t = tokenizer(one_token).unwrap();
        let msg = t.encode("a", Encode::PROMPT).unwrap_err().to_string();
        assert!(msg.contains(BOS_KEY) && msg.contains("add_bos_token"), "{msg}");
        assert_eq!(t.encode("a", Encode::TEXT).unwrap(), [0]);
    }
}
