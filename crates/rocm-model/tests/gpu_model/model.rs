//! The transformer block on the GPU against the f64 CPU reference (issue 7): a synthetic 2-layer
//! model with weights in F32, F16, BF16, Q8_0, Q4_0 and MXFP4, prefilled and decoded through the
//! paged KV cache in f32, f16 and bf16; Llama 3.1's RoPE frequency factors; chunked prefill;
//! refusals. qwen2 and glm4: `architectures.rs`.
//!
//! Tolerances: `rocm_model::model::synthetic::parity_tolerance`, chosen in `docs/model.md` (the
//! CPU test `emulated_rounding_fits_the_parity_tolerance` checks that a model of the rounding
//! of a correct `T` pipeline uses at most a quarter of them).

use std::sync::Arc;

use rocm_kernels::Dtype;
use rocm_kernels::gemm::GemmElement;
use rocm_model::kv_cache::{KvCacheError, KvCacheTensors, PagedCache, SeqId};
use rocm_model::model::synthetic::{SplitMix, SyntheticSpec, SyntheticVocab, parity_tolerance};
use rocm_model::model::{
    Architecture, LayerTensor, LoadOptions, Model, ModelConfig, ModelError, Mxfp4Layout, OUTPUT_NORM,
    Q4kLayout, Q8Layout, ROPE_FREQS, ReferenceModel, ReferenceSequence, Rounding, Sampler, Sampling,
    llama3_freq_factors, tensor_name,
};
use rocm_model::{GgmlType, GgufFile, GgufWriter};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Tolerance, compare, gpu_test};

const PROMPT: usize = 37;
const STEPS: usize = 20;

fn small(arch: Architecture) -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(SyntheticSpec::small(arch).to_bytes().unwrap()).unwrap())
}

fn tolerance<T: Dtype>() -> Tolerance {
    let t = parity_tolerance(T::NAME);
    Tolerance::abs(t.abs).with_l2(t.l2)
}

fn upload<T: Dtype>(gpu: &GpuTest, x: &[f32]) -> DeviceBuffer<T> {
    gpu.stream().upload(&x.iter().map(|&v| T::from_f32(v)).collect::<Vec<T>>()).unwrap()
}

/// The reference is fed the values the GPU was fed (rounded to T).
fn rounded<T: Dtype>(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| T::from_f32(v).to_f32() as f64).collect()
}

/// Compares and prints the errors (max-abs, relative L2), so a run with `--no-capture` records
/// the parity actually reached next to the tolerance.
fn check<T: Dtype>(what: &str, got: &DeviceBuffer<T>, want: &[f64]) {
    let got: Vec<f64> = got.to_vec().unwrap().iter().map(|v| v.to_f32() as f64).collect();
    let tol = tolerance::<T>();
    let c = compare(&got, want, &tol);
    eprintln!("parity {what} ({}): {c}", T::NAME);
    assert!(c.passed(&tol), "{what} ({}): {c}", T::NAME);
}

/// Two sequences (prompts of 37 and 23 tokens) prefilled, then decoded together for 20 steps;
/// every output compared with the reference.
pub(crate) fn parity<T: GemmElement>(gpu: &GpuTest, arch: Architecture) {
    parity_of::<T>(gpu, small(arch), &format!("{arch:?}"), LoadOptions::default());
}

