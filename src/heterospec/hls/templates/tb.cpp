// heterospec C-simulation testbench: runs a command script through the draft kernel.
//   tb <kernel dir> <script> <out.txt> <taps.bin>
// script lines:  reset            (a new sequence: KVMU pointers to zero)
//                cmd MODE MARK REINIT BASE HOST_TOKEN
// out.txt, one line per cmd: error wr_en wr_addr token_in token_out valid current ahead
// taps.bin: per written token, one uint64 hash per accumulator tap
#include "draft_kernel.h"
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

template <class T>
static std::vector<T> load(const std::string& path, long count) {
    std::vector<T> v(count);
    std::ifstream f(path, std::ios::binary);
    if (!f || !f.read(reinterpret_cast<char*>(v.data()), count * (long)sizeof(T))) {
        std::fprintf(stderr, "tb: cannot read %ld values from %s\n", count, path.c_str());
        std::exit(3);
    }
    return v;
}

int main(int argc, char** argv) {
    using namespace draft;
    if (argc != 5) { std::fprintf(stderr, "usage: tb <kernel dir> <script> <out.txt> <taps.bin>\n"); return 2; }
    std::string dir = argv[1];
    auto w8 = load<int8_t>(dir + "/weights_i8.bin", W8_BYTES);
    auto wf = load<float>(dir + "/weights_f32.bin", F_COUNT);
    std::vector<int8_t> kv_k((long)LAYERS * KV_HEADS * CAPACITY * HEAD_DIM), kv_v(kv_k.size());
    std::vector<float> kv_ks((long)LAYERS * KV_HEADS * CAPACITY);
    std::ifstream script(argv[2]);
    FILE* out = std::fopen(argv[3], "w");
    FILE* taps = std::fopen(argv[4], "wb");
    if (!script || !out || !taps) { std::fprintf(stderr, "tb: cannot open files\n"); return 3; }
    KvmuRegs regs;
    TapSink sink;
    g_taps = &sink;
    std::string word;
    while (script >> word) {
        if (word == "reset") { regs = KvmuRegs(); continue; }
        Command c;
        script >> c.mode >> c.mark >> c.reinit >> c.base >> c.host_token;
        sink.hashes.clear();
        StepResult r = draft_step(w8.data(), wf.data(), kv_k.data(), kv_ks.data(), kv_v.data(), regs, c);
        std::fprintf(out, "%d %d %u %d %d %u %u %u\n", (int)r.kvmu.error, (int)r.kvmu.wr_en, r.kvmu.wr_addr,
                     r.kvmu.wr_en ? r.kvmu.token : -1, r.token_out, regs.valid, regs.current, regs.ahead);
        if (!sink.hashes.empty()) std::fwrite(sink.hashes.data(), sizeof(uint64_t), sink.hashes.size(), taps);
    }
    std::fclose(out);
    std::fclose(taps);
    return 0;
}
