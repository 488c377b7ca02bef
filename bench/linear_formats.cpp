// Why a bf16 Linear keeps its weights in plain [out, in] storage: oneDNN 2.6's inner product on plain
// weights (its GEMM-based implementation) against the same product on weights in the blocked format oneDNN
// picks (its brgemm implementation), and what it costs to get an f32 master weight into that format (the
// cast node's reorder) against a plain f32 -> bf16 cast. Best of 5 rounds of 5 calls, one process:
//   build/bench_linear_formats
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <tuple>

namespace {
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

template <class F>
double seconds(F&& f) {
    for (int i = 0; i < 3; ++i) f();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5; ++i) f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5);
    }
    return best;
}
}  // namespace

int main() {
    engine eng(engine::kind::cpu, 0);
    stream st(eng);
    std::printf("%-22s %16s %16s %22s %18s\n", "bf16 linear M x K -> N", "plain fwd us", "blocked fwd us", "f32 -> bf16 blocked us",
                "f32 -> bf16 plain us");
    // AlexNet's fc6 and fc7 at batch 2 and 4, and a BERT-tiny feed-forward layer at batch 8 x 128 tokens
    for (const auto& [M, K, N] : {std::tuple<long, long, long>{2, 9216, 4096}, {4, 4096, 4096}, {1024, 512, 128}}) {
        const memory::desc src({M, K}, dt::bf16, tag::ab), dst({M, N}, dt::f32, tag::ab), bias({N}, dt::f32, tag::a);
        double fwd[2];
        memory::desc blocked;
        for (int any = 0; any < 2; ++any) {
            const memory::desc wei({N, K}, dt::bf16, any ? tag::any : tag::ab);
            const inner_product_forward::primitive_desc pd({prop_kind::forward_training, src, wei, bias, dst}, eng);
            memory s(src, eng), w(pd.weights_desc(), eng), b(bias, eng), d(dst, eng);
            // written, not fresh: untouched pages all map to the kernel's one zero page, which stays in cache
            for (memory* m : {&s, &w, &b, &d}) std::memset(m->get_data_handle(), 0x3c, m->get_desc().get_size());
            const inner_product_forward p(pd);
            fwd[any] = seconds([&] {
                p.execute(st, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, d}});
                st.wait();
            });
            if (any) blocked = pd.weights_desc();
        }
        memory master({{N, K}, dt::f32, tag::ab}, eng), to_blocked(blocked, eng), to_plain({{N, K}, dt::bf16, tag::ab}, eng);
        for (memory* m : {&master, &to_blocked, &to_plain}) std::memset(m->get_data_handle(), 0x3c, m->get_desc().get_size());
        const reorder rb(master, to_blocked), rp(master, to_plain);
        const double cast_blocked = seconds([&] {
            rb.execute(st, master, to_blocked);
            st.wait();
        });
        const double cast_plain = seconds([&] {
            rp.execute(st, master, to_plain);
            st.wait();
        });
        char shape[64];
        std::snprintf(shape, sizeof shape, "%ld x %ld -> %ld", M, K, N);
        std::printf("%-22s %16.1f %16.1f %22.1f %18.1f\n", shape, fwd[0] * 1e6, fwd[1] * 1e6, cast_blocked * 1e6, cast_plain * 1e6);
    }
}