/// [`parity`] of the model in `file`, `what` naming it in messages.
fn parity_of<T: GemmElement>(gpu: &GpuTest, file: Arc<GgufFile>, what: &str, options: LoadOptions) {
    let model = Model::<T>::load_with(file.clone(), gpu.stream(), options).unwrap();
    let reference = ReferenceModel::load(&file, Rounding::Exact).unwrap();
    let hidden = model.config().hidden;
    let mut cache = PagedCache::new(12, 16).unwrap();
    let mut kv = model.new_kv_cache(&cache).unwrap();
    kv.fill_bytes(0xFF).unwrap(); // NaN everywhere a write did not reach
    let mut rng = SplitMix(21);

    let seqs = [cache.add_sequence(), cache.add_sequence()];
    let mut refs: Vec<ReferenceSequence> = seqs.iter().map(|_| reference.new_sequence()).collect();
    for (i, &len) in [PROMPT, 23].iter().enumerate() {
        let x = rng.hidden(len * hidden);
        let out = model.prefill(&mut cache, &mut kv, seqs[i], &upload::<T>(gpu, &x)).unwrap();
        let want = reference.forward(&mut refs[i], &rounded::<T>(&x)).unwrap();
        check(&format!("{what} prefill of sequence {i}, {len} tokens"), &out, &want);
    }
    for step in 0..STEPS {
        let x = rng.hidden(seqs.len() * hidden);
        let out = model.decode_step(&mut cache, &mut kv, &seqs, &upload::<T>(gpu, &x)).unwrap();
        let xr = rounded::<T>(&x);
        let mut want = Vec::new();
        for (i, r) in refs.iter_mut().enumerate() {
            want.extend(reference.forward(r, &xr[i * hidden..(i + 1) * hidden]).unwrap());
        }
        check(&format!("{what} decode step {step}"), &out, &want);
    }
    assert_eq!(cache.seq_len(seqs[0]).unwrap(), PROMPT + STEPS);
    cache.validate().unwrap();
}

/// One sequence decoded alone: every product of a decode step has one token, so the block
/// formats take their fused matrix-vector kernels (two sequences, above, take the dequantise
/// and GEMM path).
pub(crate) fn parity_one_sequence<T: GemmElement>(gpu: &GpuTest, arch: Architecture) {
    parity_one_sequence_of::<T>(gpu, small(arch), &format!("{arch:?}"), LoadOptions::default());
}

fn parity_one_sequence_of<T: GemmElement>(
    gpu: &GpuTest,
    file: Arc<GgufFile>,
    what: &str,
    options: LoadOptions,
) {
    let model = Model::<T>::load_with(file.clone(), gpu.stream(), options).unwrap();
    let reference = ReferenceModel::load(&file, Rounding::Exact).unwrap();
    let hidden = model.config().hidden;
    let mut cache = PagedCache::new(6, 16).unwrap();
    let mut kv = model.new_kv_cache(&cache).unwrap();
    kv.fill_bytes(0xFF).unwrap();
    let mut rng = SplitMix(22);
    let seq = cache.add_sequence();
    let mut r = reference.new_sequence();
    let x = rng.hidden(PROMPT * hidden);
    let out = model.prefill(&mut cache, &mut kv, seq, &upload::<T>(gpu, &x)).unwrap();
    check(
        &format!("{what} prefill, {PROMPT} tokens"),
        &out,
        &reference.forward(&mut r, &rounded::<T>(&x)).unwrap(),
    );
    for step in 0..STEPS {
        let x = rng.hidden(hidden);
        let out = model.decode_step(&mut cache, &mut kv, &[seq], &upload::<T>(gpu, &x)).unwrap();
        check(
            &format!("{what} one-sequence decode step {step}"),
            &out,
            &reference.forward(&mut r, &rounded::<T>(&x)).unwrap(),
        );
    }
}

#[test]
fn one_sequence_decode_matches_the_reference_f32() {
    let gpu = gpu_test!();
    parity_one_sequence::<f32>(&gpu, Architecture::Llama);
}

#[test]
fn one_sequence_decode_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_one_sequence::<bf16>(&gpu, Architecture::Llama);
}

/// A model of k-quant (and Q8_0, Q4_0) projections: prefill through dequantisation and the
/// GEMM, decode through the fused matrix-vector kernels.
#[test]
fn kquant_model_matches_the_reference_f32() {
    let gpu = gpu_test!();
    let file = Arc::new(GgufFile::from_bytes(SyntheticSpec::small_kquants().to_bytes().unwrap()).unwrap());
    parity_one_sequence_of::<f32>(&gpu, file, "k-quants", LoadOptions::default());
}

#[test]
fn kquant_model_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    let file = Arc::new(GgufFile::from_bytes(SyntheticSpec::small_kquants().to_bytes().unwrap()).unwrap());
    parity_one_sequence_of::<bf16>(&gpu, file, "k-quants", LoadOptions::default());
}

