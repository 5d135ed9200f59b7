// heterospec C-simulation testbench of the batch-B kernel: runs a script of passes through draft_step_batch.
//   tb_batch <kernel dir> <script> <out.txt> <passes.txt> <taps.bin>
// script lines:  reset SLOT       (a sequence joins slot SLOT: its KVMU pointers to zero)
//                pass N           (one weight pass; the next N lines are its live slots' commands)
//                SLOT MODE MARK REINIT BASE HOST_TOKEN
// out.txt, one line per command: slot error wr_en wr_addr token_in token_out valid current ahead
// passes.txt, one line per pass: sequences that wrote a token, weight words streamed by the pass
// taps.bin: per written token, the slot (uint64) and then one uint64 hash per accumulator tap
#include "draft_batch.h"
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

template <class T>
static std::vector<T> load(const std::string& path, long count) {
    std::vector<T> v(count);
    std::ifstream f(path, std::ios::binary);
    if (!f || !f.read(reinterpret_cast<char*>(v.data()), count * (long)sizeof(T))) {
        std::fprintf(stderr, "tb_batch: cannot read %ld values from %s\n", count, path.c_str());
        std::exit(3);
    }
    return v;
}

int main(int argc, char** argv) {
    using namespace draft;
    if (argc != 6) {
        std::fprintf(stderr, "usage: tb_batch <kernel dir> <script> <out.txt> <passes.txt> <taps.bin>\n");
        return 2;
    }
    std::string dir = argv[1];
    auto w8 = load<int8_t>(dir + "/weights_i8.bin", W8_BYTES);
    auto wf = load<float>(dir + "/weights_f32.bin", F_COUNT);
    std::vector<int8_t> kv_k(BATCH * KV_REGION), kv_v(kv_k.size());
    std::vector<float> kv_ks(BATCH * KS_REGION);
    std::ifstream script(argv[2]);
    FILE* out = std::fopen(argv[3], "w");
    FILE* passes = std::fopen(argv[4], "w");
    FILE* taps = std::fopen(argv[5], "wb");
    if (!script || !out || !passes || !taps) { std::fprintf(stderr, "tb_batch: cannot open files\n"); return 3; }
    KvmuRegs regs[BATCH];
    TapSink sink[BATCH];
    TapSink* sinks[BATCH];
    for (int b = 0; b < BATCH; ++b) sinks[b] = &sink[b];
    std::string word;
    while (script >> word) {
        int slot;
        if (word == "reset") {
            script >> slot;
            if (slot < 0 || slot >= BATCH) { std::fprintf(stderr, "tb_batch: slot %d of %d\n", slot, BATCH); return 4; }
            regs[slot] = KvmuRegs();
            continue;
        }
        int n = 0;
        script >> n;
        Command cmd[BATCH];
        uint8_t live[BATCH] = {0};
        int order[BATCH];
        for (int i = 0; i < n; ++i) {
            Command c;
            script >> slot >> c.mode >> c.mark >> c.reinit >> c.base >> c.host_token;
            if (slot < 0 || slot >= BATCH || live[slot]) {
                std::fprintf(stderr, "tb_batch: slot %d twice in a pass or not below %d\n", slot, BATCH);
                return 4;
            }
            cmd[slot] = c;
            live[slot] = 1;
            order[i] = slot;
        }
        for (int b = 0; b < BATCH; ++b) sink[b].hashes.clear();
        StepResult res[BATCH];
        long words = g_weight_words;
        draft_step_batch(w8.data(), wf.data(), kv_k.data(), kv_ks.data(), kv_v.data(), regs, cmd, live, res, sinks);
        int writers = 0;
        for (int i = 0; i < n; ++i) {
            const int b = order[i];
            const StepResult& r = res[b];
            std::fprintf(out, "%d %d %d %u %d %d %u %u %u\n", b, (int)r.kvmu.error, (int)r.kvmu.wr_en, r.kvmu.wr_addr,
                         r.kvmu.wr_en ? r.kvmu.token : -1, r.token_out, regs[b].valid, regs[b].current, regs[b].ahead);
            if (!sink[b].hashes.empty()) {
                uint64_t s = (uint64_t)b;
                std::fwrite(&s, sizeof s, 1, taps);
                std::fwrite(sink[b].hashes.data(), sizeof(uint64_t), sink[b].hashes.size(), taps);
            }
            writers += r.kvmu.wr_en;
        }
        std::fprintf(passes, "%d %ld\n", writers, g_weight_words - words);
    }
    std::fclose(out);
    std::fclose(passes);
    std::fclose(taps);
    return 0;
}
