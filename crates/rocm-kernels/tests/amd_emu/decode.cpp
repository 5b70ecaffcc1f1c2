// CPU emulation of the decode step's small kernels on their AMD code paths (the emulator is
// simt.h): RoPE (kernels/rope.hip: the table entry rf_rope_<dt> and the warp entries
// rf_rope_warp_<dt> / rf_rope_warp_il_<dt>), the KV-cache writes (kernels/kv_cache.hip), RMSNorm
// with and without the residual add (kernels/rmsnorm.hip: the block and group paths) and SwiGLU
// (kernels/swiglu.hip: two tensors and the fused gate-up rows), in f32, f16 and bf16, at
// wavefronts of 32 lanes (RDNA's wave32) and 64 (CDNA, RDNA's wave64).
//
// Rather than the launcher's one plan per shape, every case runs each configuration a launcher
// could pick: the table path at two block sizes, the warp path (where a head's work items fit
// the wavefront) with one slice and with several slices of a token's heads, each with and
// without 16-byte accesses where the layout allows them. Every result is compared with an f64
// reference written here from the kernels' specification (the header comments), with the GPU
// tests' tolerances: rotated elements within tolerance, every other element bit for bit as it
// was (RoPE works in place), outputs of the cache writes bit for bit, untouched cache slots
// bit for bit as poisoned. Every buffer has its exact size under AddressSanitizer (run.sh).

#include "simt.h"

#include "kv_cache.hip"
#include "rmsnorm.hip"
#include "rope.hip"
#include "swiglu.hip"

// The GPU tests' RoPE tolerance, relative (gpu_kernels/rope.rs): the rotation's f32 error and one
// rounding of the output.
template <typename T> static constexpr double rope_rel() {
    return sizeof(T) == 4 ? 1e-6 : std::is_same<T, __half>::value ? 1e-3 : 8e-3;
}

// ------------------------------------------------------------------------------------------
// RoPE
// ------------------------------------------------------------------------------------------

enum Style { NEOX, GPTJ, GLM, CHATGLM_2D };
static const char* style_name(Style s) {
    switch (s) {
    case NEOX: return "neox";
    case GPTJ: return "gptj";
    case GLM: return "glm";
    default: return "chatglm2d";
    }
}

struct RopeCase {
    int tokens, q_heads, k_heads, head_dim;
    Style style;
    int rotary_dim;   // NeoX / GPT-J (GLM and ChatGLM 2D: head_dim / 2 a segment)
    double base, scale;
    int gap;          // elements between one token's heads and the next token's (a packed QKV)
    bool bad_position; // one token at max_pos, one at -1: NaN in its rotated elements
    bool quick;
};

// The three entries of one element type.
template <typename T> struct RopeEntries;
#define EMU_ROPE_ENTRIES(suffix, T)                                                                \
    template <> struct RopeEntries<T> {                                                            \
        static constexpr auto table = rf_rope_##suffix;                                            \
        static constexpr auto warp = rf_rope_warp_##suffix;                                        \
        static constexpr auto warp_il = rf_rope_warp_il_##suffix;                                  \
    };
RF_FOR_EACH_DTYPE(EMU_ROPE_ENTRIES)

struct RopeLayout {
    int seg_dim, segments;
    bool interleaved;
    double base;
};

static RopeLayout rope_layout(const RopeCase& c) {
    switch (c.style) {
    case NEOX: return {c.rotary_dim, 1, false, c.base};
    case GPTJ: return {c.rotary_dim, 1, true, c.base};
    case GLM: return {c.head_dim / 2, 1, true, c.base};
    default: return {c.head_dim / 2, 2, false, c.base};
    }
}

// One launch configuration.
struct RopePlan {
    bool warp;     // the warp entries, else the table entry
    bool vector;   // 16-byte accesses
    int threads;   // a block
    int slices;    // warp path: the grid's z
};