/// The k-quant model at widths of whole 512-element chunks (hidden 512, FFN 1024), two
/// sequences: on NVIDIA with bf16 activations the 23-token prefill takes the fused products'
/// passes of 32 (`quant_matmul_mma`) for every weight the matrix cores take, the 37-token one
/// dequantisation and the GEMM, and the steps of two tokens the passes of 8.
#[test]
fn kquant_model_batches_match_the_reference_bf16() {
    let gpu = gpu_test!();
    let base = SyntheticSpec::small_kquants();
    let spec = SyntheticSpec { config: ModelConfig { hidden: 512, ffn: 1024, ..base.config }, ..base };
    let file = Arc::new(GgufFile::from_bytes(spec.to_bytes().unwrap()).unwrap());
    parity_of::<bf16>(&gpu, file, "k-quants, batches", LoadOptions::default());
}

/// Every projection MXFP4, rows of whole 512-element chunks (hidden 512, FFN 1024, 8 query and
/// 2 KV heads of 64): on NVIDIA with bf16 activations Q, K and V decode in one launch of the
/// matrix-core product list, and gate and up in another (`mx_matvec_group`); the small model's
/// widths take a launch a product.
fn mxfp4_types(_: usize, t: LayerTensor) -> GgmlType {
    if t.is_matrix() { GgmlType::MXFP4 } else { GgmlType::F32 }
}

/// The model of [`mxfp4_types`] (hidden 512, FFN 1024, 8 query and 2 KV heads of 64).
pub(crate) fn mxfp4_file() -> Arc<GgufFile> {
    let base = SyntheticSpec::small(Architecture::Llama);
    let spec = SyntheticSpec {
        config: ModelConfig { hidden: 512, ffn: 1024, q_heads: 8, kv_heads: 2, ..base.config },
        types: mxfp4_types,
        ..base
    };
    Arc::new(GgufFile::from_bytes(spec.to_bytes().unwrap()).unwrap())
}

#[test]
fn grouped_mxfp4_products_match_the_reference_bf16() {
    let gpu = gpu_test!();
    let file = mxfp4_file();
    parity_one_sequence_of::<bf16>(&gpu, file, "MXFP4, grouped products", LoadOptions::default());
}

/// The same model decoding two sequences a step: on NVIDIA with bf16 activations each product
/// list runs `quant_matvec_mma`'s MXFP4 passes of 8 vectors (`mx_matvec_group` past one token).
#[test]
fn batched_mxfp4_products_match_the_reference_bf16() {
    let gpu = gpu_test!();
    let file = mxfp4_file();
    parity_of::<bf16>(&gpu, file, "MXFP4, batched products", LoadOptions::default());
}

/// The MXFP4 model loaded in the tiled layout ([`Mxfp4Layout::Tiled`]): a 37-token prefill and
/// 20 one-sequence decode steps (prefill dequantises the parts from the tiles for the GEMM;
/// decode runs Q, K and V stacked in one launch, gate and up in another, O and down alone, on the
/// tiled kernel), against the reference, in bf16 (the matrix-core kernel) and f32 (portable).
#[test]
fn tiled_mxfp4_model_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<bf16>(&gpu, mxfp4_file(), "MXFP4 tiled", TILED);
}

#[test]
fn tiled_mxfp4_model_matches_the_reference_f32() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<f32>(&gpu, mxfp4_file(), "MXFP4 tiled", TILED);
}

/// Two sequences a step in the tiled layout: every decode product runs the tiled kernel's
/// several-vector loop (B's columns the sequences), the prefills dequantise from the tiles.
#[test]
fn tiled_mxfp4_model_batches_match_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_of::<bf16>(&gpu, mxfp4_file(), "MXFP4 tiled, batches", TILED);
}

/// The tiled layout holds the file's MXFP4 bytes: the same device bytes as the rows (no padding
/// at these widths and row counts).
#[test]
fn tiled_mxfp4_weights_take_the_files_bytes() {
    let gpu = gpu_test!();
    let rows = Model::<bf16>::load(mxfp4_file(), gpu.stream()).unwrap();
    let tiled = Model::<bf16>::load_with(mxfp4_file(), gpu.stream(), TILED).unwrap();
    assert_eq!(tiled.weight_bytes(), rows.weight_bytes());
}

