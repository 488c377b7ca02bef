// The plan's Cast (each element converted to the output dtype, round to nearest even, graph/bf16.hpp)
// and Transfer (the reference keeps tensors in host memory: a transfer into it is a copy).
#include <cstring>

#include "backend/reference/kernels.hpp"

namespace joule::reference {

std::unique_ptr<Kernel> make_convert(const Op& op) {
    const Buf x = op.in[0], y = op.out[0];
    if (op.kind() == OpKind::Cast)
        return loop([=](const RunContext&) {
            for (int64_t i = 0; i < x.numel(); ++i) y.set(i, x.get(i));  // widen exactly, round once
        });
    if (op.kind() != OpKind::Transfer) throw InternalError("not a cast or transfer");
    return loop([=](const RunContext&) { std::memcpy(y.data, x.data, x.desc.bytes()); });
}

}  // namespace joule::reference
