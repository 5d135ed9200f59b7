// heterospec: the batch-B draft kernel as a shared library (heterospec.hls.kernel_lib.BatchKernel, through ctypes):
// what the board's memory would hold for B slots (the weight blobs, B KV regions, B sets of KVMU registers), and
// one weight pass per call.
//   hsb_create(dir)          load <dir>/weights_i8.bin and weights_f32.bin, allocate B KV regions; NULL if unreadable
//   hsb_destroy(k)           free them
//   hsb_reset(k, slot)       a sequence joins the slot: its KVMU registers (and sampler token) to zero
//   hsb_pass(k, n, cmds, out) one draft_step_batch call over n live slots; cmds[6 i ..]: slot mode mark reinit base
//                            host_token; out[9 i ..]: error wr_en wr_addr token_in token_out valid current ahead
//                            sampled; returns the weight words the pass streamed (0: no slot wrote), -1 on a bad slot
//   hsb_shape(out)           out[8] = CAPACITY POINTER_BITS VOCAB HIDDEN LAYERS W8_BYTES F_COUNT BATCH
#include "draft_batch.h"
#include <cstdio>
#include <string>
#include <vector>

namespace {
struct Instance {
    std::vector<int8_t> w8, kv_k, kv_v;
    std::vector<float> wf, kv_ks;
    draft::KvmuRegs regs[draft::BATCH];
};

template <class T>
bool load(const std::string& path, long count, std::vector<T>& v) {
    v.resize(count);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    bool ok = std::fread(v.data(), sizeof(T), count, f) == (size_t)count && std::fgetc(f) == EOF;
    std::fclose(f);
    return ok;
}
}  // namespace

extern "C" {

void* hsb_create(const char* dir) {
    using namespace draft;
    Instance* k = new Instance();
    std::string d = dir;
    if (!load(d + "/weights_i8.bin", W8_BYTES, k->w8) || !load(d + "/weights_f32.bin", F_COUNT, k->wf)) {
        delete k;
        return nullptr;
    }
    k->kv_k.assign(BATCH * KV_REGION, 0);
    k->kv_v.assign(k->kv_k.size(), 0);
    k->kv_ks.assign(BATCH * KS_REGION, 0.0f);
    return k;
}

void hsb_destroy(void* p) { delete static_cast<Instance*>(p); }

int hsb_reset(void* p, int slot) {
    if (slot < 0 || slot >= draft::BATCH) return -1;
    static_cast<Instance*>(p)->regs[slot] = draft::KvmuRegs();
    return 0;
}

long hsb_pass(void* p, int n, const int32_t* cmds, int32_t* out) {
    using namespace draft;
    Instance* k = static_cast<Instance*>(p);
    Command cmd[BATCH];
    uint8_t live[BATCH] = {0};
    if (n < 0 || n > BATCH) return -1;
    for (int i = 0; i < n; ++i) {
        const int32_t* c = cmds + 6 * i;
        if (c[0] < 0 || c[0] >= BATCH || live[c[0]]) return -1;
        live[c[0]] = 1;
        cmd[c[0]].mode = c[1];
        cmd[c[0]].mark = c[2];
        cmd[c[0]].reinit = c[3];
        cmd[c[0]].base = c[4];
        cmd[c[0]].host_token = c[5];
    }
    StepResult res[BATCH];
    g_taps = nullptr;                              // no accumulator hashes: the host only wants the tokens
    long words = g_weight_words;
    draft_step_batch(k->w8.data(), k->wf.data(), k->kv_k.data(), k->kv_ks.data(), k->kv_v.data(), k->regs, cmd, live,
                     res, nullptr);
    for (int i = 0; i < n; ++i) {
        const int b = cmds[6 * i];
        const StepResult& r = res[b];
        int32_t* o = out + 9 * i;
        o[0] = r.kvmu.error;
        o[1] = r.kvmu.wr_en;
        o[2] = (int32_t)r.kvmu.wr_addr;
        o[3] = r.kvmu.wr_en ? r.kvmu.token : -1;
        o[4] = r.token_out;
        o[5] = (int32_t)k->regs[b].valid;
        o[6] = (int32_t)k->regs[b].current;
        o[7] = (int32_t)k->regs[b].ahead;
        o[8] = k->regs[b].sampled;
    }
    return g_weight_words - words;
}

void hsb_shape(int64_t* out) {
    using namespace draft;
    out[0] = CAPACITY;
    out[1] = POINTER_BITS;
    out[2] = VOCAB;
    out[3] = HIDDEN;
    out[4] = LAYERS;
    out[5] = W8_BYTES;
    out[6] = F_COUNT;
    out[7] = BATCH;
}

}  // extern "C"
