// TensorDesc: the logical shape, element type and physical layout of one tensor.
//
// Shapes are logical (NCHW for images). `layout` says how a backend stores the elements:
//   Plain        row-major in logical order (the only layout for rank != 4)
//   ChannelsLast rank-4 NCHW tensor stored as NHWC (what oneDNN's brgemm convolutions prefer)
//   Blocked      `blocking` says how (oneDNN's blocked formats, e.g. a convolution's weights as
//                OIhw16i16o, described device-neutrally); only plan/'s layout pass chooses it
// Parameters are Plain until the layout pass; image activations and their gradients are ChannelsLast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace joule {

// U8: small indices (max-pooling's arg-max inside a window of at most 255 elements).
enum class DType : uint8_t { F32, BF16, F16, I32, U8 };
inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }
enum class Layout : uint8_t { Plain, ChannelsLast, Blocked };

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

// A blocked layout (oneDNN's blocking descriptor): the tensor seen as `dims`, a row-major reshape of its
// shape (a grouped convolution's [O, I/g, kh, kw] weights as [g, O/g, I/g, kh, kw]); the outer blocks of
// the dims in `order` (outermost first), then the `inner` blocks (dim, size), outermost first. A dim with
// inner blocks is padded up to a multiple of their product; the padding holds zeros.
//   OIhw16i16o = {dims [O, I, h, w], order [0, 1, 2, 3], inner [(1, 16), (0, 16)]}, named "ABcd16b16a"
struct Blocking {
    Shape dims;
    std::vector<int> order;
    std::vector<std::pair<int, int64_t>> inner;
    bool operator==(const Blocking&) const = default;
    Shape padded_dims() const;
    std::string name() const;  // oneDNN's tag spelling: blocked dims in capitals, then the inner blocks
    // The storage offset of every element, in row-major logical order; offsets no element has are padding.
    std::vector<int64_t> offsets() const;
};

struct TensorDesc {
    Shape shape;
    DType dtype = DType::F32;
    Layout layout = Layout::Plain;
    Blocking blocking;  // Blocked only

    int64_t rank() const { return int64_t(shape.size()); }
    int64_t numel() const;          // logical elements
    int64_t storage_numel() const;  // elements stored: numel(), plus a blocked layout's padding
    size_t bytes() const { return size_t(storage_numel()) * dtype_size(dtype); }
    // Whether the bytes are in row-major logical order: Plain, or nhwc with C == 1 or H * W == 1. Two such
    // tensors of one shape and dtype hold the same bytes, so a reshape between them moves none.
    bool row_major() const {
        return layout == Layout::Plain || (layout == Layout::ChannelsLast && (shape[1] == 1 || shape[2] * shape[3] == 1));
    }
    bool operator==(const TensorDesc&) const = default;
};

std::string shape_str(const Shape& s);     // "[64, 1, 28, 28]"
std::string desc_str(const TensorDesc& d);  // "f32[64, 1, 28, 28] nhwc", "f32[64, 64, 3, 3] ABcd16b16a"
std::string layout_str(const TensorDesc& d);  // "plain", "nhwc", "ABcd16b16a"
// Blocked storage to and from plain row-major order (initialisation, checkpoints, reading results; not
// the hot path: plans reorder with Cast nodes). The other layouts are returned as they are.
std::vector<std::byte> to_plain(const TensorDesc& d, const void* storage);
void from_plain(const TensorDesc& d, const void* plain, void* storage);  // zeros the padding

}  // namespace joule