// Runs RoPE on random Q and K under `plan` and checks both against the f64 rotation of the
// stored inputs.
template <typename T>
static void rope_check(const RopeCase& c, const RopePlan& plan, int width, std::mt19937_64& rng) {
    const RopeLayout lay = rope_layout(c);
    const int hd = c.head_dim, half = lay.seg_dim / 2;
    const size_t q_stride = (size_t)c.q_heads * hd + c.gap, k_stride = (size_t)c.k_heads * hd + c.gap;
    const size_t nq = c.tokens * q_stride, nk = c.tokens * k_stride;
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    EmuBuffers mem;
    T* q = mem.exact<T>(nq);
    T* k = mem.exact<T>(nk);
    std::vector<T> q0(nq), k0(nk);
    for (size_t i = 0; i < nq; ++i) q[i] = q0[i] = Io<T>::store(u(rng));
    for (size_t i = 0; i < nk; ++i) k[i] = k0[i] = Io<T>::store(u(rng));
    const long long max_pos = 100000;
    int* pos = mem.exact<int>(c.tokens);
    int* block_pos = mem.exact<int>(c.tokens);
    for (int t = 0; t < c.tokens; ++t) {
        pos[t] = (int)(rng() % max_pos);
        block_pos[t] = (int)(rng() % max_pos);
    }
    pos[0] = 0;
    if (c.bad_position && c.tokens > 2) {
        pos[1] = (int)max_pos;
        block_pos[c.tokens - 1] = -1;
    }
    rf_rope::Freqs freqs{};
    for (int i = 0; i < half; ++i) freqs.inv_freq[i] = std::pow(lay.base, -2.0 * i / lay.seg_dim) / c.scale;

    const auto kernel = plan.warp ? (lay.interleaved ? RopeEntries<T>::warp_il : RopeEntries<T>::warp)
                                  : RopeEntries<T>::table;
    const unsigned blocks = plan.warp ? (unsigned)((c.tokens + plan.threads / width - 1) / (plan.threads / width))
                                      : (unsigned)c.tokens;
    emu_launch(emu_dim3{blocks, 1, plan.warp ? (unsigned)plan.slices : 1u}, plan.threads, width, [&] {
        kernel(q, c.k_heads ? k : nullptr, pos, lay.segments > 1 ? block_pos : nullptr, c.tokens, c.q_heads,
               c.k_heads, q_stride, c.k_heads ? k_stride : 0, hd, lay.seg_dim, lay.segments, lay.interleaved,
               plan.vector, max_pos, freqs);
    });

    int bad = 0;
    double worst = 0.0;
    auto check = [&](const char* what, const T* got, const std::vector<T>& before, int heads, size_t stride) {
        std::vector<char> rotated(stride, 0);
        for (int h = 0; h < heads; ++h)
            for (int s = 0; s < lay.segments; ++s)
                for (int e = 0; e < lay.seg_dim; ++e) rotated[h * hd + s * lay.seg_dim + e] = 1;
        for (int t = 0; t < c.tokens; ++t) {
            for (size_t e = 0; e < stride; ++e) {
                const size_t i = t * stride + e;
                if (!rotated[e] && emu_bits(got[i]) != emu_bits(before[i])) {
                    if (bad++ < 5) std::printf("    %s token %d element %zu: not rotated but changed\n", what, t, e);
                }
            }
            for (int h = 0; h < heads; ++h)
                for (int s = 0; s < lay.segments; ++s) {
                    const int p = s == 0 ? pos[t] : block_pos[t];
                    const bool valid = p >= 0 && p < max_pos;
                    const size_t start = t * stride + (size_t)h * hd + (size_t)s * lay.seg_dim;
                    for (int i = 0; i < half; ++i) {
                        const size_t ia = start + (lay.interleaved ? 2 * i : i);
                        const size_t ib = start + (lay.interleaved ? 2 * i + 1 : i + half);
                        const double a = Io<T>::load(before[ia]), b = Io<T>::load(before[ib]);
                        const double angle = (double)p * freqs.inv_freq[i];
                        const double want[2] = {a * std::cos(angle) - b * std::sin(angle),
                                                b * std::cos(angle) + a * std::sin(angle)};
                        const size_t at[2] = {ia, ib};
                        for (int m = 0; m < 2; ++m) {
                            const double g = Io<T>::load(got[at[m]]);
                            if (!valid) {
                                if (!std::isnan(g) && bad++ < 5)
                                    std::printf("    %s token %d head %d pair %d: position %d, got %g, want NaN\n",
                                                what, t, h, i, p, g);
                                continue;
                            }
                            const double tol = 4e-6 + rope_rel<T>() * std::fabs(want[m]);
                            const double ratio = std::fabs(g - want[m]) / tol;
                            if (!(ratio <= 1.0)) {
                                if (bad++ < 5)
                                    std::printf("    %s token %d head %d pair %d: got %.7g, want %.7g\n", what, t, h, i,
                                                g, want[m]);
                            } else {
                                worst = std::max(worst, ratio);
                            }
                        }
                    }
                }
        }
    };
    check("q", q, q0, c.q_heads, q_stride);
    if (c.k_heads) check("k", k, k0, c.k_heads, k_stride);
    emu_record(bad, worst);
    std::printf("%-4s rope %-4s %-9s w%d %-5s %-6s t%-3d slices%d tokens%-3d heads %d+%d hd%-3d seg%d%s gap%d -> %s "
                "(worst %.3f of tol)\n",
                bad ? "FAIL" : "ok", Io<T>::name, style_name(c.style), width, plan.warp ? "warp" : "table",
                plan.vector ? "vector" : "scalar", plan.threads, plan.slices, c.tokens, c.q_heads, c.k_heads, hd,
                lay.seg_dim, lay.segments > 1 ? "x2" : "", c.gap, bad ? "MISMATCH" : "match", worst);
}