const TILED: LoadOptions =
    LoadOptions { mxfp4: Mxfp4Layout::Tiled, q4k: Q4kLayout::Rows, q8_0: Q8Layout::Rows };

/// Every projection q4_K (hidden 512, FFN 1024, 8 query and 2 KV heads of 64).
fn q4k_types(_: usize, t: LayerTensor) -> GgmlType {
    if t.is_matrix() { GgmlType::Q4_K } else { GgmlType::F32 }
}

/// Every projection q8_0, as [`q4k_types`].
fn q8_types(_: usize, t: LayerTensor) -> GgmlType {
    if t.is_matrix() { GgmlType::Q8_0 } else { GgmlType::F32 }
}

/// A model of hidden 512, FFN 1024, 8 query and 2 KV heads of 64, tensors of `types`.
fn whole_tiles_file(types: fn(usize, LayerTensor) -> GgmlType) -> Arc<GgufFile> {
    let base = SyntheticSpec::small(Architecture::Llama);
    let spec = SyntheticSpec {
        config: ModelConfig { hidden: 512, ffn: 1024, q_heads: 8, kv_heads: 2, ..base.config },
        types,
        ..base
    };
    Arc::new(GgufFile::from_bytes(spec.to_bytes().unwrap()).unwrap())
}

/// The model of [`q4k_types`].
pub(crate) fn q4k_file() -> Arc<GgufFile> {
    whole_tiles_file(q4k_types)
}

/// The model of [`q8_types`].
pub(crate) fn q8_file() -> Arc<GgufFile> {
    whole_tiles_file(q8_types)
}

pub(crate) const Q4K_COPY: LoadOptions =
    LoadOptions { mxfp4: Mxfp4Layout::Rows, q4k: Q4kLayout::TiledCopy, q8_0: Q8Layout::Rows };
pub(crate) const Q8_COPY: LoadOptions =
    LoadOptions { mxfp4: Mxfp4Layout::Rows, q4k: Q4kLayout::Rows, q8_0: Q8Layout::TiledCopy };
pub(crate) const Q8_TILED: LoadOptions =
    LoadOptions { mxfp4: Mxfp4Layout::Rows, q4k: Q4kLayout::Rows, q8_0: Q8Layout::Tiled };

/// q4_K with the tiled copy: where the device runs the tiled q4_K kernel, every decode step of
/// one sequence folds the layer's norms and residual adds into its products on the copy (the
/// prefill reads the rows); elsewhere the copy is not made and the rows run everything.
#[test]
fn tiled_q4k_copy_model_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<bf16>(&gpu, q4k_file(), "q4_K tiled copy", Q4K_COPY);
}

#[test]
fn tiled_q4k_copy_model_matches_the_reference_f16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<f16>(&gpu, q4k_file(), "q4_K tiled copy", Q4K_COPY);
}

/// Two sequences a step: the copy serves one-token passes only, so these read the rows.
#[test]
fn tiled_q4k_copy_model_batches_match_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_of::<bf16>(&gpu, q4k_file(), "q4_K tiled copy, batches", Q4K_COPY);
}

/// The copy takes the projections' bytes a second time where it is made (and nothing else), and
/// a pass still reads them once.
fn copy_takes_the_projections_bytes_again(
    gpu: &GpuTest,
    file: Arc<GgufFile>,
    options: LoadOptions,
    runs: bool,
) {
    let rows = Model::<bf16>::load(file.clone(), gpu.stream()).unwrap();
    let copy = Model::<bf16>::load_with(file.clone(), gpu.stream(), options).unwrap();
    let projections: u64 = (0..rows.config().layers)
        .flat_map(|l| Architecture::Llama.layer_tensors().iter().map(move |&t| (l, t)))
        .filter(|(_, t)| t.is_matrix())
        .map(|(l, t)| file.tensor(&tensor_name(l, t)).unwrap().n_bytes())
        .sum();
    let extra = if runs { projections } else { 0 };
    assert_eq!(copy.weight_bytes(), rows.weight_bytes() + extra);
    assert_eq!(copy.read_weight_bytes(), rows.weight_bytes());
    assert_eq!(rows.read_weight_bytes(), rows.weight_bytes());
}

