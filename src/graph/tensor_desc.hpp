// TensorDesc: the logical shape, element type and physical layout of one tensor.
//
// Shapes are logical (NCHW for images). `layout` says how a backend stores the elements:
//   Plain        row-major in logical order (the only layout for rank != 4)
//   ChannelsLast rank-4 NCHW tensor stored as NHWC (what oneDNN's brgemm convolutions prefer)
// Parameters are Plain; image activations and their gradients are ChannelsLast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace joule {

// U8: small indices (max-pooling's arg-max inside a window of at most 255 elements).
enum class DType : uint8_t { F32, BF16, F16, I32, U8 };
inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }
enum class Layout : uint8_t { Plain, ChannelsLast };

const char* dtype_name(DType t);
DType parse_dtype(const std::string& s);  // "f32" | "bf16" | "f16"; throws Error otherwise
constexpr size_t dtype_size(DType t) {
    switch (t) {
        case DType::F32: return 4;
        case DType::BF16: return 2;
        case DType::F16: return 2;
        case DType::I32: return 4;
        case DType::U8: return 1;
    }
    return 0;
}
const char* layout_name(Layout l);

using Shape = std::vector<int64_t>;

struct TensorDesc {
    Shape shape;
    DType dtype = DType::F32;
    Layout layout = Layout::Plain;

    int64_t rank() const { return int64_t(shape.size()); }
    int64_t numel() const;
    size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
    // Whether the bytes are in row-major logical order: Plain, or nhwc with C == 1 or H * W == 1. Two such
    // tensors of one shape and dtype hold the same bytes, so a reshape between them moves none.
    bool row_major() const { return layout == Layout::Plain || shape[1] == 1 || shape[2] * shape[3] == 1; }
    bool operator==(const TensorDesc&) const = default;
};

std::string shape_str(const Shape& s);     // "[64, 1, 28, 28]"
std::string desc_str(const TensorDesc& d);  // "f32[64, 1, 28, 28] nhwc"

}  // namespace joule