// Every configuration a launcher could pick for the case (crates/rocm-kernels/src/rope.rs: the
// warp path needs a head's work items to fit the wavefront; 16-byte accesses need the pairs,
// heads and token stride in whole vectors).
template <typename T> static void rope_case(const RopeCase& c, int width, std::mt19937_64& rng) {
    const RopeLayout lay = rope_layout(c);
    const int n = 16 / (int)sizeof(T), half = lay.seg_dim / 2;
    const bool groups = lay.interleaved ? lay.seg_dim % (2 * n) == 0 : half % n == 0;
    const bool vectorizable = groups && c.head_dim % n == 0 && lay.seg_dim % n == 0 &&
                              (c.q_heads * c.head_dim + c.gap) % n == 0 && (c.k_heads * c.head_dim + c.gap) % n == 0;
    for (bool vector : {false, true}) {
        if (vector && !vectorizable) continue;
        const int pairs_per_item = !vector ? 1 : lay.interleaved ? n / 2 : n;
        const int items_per_head = lay.segments * (half / pairs_per_item);
        const int items = (c.q_heads + c.k_heads) * items_per_head;
        // Table path: a small block (a token's items loop) and one that covers them.
        const int covering = std::min(512, (items + width - 1) / width * width);
        rope_check<T>(c, RopePlan{false, vector, width, 1}, width, rng);
        if (covering != width) rope_check<T>(c, RopePlan{false, vector, covering, 1}, width, rng);
        if (items_per_head <= width) {
            // One slice (many tokens), a few, and more slices than rounds of heads (some idle).
            const int rounds = (c.q_heads + c.k_heads + width / items_per_head - 1) / (width / items_per_head);
            std::vector<int> slices = {1};
            if (std::min(3, rounds) > 1) slices.push_back(std::min(3, rounds));
            slices.push_back(rounds + 1);
            for (int s : slices) rope_check<T>(c, RopePlan{true, vector, 128, s}, width, rng);
        }
    }
}

// RoPE fused with the KV-cache write (rf_rope_warp_kv_* / rf_rope_warp_il_kv_*: one segment
// covering the head): Q rotated in place; K's rotated heads in the K cache at the token's slot, V
// copied to the V cache; K itself untouched; a token whose slot is negative or past the cache
// writes neither. `v_gap`: V's token stride past its row (a packed QKV); odd gaps take the
// element copy.
template <typename T> struct RopeKvEntries;
#define EMU_ROPE_KV_ENTRIES(suffix, T)                                                             \
    template <> struct RopeKvEntries<T> {                                                          \
        static constexpr auto half_split = rf_rope_warp_kv_##suffix;                               \
        static constexpr auto interleaved = rf_rope_warp_il_kv_##suffix;                           \
    };
RF_FOR_EACH_DTYPE(EMU_ROPE_KV_ENTRIES)

