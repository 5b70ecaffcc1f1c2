//! The byte-level pre-tokenizers against the models' own expressions run by another engine:
//! rocm-model runs them without their lookahead (`\s+(?!\S)`) and completes it by hand
//! (`src/model/vocabulary/pretokenize.rs`); `tests/pretokenize_regex.py` runs them as written,
//! with Python's `regex` module. Random texts from an alphabet of the cases that matter
//! (runs of spaces, tabs, line breaks and other whitespace; letters with case folds such as
//! `ſ` and the Kelvin sign; title case, modifier letters, upper after lower; digits of other
//! scripts; marks; emoji; contractions) must cut into the same words with each of the GPT-2,
//! Llama 3, Qwen2 and Tekken pre-tokenizers.
//!
//! Skipped (with a printed reason) where `python3 -c "import regex"` fails, except under CI.

use std::process::Command;

use crate::common::{TempDir, hex, manifest_dir, python_has};
use rocm_model::model::Tokenizer;
use rocm_model::model::synthetic::SplitMix;
use rocm_model::{GgufFile, GgufWriter};

/// Pieces the texts are made of.
const ALPHABET: &[&str] = &[
    " ",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\u{3000}",
    "\u{a0}",
    "\u{85}",
    "a",
    "B",
    "é",
    "ſ",
    "\u{212a}",
    "'",
    "'s",
    "'S",
    "'ll",
    "'LL",
    "'Ve",
    "1",
    "22",
    "333",
    "\u{663}",
    "½",
    "!",
    "?",
    ".",
    "-",
    "😁",
    "我",
    "ក",
    "ា",
    "\u{200d}",
    "\u{301}",
    "x",
    "Z",
    "aB",
    "Ab",
    "ǅ",
    "ʰ",
    "/",
    "\u{10400}",
];

/// A tokenizer whose only use here is its pre-tokenizer.
fn tokenizer(pre: &str) -> Tokenizer {
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", "gpt2").unwrap();
    w.add_metadata("tokenizer.ggml.pre", pre).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["a"]).unwrap();
    w.add_metadata("tokenizer.ggml.merges", Vec::<String>::new()).unwrap();
    Tokenizer::from_file(&GgufFile::from_bytes(w.to_bytes()).unwrap()).unwrap().unwrap()
}

#[test]
fn pre_tokenizers_cut_text_as_python_regex_does() {
    let test = "pre_tokenizers_cut_text_as_python_regex_does";
    if !python_has(test, "regex", "regex") {
        return;
    }
    let names = ["gpt-2", "llama-bpe", "qwen2", "tekken"];
    let tokenizers: Vec<Tokenizer> = names.iter().map(|n| tokenizer(n)).collect();
    let mut rng = SplitMix(0x5EED); // the same texts every run
    let mut next = || rng.next_u64();
    let mut texts = Vec::new();
    for _ in 0..6000 {
        let len = (next() % 40) as usize;
        texts.push((0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect::<String>());
    }
    texts.push(" ".repeat(5000) + "x");
    let mut input = String::new();
    for text in &texts {
        for name in names {
            input.push_str(&format!("{name}\t{}\n", hex(text.as_bytes())));
        }
    }
    let dir = TempDir::new("pretokenize");
    let path = dir.join("texts.txt");
    std::fs::write(&path, input).unwrap();
    let script = manifest_dir().join("tests/pretokenize_regex.py");
    let out = Command::new("python3").arg(&script).arg(&path).output().unwrap();
    assert!(out.status.success(), "pretokenize_regex.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let expected = String::from_utf8(out.stdout).unwrap();
    let mut lines = expected.lines();
    let mut bad = Vec::new();
    for text in &texts {
        for (name, tok) in names.iter().zip(&tokenizers) {
            let theirs = lines.next().expect("a line per text and pre-tokenizer");
            let ours: Vec<String> = tok.words(text).iter().map(|w| hex(w.as_bytes())).collect();
            if ours.join(",") != theirs {
                bad.push(format!("{name} {text:?}: ours {:?}", tok.words(text)));
            }
        }
    }
    assert!(lines.next().is_none(), "more lines than texts");
    assert!(
        bad.is_empty(),
        "{} of {} texts cut differently:\n{}",
        bad.len(),
        texts.len() * names.len(),
        bad[..bad.len().min(20)].join("\n")
    );
}
