// heterospec W8A8 draft decoder: a streaming dataflow kernel, one token per call.
// Tasks are joined by streams (TAPA / Vitis HLS dataflow style); in C simulation they run in order.
// Numerics (heterospec.quantize.intmath): integer where it accumulates (int8 x int8 -> int32 engines,
// int32 scores, int64 softmax sums and p.v, int64 RMSNorm statistic); float32 only element-wise, in the same
// operation order as the torch reference, with no fused multiply-add (compile with -ffp-contract=off).
#include "draft_kernel.h"

namespace draft {

TapSink* g_taps = nullptr;

// ----------------------------------------------------------------------------- numerics
static inline float exp_det(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = x * LOG2E;
    float n = std::floor(t);
    float f = t - n;
    float p = EXP2_POLY[0];
    for (int i = 1; i < (int)(sizeof(EXP2_POLY) / sizeof(float)); ++i) {
        p = p * f;
        p = p + EXP2_POLY[i];
    }
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

static inline float round_even(float x) { return std::nearbyint(x); }

// symmetric per-vector quantisation: returns the scale, writes integer values into q
template <class Q>
static float quantize(const float* x, int n, float qmax, Q* q) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
    float s = (amax > 0.0f ? amax : 1.0f) / qmax;
    for (int i = 0; i < n; ++i) {
        float v = round_even(x[i] / s);
        q[i] = (Q)(v < -qmax ? -qmax : (v > qmax ? qmax : v));
    }
    return s;
}

// ----------------------------------------------------------------------------- KVMU and input multiplexer
KvmuOut kvmu_step(KvmuRegs& r, const Command& c) {
    const uint32_t cap = (1u << POINTER_BITS) - 1;
    KvmuOut o{};
    uint32_t start = (c.mode == MODE_INIT && c.reinit) ? (uint32_t)c.base : r.ahead;
    bool writes = c.mode == MODE_INIT || c.mode == MODE_SPEC;
    bool illegal = (c.mode == MODE_INIT && c.reinit && (uint32_t)c.base > r.valid) || (writes && start == cap) ||
                   (writes && start >= (uint32_t)CAPACITY);
    o.sel_host = c.mode == MODE_INIT;
    o.token = o.sel_host ? c.host_token : r.sampled;       // the input multiplexer
    o.wr_addr = start;
    o.attn_len = start + 1;
    o.wr_en = writes && !illegal;
    o.error = illegal;
    if (!illegal) {
        switch (c.mode) {
            case MODE_INIT: r.valid = r.current = r.ahead = start + 1; break;
            case MODE_SPEC: r.ahead = start + 1; if (c.mark) r.current = start + 1; break;
            case MODE_ACCEPT: r.valid = r.current; break;
            case MODE_ROLLBACK: r.current = r.ahead = r.valid; break;
        }
    }
    return o;
}

// ----------------------------------------------------------------------------- tasks
static void embed(int token, const int8_t* w8, const float* wf, hls::stream<float>& x) {
    const float s = wf[F_EMBED_SCALE + token];
    for (int j = 0; j < HIDDEN; ++j) x.write((float)w8[W8_EMBED + (long)token * HIDDEN + j] * s);
}

// forks a stream: one copy for the residual path, one for the next task
template <int N>
static void fork(hls::stream<float>& in, hls::stream<float>& a, hls::stream<float>& b) {
    for (int i = 0; i < N; ++i) { float v = in.read(); a.write(v); b.write(v); }
}

// RMSNorm folded into the int8 quantisation of its output; `a` is the per-token dequantisation scale
template <int N>
static void rmsnorm_quant(hls::stream<float>& x_in, const float* w, hls::stream<int8_t>& q_out, float& a) {
    float x[N], u[N];
    int8_t q[N];
    int16_t x16[N];
    for (int i = 0; i < N; ++i) x[i] = x_in.read();
    float s16 = quantize<int16_t>(x, N, 32767.0f, x16);
    int64_t ss = 0;
    for (int i = 0; i < N; ++i) ss += (int64_t)x16[i] * x16[i];
    float var = (((float)ss * s16) * s16) / (float)N;
    float r = 1.0f / std::sqrt(var + EPS);
    for (int i = 0; i < N; ++i) u[i] = x[i] * w[i];
    float su = quantize<int8_t>(u, N, 127.0f, q);
    a = su * r;
    for (int i = 0; i < N; ++i) q_out.write(q[i]);
}

template <int N>
static void quant(hls::stream<float>& x_in, hls::stream<int8_t>& q_out, float& a) {
    float x[N];
    int8_t q[N];
    for (int i = 0; i < N; ++i) x[i] = x_in.read();
    a = quantize<int8_t>(x, N, 127.0f, q);
    for (int i = 0; i < N; ++i) q_out.write(q[i]);
}

// weight loader: an O x K int8 matrix read from HBM as PORT_BITS-wide words (the tail word zero-padded). In a
// dataflow build it runs ahead of the engine, filling the prefetch FIFO while the activation chain is busy.
static void load_weights(const int8_t* w, long n, hls::stream<Word>& out) {
    for (long i = 0; i < n; i += PORT_BYTES) {
#pragma HLS PIPELINE II = 1
        Word wd;
        for (int j = 0; j < PORT_BYTES; ++j) wd.b[j] = i + j < n ? w[i + j] : (int8_t)0;
        out.write(wd);
    }
}

// int8 matrix-vector engine: ROWS outputs x COLS inputs per cycle, weights unpacked from the loader's words
template <int O, int K>
static void mv_compute(hls::stream<int8_t>& x_in, hls::stream<Word>& words, hls::stream<int32_t>& acc_out, int tap) {
    static_assert(O % ROWS == 0 && K % COLS == 0, "engine parallelism must divide the layer");
    static int8_t blk[ROWS * K];
    int8_t x[K];
    int32_t acc_all[O];
    Word cur;
    int pos = PORT_BYTES;
    for (int k = 0; k < K; ++k) x[k] = x_in.read();
    for (int o = 0; o < O; o += ROWS) {
        for (int i = 0; i < ROWS * K; ++i) {     // one row block, row-major as the loader streams it
            if (pos == PORT_BYTES) { cur = words.read(); pos = 0; }
            blk[i] = cur.b[pos++];
        }
        int32_t acc[ROWS] = {0};
        for (int k = 0; k < K; k += COLS) {
#pragma HLS PIPELINE II = 1
            for (int r = 0; r < ROWS; ++r) {
#pragma HLS UNROLL
                for (int c = 0; c < COLS; ++c) {
#pragma HLS UNROLL
                    acc[r] += (int32_t)x[k + c] * (int32_t)blk[r * K + k + c];
                }
            }
        }
        for (int r = 0; r < ROWS; ++r) { acc_out.write(acc[r]); acc_all[o + r] = acc[r]; }
    }
#ifndef __SYNTHESIS__
    if (g_taps) g_taps->add(tap, acc_all, 1, O);
#endif
}

template <int O, int K>
static void mv_engine(hls::stream<int8_t>& x_in, const int8_t* w, hls::stream<int32_t>& acc_out, int tap) {
    hls::stream<Word> words;
    HS_PRAGMA(HLS STREAM variable = words depth = HS_PREFETCH_WORDS)
    load_weights(w, (long)O * K, words);
    mv_compute<O, K>(x_in, words, acc_out, tap);
}

// (float(acc) * a) * w_scale (+ bias)
template <int O>
static void dequant(hls::stream<int32_t>& acc, float a, const float* scale, const float* bias, hls::stream<float>& y) {
    for (int o = 0; o < O; ++o) {
        float v = ((float)acc.read() * a) * scale[o];
        y.write(bias ? v + bias[o] : v);
    }
}

static void rope(float* x, const float* cos, const float* sin) {
    const int h = HEAD_DIM / 2;
    float out[HEAD_DIM];
    for (int i = 0; i < HEAD_DIM; ++i) {
        float rot = i < h ? -x[i + h] : x[i - h];
        out[i] = x[i] * cos[i] + rot * sin[i];
    }
    for (int i = 0; i < HEAD_DIM; ++i) x[i] = out[i];
}

// RoPE, q/k quantisation per head, K/V written to the HBM KV cache at slot `pos`
static void rope_quant_kv(hls::stream<float>& qkv, int layer, int pos, const float* wf, int8_t* kv_k,
                          float* kv_ks, int8_t* kv_v, hls::stream<int8_t>& q_out, float* s_q) {
    float v[QKV];
    for (int i = 0; i < QKV; ++i) v[i] = qkv.read();
    const float* cos = wf + F_ROPE_COS + (long)pos * HEAD_DIM;
    const float* sin = wf + F_ROPE_SIN + (long)pos * HEAD_DIM;
    const float* vscale = wf + LAYER[layer].v_scale;
    for (int hd = 0; hd < HEADS; ++hd) {
        int8_t q[HEAD_DIM];
        rope(v + hd * HEAD_DIM, cos, sin);
        s_q[hd] = quantize<int8_t>(v + hd * HEAD_DIM, HEAD_DIM, 127.0f, q);
        for (int i = 0; i < HEAD_DIM; ++i) q_out.write(q[i]);
    }
    for (int g = 0; g < KV_HEADS; ++g) {
        float* k = v + (HEADS + g) * HEAD_DIM;
        const float* vv = v + (HEADS + KV_HEADS + g) * HEAD_DIM;
        long slot = ((long)layer * KV_HEADS + g) * CAPACITY + pos;
        rope(k, cos, sin);
        kv_ks[slot] = quantize<int8_t>(k, HEAD_DIM, 127.0f, kv_k + slot * HEAD_DIM);
        for (int i = 0; i < HEAD_DIM; ++i) {
            float qv = round_even(vv[i] / vscale[g]);
            kv_v[slot * HEAD_DIM + i] = (int8_t)(qv < -127.0f ? -127.0f : (qv > 127.0f ? 127.0f : qv));
        }
    }
}

// attention of one token over KV slots [0, len): int32 scores, 15-bit softmax weights, int64 p.v
static void attention(hls::stream<int8_t>& q_in, const float* s_q, int layer, int len, const float* wf,
                      const int8_t* kv_k, const float* kv_ks, const int8_t* kv_v, hls::stream<float>& out) {
    static int32_t acc[HEADS * CAPACITY];
    static float score[CAPACITY];
    static int64_t pv_all[HEADS * HEAD_DIM];
    const float* vscale = wf + LAYER[layer].v_scale;
    for (int hd = 0; hd < HEADS; ++hd) {
        int8_t q[HEAD_DIM];
        for (int i = 0; i < HEAD_DIM; ++i) q[i] = q_in.read();
        const int g = hd / (HEADS / KV_HEADS);
        const long base = ((long)layer * KV_HEADS + g) * CAPACITY;
        float m = -INFINITY;
        for (int j = 0; j < len; ++j) {
            int32_t a = 0;
            for (int i = 0; i < HEAD_DIM; ++i) a += (int32_t)q[i] * (int32_t)kv_k[(base + j) * HEAD_DIM + i];
            acc[hd * len + j] = a;
            score[j] = (((float)a * s_q[hd]) * kv_ks[base + j]) * INV_SQRT_D;
            m = score[j] > m ? score[j] : m;
        }
        int64_t total = 0, pv[HEAD_DIM] = {0};
        for (int j = 0; j < len; ++j) {
            int64_t e = (int64_t)round_even(exp_det(score[j] - m) * 32767.0f);
            total += e;
            for (int i = 0; i < HEAD_DIM; ++i) pv[i] += e * (int64_t)kv_v[(base + j) * HEAD_DIM + i];
        }
        for (int i = 0; i < HEAD_DIM; ++i) {
            pv_all[hd * HEAD_DIM + i] = pv[i];
            out.write(((float)pv[i] / (float)total) * vscale[g]);
        }
    }
#ifndef __SYNTHESIS__
    if (g_taps) {
        g_taps->add(TAP_SCORE, acc, HEADS, len);
        g_taps->add(TAP_PV, pv_all, HEADS, HEAD_DIM);
    }
#endif
}

template <int N>
static void residual(hls::stream<float>& a, hls::stream<float>& b, hls::stream<float>& out) {
    for (int i = 0; i < N; ++i) out.write(a.read() + b.read());
}

static void silu_mul(hls::stream<float>& gu, hls::stream<float>& out) {
    static float g[INTER];
    for (int i = 0; i < INTER; ++i) g[i] = gu.read();
    for (int i = 0; i < INTER; ++i) {
        float s = g[i] / (1.0f + exp_det(-g[i]));
        out.write(s * gu.read());
    }
}

static int argmax(hls::stream<float>& logits) {
    int best = 0;
    float bv = -INFINITY;
    for (int o = 0; o < VOCAB; ++o) {
        float v = logits.read();
        if (v > bv) { bv = v; best = o; }
    }
    return best;
}

static void decoder_layer(int l, hls::stream<float>& x, hls::stream<float>& x_out, int pos, int len,
                          const int8_t* w8, const float* wf, int8_t* kv_k, float* kv_ks, int8_t* kv_v) {
    const LayerOffsets& L = LAYER[l];
    hls::stream<float> x_res, x_norm, qkv, att, o, x_mid, x_res2, x_norm2, gu, hmul, down;
    hls::stream<int8_t> xq, qq, aq, xq2, hq;
    hls::stream<int32_t> acc_qkv, acc_o, acc_gu, acc_down;
    float a, s_q[HEADS], sa, a2, sh;
#if HS_DATAFLOW
#pragma HLS DATAFLOW
#endif
    fork<HIDDEN>(x, x_res, x_norm);
    rmsnorm_quant<HIDDEN>(x_norm, wf + L.attn_norm, xq, a);
    mv_engine<QKV, HIDDEN>(xq, w8 + L.qkv, acc_qkv, TAP_QKV);
    dequant<QKV>(acc_qkv, a, wf + L.qkv_scale, wf + L.qkv_bias, qkv);
    rope_quant_kv(qkv, l, pos, wf, kv_k, kv_ks, kv_v, qq, s_q);
    attention(qq, s_q, l, len, wf, kv_k, kv_ks, kv_v, att);
    quant<HEADS * HEAD_DIM>(att, aq, sa);
    mv_engine<HIDDEN, HEADS * HEAD_DIM>(aq, w8 + L.o, acc_o, TAP_O);
    dequant<HIDDEN>(acc_o, sa, wf + L.o_scale, nullptr, o);
    residual<HIDDEN>(x_res, o, x_mid);
    fork<HIDDEN>(x_mid, x_res2, x_norm2);
    rmsnorm_quant<HIDDEN>(x_norm2, wf + L.mlp_norm, xq2, a2);
    mv_engine<2 * INTER, HIDDEN>(xq2, w8 + L.gu, acc_gu, TAP_GATE_UP);
    dequant<2 * INTER>(acc_gu, a2, wf + L.gu_scale, nullptr, gu);
    silu_mul(gu, hmul);
    quant<INTER>(hmul, hq, sh);
    mv_engine<HIDDEN, INTER>(hq, w8 + L.down, acc_down, TAP_DOWN);
    dequant<HIDDEN>(acc_down, sh, wf + L.down_scale, nullptr, down);
    residual<HIDDEN>(x_res2, down, x_out);
}

// ----------------------------------------------------------------------------- top
StepResult draft_step(const int8_t* w8, const float* wf, int8_t* kv_k, float* kv_ks, int8_t* kv_v, KvmuRegs& kvmu,
                      const Command& cmd) {
    HS_PRAGMA(HLS INTERFACE m_axi port = w8 bundle = gmem_w max_widen_bitwidth = HS_PORT_BITS max_read_burst_length = 64)
    HS_PRAGMA(HLS INTERFACE m_axi port = kv_k bundle = gmem_kv max_widen_bitwidth = HS_PORT_BITS)
    HS_PRAGMA(HLS INTERFACE m_axi port = kv_v bundle = gmem_kv max_widen_bitwidth = HS_PORT_BITS)
    StepResult res{};
    KvmuOut k = kvmu_step(kvmu, cmd);
    res.kvmu = k;
    res.token_out = -1;
    if (!k.wr_en) return res;                    // accept / rollback / an illegal command: pointers only
    hls::stream<float> x[LAYERS + 1];
    embed(k.token, w8, wf, x[0]);
    for (int l = 0; l < LAYERS; ++l) decoder_layer(l, x[l], x[l + 1], (int)k.wr_addr, (int)k.attn_len, w8, wf, kv_k, kv_ks, kv_v);
    hls::stream<float> logits;
    hls::stream<int8_t> xq;
    hls::stream<int32_t> acc;
    float a;
    rmsnorm_quant<HIDDEN>(x[LAYERS], wf + F_NORM, xq, a);
    mv_engine<VOCAB, HIDDEN>(xq, w8 + W8_LM_HEAD, acc, TAP_LM_HEAD);
    dequant<VOCAB>(acc, a, wf + F_LM_HEAD_SCALE, nullptr, logits);
    res.token_out = argmax(logits);
    kvmu.sampled = res.token_out;                // the greedy sampler feeds the multiplexer's local input
    return res;
}

}  // namespace draft
