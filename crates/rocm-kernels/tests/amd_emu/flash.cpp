// CPU emulation of the flash-attention kernels (kernels/flash_portable.hip, flash_combine.hip and
// flash_mfma.hip), for checking them without AMD hardware; the emulator is simt.h. What runs
// depends on the target run.sh builds for:
//   - MFMA targets (gfx908, gfx90a, gfx942, gfx950): the MFMA kernels (rf_flash_mfma_*), as
//     64-lane wavefronts; the build fails unless the kernel enables its MFMA body there;
//   - gfx1100 (RDNA3, no MFMA; the build fails if the kernel enables it there): the portable
//     kernels (rf_flash_<dt>_d<DMAX>) at 32- and 64-lane wavefronts (RDNA's wave32 and wave64;
//     CDNA runs them at 64), and rocmforge.h's wavefront helpers at both widths.
//
// Every case runs against an f64 reference here, with the GPU tests' tolerances; outputs are
// poisoned (NaN), every buffer its exact size under AddressSanitizer (run.sh).

// The kernels' dynamic shared memory is declared `extern __shared__`: these arrays.
#define EMU_EXTERN_SHARED 1
#include "simt.h"

alignas(16) unsigned char rf_flash_mfma_smem[64 * 1024];
alignas(16) float rf_flash_smem[64 * 1024];

#include "flash_portable.hip"
#include "flash_combine.hip"
#include "flash_mfma.hip"

// The kernel must enable its MFMA body exactly on the targets that have the instructions.
#if EMU_HAS_MFMA && !RF_FLASH_MFMA
#error "kernels/flash_mfma.hip does not enable its MFMA body (RF_FLASH_MFMA) for this MFMA target"
#endif
#if !EMU_HAS_MFMA && RF_FLASH_MFMA
#error "kernels/flash_mfma.hip enables its MFMA body for a target without MFMA"
#endif

// ------------------------------------------------------------------------------------------
// Cases
// ------------------------------------------------------------------------------------------

struct Case {
    int batch, seq_q, seq_k, q_heads, kv_heads, head_dim;
    int causal;       // 0: none, 1: default offset (seq_k - seq_q), 2: explicit `offset`
    long long offset;
    bool bhsd;
    float magnitude;
    int splits;       // 1: no split (direct store), else through rf_flash_combine
    int waves;        // MFMA kernel: 4 or 1 wavefronts a block (the portable kernel has one shape)
    int block_size;   // 0: contiguous; else paged with this block size
    bool quick;       // also in quick mode
};

// Which kernel a case runs: the MFMA kernel (64 lanes) or the portable one (at `width` lanes).
struct Kind {
    bool mfma;
    int width;
};


typedef void (*Kernel)(rf_flash_params);

