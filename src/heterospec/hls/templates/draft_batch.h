// heterospec W8A8 draft decoder, batch-B design point: one weight pass advances up to BATCH sequences
// (see draft_batch.cpp). Each sequence has its own slot: KVMU registers, KV region and context length.
#pragma once
#include "draft_kernel.h"

#ifndef HS_BATCH
#define HS_BATCH 1                               // sequences per weight pass (draft_config.h sets it when B > 1)
#endif

namespace draft {
constexpr int BATCH = HS_BATCH;
constexpr long KV_REGION = (long)LAYERS * KV_HEADS * CAPACITY * HEAD_DIM;   // int8 K (and V) bytes of one slot
constexpr long KS_REGION = (long)LAYERS * KV_HEADS * CAPACITY;              // K scales of one slot

extern long g_weight_words;                      // C simulation: weight words streamed from HBM, all passes

// One pass: every live slot runs its command through its own KVMU; those that write a token (init / spec) share
// one stream of the weights. Slot b's K/V live at kv_k + b * KV_REGION (kv_ks + b * KS_REGION). taps: one sink
// per slot, or null.
void draft_step_batch(const int8_t* w8, const float* wf, int8_t* kv_k, float* kv_ks, int8_t* kv_v,
                      KvmuRegs regs[BATCH], const Command cmd[BATCH], const uint8_t live[BATCH],
                      StepResult res[BATCH], TapSink* const taps[BATCH]);

}  // namespace draft
