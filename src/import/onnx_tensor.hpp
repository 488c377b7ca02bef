// Internal to import/: reading ONNX TensorProto data (inline, raw or in an external file) and small
// host-side constants for the shape arithmetic evaluated at import.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "graph/tensor_desc.hpp"

namespace joule::onnx_io {

// A constant known at import: its values (exact for integers up to 2^53) and dims.
struct Const {
    bool floating = false;
    Shape dims;
    std::vector<double> v;
    int64_t numel() const { return int64_t(v.size()); }
};

// Elements of a tensor with these dims; Error (naming `what`) on negative dims or over 2^40 elements.
int64_t element_count(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what);
// The values of a tensor as T, converted from its data type (float, double, int8/16/32/64, uint8, bool).
// `dir` is where external data lives ("" refuses external data). Error naming `what` on an unknown data
// type, a count that disagrees with the dims, or external data that is missing or short.
template <class T>
std::vector<T> values_of(const onnx::TensorProto& t, const std::string& what, const std::string& dir);
Const const_of(const onnx::TensorProto& t, const std::string& what, const std::string& dir);
bool is_float_type(int32_t onnx_type);

}  // namespace joule::onnx_io