#[test]
fn tiled_q4k_copy_takes_the_projections_bytes_again() {
    let gpu = gpu_test!();
    let runs = rocm_kernels::quant::q4k_tiled_on_matrix_cores::<bf16>(gpu.stream());
    copy_takes_the_projections_bytes_again(&gpu, q4k_file(), Q4K_COPY, runs);
}

/// q8_0 with the tiled copy, as the q4_K copy above: decode steps of one sequence on the copy
/// where the device runs the tiled q8_0 kernel.
#[test]
fn tiled_q8_copy_model_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<bf16>(&gpu, q8_file(), "q8_0 tiled copy", Q8_COPY);
}

#[test]
fn tiled_q8_copy_model_matches_the_reference_f16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<f16>(&gpu, q8_file(), "q8_0 tiled copy", Q8_COPY);
}

/// q8_0 in the tiled layout alone (the file's bytes): one sequence's decode steps fold the norms
/// into the tiled products; several sequences run the several-vector loops; the prefill
/// dequantises the tiles.
#[test]
fn tiled_q8_model_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<bf16>(&gpu, q8_file(), "q8_0 tiled", Q8_TILED);
}

#[test]
fn tiled_q8_model_matches_the_reference_f16() {
    let gpu = gpu_test!();
    parity_one_sequence_of::<f16>(&gpu, q8_file(), "q8_0 tiled", Q8_TILED);
}

#[test]
fn tiled_q8_model_batches_match_the_reference_bf16() {
    let gpu = gpu_test!();
    parity_of::<bf16>(&gpu, q8_file(), "q8_0 tiled, batches", Q8_TILED);
}

#[test]
fn tiled_q8_model_batches_match_the_reference_f32() {
    let gpu = gpu_test!();
    parity_of::<f32>(&gpu, q8_file(), "q8_0 tiled, batches (portable kernel)", Q8_TILED);
}

/// The tiled q8_0 layout holds the file's bytes, as the rows do (Llama's widths are whole
/// groups and tiles: no padding).
#[test]
fn tiled_q8_weights_take_the_files_bytes() {
    let gpu = gpu_test!();
    let rows = Model::<bf16>::load(q8_file(), gpu.stream()).unwrap();
    let tiled = Model::<bf16>::load_with(q8_file(), gpu.stream(), Q8_TILED).unwrap();
    assert_eq!(tiled.weight_bytes(), rows.weight_bytes());
    assert_eq!(tiled.read_weight_bytes(), rows.weight_bytes());
}

#[test]
fn tiled_q8_copy_takes_the_projections_bytes_again() {
    let gpu = gpu_test!();
    let runs = rocm_kernels::quant::q8_0_tiled_on_matrix_cores::<bf16>(gpu.stream());
    copy_takes_the_projections_bytes_again(&gpu, q8_file(), Q8_COPY, runs);
}

/// Block-format projections stay as their blocks on the device: the weights take the file's
/// bytes for those, and `T`'s for the plain types (converted at load) and the norms.
#[test]
fn block_weights_take_the_files_bytes_on_the_device() {
    let gpu = gpu_test!();
    let file = small(Architecture::Llama);
    let model = Model::<bf16>::load(file.clone(), gpu.stream()).unwrap();
    let as_bf16 = |elements: u64| elements * size_of::<bf16>() as u64;
    let (mut want, mut in_file) = (0u64, 0u64);
    let tensors = Architecture::Llama.layer_tensors();
    let mut names: Vec<String> =
        (0..model.config().layers).flat_map(|l| tensors.iter().map(move |&t| tensor_name(l, t))).collect();
    names.push(OUTPUT_NORM.to_string());
    for name in &names {
        let info = file.tensor(name).unwrap();
        in_file += info.n_bytes();
        let projection = !name.ends_with("norm.weight");
        want += match info.ggml_type() {
            GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::MXFP4
                if projection =>
            {
                info.n_bytes()
            }
            _ => as_bf16(info.n_elements()),
        };
    }
    eprintln!(
        "weights: {} B on the device (bf16 model), {in_file} B of tensors in the file",
        model.weight_bytes()
    );
    assert_eq!(model.weight_bytes(), want);
}

