//! rocm-model's host-side integration tests (no GPU): the `gguf` tool, the fuzzer's seed
//! corpus, tensors larger than memory, interop with the Python `gguf` package, the tokenizer
//! against Hugging Face `tokenizers` on llama.cpp's test vocabularies and its pre-tokenizers
//! against Python's `regex`, and the KV-cache
//! property tests. One binary
//! for the reason `tests/gpu_model/main.rs` gives. (`allocation_bounds.rs` stays a binary of
//! its own: it installs a global allocator.)

mod cli;
mod common;
mod fuzz_corpus;
mod huge_tensors;
mod kv_cache_props;
mod llama_vocabs;
mod pretokenize_regex;
mod python_interop;
