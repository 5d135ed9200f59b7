// heterospec W8A8 draft decoder: interface of the generated kernel (see draft_kernel.cpp).
#pragma once
#include "hs_types.h"
#include "draft_config.h"
#include <vector>

namespace draft {

enum Mode { MODE_INIT = 0, MODE_SPEC = 1, MODE_ACCEPT = 2, MODE_ROLLBACK = 3 };

// KVMU pointer registers (s_axilite in hardware); `sampled` is the greedy sampler's last token
struct KvmuRegs { uint32_t valid = 0, current = 0, ahead = 0; int32_t sampled = 0; };
struct Command { int mode = MODE_INIT, mark = 0, reinit = 0, base = 0, host_token = 0; };
struct KvmuOut { bool sel_host, wr_en, error; int32_t token; uint32_t wr_addr, attn_len; };
struct StepResult { KvmuOut kvmu; int32_t token_out; };

// C-simulation taps: a hash of each integer accumulator vector, in the order the torch reference lists them
enum Tap { TAP_QKV = 0, TAP_SCORE, TAP_PV, TAP_O, TAP_GATE_UP, TAP_DOWN, TAP_LM_HEAD };
struct TapSink {
    std::vector<uint64_t> hashes;
    // H = sum_r (sum_j v[r][j] * P^j) * Q^r  (mod 2^64)
    template <class T>
    void add(int, const T* v, int rows, int n) {
        const uint64_t P = 0x100000001B3ull, Q = 0x9E3779B97F4A7C15ull;
        uint64_t h = 0, q = 1;
        for (int r = 0; r < rows; ++r, q *= Q) {
            uint64_t hr = 0, p = 1;
            for (int j = 0; j < n; ++j, p *= P) hr += (uint64_t)(int64_t)v[r * n + j] * p;
            h += hr * q;
        }
        hashes.push_back(h);
    }
};
extern TapSink* g_taps;

KvmuOut kvmu_step(KvmuRegs& regs, const Command& cmd);
StepResult draft_step(const int8_t* w8, const float* wf, int8_t* kv_k, float* kv_ks, int8_t* kv_v, KvmuRegs& kvmu,
                      const Command& cmd);

}  // namespace draft