/// Token ids to logits: the embedding's rows, a prefill, the last token's logits, then greedy
/// decoding (each step's token fed to both sides), every row of logits compared with the
/// reference. `vocab` picks the embedding's type and whether the head is tied to it.
fn tokens_to_logits<T: GemmElement>(gpu: &GpuTest, vocab: SyntheticVocab) {
    let spec = SyntheticSpec { vocab: Some(vocab), ..SyntheticSpec::small(Architecture::Llama) };
    let file = Arc::new(GgufFile::from_bytes(spec.to_bytes().unwrap()).unwrap());
    let model = Model::<T>::load(file.clone(), gpu.stream()).unwrap();
    let reference = ReferenceModel::load(&file, Rounding::Exact).unwrap();
    assert_eq!(model.vocab_size(), Some(vocab.size));
    let mut cache = PagedCache::new(6, 16).unwrap();
    let mut kv = model.new_kv_cache(&cache).unwrap();
    kv.fill_bytes(0xFF).unwrap();
    let seq = cache.add_sequence();
    let mut r = reference.new_sequence();
    let mut rng = SplitMix(23);
    let prompt: Vec<u32> = (0..19).map(|_| (rng.next_u64() % vocab.size as u64) as u32).collect();
    let to_t = |x: &[f64]| x.iter().map(|&v| T::from_f32(v as f32).to_f32() as f64).collect::<Vec<_>>();

    let x = model.embed(&prompt).unwrap();
    let want_x = to_t(&reference.embed(&prompt).unwrap());
    check("embedding rows", &x, &want_x);
    let out = model.prefill(&mut cache, &mut kv, seq, &x).unwrap();
    let want_out = reference.forward(&mut r, &want_x).unwrap();
    let hidden = model.config().hidden;
    let mut logits = model.logits(&model.last_token(&out).unwrap()).unwrap();
    let what = format!("{:?} head{} logits", vocab.ty, if vocab.tied { " (tied)" } else { "" });
    check(
        &format!("{what} after prefill"),
        &logits,
        &reference.logits(&want_out[want_out.len() - hidden..]).unwrap(),
    );
    let mut sampler = Sampler::new(Sampling::GREEDY).unwrap();
    for step in 0..8 {
        let row: Vec<f32> = logits.to_vec().unwrap().iter().map(|v| v.to_f32()).collect();
        let token = sampler.sample(&row).unwrap();
        let x = model.embed(&[token]).unwrap();
        let out = model.decode_step(&mut cache, &mut kv, &[seq], &x).unwrap();
        logits = model.logits(&out).unwrap();
        let want = reference.forward(&mut r, &to_t(&reference.embed(&[token]).unwrap())).unwrap();
        check(&format!("{what}, decode step {step}"), &logits, &reference.logits(&want).unwrap());
    }
    let e = model.embed(&[1, vocab.size as u32]).unwrap_err().to_string();
    assert!(e.contains(&format!("token id {} (at 1) is out of range", vocab.size)), "{e}");
}

#[test]
fn token_ids_to_logits_match_the_reference_f32() {
    let gpu = gpu_test!();
    tokens_to_logits::<f32>(&gpu, SyntheticVocab { size: 300, ty: GgmlType::Q8_0, tied: false });
}

#[test]
fn token_ids_to_logits_with_a_tied_mxfp4_head_match_the_reference_f32() {
    let gpu = gpu_test!();
    tokens_to_logits::<f32>(&gpu, SyntheticVocab { size: 257, ty: GgmlType::MXFP4, tied: true });
}

#[test]
fn llama_f32_matches_the_reference() {
    let gpu = gpu_test!();
    parity::<f32>(&gpu, Architecture::Llama);
}

#[test]
fn llama_f16_matches_the_reference() {
    let gpu = gpu_test!();
    parity::<f16>(&gpu, Architecture::Llama);
}

