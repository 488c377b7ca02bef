#include "graph/tensor_desc.hpp"

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

const char* layout_name(Layout l) { return l == Layout::Plain ? "plain" : "nhwc"; }

int64_t TensorDesc::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string shape_str(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

std::string desc_str(const TensorDesc& d) {
    std::string r = std::string(dtype_name(d.dtype)) + shape_str(d.shape);
    if (d.layout == Layout::ChannelsLast) r += " nhwc";
    return r;
}

}  // namespace joule
