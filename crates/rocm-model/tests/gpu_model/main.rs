//! rocm-model's GPU tests: one test binary (binaries named `gpu_*` form the GPU test group),
//! a module per subject. One binary rather than one a file because every binary linking
//! rocm-model embeds every kernel, and the GPU archive that carries them to a GPU host has a
//! size limit. Nextest still runs each test in its own process.

mod architectures;
mod decode_graph;
mod gguf;
mod kv_cache;
mod model;
mod position;