#[test]
fn llama_bf16_matches_the_reference() {
    let gpu = gpu_test!();
    parity::<bf16>(&gpu, Architecture::Llama);
}

/// The small Llama with Llama 3.1's RoPE: base 500000 and `rope_freqs.weight` holding the
/// llama3 factors (`llama3_freq_factors(64, 500000, 8, 1, 4, 8192)`: 1 for the high-frequency
/// pairs, up to 8 for the low ones), scaling type `llama3`.
fn small_llama3() -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(SyntheticSpec::small_llama3().to_bytes().unwrap()).unwrap())
}

/// The GPU model applies the file's frequency factors as the reference does. Ignoring them
/// would move the outputs by ~1.4e-2 (CPU test
/// `reference_with_unit_factors_equals_none_and_other_factors_differ`), about 300 times the f32
/// tolerance; bf16's tolerance is wider than that, so there it checks the path runs and agrees.
fn llama3_parity<T: GemmElement>(gpu: &GpuTest) {
    let file = small_llama3();
    let config = ModelConfig::from_file(&file).unwrap();
    let factors = config.rope_freqs.clone().expect("the file has rope_freqs.weight");
    assert_eq!(factors, llama3_freq_factors(64, 500_000.0, 8.0, 1.0, 4.0, 8192.0).unwrap());
    assert!(factors.contains(&1.0) && factors.contains(&8.0) && factors.iter().any(|&f| f > 1.0 && f < 8.0));
    let model = Model::<T>::load(file.clone(), gpu.stream()).unwrap();
    assert_eq!(model.config(), &config);
    drop(model);
    parity_of::<T>(gpu, file, "Llama 3.1 RoPE", LoadOptions::default());
}

#[test]
fn llama3_rope_freqs_f32_match_the_reference() {
    let gpu = gpu_test!();
    llama3_parity::<f32>(&gpu);
}

#[test]
fn llama3_rope_freqs_bf16_match_the_reference() {
    let gpu = gpu_test!();
    llama3_parity::<bf16>(&gpu);
}

/// A file whose scaling type is `llama3` but which lacks `rope_freqs.weight` is refused before
/// anything is uploaded, naming the tensor.
#[test]
fn a_llama3_model_without_its_factors_is_refused_before_any_upload() {
    let gpu = gpu_test!();
    let full = small_llama3();
    let mut w = GgufWriter::new();
    for (k, v) in full.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in full.tensors().iter().filter(|t| t.name() != ROPE_FREQS) {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), full.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes()).unwrap());
    let err = Model::<f32>::load(file, gpu.stream()).unwrap_err();
    assert!(matches!(&err, ModelError::BadTensor { name, .. } if name == ROPE_FREQS), "{err}");
    assert!(err.to_string().contains("llama3 frequency factors tensor is missing"), "{err}");
    assert_eq!(gpu.account().allocated_bytes(), 0, "nothing is uploaded for a model that cannot load");
}

/// A prompt prefilled in chunks of 16 + 16 + 5 gives what one prefill gives (and the reference).
fn chunked<T: GemmElement>(gpu: &GpuTest) {
    let file = small(Architecture::Llama);
    let model = Model::<T>::load(file.clone(), gpu.stream()).unwrap();
    let reference = ReferenceModel::load(&file, Rounding::Exact).unwrap();
    let hidden = model.config().hidden;
    let mut cache = PagedCache::new(8, 16).unwrap();
    let mut kv: KvCacheTensors<T> = model.new_kv_cache(&cache).unwrap();
    kv.fill_bytes(0xFF).unwrap();
    let x = SplitMix(4).hidden(PROMPT * hidden);

    let whole_seq = cache.add_sequence();
    let whole = model.prefill(&mut cache, &mut kv, whole_seq, &upload::<T>(gpu, &x)).unwrap();
    let whole: Vec<f64> = whole.to_vec().unwrap().iter().map(|v| v.to_f32() as f64).collect();
    let want = reference.forward(&mut reference.new_sequence(), &rounded::<T>(&x)).unwrap();

    let seq = cache.add_sequence();
    let mut start = 0;
    for chunk in [16, 16, 5] {
        let part = &x[start * hidden..(start + chunk) * hidden];
        let out = model.prefill(&mut cache, &mut kv, seq, &upload::<T>(gpu, part)).unwrap();
        let range = start * hidden..(start + chunk) * hidden;
        check(&format!("chunk at {start} vs the reference"), &out, &want[range.clone()]);
        check(&format!("chunk at {start} vs one prefill"), &out, &whole[range]);
        start += chunk;
    }
    assert_eq!(cache.seq_len(seq).unwrap(), PROMPT);
}

