//! Cutting text into words before byte-level BPE (`tokenizer.ggml.pre`).
//!
//! Each family of models splits text with its own regular expression (the `pre_tokenizer` of
//! its Hugging Face `tokenizer.json`) before any merge, so no merge crosses a word boundary:
//! GPT-2 keeps a space with the word after it and numbers whole; Llama 3 (and GLM-4) lets one
//! non-letter lead a word and cuts numbers into groups of up to three digits; Qwen2 cuts them
//! into single digits; Mistral's Tekken also cuts where upper case follows lower case.
//!
//! Those expressions end in `\s+(?!\S)|\s+`: a run of whitespace is a word, but one followed by
//! a non-space leaves its last character to start the next word (where `" world"` may take it).
//! The lookahead needs a backtracking engine, whose stack grows with the run (a run of a
//! million spaces overflows one). So the expressions here end in `\s+` alone, which the linear
//! `regex` crate runs, and [`PreTokenizer::words`] gives the last character back itself: a
//! match of whitespace only, two or more characters long, that is not the end of the text and
//! could only have come from those two alternatives, is cut before its last character, and
//! matching resumes there. (In every expression here but GPT-2's `\s*[\r\n]+` comes first and
//! takes every run that holds a line break, so only runs without one are cut.)

use regex::Regex;

use super::PRE_KEY;
use crate::model::error::{ModelError, Result};

/// GPT-2's expression (also Phi-2's), `\s+(?!\S)|\s+` as `\s+`.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";
/// Llama 3's (also GLM-4's): contractions in any case, numbers in groups of up to three digits.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";
/// Qwen2's: as Llama 3's, one digit at a time.
const QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";

/// Which whitespace runs give their last character back (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// Every run (GPT-2: no alternative before `\s+` takes whitespace).
    All,
    /// Runs without a line break (`\s*[\r\n]+` took the others).
    WithoutLineBreaks,
}

/// Mistral's Tekken (Mistral NeMo and later): words split where upper case follows lower case,
/// digits one at a time, `/` kept with line breaks after punctuation.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+";

/// A pre-tokenizer llama.cpp's converter names: its expression, which runs give a character
/// back, whether a word that is itself a token skips the merges (`ignore_merges` in the model's
/// `tokenizer.json`), and whether the beginning-of-sequence token goes in front where the file
/// does not say (`tokenizer.ggml.add_bos_token`; llama.cpp's default for that name).
struct Known {
    name: &'static str,
    pattern: &'static str,
    runs: Runs,
    ignore_merges: bool,
    bos: bool,
}

const fn known(
    name: &'static str,
    pattern: &'static str,
    runs: Runs,
    ignore_merges: bool,
    bos: bool,
) -> Known {
    Known { name, pattern, runs, ignore_merges, bos }
}

const KNOWN: &[Known] = &[
    known("gpt-2", GPT2, Runs::All, false, false),
    known("phi-2", GPT2, Runs::All, false, false),
    known("llama-bpe", LLAMA3, Runs::WithoutLineBreaks, true, false),
    known("llama3", LLAMA3, Runs::WithoutLineBreaks, true, false),
    known("llama-v3", LLAMA3, Runs::WithoutLineBreaks, true, false),
    known("chatglm-bpe", LLAMA3, Runs::WithoutLineBreaks, false, false),
    known("glm4", LLAMA3, Runs::WithoutLineBreaks, true, false),
    known("qwen2", QWEN2, Runs::WithoutLineBreaks, false, false),
    known("deepseek-r1-qwen", QWEN2, Runs::WithoutLineBreaks, false, false),
    known("tekken", TEKKEN, Runs::WithoutLineBreaks, true, true),
];

/// A byte-level BPE vocabulary's word splitter.
#[derive(Debug)]
pub(super) struct PreTokenizer {
    regex: Regex,
    runs: Runs,
    /// A word that is a token as it is becomes that token without merging.
    pub ignore_merges: bool,
    /// The beginning-of-sequence token goes in front unless the file says otherwise.
    pub bos_by_default: bool,
}