template <typename T>
static void rope_kv_check(const RopeCase& c, bool vector, int slices, int v_gap, int width, std::mt19937_64& rng) {
    const RopeLayout lay = rope_layout(c);
    const int hd = c.head_dim, half = hd / 2;
    const size_t q_stride = (size_t)c.q_heads * hd + c.gap, row = (size_t)c.k_heads * hd;
    const size_t k_stride = row + c.gap, v_stride = row + v_gap;
    const int num_slots = c.tokens + 6;
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    EmuBuffers mem;
    T* q = mem.exact<T>(c.tokens * q_stride);
    T* k = mem.exact<T>(c.tokens * k_stride);
    T* v = mem.exact<T>(c.tokens * v_stride);
    std::vector<T> q0(c.tokens * q_stride), k0(c.tokens * k_stride);
    for (size_t i = 0; i < c.tokens * q_stride; ++i) q[i] = q0[i] = Io<T>::store(u(rng));
    for (size_t i = 0; i < c.tokens * k_stride; ++i) k[i] = k0[i] = Io<T>::store(u(rng));
    for (size_t i = 0; i < c.tokens * v_stride; ++i) v[i] = Io<T>::store(u(rng));
    T* kc = mem.exact<T>(num_slots * row);
    T* vc = mem.exact<T>(num_slots * row);
    const T poison = Io<T>::store(NAN);
    for (size_t i = 0; i < num_slots * row; ++i) kc[i] = vc[i] = poison;
    const long long max_pos = 100000;
    int* pos = mem.exact<int>(c.tokens);
    int* slots = mem.exact<int>(c.tokens);
    std::vector<int> order(num_slots);
    for (int s = 0; s < num_slots; ++s) order[s] = s;
    std::shuffle(order.begin(), order.end(), rng);
    for (int t = 0; t < c.tokens; ++t) {
        pos[t] = (int)(rng() % max_pos);
        slots[t] = order[t];
    }
    if (c.tokens > 2) {
        slots[1] = -1;
        slots[c.tokens - 1] = num_slots;
        if (c.bad_position) pos[0] = -1;
    }
    rf_rope::Freqs freqs{};
    for (int i = 0; i < half; ++i) freqs.inv_freq[i] = std::pow(lay.base, -2.0 * i / hd) / c.scale;
    rf_kv_write_params kv{k, v, kc, vc, slots, k_stride, v_stride, row, (unsigned long long)c.tokens,
                          (unsigned long long)num_slots};
    const auto kernel = lay.interleaved ? RopeKvEntries<T>::interleaved : RopeKvEntries<T>::half_split;
    const int threads = 128;
    const unsigned blocks = (unsigned)((c.tokens + threads / width - 1) / (threads / width));
    emu_launch(emu_dim3{blocks, 1, (unsigned)slices}, threads, width, [&] {
        kernel(q, pos, c.tokens, c.q_heads, c.k_heads, q_stride, hd, vector, max_pos, freqs, kv);
    });

    int bad = 0;
    double worst = 0.0;
    // Rotated head h of token t from `before` (stride `stride`) against `got` (head start `out`).
    auto compare_head = [&](const char* what, int t, int h, const std::vector<T>& before, size_t in, const T* out) {
        const bool valid = pos[t] >= 0 && pos[t] < max_pos;
        for (int i = 0; i < half; ++i) {
            const size_t ia = lay.interleaved ? 2 * i : i, ib = lay.interleaved ? 2 * i + 1 : i + half;
            const double a = Io<T>::load(before[in + ia]), b = Io<T>::load(before[in + ib]);
            const double angle = (double)pos[t] * freqs.inv_freq[i];
            const double want[2] = {a * std::cos(angle) - b * std::sin(angle), b * std::cos(angle) + a * std::sin(angle)};
            const size_t at[2] = {ia, ib};
            for (int m = 0; m < 2; ++m) {
                const double g = Io<T>::load(out[at[m]]);
                const double tol = 4e-6 + rope_rel<T>() * std::fabs(want[m]);
                const bool ok = valid ? std::fabs(g - want[m]) <= tol : std::isnan(g);
                if (!ok) {
                    if (bad++ < 5) std::printf("    %s token %d head %d pair %d: got %.7g, want %.7g\n", what, t, h, i, g,
                                               valid ? want[m] : NAN);
                } else if (valid) {
                    worst = std::max(worst, std::fabs(g - want[m]) / tol);
                }
            }
        }
    };
    std::vector<char> written(num_slots, 0);
    for (int t = 0; t < c.tokens; ++t) {
        for (int h = 0; h < c.q_heads; ++h) compare_head("q", t, h, q0, t * q_stride + h * hd, q + t * q_stride + h * hd);
        for (size_t e = c.q_heads * hd; e < q_stride; ++e)
            if (emu_bits(q[t * q_stride + e]) != emu_bits(q0[t * q_stride + e]) && bad++ < 5)
                std::printf("    q token %d element %zu (the gap) changed\n", t, e);
        const int slot = slots[t];
        if (slot < 0 || slot >= num_slots) continue;
        written[slot] = 1;
        for (int h = 0; h < c.k_heads; ++h) compare_head("k cache", t, h, k0, t * k_stride + h * hd, kc + slot * row + h * hd);
        for (size_t e = 0; e < row; ++e)
            if (emu_bits(vc[slot * row + e]) != emu_bits(v[t * v_stride + e]) && bad++ < 5)
                std::printf("    v cache slot %d element %zu: not token %d's V\n", slot, e, t);
    }
    for (size_t i = 0; i < c.tokens * k_stride; ++i)
        if (emu_bits(k[i]) != emu_bits(k0[i]) && bad++ < 5) std::printf("    k element %zu changed (K is read only)\n", i);
    for (int s = 0; s < num_slots; ++s)
        for (size_t e = 0; !written[s] && e < row; ++e)
            if ((emu_bits(kc[s * row + e]) != emu_bits(poison) || emu_bits(vc[s * row + e]) != emu_bits(poison)) && bad++ < 5)
                std::printf("    slot %d element %zu written, but no token has that slot\n", s, e);
    emu_record(bad, worst);
    std::printf("%-4s rope+kv %-4s %-9s w%d %-6s slices%d tokens%-3d heads %d+%d hd%-3d gap%d v+%d -> %s (worst %.3f "
                "of tol)\n",
                bad ? "FAIL" : "ok", Io<T>::name, style_name(c.style), width, vector ? "vector" : "scalar", slices,
                c.tokens, c.q_heads, c.k_heads, hd, c.gap, v_gap, bad ? "MISMATCH" : "match", worst);
}

// The fused entries where the launcher may take them: one segment over the whole head, a head's
// work items within the wavefront; one slice and several.
template <typename T> static void rope_kv_case(const RopeCase& c, int width, std::mt19937_64& rng) {
    const RopeLayout lay = rope_layout(c);
    if (lay.segments != 1 || lay.seg_dim != c.head_dim || c.k_heads == 0) return;
    const int n = 16 / (int)sizeof(T), half = c.head_dim / 2;
    const bool groups = lay.interleaved ? c.head_dim % (2 * n) == 0 : half % n == 0;
    const bool vectorizable = groups && c.head_dim % n == 0 && (c.q_heads * c.head_dim + c.gap) % n == 0 &&
                              (c.k_heads * c.head_dim + c.gap) % n == 0;
    for (bool vector : {false, true}) {
        if (vector && !vectorizable) continue;
        const int items_per_head = half / (!vector ? 1 : lay.interleaved ? n / 2 : n);
        if (items_per_head > width) continue;
        const int rounds = (c.q_heads + c.k_heads + width / items_per_head - 1) / (width / items_per_head);
        for (int slices : {1, std::min(3, rounds), rounds + 1})
            for (int v_gap : {0, 8, 1}) rope_kv_check<T>(c, vector, slices, v_gap, width, rng);
    }
}