#[test]
fn chunked_prefill_matches_one_prefill_f32() {
    let gpu = gpu_test!();
    chunked::<f32>(&gpu);
}

#[test]
fn chunked_prefill_matches_one_prefill_bf16() {
    let gpu = gpu_test!();
    chunked::<bf16>(&gpu);
}

#[test]
fn bad_inputs_are_refused_and_leave_the_cache_unchanged() {
    let gpu = gpu_test!();
    let model = Model::<f32>::load(small(Architecture::Llama), gpu.stream()).unwrap();
    let hidden = model.config().hidden;
    let mut cache = PagedCache::new(2, 16).unwrap();
    let mut kv = model.new_kv_cache(&cache).unwrap();
    let seq = cache.add_sequence();

    // Cache full: 33 tokens need 3 blocks of 16, there are 2.
    let x = upload::<f32>(&gpu, &SplitMix(1).hidden(33 * hidden));
    let err = model.prefill(&mut cache, &mut kv, seq, &x).unwrap_err();
    assert!(matches!(err, ModelError::KvCache(KvCacheError::CacheFull { needed: 3, free: 2, .. })), "{err}");
    assert_eq!((cache.seq_len(seq).unwrap(), cache.num_free_blocks()), (0, 2));

    // A sequence that is not (or no longer) in the cache.
    let gone: SeqId = cache.add_sequence();
    cache.free_sequence(gone).unwrap();
    let one = upload::<f32>(&gpu, &SplitMix(2).hidden(hidden));
    let err = model.decode_step(&mut cache, &mut kv, &[gone], &one).unwrap_err();
    assert!(matches!(err, ModelError::KvCache(KvCacheError::SequenceNotFound(s)) if s == gone), "{err}");

    // The same sequence twice, and a hidden state of the wrong size.
    let two = upload::<f32>(&gpu, &SplitMix(3).hidden(2 * hidden));
    assert!(matches!(
        model.decode_step(&mut cache, &mut kv, &[seq, seq], &two),
        Err(ModelError::BadInput(_))
    ));
    assert!(matches!(model.decode_step(&mut cache, &mut kv, &[seq], &two), Err(ModelError::BadInput(_))));

    // KV tensors of another shape.
    let other = PagedCache::new(3, 16).unwrap();
    let mut wrong_kv = model.new_kv_cache(&other).unwrap();
    let err = model.decode_step(&mut cache, &mut wrong_kv, &[seq], &one).unwrap_err();
    assert!(matches!(err, ModelError::BadInput(_)), "{err}");
    assert_eq!((cache.seq_len(seq).unwrap(), cache.num_free_blocks()), (0, 2));

    // A step that fits still runs after the refusals.
    model.decode_step(&mut cache, &mut kv, &[seq], &one).unwrap();
    assert_eq!(cache.seq_len(seq).unwrap(), 1);
}

#[test]
fn a_model_missing_a_tensor_is_refused_before_any_upload() {
    let gpu = gpu_test!();
    let full = small(Architecture::Llama);
    let mut w = GgufWriter::new();
    for (k, v) in full.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in full.tensors().iter().filter(|t| t.name() != "blk.1.ffn_down.weight") {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), full.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes()).unwrap());
    let err = Model::<bf16>::load(file, gpu.stream()).unwrap_err();
    assert!(matches!(&err, ModelError::MissingTensor { name } if name == "blk.1.ffn_down.weight"), "{err}");
    assert_eq!(gpu.account().allocated_bytes(), 0, "nothing is uploaded for a model that cannot load");
}