struct Entry {
    const char* name;
    Kernel fn;
};
#define E(x) {#x, x}
static const Entry ENTRIES[] = {
#define MFMA_DIMS(dt, d) E(rf_flash_mfma_##dt##_d##d##_w4), E(rf_flash_mfma_##dt##_d##d##_w1), \
    E(rf_flash_mfma_##dt##_d##d##_w4_paged), E(rf_flash_mfma_##dt##_d##d##_w1_paged)
    MFMA_DIMS(f16, 64), MFMA_DIMS(f16, 80), MFMA_DIMS(f16, 96), MFMA_DIMS(f16, 128), MFMA_DIMS(f16, 256),
    MFMA_DIMS(bf16, 64), MFMA_DIMS(bf16, 80), MFMA_DIMS(bf16, 96), MFMA_DIMS(bf16, 128), MFMA_DIMS(bf16, 256),
#define PORTABLE_DIMS(dt, d) E(rf_flash_##dt##_d##d), E(rf_flash_##dt##_d##d##_paged)
    PORTABLE_DIMS(f16, 64), PORTABLE_DIMS(f16, 128), PORTABLE_DIMS(f16, 256),
    PORTABLE_DIMS(bf16, 64), PORTABLE_DIMS(bf16, 128), PORTABLE_DIMS(bf16, 256),
};
static Kernel find(const std::string& name) {
    for (const Entry& e : ENTRIES)
        if (name == e.name) return e.fn;
    std::fprintf(stderr, "no entry %s\n", name.c_str());
    std::abort();
}

static void launch(Kernel k, const rf_flash_params& p, emu_dim3 grid, int threads, int width) {
    emu_launch(grid, threads, width, [&] { k(p); });
}


template <typename T> static void run_case(const Case& c, Kind kind, std::mt19937_64& rng) {
    const int B = c.batch, SQ = c.seq_q, HQ = c.q_heads, HKV = c.kv_heads, D = c.head_dim;
    const int group = HQ / HKV;
    const bool paged = c.block_size > 0;
    // Paged: batch b has lens[b] keys (its queries the last SQ of them when causal); the cache
    // has a shuffled block table. Contiguous: every batch has seq_k keys.
    std::vector<int> lens(B, c.seq_k);
    if (paged)
        for (int b = 0; b < B; ++b) lens[b] = std::max(1, c.seq_k - 37 * b);
    const int SK = c.seq_k;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto rnd = [&](float sd) { return Dt<T>::from(nd(rng) * sd); };

    // Strides (elements) and buffers; BHSD pads Q rows by 8, BSHD pads O tokens by 16.
    const long long qs_b = c.bhsd ? (long long)HQ * SQ * (D + 8) : (long long)SQ * HQ * D;
    const long long qs_s = c.bhsd ? D + 8 : (long long)HQ * D;
    const long long qs_h = c.bhsd ? (long long)SQ * (D + 8) : D;
    const long long ks_b = c.bhsd ? (long long)HKV * SK * D : (long long)SK * HKV * D;
    const long long ks_s = c.bhsd ? D : (long long)HKV * D;
    const long long ks_h = c.bhsd ? (long long)SK * D : D;
    const long long os_b = c.bhsd ? (long long)HQ * SQ * D : (long long)SQ * (HQ * D + 16);
    const long long os_s = c.bhsd ? D : (long long)HQ * D + 16;
    const long long os_h = c.bhsd ? (long long)SQ * D : D;
    const size_t q_len = (size_t)B * qs_b, kv_len = (size_t)B * ks_b, o_len = (size_t)B * os_b;

    EmuBuffers mem;
    uint16_t* q = mem.exact<uint16_t>(q_len);
    for (size_t i = 0; i < q_len; ++i) q[i] = rnd(c.magnitude);
    // Logical K/V [b][key][h][d] (values), placed contiguously or into the paged cache.
    std::vector<uint16_t> kl((size_t)B * SK * HKV * D), vl(kl.size());
    for (auto& x : kl) x = rnd(c.magnitude);
    for (auto& x : vl) x = rnd(1.0f);
    auto lidx = [&](int b, int j, int h, int d) { return (((size_t)b * SK + j) * HKV + h) * D + d; };

    uint16_t *k, *v;
    int *table = nullptr, *seq_lens = nullptr;
    int max_blocks = 0, num_blocks = 0;
    if (!paged) {
        k = mem.exact<uint16_t>(kv_len);
        v = mem.exact<uint16_t>(kv_len);
        for (int b = 0; b < B; ++b)
            for (int j = 0; j < SK; ++j)
                for (int h = 0; h < HKV; ++h)
                    for (int d = 0; d < D; ++d) {
                        const size_t at = b * ks_b + j * ks_s + h * ks_h + d;
                        k[at] = kl[lidx(b, j, h, d)];
                        v[at] = vl[lidx(b, j, h, d)];
                    }
    } else {
        // Cache [num_blocks * block_size][HKV][D]; table rows shuffled.
        const int bs = c.block_size;
        max_blocks = (SK + bs - 1) / bs;
        num_blocks = B * max_blocks + 3;
        std::vector<int> ids(num_blocks);
        for (int i = 0; i < num_blocks; ++i) ids[i] = i;
        std::shuffle(ids.begin(), ids.end(), rng);
        table = mem.exact<int>((size_t)B * max_blocks);
        seq_lens = mem.exact<int>(B);
        const size_t cache_len = (size_t)num_blocks * bs * HKV * D;
        k = mem.exact<uint16_t>(cache_len);
        v = mem.exact<uint16_t>(cache_len);
        for (size_t i = 0; i < cache_len; ++i) k[i] = v[i] = Dt<T>::from(NAN);
        for (int b = 0; b < B; ++b) {
            seq_lens[b] = lens[b];
            for (int i = 0; i < max_blocks; ++i) table[b * max_blocks + i] = ids[b * max_blocks + i];
            for (int j = 0; j < lens[b]; ++j) {
                const size_t slot = (size_t)table[b * max_blocks + j / bs] * bs + j % bs;
                for (int h = 0; h < HKV; ++h)
                    for (int d = 0; d < D; ++d) {
                        k[(slot * HKV + h) * D + d] = kl[lidx(b, j, h, d)];
                        v[(slot * HKV + h) * D + d] = vl[lidx(b, j, h, d)];
                    }
            }
        }
    }
    uint16_t* o = mem.exact<uint16_t>(o_len);
    for (size_t i = 0; i < o_len; ++i) o[i] = Dt<T>::from(NAN);
    float* lse = mem.exact<float>((size_t)B * HQ * SQ);
    for (int i = 0; i < B * HQ * SQ; ++i) lse[i] = NAN;

    // The launcher's split arithmetic (SPLIT_ALIGN = 64).
    int keys_per_split = ((SK + c.splits - 1) / c.splits + 63) / 64 * 64;
    if (keys_per_split < 64) keys_per_split = 64;
    const int num_splits = std::max(1, (SK + keys_per_split - 1) / keys_per_split);
    const size_t rows = (size_t)B * HQ * SQ;
    float* po = nullptr;
    float* pl = nullptr;
    if (num_splits > 1) {
        po = mem.exact<float>(num_splits * rows * D);
        pl = mem.exact<float>(num_splits * rows);
        for (size_t i = 0; i < num_splits * rows * D; ++i) po[i] = NAN;
        for (size_t i = 0; i < num_splits * rows; ++i) pl[i] = NAN;
    }
    const float scale = 1.0f / std::sqrt((float)D);
    rf_flash_params p{};
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.lse = lse;
    p.partial_o = po;
    p.partial_lse = pl;
    p.q_batch = qs_b, p.q_seq = qs_s, p.q_head = qs_h;
    if (paged) {
        p.k_batch = p.v_batch = 0;
        p.k_seq = p.v_seq = (rf_u64)HKV * D;
        p.k_head = p.v_head = D;
    } else {
        p.k_batch = p.v_batch = ks_b, p.k_seq = p.v_seq = ks_s, p.k_head = p.v_head = ks_h;
    }
    p.o_batch = os_b, p.o_seq = os_s, p.o_head = os_h;
    const long long offset = c.causal == 2 ? c.offset : (long long)SK - SQ;
    p.causal_offset = c.causal ? offset : 0;
    p.batch = B, p.q_heads = HQ, p.kv_heads = HKV, p.seq_q = SQ, p.seq_k = SK, p.head_dim = D;
    p.group = group;
    p.keys_per_split = keys_per_split;
    p.num_splits = num_splits;
    p.causal = c.causal != 0;
    p.scale_log2 = scale * 1.4426950408889634f;
    if (paged) {
        p.block_table = table;
        p.seq_lens = seq_lens;
        p.block_size = c.block_size;
        p.max_blocks = max_blocks;
        p.num_blocks = num_blocks;
        p.block_shift = (c.block_size & (c.block_size - 1)) == 0 ? __builtin_ctz(c.block_size) : -1;
    } else {
        p.block_shift = -1;
    }

    // The launcher's plan (crates/rocm-kernels/src/attention/flash.rs): mfma_plan, or the
    // portable kernel's 128 threads and 16 rows a block.
    std::string entry;
    int rows_per_block, threads;
    if (kind.mfma) {
        int dt = 0;
        for (int d : {64, 80, 96, 128, 256})
            if (d >= D) {
                dt = d;
                break;
            }
        entry = std::string("rf_flash_mfma_") + Dt<T>::name + "_d" + std::to_string(dt) + (c.waves == 4 ? "_w4" : "_w1") +
                (paged ? "_paged" : "");
        rows_per_block = 16 * c.waves;
        threads = 64 * c.waves;
    } else {
        int dmax = 0;
        for (int d : {64, 128, 256})
            if (d >= D) {
                dmax = d;
                break;
            }
        entry = std::string("rf_flash_") + Dt<T>::name + "_d" + std::to_string(dmax) + (paged ? "_paged" : "");
        rows_per_block = RF_FLASH_P_ROWS;
        threads = RF_FLASH_P_THREADS;
    }
    const unsigned row_blocks = (unsigned)((group * SQ + rows_per_block - 1) / rows_per_block);
    launch(find(entry), p, emu_dim3{row_blocks, (unsigned)(HKV * num_splits), (unsigned)B}, threads, kind.width);
    if (num_splits > 1) {
        // rf_flash_combine_<dt> over a grid-stride grid of 64-lane blocks.
        const Kernel comb = std::string(Dt<T>::name) == "f16" ? rf_flash_combine_f16 : rf_flash_combine_bf16;
        launch(comb, p, emu_dim3{4, 1, 1}, 64, kind.width);
    }

    // f64 reference and comparison.
    std::vector<double> kd(kl.size()), vd(vl.size()), qd(D);
    for (size_t i = 0; i < kl.size(); ++i) kd[i] = Dt<T>::to(kl[i]);
    for (size_t i = 0; i < vl.size(); ++i) vd[i] = Dt<T>::to(vl[i]);
    double vmax = 0;
    for (double x : vd) vmax = std::max(vmax, std::fabs(x));
    const double tol = vmax * (4 * Dt<T>::eps + (c.magnitude > 1 ? 2e-3 : 2e-5));
    double worst = 0;
    int bad = 0;
    for (int b = 0; b < B; ++b) {
        const int sk = lens[b];
        const long long off = c.causal == 2 ? c.offset : (long long)sk - SQ;
        for (int i = 0; i < SQ; ++i)
            for (int h = 0; h < HQ; ++h) {
                const int kh = h / group;
                const uint16_t* qr = q + b * qs_b + i * qs_s + h * qs_h;
                for (int d = 0; d < D; ++d) qd[d] = Dt<T>::to(qr[d]);
                std::vector<double> s;
                double mx = -INFINITY;
                for (int j = 0; j < sk; ++j) {
                    if (c.causal && j > i + off) break;
                    const double* kr = &kd[lidx(b, j, kh, 0)];
                    double dot = 0;
                    for (int d = 0; d < D; ++d) dot += qd[d] * kr[d];
                    s.push_back(dot * scale);
                    mx = std::max(mx, dot * scale);
                }
                double sum = 0;
                for (double& x : s) sum += (x = std::exp(x - mx));
                const uint16_t* orow = o + b * os_b + i * os_s + h * os_h;
                for (int d = 0; d < D; ++d) {
                    double want = 0;
                    for (size_t j = 0; j < s.size(); ++j) want += s[j] * vd[lidx(b, (int)j, kh, d)];
                    if (!s.empty()) want /= sum;
                    const double got = Dt<T>::to(orow[d]);
                    const double err = std::fabs(got - want);
                    if (!(err <= tol)) {
                        if (bad++ < 5)
                            std::printf("    o[b%d i%d h%d d%d] = %g, want %g\n", b, i, h, d, got, want);
                    }
                    if (err == err) worst = std::max(worst, err / tol);
                }
                const float gl = lse[((size_t)b * HQ + h) * SQ + i];
                if (s.empty()) {
                    if (!(gl == -INFINITY) && bad++ < 5) std::printf("    lse[b%d i%d h%d] = %g, want -inf\n", b, i, h, gl);
                } else {
                    const double want = mx + std::log(sum);
                    const double allowed = 1e-5 * std::max(std::fabs(want), 1.0) + (c.magnitude > 1 ? 2e-3 : 2e-5);
                    if (!(std::fabs(gl - want) <= allowed) && bad++ < 5)
                        std::printf("    lse[b%d i%d h%d] = %g, want %g\n", b, i, h, gl, want);
                }
            }
        // BSHD: the 16-element gap after each token's heads keeps its poison.
        if (!c.bhsd)
            for (int i = 0; i < SQ; ++i)
                for (int g = 0; g < 16; ++g)
                    if (!std::isnan(Dt<T>::to(o[b * os_b + i * os_s + HQ * D + g])) && bad++ < 5)
                        std::printf("    gap after token %d written\n", i);
    }
    emu_record(bad, worst);
    std::printf("%-4s %-32s w%d b%d sq%-4d sk%-4d hq%-2d hkv%d d%-3d causal%d(%lld) %s mag%-2g splits%d -> %s (worst %.3f of tol)\n",
                bad ? "FAIL" : "ok", entry.c_str(), kind.width, B, SQ, SK, HQ, HKV, D, c.causal, c.causal ? offset : 0,
                c.bhsd ? "bhsd" : "bshd", c.magnitude, num_splits, bad ? "mismatch" : "match", worst);
    std::fflush(stdout);
}

// rocmforge.h's wavefront helpers (rf_warp_sum, rf_warp_max, rf_shfl_down, rf_lane_id,
// rf_warp_width) on one 128-lane block of `width`-lane wavefronts, against the CPU. Values are
// small integers, so every summation order gives the same bits.
static void check_wave_helpers(int width) {
    const int threads = 128;
    std::vector<float> val(threads), sum(threads), mx(threads), down_f(threads);
    std::vector<int> down_i(threads), lane(threads), wwidth(threads);
    for (int t = 0; t < threads; ++t) val[t] = (float)((t * 37 + 11) % 101) - 50.0f;
    emu_launch(emu_dim3{1, 1, 1}, threads, width, [&] {
        const int t = threadIdx.x;
        sum[t] = rf_warp_sum(val[t]);
        mx[t] = rf_warp_max(val[t]);
        down_f[t] = rf_shfl_down(val[t], 5u);
        down_i[t] = rf_shfl_down(t * 3 + 1, 17u);
        lane[t] = rf_lane_id();
        wwidth[t] = (int)rf_warp_width();
    });
    int bad = 0;
    for (int t = 0; t < threads; ++t) {
        const int w0 = t / width * width, l = t % width;
        float s = 0.0f, m = -INFINITY;
        for (int j = w0; j < w0 + width; ++j) s += val[j], m = std::max(m, val[j]);
        const float df = l + 5 < width ? val[t + 5] : val[t];
        const int di = l + 17 < width ? (t + 17) * 3 + 1 : t * 3 + 1;
        if (sum[t] != s || mx[t] != m || down_f[t] != df || down_i[t] != di || lane[t] != l || wwidth[t] != width) {
            if (bad++ < 5)
                std::printf("    lane %d: sum %g (want %g) max %g (%g) down %g (%g) %d (%d) lane %d (%d) width %d\n", t,
                            sum[t], s, mx[t], m, down_f[t], df, down_i[t], di, lane[t], l, wwidth[t]);
        }
    }
    emu_record(bad, 0.0);
    std::printf("%-4s rocmforge.h wave helpers          w%d (rf_warp_sum, rf_warp_max, rf_shfl_down, rf_lane_id, "
                "rf_warp_width) -> %s\n",
                bad ? "FAIL" : "ok", width, bad ? "mismatch" : "match");
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x3fa);
    const bool quick = emu_quick_arg(argc, argv);
    // {batch, seq_q, seq_k, q_heads, kv_heads, head_dim, causal, offset, bhsd, magnitude, splits,
    //  waves, block_size, quick}
    const std::vector<Case> mfma_cases = {
        {1, 1, 1, 1, 1, 64, 0, 0, false, 1, 1, 4, 0, true},
        {3, 17, 17, 3, 3, 64, 1, 0, false, 1, 1, 4, 0, true},
        {1, 255, 255, 8, 2, 128, 1, 0, false, 30, 1, 4, 0, false},
        {1, 100, 100, 8, 2, 128, 1, 0, false, 30, 1, 4, 0, true}, // the same, smaller, for quick
        {3, 1, 255, 8, 1, 128, 0, 0, false, 1, 1, 1, 0, true},    // decode, GQA 8, one wavefront
        {3, 1, 255, 8, 1, 128, 0, 0, false, 1, 3, 4, 0, true},    // the same through 3 splits
        {1, 255, 255, 5, 5, 80, 1, 0, true, 1, 1, 4, 0, false},
        {1, 17, 300, 8, 1, 96, 1, 0, false, 1, 1, 4, 0, false},   // chunked prefill, GQA 8
        {2, 17, 255, 4, 1, 256, 0, 0, false, 30, 2, 4, 0, false}, // head_dim 256, splits
        {1, 33, 20, 2, 2, 64, 1, 0, false, 1, 1, 4, 0, false},    // more queries than keys
        {1, 7, 9, 2, 1, 40, 2, 3, true, 1, 1, 4, 0, true},        // explicit offset, padded dim
        {2, 1, 255, 32, 4, 128, 1, 0, false, 30, 1, 1, 0, false}, // decode, GQA 8, magnitude 30
        {3, 255, 17, 4, 4, 64, 2, -200, false, 1, 1, 4, 0, false}, // negative offset: masked rows
        {2, 2, 300, 6, 1, 80, 1, 0, false, 1, 1, 4, 0, false},    // MQA
        {1, 3, 255, 4, 1, 96, 0, 0, false, 30, 1, 1, 0, false},
        {1, 1, 1, 4, 4, 128, 1, 0, true, 1, 1, 1, 0, false},
        // Paged (shuffled block table; per-batch lengths seq_k - 37 b).
        {3, 1, 200, 8, 1, 128, 1, 0, false, 1, 1, 1, 16, true},
        {2, 3, 150, 4, 2, 64, 1, 0, false, 1, 2, 4, 16, false},
        {2, 17, 100, 6, 1, 80, 0, 0, false, 1, 1, 4, 12, true},   // block size not a power of two
        {2, 1, 90, 4, 1, 256, 1, 0, false, 30, 1, 1, 32, false},
    };
    // The portable kernel (16 rows a block of 128 threads, 32-key tiles; any head_dim).
    const std::vector<Case> portable_cases = {
        {3, 17, 17, 3, 3, 64, 1, 0, false, 1, 1, 4, 0, true},
        {1, 40, 100, 4, 2, 128, 1, 0, false, 30, 1, 4, 0, true},  // several tiles and row blocks, GQA 2
        {3, 1, 255, 8, 1, 128, 0, 0, false, 1, 3, 4, 0, true},    // decode, GQA 8, 3 splits
        {1, 7, 9, 2, 1, 33, 2, 3, true, 1, 1, 4, 0, true},        // odd head_dim, explicit offset
        {3, 255, 17, 4, 4, 64, 2, -200, false, 1, 1, 4, 0, false}, // negative offset: masked rows
        {2, 17, 255, 4, 1, 256, 0, 0, false, 30, 2, 4, 0, false}, // head_dim 256, splits
        {2, 2, 300, 6, 1, 80, 1, 0, false, 1, 1, 4, 0, false},    // MQA
        {3, 1, 200, 8, 1, 128, 1, 0, false, 1, 1, 1, 16, true},   // paged decode
        {2, 17, 100, 6, 1, 80, 0, 0, false, 1, 1, 4, 12, false},  // paged, block size 12
    };
    std::string what;
#if RF_FLASH_MFMA
    what = "MFMA kernel, wave64";
#if defined(__gfx908__)
    what += ", bf16 as two 16x16x8 steps";
#endif
    for (const Case& c : mfma_cases) {
        if (quick && !c.quick) continue;
        run_case<__half>(c, Kind{true, 64}, rng);
        run_case<rf_bf16>(c, Kind{true, 64}, rng);
    }
#else
    what = "portable kernel and wave helpers, wave32 and wave64";
    for (int width : {32, 64}) {
        check_wave_helpers(width);
        for (const Case& c : portable_cases) {
            if (quick && !c.quick) continue;
            run_case<__half>(c, Kind{false, width}, rng);
            run_case<rf_bf16>(c, Kind{false, width}, rng);
        }
    }
#endif
    return emu_finish("flash", what);
}