// ------------------------------------------------------------------------------------------
// KV-cache writes
// ------------------------------------------------------------------------------------------

struct KvCase {
    int tokens, row, num_slots;
    int extra_stride; // k and v token strides past the row (a packed QKV)
    int blocks;       // grid
    bool quick;
};

template <typename T> struct KvEntries;
#define EMU_KV_ENTRIES(suffix, T)                                                                  \
    template <> struct KvEntries<T> {                                                              \
        static constexpr auto write = rf_kv_cache_write_##suffix;                                  \
        static constexpr auto copy = rf_kv_cache_copy_blocks_##suffix;                             \
    };
RF_FOR_EACH_DTYPE(EMU_KV_ENTRIES)

// Writes `tokens` rows to shuffled slots (one skipped by a negative slot, one by a slot past the
// cache), then copies whole blocks (pairs with an id outside the cache skipped), against the
// same moves done here.
template <typename T> static void kv_case(const KvCase& c, int width, std::mt19937_64& rng) {
    const size_t ks = c.row + c.extra_stride, vs = c.row + 2 * c.extra_stride;
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    EmuBuffers mem;
    T* k = mem.exact<T>(c.tokens * ks);
    T* v = mem.exact<T>(c.tokens * vs);
    for (size_t i = 0; i < c.tokens * ks; ++i) k[i] = Io<T>::store(u(rng));
    for (size_t i = 0; i < c.tokens * vs; ++i) v[i] = Io<T>::store(u(rng));
    const size_t cache_len = (size_t)c.num_slots * c.row;
    T* kc = mem.exact<T>(cache_len);
    T* vc = mem.exact<T>(cache_len);
    const T poison = Io<T>::store(NAN);
    for (size_t i = 0; i < cache_len; ++i) kc[i] = vc[i] = poison;
    std::vector<int> order(c.num_slots);
    for (int s = 0; s < c.num_slots; ++s) order[s] = s;
    std::shuffle(order.begin(), order.end(), rng);
    int* slots = mem.exact<int>(c.tokens);
    for (int t = 0; t < c.tokens; ++t) slots[t] = order[t];
    if (c.tokens > 2) {
        slots[1] = -1;
        slots[c.tokens - 1] = c.num_slots + 5;
    }
    std::vector<T> want_k(cache_len, poison), want_v(cache_len, poison);
    for (int t = 0; t < c.tokens; ++t) {
        if (slots[t] < 0 || slots[t] >= c.num_slots) continue;
        for (int i = 0; i < c.row; ++i) {
            want_k[(size_t)slots[t] * c.row + i] = k[t * ks + i];
            want_v[(size_t)slots[t] * c.row + i] = v[t * vs + i];
        }
    }
    rf_kv_write_params p{k, v, kc, vc, slots, ks, vs, (unsigned long long)c.row, (unsigned long long)c.tokens,
                         (unsigned long long)c.num_slots};
    emu_launch(emu_dim3{(unsigned)c.blocks, 1, 1}, 64, width, [&] { KvEntries<T>::write(p); });
    int bad = 0;
    auto compare = [&](const char* what, const T* got, const std::vector<T>& want) {
        for (size_t i = 0; i < cache_len; ++i)
            if (emu_bits(got[i]) != emu_bits(want[i]) && bad++ < 5)
                std::printf("    %s slot %zu element %zu: %08x, want %08x\n", what, i / c.row, i % c.row,
                            emu_bits(got[i]), emu_bits(want[i]));
    };
    compare("write k", kc, want_k);
    compare("write v", vc, want_v);

    // Copy-on-write: blocks of 4 slots; pairs (src, dst) without chains, one out of range.
    const int block_size = 4, num_blocks = c.num_slots / block_size;
    if (num_blocks >= 4) {
        const int pairs_host[] = {0, num_blocks - 1, 2, 1, num_blocks + 3, 0};
        int* pairs = mem.exact<int>(6);
        std::memcpy(pairs, pairs_host, sizeof pairs_host);
        const size_t be = (size_t)block_size * c.row;
        for (int pr = 0; pr < 3; ++pr) {
            const int src = pairs_host[2 * pr], dst = pairs_host[2 * pr + 1];
            if (src >= num_blocks || dst >= num_blocks) continue;
            for (size_t i = 0; i < be; ++i) {
                want_k[dst * be + i] = want_k[src * be + i];
                want_v[dst * be + i] = want_v[src * be + i];
            }
        }
        rf_kv_copy_params cp{kc, vc, pairs, 3, be, (unsigned long long)num_blocks};
        emu_launch(emu_dim3{(unsigned)c.blocks, 1, 1}, 64, width, [&] { KvEntries<T>::copy(cp); });
        compare("copy k", kc, want_k);
        compare("copy v", vc, want_v);
    }
    emu_record(bad, 0.0);
    std::printf("%-4s kv_cache %-4s w%d tokens%-3d row%-4d slots%-4d stride+%d blocks%d -> %s\n", bad ? "FAIL" : "ok",
                Io<T>::name, width, c.tokens, c.row, c.num_slots, c.extra_stride, c.blocks,
                bad ? "MISMATCH" : "match (bit for bit)");
}

