#include "graph/tensor_desc.hpp"

#include <cstring>

#include "graph/error.hpp"

namespace joule {

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
    throw InternalError(std::string("internal error: ") + expr + " failed at " + file + ":" +
                        std::to_string(line) + (msg.empty() ? "" : ": " + msg));
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "f32";
        case DType::BF16: return "bf16";
        case DType::F16: return "f16";
        case DType::I32: return "i32";
        case DType::U8: return "u8";
    }
    return "?";
}

DType parse_dtype(const std::string& s) {
    if (s == "f32" || s == "fp32" || s == "float32") return DType::F32;
    if (s == "bf16" || s == "bfloat16") return DType::BF16;
    if (s == "f16" || s == "fp16" || s == "float16") return DType::F16;
    throw Error("unknown dtype '" + s + "'", "use f32, bf16 or f16");
}

const char* layout_name(Layout l) { return l == Layout::Plain ? "plain" : l == Layout::ChannelsLast ? "nhwc" : "blocked"; }

Shape Blocking::padded_dims() const {
    Shape p = dims;
    std::vector<int64_t> block(dims.size(), 1);
    for (const auto& [d, b] : inner) block[size_t(d)] *= b;
    for (size_t d = 0; d < p.size(); ++d) p[d] = (p[d] + block[d] - 1) / block[d] * block[d];
    return p;
}

std::string Blocking::name() const {
    std::vector<bool> blocked(dims.size(), false);
    for (const auto& [d, b] : inner) blocked[size_t(d)] = true;
    std::string s;
    for (int d : order) s += char((blocked[size_t(d)] ? 'A' : 'a') + d);
    for (const auto& [d, b] : inner) s += std::to_string(b) + char('a' + d);
    return s;
}

std::vector<int64_t> Blocking::offsets() const {
    const size_t nd = dims.size();
    const Shape padded = padded_dims();
    std::vector<int64_t> block(nd, 1), outer_stride(nd, 0), inner_stride(inner.size(), 1), within(inner.size(), 1);
    for (const auto& [d, b] : inner) block[size_t(d)] *= b;
    int64_t stride = 1;
    for (size_t k = inner.size(); k-- > 0;) {
        inner_stride[k] = stride;
        stride *= inner[k].second;
        for (size_t j = k + 1; j < inner.size(); ++j)  // the blocks of the same dim inside this one
            if (inner[j].first == inner[k].first) within[k] *= inner[j].second;
    }
    for (size_t k = order.size(); k-- > 0;) {
        const size_t d = size_t(order[k]);
        outer_stride[d] = stride;
        stride *= padded[d] / block[d];
    }
    // an element's offset is a sum of one term per dim: part[d][index along d], tabled once
    std::vector<std::vector<int64_t>> part(nd);
    for (size_t d = 0; d < nd; ++d) {
        part[d].resize(size_t(dims[d]));
        for (int64_t i = 0; i < dims[d]; ++i) {
            int64_t o = i / block[d] * outer_stride[d];
            for (size_t k = 0; k < inner.size(); ++k)
                if (size_t(inner[k].first) == d) o += (i % block[d]) / within[k] % inner[k].second * inner_stride[k];
            part[d][size_t(i)] = o;
        }
    }
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<int64_t> off(static_cast<size_t>(n));
    if (nd == 0) return off;
    const int64_t last = dims[nd - 1];
    std::vector<int64_t> idx(nd, 0);
    for (int64_t e = 0; e < n; e += last) {  // a row of the last dim at a time, row-major
        int64_t base = 0;
        for (size_t d = 0; d + 1 < nd; ++d) base += part[d][size_t(idx[d])];
        for (int64_t i = 0; i < last; ++i) off[size_t(e + i)] = base + part[nd - 1][size_t(i)];
        for (size_t d = nd - 1; d-- > 0;) {  // the next row
            if (++idx[d] < dims[d]) break;
            idx[d] = 0;
        }
    }
    return off;
}

int64_t TensorDesc::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

int64_t TensorDesc::storage_numel() const {
    if (layout != Layout::Blocked) return numel();
    int64_t n = 1;
    for (int64_t d : blocking.padded_dims()) n *= d;
    return n;
}

std::string shape_str(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

std::string desc_str(const TensorDesc& d) {
    std::string r = std::string(dtype_name(d.dtype)) + shape_str(d.shape);
    if (d.layout != Layout::Plain) r += " " + layout_str(d);
    return r;
}

std::string layout_str(const TensorDesc& d) { return d.layout == Layout::Blocked ? d.blocking.name() : layout_name(d.layout); }

std::vector<std::byte> to_plain(const TensorDesc& d, const void* storage) {
    const size_t es = dtype_size(d.dtype);
    const auto* s = static_cast<const std::byte*>(storage);
    if (d.layout != Layout::Blocked) return {s, s + d.bytes()};
    std::vector<std::byte> plain(size_t(d.numel()) * es);
    const std::vector<int64_t> off = d.blocking.offsets();
    for (size_t e = 0; e < off.size(); ++e) std::memcpy(&plain[e * es], s + size_t(off[e]) * es, es);
    return plain;
}

void from_plain(const TensorDesc& d, const void* plain, void* storage) {
    const size_t es = dtype_size(d.dtype);
    const auto* p = static_cast<const std::byte*>(plain);
    auto* s = static_cast<std::byte*>(storage);
    if (d.layout != Layout::Blocked) {
        std::memcpy(s, p, d.bytes());
        return;
    }
    std::memset(s, 0, d.bytes());
    const std::vector<int64_t> off = d.blocking.offsets();
    for (size_t e = 0; e < off.size(); ++e) std::memcpy(s + size_t(off[e]) * es, p + e * es, es);
}

}  // namespace joule
