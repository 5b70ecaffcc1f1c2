//! The tokenizer against Hugging Face `tokenizers`, on real vocabularies: llama.cpp's tokenizer
//! test files (a vocabulary-only GGUF its converter wrote from the model's `tokenizer.json`, 46
//! texts, and the ids `tokenizers` gives each, `encode(text, add_special_tokens=False)`).
//! Every text must encode to exactly those ids ([`Encode::TEXT`]), and those ids must decode
//! back to the text ([`Detokenizer`]; SentencePiece adds its space in front).
//!
//! The files come from `scripts/fetch_llama_vocabs.py` (into `target/llama-vocabs`, or the
//! folder `ROCMFORGE_LLAMA_VOCABS` names). Skipped with a printed reason where they are absent,
//! except under CI, which fetches them.

use std::path::{Path, PathBuf};

use crate::common::manifest_dir;
use rocm_model::GgufFile;
use rocm_model::model::synthetic::SplitMix;
use rocm_model::model::{Detokenizer, Encode, Tokenizer};

/// The folder with the files, or `None` (after printing why) where they are absent outside CI.
fn vocab_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("ROCMFORGE_LLAMA_VOCABS")
        .map_or_else(|| manifest_dir().join("../../target/llama-vocabs"), PathBuf::from);
    if dir.join("ggml-vocab-llama-bpe.gguf").is_file() {
        return Some(dir);
    }
    let why = format!("no llama.cpp vocabularies in {}", dir.display());
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{test}: {why}; CI fetches them (python3 scripts/fetch_llama_vocabs.py)");
    }
    eprintln!("SKIP {test}: {why}; python3 scripts/fetch_llama_vocabs.py fetches them");
    None
}

/// The texts of `<name>.gguf.inp` and the ids of `<name>.gguf.out`, in order.
fn cases(dir: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |suffix: &str| {
        let path = dir.join(format!("ggml-vocab-{name}.gguf{suffix}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let inp = read(".inp");
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""), "{name}.inp ends with a separator");
    let out = read(".out");
    let ids: Vec<Vec<u32>> =
        out.lines().map(|line| line.split_whitespace().map(|id| id.parse().unwrap()).collect()).collect();
    assert_eq!(texts.len(), ids.len(), "{name}: as many texts as id lines");
    assert!(texts.len() >= 40, "{name}: {} cases", texts.len());
    texts.into_iter().map(str::to_string).zip(ids).collect()
}

/// Encodes every case of vocabulary `name` and decodes its expected ids; returns the
/// mismatches, described.
fn check(dir: &Path, name: &str) -> Vec<String> {
    let file = GgufFile::open(dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
    let tok = Tokenizer::from_file(&file).unwrap().expect("a vocabulary");
    let detok = Detokenizer::from_file(&file).unwrap().expect("a vocabulary");
    let mut bad = Vec::new();
    for (text, expected) in cases(dir, name) {
        let got = tok.encode(&text, Encode::TEXT).unwrap();
        if got != expected {
            bad.push(format!("{name}: {text:?}\n  expected {expected:?}\n  got      {got:?}"));
        }
        let decoded = detok.decode(&expected).unwrap();
        let round = if detok.is_byte_level() || text.is_empty() { text.clone() } else { format!(" {text}") };
        if decoded != round {
            bad.push(format!("{name}: {expected:?} decodes to {decoded:?}, not {round:?}"));
        }
    }
    bad
}

fn vocabularies_match_tokenizers(names: &[&str], test: &str) {
    let Some(dir) = vocab_dir(test) else {
        return;
    };
    let bad: Vec<String> = names.iter().flat_map(|name| check(&dir, name)).collect();
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn sentencepiece_vocabularies_match_hugging_face() {
    vocabularies_match_tokenizers(&["llama-spm", "phi-3"], "sentencepiece_vocabularies_match_hugging_face");
}

#[test]
fn byte_level_vocabularies_match_hugging_face() {
    vocabularies_match_tokenizers(
        &["llama-bpe", "qwen2", "gpt-2"],
        "byte_level_vocabularies_match_hugging_face",
    );
}

/// Any text comes back from its ids: byte-level BPE is lossless, and SentencePiece with byte
/// tokens for every byte gives the text back behind its space prefix. And random ids streamed
/// one at a time ([`Detokenizer::stream`]) give what decoding them together gives. Random texts of random
/// code points (any plane, controls and unassigned ones included) and of the pieces that
/// tokenize in interesting ways; control tokens' text is ordinary text here.
#[test]
fn random_texts_round_trip_through_the_ids() {
    let Some(dir) = vocab_dir("random_texts_round_trip_through_the_ids") else {
        return;
    };
    const PIECES: &[&str] =
        &[" ", "  ", "\n", "\t", "\r\n", "'s", "'LL", "123", "4567", "é", "😁", "我", "<s>", "<|eot_id|>"];
    let mut rng = SplitMix(0xA11CE);
    let mut next = || rng.next_u64();
    let mut texts = Vec::new();
    for _ in 0..400 {
        let mut text = String::new();
        for _ in 0..next() % 24 {
            match next() % 3 {
                0 => text.push_str(PIECES[(next() % PIECES.len() as u64) as usize]),
                1 => text.push(char::from_u32((next() % 0x11_0000) as u32).unwrap_or('\u{FFFD}')),
                _ => text.push(char::from_u32(0x20 + (next() % 0x5F) as u32).unwrap()),
            }
        }
        texts.push(text);
    }
    for name in ["llama-spm", "llama-bpe", "qwen2", "gpt-2"] {
        let file = GgufFile::open(dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let tok = Tokenizer::from_file(&file).unwrap().unwrap();
        let detok = Detokenizer::from_file(&file).unwrap().unwrap();
        for text in &texts {
            let ids = tok.encode(text, Encode::TEXT).unwrap();
            let expected =
                if detok.is_byte_level() || text.is_empty() { text.clone() } else { format!(" {text}") };
            assert_eq!(detok.decode(&ids).unwrap(), expected, "{name}: {text:?} -> {ids:?}");
        }
        // Streamed one id at a time, random ids (byte tokens and pieces of characters among
        // them) give what decoding them together gives.
        for _ in 0..300 {
            let ids: Vec<u32> = (0..next() % 12).map(|_| (next() % detok.len() as u64) as u32).collect();
            let mut stream = detok.stream();
            let mut streamed: String = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
            streamed.push_str(&stream.finish());
            assert_eq!(streamed, detok.decode(&ids).unwrap(), "{name}: {ids:?}");
        }
    }
}

/// The tokens that end a generation on real vocabularies: the end-of-sequence token and the
/// control tokens each model ends its turn with, and not Qwen2's `</s>` (a normal token there)
/// nor Phi-3's (user-defined).
#[test]
fn end_of_generation_tokens_of_real_vocabularies() {
    let Some(dir) = vocab_dir("end_of_generation_tokens_of_real_vocabularies") else {
        return;
    };
    for (name, expected) in [
        ("llama-bpe", &[128001, 128009][..]), // <|end_of_text|>, <|eot_id|>
        ("llama-spm", &[2]),                  // </s>
        ("qwen2", &[151643, 151645]),         // <|endoftext|>, <|im_end|>
        ("gpt-2", &[50256]),                  // <|endoftext|>
        ("phi-3", &[32000, 32007, 32010]),    // <|endoftext|>, <|end|>, <|user|>
    ] {
        let file = GgufFile::open(dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let tok = Tokenizer::from_file(&file).unwrap().unwrap();
        assert_eq!(tok.end_of_generation(), expected, "{name}");
    }
}