// ------------------------------------------------------------------------------------------
// RMSNorm
// ------------------------------------------------------------------------------------------

template <typename T> struct RmsEntries;
#define EMU_RMS_ENTRIES(suffix, T)                                                                 \
    template <> struct RmsEntries<T> {                                                             \
        static constexpr auto block = rf_rmsnorm_##suffix;                                         \
        static constexpr auto residual = rf_rmsnorm_residual_##suffix;                             \
        static constexpr auto group = rf_rmsnorm_group_##suffix;                                   \
        static constexpr auto residual_group = rf_rmsnorm_residual_group_##suffix;                 \
    };
RF_FOR_EACH_DTYPE(EMU_RMS_ENTRIES)

// The GPU tests' tolerance (gpu_kernels/rmsnorm.rs): the f32 reduction and one rounding of the
// output, relative, plus 1e-6 of the largest output.
template <typename T> static double rms_rel() {
    return sizeof(T) == 4 ? 1e-5 : std::is_same<T, __half>::value ? 2.0 * std::ldexp(1.0, -10) : 2.0 * std::ldexp(1.0, -7);
}

struct RmsCase {
    int rows, cols, stride_pad; // rows `cols + stride_pad` apart
    int grid;                   // 0: one block a row
    bool quick;
};

// out = x / sqrt(mean(x^2) + eps) * w, with residual: s = round_T(x + r) (into r) normed; block
// path at a few block sizes (the register cache and the streaming path), group path at the
// launcher's block and at one too small for the row (its streaming fallback).
template <typename T> static void rms_case(const RmsCase& c, bool residual, int width, std::mt19937_64& rng) {
    const size_t stride = (size_t)c.cols + c.stride_pad, len = c.rows * stride;
    std::uniform_real_distribution<float> ux(-3.0f, 3.0f), uw(-2.0f, 2.0f);
    std::vector<T> x0(len), r0(len), w0(c.cols);
    for (auto& v : x0) v = Io<T>::store(ux(rng));
    for (auto& v : r0) v = Io<T>::store(ux(rng));
    for (auto& v : w0) v = Io<T>::store(uw(rng));
    const float eps = 1e-5f;
    // Expected: s (bit for bit: the f32 sum of the two stored values, rounded once) and out.
    std::vector<T> want_s(len);
    std::vector<double> want(len, 0.0);
    double scale = 0.0;
    for (int row = 0; row < c.rows; ++row) {
        double ss = 0.0;
        for (int j = 0; j < c.cols; ++j) {
            const size_t i = row * stride + j;
            want_s[i] = residual ? Io<T>::store(Io<T>::load(x0[i]) + Io<T>::load(r0[i])) : x0[i];
            ss += (double)Io<T>::load(want_s[i]) * Io<T>::load(want_s[i]);
        }
        const double inv = 1.0 / std::sqrt(ss / c.cols + eps);
        for (int j = 0; j < c.cols; ++j) {
            const size_t i = row * stride + j;
            want[i] = Io<T>::load(want_s[i]) * inv * Io<T>::load(w0[j]);
            scale = std::max(scale, std::fabs(want[i]));
        }
    }
    const int n = 16 / (int)sizeof(T);
    const bool vector = c.cols >= n && stride % n == 0;
    const int vectors = c.cols / n;
    const int group_block = ((vectors + 1) / 2 + width - 1) / width * width;
    struct Plan {
        bool group;
        int threads;
    };
    std::vector<Plan> plans = {{false, width}, {false, 256}};
    if (vector && group_block <= 1024) plans.push_back({true, std::max(width, group_block)});
    plans.push_back({true, width}); // the group entry's fallback when the row does not fit
    for (const Plan& plan : plans) {
        EmuBuffers mem;
        T* x = mem.exact<T>(len);
        T* r = mem.exact<T>(len);
        T* w = mem.exact<T>(c.cols);
        T* out = mem.exact<T>(len);
        std::copy(x0.begin(), x0.end(), x);
        std::copy(r0.begin(), r0.end(), r);
        std::copy(w0.begin(), w0.end(), w);
        const T poison = Io<T>::store(NAN);
        for (size_t i = 0; i < len; ++i) out[i] = poison;
        const unsigned grid = (unsigned)(c.grid > 0 ? std::min(c.grid, c.rows) : c.rows);
        emu_launch(emu_dim3{grid, 1, 1}, plan.threads, width, [&] {
            if (residual) {
                (plan.group ? RmsEntries<T>::residual_group : RmsEntries<T>::residual)(
                    x, r, w, out, stride, stride, stride, c.rows, c.cols, eps);
            } else {
                (plan.group ? RmsEntries<T>::group : RmsEntries<T>::block)(x, w, out, stride, stride, c.rows, c.cols, eps);
            }
        });
        int bad = 0;
        double worst = 0.0;
        for (int row = 0; row < c.rows; ++row) {
            for (size_t j = 0; j < stride; ++j) {
                const size_t i = row * stride + j;
                if ((int)j >= c.cols) {
                    if (emu_bits(out[i]) != emu_bits(poison) && bad++ < 5) std::printf("    gap element %zu written\n", i);
                    continue;
                }
                if (residual && emu_bits(r[i]) != emu_bits(want_s[i]) && bad++ < 5)
                    std::printf("    row %d col %zu: residual %08x, want %08x\n", row, j, emu_bits(r[i]), emu_bits(want_s[i]));
                const double g = Io<T>::load(out[i]);
                const double tol = 1e-6 * scale + rms_rel<T>() * std::fabs(want[i]);
                const double err = std::fabs(g - want[i]);
                if (!(err <= tol)) {
                    if (bad++ < 5) std::printf("    row %d col %zu: got %.7g, want %.7g\n", row, j, g, want[i]);
                } else {
                    worst = std::max(worst, err / tol);
                }
            }
        }
        emu_record(bad, worst);
        std::printf("%-4s rmsnorm%s %-4s %-5s w%d threads%-4d grid%-3u rows%-3d cols%-6d stride+%d -> %s (worst %.3f of "
                    "tol)\n",
                    bad ? "FAIL" : "ok", residual ? "_residual" : "         ", Io<T>::name, plan.group ? "group" : "block",
                    width, plan.threads, grid, c.rows, c.cols, c.stride_pad, bad ? "MISMATCH" : "match", worst);
    }
}

