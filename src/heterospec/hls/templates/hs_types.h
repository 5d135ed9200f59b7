// heterospec: streams and fixed-width integers for the draft kernel.
// Vitis HLS / TAPA headers are used when present; otherwise this small replacement lets g++ run the
// C simulation: hls::stream is an unbounded FIFO (tasks run one after another in C simulation).
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#if defined(__SYNTHESIS__) || (defined(HS_USE_VENDOR) && __has_include(<hls_stream.h>))
#include <hls_stream.h>
#define HS_VENDOR 1
#else
#include <deque>
#include <stdexcept>
namespace hls {
template <class T>
class stream {
  public:
    void write(const T& v) { q_.push_back(v); }
    T read() {
        if (q_.empty()) throw std::runtime_error("read from an empty stream");
        T v = q_.front();
        q_.pop_front();
        return v;
    }
    bool empty() const { return q_.empty(); }
    std::size_t size() const { return q_.size(); }
  private:
    std::deque<T> q_;
};
}  // namespace hls
#define HS_VENDOR 0
#endif