impl PreTokenizer {
    /// The splitter `tokenizer.ggml.pre` names; an error naming the supported ones otherwise.
    pub fn named(name: &str) -> Result<PreTokenizer> {
        let Some(known) = KNOWN.iter().find(|k| k.name == name) else {
            let names: Vec<&str> = KNOWN.iter().map(|k| k.name).collect();
            return Err(ModelError::BadMetadata {
                key: PRE_KEY.into(),
                reason: format!("pre-tokenizer `{name}` is not supported (supported: {})", names.join(", ")),
            });
        };
        let regex = Regex::new(known.pattern).expect("the pre-tokenizer expressions compile");
        Ok(PreTokenizer {
            regex,
            runs: known.runs,
            ignore_merges: known.ignore_merges,
            bos_by_default: known.bos,
        })
    }

    /// `text` cut into words, in order; together they are `text`. Text no alternative matches
    /// (these expressions leave none) would be a word of its own.
    pub fn words<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut words = Vec::new();
        let mut at = 0;
        while let Some(m) = self.regex.find_at(text, at) {
            if m.start() > at {
                words.push(&text[at..m.start()]);
            }
            let mut end = m.end();
            if end < text.len() && self.gives_back(m.as_str()) {
                end -= m.as_str().chars().next_back().map_or(0, char::len_utf8);
            }
            words.push(&text[m.start()..end]);
            at = end;
        }
        if at < text.len() {
            words.push(&text[at..]);
        }
        words
    }

    /// Whether a match the expression made (not at the end of the text) is a whitespace run
    /// that `\s+(?!\S)` would have stopped one character short of.
    fn gives_back(&self, word: &str) -> bool {
        let mut chars = word.chars();
        let two = chars.next().is_some() && chars.next().is_some();
        two && word.chars().all(char::is_whitespace)
            && (self.runs == Runs::All || !word.contains(['\r', '\n']))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::named(pre).unwrap();
        let w = p.words(text);
        assert_eq!(w.concat(), text, "the words are the text");
        w.into_iter().map(str::to_string).collect()
    }

    #[test]
    fn gpt2_keeps_a_space_with_the_word_after_it() {
        assert_eq!(words("gpt-2", "Hello world"), ["Hello", " world"]);
        assert_eq!(words("gpt-2", "I'll  go"), ["I", "'ll", " ", " go"]);
        assert_eq!(words("gpt-2", "12345 x"), ["12345", " x"]);
        assert_eq!(words("gpt-2", "a\n\nb"), ["a", "\n", "\n", "b"]);
        assert_eq!(words("gpt-2", "   "), ["   "]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_leads_words_with_one_mark() {
        assert_eq!(words("llama-bpe", "12345"), ["123", "45"]);
        assert_eq!(words("llama-bpe", "I'LL go"), ["I", "'LL", " go"]);
        assert_eq!(words("llama-bpe", "(hi) there!!\n\nok"), ["(hi", ")", " there", "!!\n\n", "ok"]);
        assert_eq!(words("qwen2", "123"), ["1", "2", "3"]);
    }

    /// `\s+(?!\S)` done by hand: a run gives its last character to the word after it, not at
    /// the end, not when it holds a line break (Llama 3), and whatever its length.
    #[test]
    fn whitespace_runs_leave_their_last_character_to_the_next_word() {
        assert_eq!(words("gpt-2", "a   b  "), ["a", "  ", " b", "  "]);
        assert_eq!(words("gpt-2", "a\u{3000}\u{3000}b"), ["a", "\u{3000}", "\u{3000}", "b"]);
        assert_eq!(words("llama-bpe", "a  \n  b"), ["a", "  \n", " ", " b"]);
        assert_eq!(words("llama-bpe", "a\t\tb"), ["a", "\t", "\tb"]);
        let long = " ".repeat(2_000_000) + "x";
        let w = words("llama-bpe", &long);
        assert_eq!((w.len(), w[0].len(), w[1].as_str()), (2, 1_999_999, " x"));
    }

    #[test]
    fn unknown_pre_tokenizers_are_named() {
        let msg = PreTokenizer::named("bloom").unwrap_err().to_string();
        assert!(msg.contains(PRE_KEY) && msg.contains("`bloom`") && msg.contains("llama-bpe"), "{msg}");
    }
}