// ------------------------------------------------------------------------------------------
// SwiGLU
// ------------------------------------------------------------------------------------------

template <typename T> struct SwigluEntry;
#define EMU_SWIGLU_ENTRY(suffix, T)                                                                \
    template <> struct SwigluEntry<T> {                                                            \
        static constexpr auto run = rf_swiglu_##suffix;                                            \
    };
RF_FOR_EACH_DTYPE(EMU_SWIGLU_ENTRY)

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)): two tensors (one row of `cols`) or fused
// gate-up rows ([gate | up], stride 2 cols); the kernel's tolerance (swiglu.hip: 1e-5 in f32,
// two storage ulps, and f16's subnormal spacing).
template <typename T> static void swiglu_case(int rows, int cols, bool fused, int grid_x, int width, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> ug(-12.0f, 12.0f), uu(-3.0f, 3.0f);
    const size_t in_len = fused ? (size_t)rows * 2 * cols : (size_t)rows * cols;
    EmuBuffers mem;
    T* gate = mem.exact<T>(in_len);
    T* up = fused ? gate + cols : mem.exact<T>(in_len);
    for (size_t i = 0; i < in_len; ++i) gate[i] = Io<T>::store(ug(rng));
    if (!fused)
        for (size_t i = 0; i < in_len; ++i) up[i] = Io<T>::store(uu(rng));
    T* out = mem.exact<T>((size_t)rows * cols);
    for (size_t i = 0; i < (size_t)rows * cols; ++i) out[i] = Io<T>::store(NAN);
    const rf_u64 in_stride = fused ? 2 * (rf_u64)cols : (rf_u64)cols;
    emu_launch(emu_dim3{(unsigned)grid_x, (unsigned)rows, 1}, 64, width, [&] {
        SwigluEntry<T>::run(gate, up, out, in_stride, in_stride, cols, rows, cols);
    });
    const double rel = sizeof(T) == 4 ? 1e-5 : std::is_same<T, __half>::value ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    int bad = 0;
    double worst = 0.0;
    for (int row = 0; row < rows; ++row)
        for (int j = 0; j < cols; ++j) {
            const double g = Io<T>::load(gate[row * in_stride + j]), u = Io<T>::load(up[row * in_stride + j]);
            const double want = g / (1.0 + std::exp(-g)) * u;
            const double got = Io<T>::load(out[(size_t)row * cols + j]);
            // f16 outputs below 2^-14 are subnormal: their spacing is 2^-24.
            const double tol = rel * std::fabs(want) + (std::is_same<T, __half>::value ? std::ldexp(1.0, -24) : 1e-30);
            if (!(std::fabs(got - want) <= tol)) {
                if (bad++ < 5) std::printf("    row %d col %d: got %.7g, want %.7g\n", row, j, got, want);
            } else {
                worst = std::max(worst, std::fabs(got - want) / tol);
            }
        }
    emu_record(bad, worst);
    std::printf("%-4s swiglu %-4s %-5s w%d grid %dx%d rows%-3d cols%-6d -> %s (worst %.3f of tol)\n", bad ? "FAIL" : "ok",
                Io<T>::name, fused ? "fused" : "two", width, grid_x, rows, rows, cols, bad ? "MISMATCH" : "match", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0xdec0de);
    const bool quick = emu_quick_arg(argc, argv);
    // {tokens, q_heads, k_heads, head_dim, style, rotary_dim, base, scale, gap, bad_position, quick}
    const std::vector<RopeCase> rope_cases = {
        {1, 32, 8, 128, NEOX, 128, 500000.0, 1.0, 0, false, true},  // Llama 3 decode
        {5, 28, 4, 128, NEOX, 128, 1e6, 1.0, 1024, true, true},     // Qwen2, strided (packed QKV)
        {3, 4, 2, 80, NEOX, 80, 10000.0, 1.0, 0, false, true},      // items that do not divide a warp
        {2, 3, 1, 96, NEOX, 24, 10000.0, 4.0, 8, false, false},     // partial rotary, scaled
        {3, 2, 1, 6, NEOX, 4, 10000.0, 1.0, 0, true, false},        // never vectorised
        {2, 4, 4, 128, GPTJ, 128, 10000.0, 1.0, 0, false, true},
        {2, 2, 1, 256, GPTJ, 64, 10000.0, 2.5, 0, false, false},
        {3, 6, 2, 128, GLM, 0, 10000.0, 1.0, 16, true, true},       // GLM-4: half the head rotated
        {2, 2, 2, 12, GLM, 0, 10000.0, 1.0, 0, false, false},
        {3, 4, 2, 128, CHATGLM_2D, 0, 10000.0, 1.0, 0, true, true}, // two segments, two positions
        {1, 2, 0, 16, CHATGLM_2D, 0, 10000.0, 1.0, 0, false, false}, // no K
        {2, 2, 1, 130, NEOX, 130, 10000.0, 1.0, 0, false, false},   // 65 pairs: the table path only
    };
    // {tokens, row, num_slots, extra_stride, blocks, quick}
    const std::vector<KvCase> kv_cases = {
        {1, 1024, 64, 0, 3, true},   // decode: one row
        {7, 1024, 32, 0, 2, true},   // a few tokens, grid-stride
        {9, 136, 40, 24, 5, false},  // strided rows (a packed QKV), row not a power of two
        {3, 8, 16, 0, 1, true},
    };
    for (int width : {32, 64}) {
        for (const RopeCase& c : rope_cases) {
            if (quick && !c.quick) continue;
            rope_case<float>(c, width, rng);
            rope_case<__half>(c, width, rng);
            rope_case<rf_bf16>(c, width, rng);
            rope_kv_case<float>(c, width, rng);
            rope_kv_case<__half>(c, width, rng);
            rope_kv_case<rf_bf16>(c, width, rng);
        }
        for (const KvCase& c : kv_cases) {
            if (quick && !c.quick) continue;
            kv_case<float>(c, width, rng);
            kv_case<__half>(c, width, rng);
            kv_case<rf_bf16>(c, width, rng);
        }
    }
    // {rows, cols, stride pad, grid, quick}
    const std::vector<RmsCase> rms_cases = {
        {1, 1, 0, 0, true},
        {3, 7, 0, 0, true},        // rows shorter than a vector
        {2, 4096, 0, 0, true},     // the 8B model's hidden size
        {5, 4097, 0, 2, false},    // a scalar row (its stride breaks 16-byte alignment), grid-stride
        {2, 4104, 8, 0, true},     // strided rows
        {1, 16392, 0, 0, false},   // longer than a 1024-thread group block: the block path streams
    };
    for (int width : {32, 64}) {
        for (const RmsCase& c : rms_cases) {
            if (quick && !c.quick) continue;
            for (bool residual : {false, true}) {
                rms_case<float>(c, residual, width, rng);
                rms_case<__half>(c, residual, width, rng);
                rms_case<rf_bf16>(c, residual, width, rng);
            }
        }
        // {rows, cols, fused, grid x}
        for (auto [rows, cols, fused, gx] : std::vector<std::tuple<int, int, bool, int>>{
                 {1, 14336, false, 3}, {1, 1001, false, 1}, {3, 4096, true, 2}, {2, 37, true, 1}}) {
            swiglu_case<float>(rows, cols, fused, gx, width, rng);
            swiglu_case<__half>(rows, cols, fused, gx, width, rng);
            swiglu_case<rf_bf16>(rows, cols, fused, gx, width, rng);
        }
    }
    return emu_finish(
        "decode", "RoPE, RoPE with the KV-cache write, KV-cache writes, RMSNorm, SwiGLU, wave32 and wave64");
}
