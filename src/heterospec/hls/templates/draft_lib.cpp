// heterospec: the generated draft kernel as a shared library, for a host program that drives it command by command
// (heterospec.hls.kernel_draft, through ctypes). The kernel is the same C++ the vendor flow takes; this file only
// holds what the board's memory would: the weight blobs, the KV buffers and the KVMU's registers.
//   hs_create(dir)      load <dir>/weights_i8.bin and weights_f32.bin, allocate the KV buffers; NULL if unreadable
//   hs_destroy(k)       free them
//   hs_reset(k)         a new sequence: the KVMU's pointer registers (and the sampler's token) to zero
//   hs_step(k, ..., out) one command = one draft_step call; out[9] = error wr_en wr_addr token_in token_out
//                       valid current ahead sampled
//   hs_shape(out)       out[7] = CAPACITY POINTER_BITS VOCAB HIDDEN LAYERS W8_BYTES F_COUNT
#include "draft_kernel.h"
#include <cstdio>
#include <string>
#include <vector>

namespace {
struct Instance {
    std::vector<int8_t> w8, kv_k, kv_v;
    std::vector<float> wf, kv_ks;
    draft::KvmuRegs regs;
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

void* hs_create(const char* dir) {
    using namespace draft;
    Instance* k = new Instance();
    std::string d = dir;
    if (!load(d + "/weights_i8.bin", W8_BYTES, k->w8) || !load(d + "/weights_f32.bin", F_COUNT, k->wf)) {
        delete k;
        return nullptr;
    }
    k->kv_k.assign((long)LAYERS * KV_HEADS * CAPACITY * HEAD_DIM, 0);
    k->kv_v.assign(k->kv_k.size(), 0);
    k->kv_ks.assign((long)LAYERS * KV_HEADS * CAPACITY, 0.0f);
    return k;
}

void hs_destroy(void* p) { delete static_cast<Instance*>(p); }

void hs_reset(void* p) { static_cast<Instance*>(p)->regs = draft::KvmuRegs(); }

void hs_step(void* p, int mode, int mark, int reinit, int base, int host_token, int32_t* out) {
    using namespace draft;
    Instance* k = static_cast<Instance*>(p);
    Command c;
    c.mode = mode;
    c.mark = mark;
    c.reinit = reinit;
    c.base = base;
    c.host_token = host_token;
    g_taps = nullptr;                              // no accumulator hashes: the host only wants the token
    StepResult r = draft_step(k->w8.data(), k->wf.data(), k->kv_k.data(), k->kv_ks.data(), k->kv_v.data(), k->regs, c);
    out[0] = r.kvmu.error;
    out[1] = r.kvmu.wr_en;
    out[2] = (int32_t)r.kvmu.wr_addr;
    out[3] = r.kvmu.wr_en ? r.kvmu.token : -1;
    out[4] = r.token_out;
    out[5] = (int32_t)k->regs.valid;
    out[6] = (int32_t)k->regs.current;
    out[7] = (int32_t)k->regs.ahead;
    out[8] = k->regs.sampled;
}

void hs_shape(int64_t* out) {
    using namespace draft;
    out[0] = CAPACITY;
    out[1] = POINTER_BITS;
    out[2] = VOCAB;
    out[3] = HIDDEN;
    out[4] = LAYERS;
    out[5] = W8_BYTES;
    out[6] = F_COUNT;
}

}  // extern "C"
