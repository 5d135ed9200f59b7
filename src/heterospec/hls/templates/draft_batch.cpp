// heterospec W8A8 draft decoder, batch-B: the batch-1 kernel's tasks (draft_kernel.cpp, included whole, so both
// designs run the same numerics) with one matrix-vector engine per layer matrix that reads each row block of the
// weights once per pass and applies it to every live sequence's activations. Everything that depends on a
// sequence (RMSNorm, RoPE, its KV writes, attention over its own context, SiLU, the sampler) runs per sequence.
#include "draft_batch.h"
#include "draft_kernel.cpp"

namespace draft {

long g_weight_words = 0;

// O x K int8 engine over n sequences: one row block of weights (ROWS x K) is unpacked once from the loader's words
// and multiplied into each sequence's accumulators; row blocks stream in the batch-1 order
template <int O, int K>
static void mv_compute_batch(int n, hls::stream<int8_t> x_in[BATCH], hls::stream<Word>& words,
                             hls::stream<int32_t> acc_out[BATCH], int tap, TapSink* const taps[BATCH]) {
    static_assert(O % ROWS == 0 && K % COLS == 0, "engine parallelism must divide the layer");
    static int8_t blk[ROWS * K];
    static int8_t x[BATCH][K];
    static int32_t acc_all[BATCH][O];
    Word cur;
    int pos = PORT_BYTES;
    for (int s = 0; s < n; ++s)
        for (int k = 0; k < K; ++k) x[s][k] = x_in[s].read();
    for (int o = 0; o < O; o += ROWS) {
        for (int i = 0; i < ROWS * K; ++i) {
            if (pos == PORT_BYTES) {
                cur = words.read();
                pos = 0;
#ifndef __SYNTHESIS__
                ++g_weight_words;
#endif
            }
            blk[i] = cur.b[pos++];
        }
        for (int s = 0; s < n; ++s) {            // the block stays on chip while each sequence passes through
            int32_t acc[ROWS] = {0};
            for (int k = 0; k < K; k += COLS) {
#pragma HLS PIPELINE II = 1
                for (int r = 0; r < ROWS; ++r) {
#pragma HLS UNROLL
                    for (int c = 0; c < COLS; ++c) {
#pragma HLS UNROLL
                        acc[r] += (int32_t)x[s][k + c] * (int32_t)blk[r * K + k + c];
                    }
                }
            }
            for (int r = 0; r < ROWS; ++r) { acc_out[s].write(acc[r]); acc_all[s][o + r] = acc[r]; }
        }
    }
#ifndef __SYNTHESIS__
    for (int s = 0; s < n; ++s)
        if (taps[s]) taps[s]->add(tap, acc_all[s], 1, O);
#endif
}

template <int O, int K>
static void mv_engine_batch(int n, hls::stream<int8_t> x_in[BATCH], const int8_t* w, hls::stream<int32_t> acc_out[BATCH],
                            int tap, TapSink* const taps[BATCH]) {
    hls::stream<Word> words;
    HS_PRAGMA(HLS STREAM variable = words depth = HS_PREFETCH_WORDS)
    load_weights(w, (long)O * K, words);
    mv_compute_batch<O, K>(n, x_in, words, acc_out, tap, taps);
}

// what one sequence of a pass carries: its slot's KV region, the position it writes and the context it attends to
struct Seq { int8_t* kv_k; float* kv_ks; int8_t* kv_v; int pos, len; TapSink* taps; };

static void decoder_layer_batch(int l, int n, const Seq* q, hls::stream<float> x[BATCH], hls::stream<float> x_out[BATCH],
                                const int8_t* w8, const float* wf) {
    const LayerOffsets& L = LAYER[l];
    hls::stream<float> x_res[BATCH], x_norm[BATCH], qkv[BATCH], att[BATCH], o[BATCH], x_mid[BATCH], x_res2[BATCH],
        x_norm2[BATCH], gu[BATCH], hmul[BATCH], down[BATCH];
    hls::stream<int8_t> xq[BATCH], qq[BATCH], aq[BATCH], xq2[BATCH], hq[BATCH];
    hls::stream<int32_t> acc_qkv[BATCH], acc_o[BATCH], acc_gu[BATCH], acc_down[BATCH];
    float a[BATCH], s_q[BATCH][HEADS], sa[BATCH], a2[BATCH], sh[BATCH];
    TapSink* taps[BATCH];
    for (int s = 0; s < n; ++s) taps[s] = q[s].taps;
    for (int s = 0; s < n; ++s) {
        fork<HIDDEN>(x[s], x_res[s], x_norm[s]);
        rmsnorm_quant<HIDDEN>(x_norm[s], wf + L.attn_norm, xq[s], a[s]);
    }
    mv_engine_batch<QKV, HIDDEN>(n, xq, w8 + L.qkv, acc_qkv, TAP_QKV, taps);
    for (int s = 0; s < n; ++s) {
        g_taps = q[s].taps;                      // attention hashes its scores and p.v into the sequence's own sink
        dequant<QKV>(acc_qkv[s], a[s], wf + L.qkv_scale, wf + L.qkv_bias, qkv[s]);
        rope_quant_kv(qkv[s], l, q[s].pos, wf, q[s].kv_k, q[s].kv_ks, q[s].kv_v, qq[s], s_q[s]);
        attention(qq[s], s_q[s], l, q[s].len, wf, q[s].kv_k, q[s].kv_ks, q[s].kv_v, att[s]);
        quant<HEADS * HEAD_DIM>(att[s], aq[s], sa[s]);
    }
    g_taps = nullptr;
    mv_engine_batch<HIDDEN, HEADS * HEAD_DIM>(n, aq, w8 + L.o, acc_o, TAP_O, taps);
    for (int s = 0; s < n; ++s) {
        dequant<HIDDEN>(acc_o[s], sa[s], wf + L.o_scale, nullptr, o[s]);
        residual<HIDDEN>(x_res[s], o[s], x_mid[s]);
        fork<HIDDEN>(x_mid[s], x_res2[s], x_norm2[s]);
        rmsnorm_quant<HIDDEN>(x_norm2[s], wf + L.mlp_norm, xq2[s], a2[s]);
    }
    mv_engine_batch<2 * INTER, HIDDEN>(n, xq2, w8 + L.gu, acc_gu, TAP_GATE_UP, taps);
    for (int s = 0; s < n; ++s) {
        dequant<2 * INTER>(acc_gu[s], a2[s], wf + L.gu_scale, nullptr, gu[s]);
        silu_mul(gu[s], hmul[s]);
        quant<INTER>(hmul[s], hq[s], sh[s]);
    }
    mv_engine_batch<HIDDEN, INTER>(n, hq, w8 + L.down, acc_down, TAP_DOWN, taps);
    for (int s = 0; s < n; ++s) {
        dequant<HIDDEN>(acc_down[s], sh[s], wf + L.down_scale, nullptr, down[s]);
        residual<HIDDEN>(x_res2[s], down[s], x_out[s]);
    }
}

void draft_step_batch(const int8_t* w8, const float* wf, int8_t* kv_k, float* kv_ks, int8_t* kv_v,
                      KvmuRegs regs[BATCH], const Command cmd[BATCH], const uint8_t live[BATCH],
                      StepResult res[BATCH], TapSink* const taps[BATCH]) {
    HS_PRAGMA(HLS INTERFACE m_axi port = w8 bundle = gmem_w max_widen_bitwidth = HS_PORT_BITS max_read_burst_length = 64)
    HS_PRAGMA(HLS INTERFACE m_axi port = kv_k bundle = gmem_kv max_widen_bitwidth = HS_PORT_BITS)
    HS_PRAGMA(HLS INTERFACE m_axi port = kv_v bundle = gmem_kv max_widen_bitwidth = HS_PORT_BITS)
    Seq q[BATCH];
    int slot[BATCH], token[BATCH], n = 0;
    for (int b = 0; b < BATCH; ++b) {
        res[b] = StepResult{};
        res[b].token_out = -1;
        if (!live[b]) continue;                  // an empty slot: no sequence, or one that left
        KvmuOut k = kvmu_step(regs[b], cmd[b]);
        res[b].kvmu = k;
        if (!k.wr_en) continue;                  // accept / rollback / an illegal command: pointers only
        q[n] = Seq{kv_k + b * KV_REGION, kv_ks + b * KS_REGION, kv_v + b * KV_REGION, (int)k.wr_addr, (int)k.attn_len,
                   taps ? taps[b] : nullptr};
        slot[n] = b;
        token[n++] = k.token;
    }
    if (n == 0) return;                          // no weight pass
    static hls::stream<float> x[LAYERS + 1][BATCH];
    for (int s = 0; s < n; ++s) embed(token[s], w8, wf, x[0][s]);
    for (int l = 0; l < LAYERS; ++l) decoder_layer_batch(l, n, q, x[l], x[l + 1], w8, wf);
    hls::stream<float> logits[BATCH];
    hls::stream<int8_t> xq[BATCH];
    hls::stream<int32_t> acc[BATCH];
    float a[BATCH];
    TapSink* tp[BATCH];
    for (int s = 0; s < n; ++s) {
        tp[s] = q[s].taps;
        rmsnorm_quant<HIDDEN>(x[LAYERS][s], wf + F_NORM, xq[s], a[s]);
    }
    mv_engine_batch<VOCAB, HIDDEN>(n, xq, w8 + W8_LM_HEAD, acc, TAP_LM_HEAD, tp);
    for (int s = 0; s < n; ++s) {
        dequant<VOCAB>(acc[s], a[s], wf + F_LM_HEAD_SCALE, nullptr, logits[s]);
        int t = argmax(logits[s]);
        res[slot[s]].token_out = t;
        regs[slot[s]].sampled = t;               // each slot's sampler feeds its own multiplexer
    }
}

}  // namespace draft
