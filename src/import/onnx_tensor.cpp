#include "import/onnx_tensor.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.hpp"

namespace joule::onnx_io {

namespace {
using TP = onnx::TensorProto;

size_t raw_size(int32_t type) {
    switch (type) {
        case TP::FLOAT: case TP::INT32: case TP::UINT32: return 4;
        case TP::DOUBLE: case TP::INT64: case TP::UINT64: return 8;
        case TP::INT16: case TP::UINT16: case TP::FLOAT16: case TP::BFLOAT16: return 2;
        case TP::INT8: case TP::UINT8: case TP::BOOL: return 1;
        default: return 0;
    }
}

const char* type_name(int32_t type) {
    return TP::DataType_IsValid(type) ? TP::DataType_Name(TP::DataType(type)).c_str() : "unknown";
}

template <class T>
T from_raw(const char* p, int32_t type) {
    switch (type) {
        case TP::FLOAT: { float v; std::memcpy(&v, p, 4); return T(v); }
        case TP::DOUBLE: { double v; std::memcpy(&v, p, 8); return T(v); }
        case TP::INT64: { int64_t v; std::memcpy(&v, p, 8); return T(v); }
        case TP::UINT64: { uint64_t v; std::memcpy(&v, p, 8); return T(v); }
        case TP::INT32: { int32_t v; std::memcpy(&v, p, 4); return T(v); }
        case TP::UINT32: { uint32_t v; std::memcpy(&v, p, 4); return T(v); }
        case TP::INT16: { int16_t v; std::memcpy(&v, p, 2); return T(v); }
        case TP::UINT16: { uint16_t v; std::memcpy(&v, p, 2); return T(v); }
        case TP::INT8: return T(int8_t(*p));
        case TP::UINT8: case TP::BOOL: return T(uint8_t(*p));
        default: return T(0);
    }
}

// The bytes of external data: `location` relative to the model's directory, at `offset`, `length` long.
std::string external_bytes(const TP& t, const std::string& what, const std::string& dir, size_t want) {
    if (dir.empty()) throw Error(what + ": data is in an external file, which is not allowed here");
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
        try {
            if (kv.key() == "location") location = kv.value();
            else if (kv.key() == "offset") offset = std::stoll(kv.value());
            else if (kv.key() == "length") length = std::stoll(kv.value());
        } catch (const std::exception&) {
            throw Error(what + ": external data " + kv.key() + " '" + kv.value() + "' is not a number");
        }
    }
    const std::filesystem::path rel(location);
    if (location.empty() || rel.is_absolute() || location.find("..") != std::string::npos)
        throw Error(what + ": external data location '" + location + "' must be a file name relative to the model's directory");
    const std::string file = (std::filesystem::path(dir) / rel).string();
    std::ifstream f(file, std::ios::binary);
    if (!f) throw Error(what + ": its external data file " + file + " is missing", "keep the .onnx file beside its data file");
    if (offset < 0 || (length >= 0 && size_t(length) != want))
        throw Error(what + ": external data of " + std::to_string(length) + " bytes at offset " + std::to_string(offset) + " for " +
                    std::to_string(want) + " bytes of values");
    std::string bytes(want, '\0');
    f.seekg(offset);
    if (!f.read(bytes.data(), std::streamsize(want)))
        throw Error(what + ": external data file " + file + " ends before the " + std::to_string(want) + " bytes at offset " + std::to_string(offset));
    return bytes;
}
}  // namespace

bool is_float_type(int32_t type) { return type == TP::FLOAT || type == TP::DOUBLE || type == TP::FLOAT16 || type == TP::BFLOAT16; }

int64_t element_count(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what) {
    int64_t n = 1;
    for (int64_t d : dims) {
        if (d < 0) throw Error(what + ": negative dimension " + std::to_string(d));
        if (d > 0 && n > (int64_t(1) << 40) / d) throw Error(what + ": more than 2^40 elements");
        n *= d;
    }
    return n;
}

template <class T>
std::vector<T> values_of(const TP& t, const std::string& what, const std::string& dir) {
    const int32_t type = t.data_type();
    const size_t size = raw_size(type);
    if (size == 0 || type == TP::FLOAT16 || type == TP::BFLOAT16)
        throw Error(what + ": data type " + std::string(type_name(type)) + " (" + std::to_string(type) + ") is not one joule reads",
                    "export in float32");
    const size_t n = size_t(element_count(t.dims(), what));
    std::vector<T> out;
    auto check = [&](size_t have) {
        if (have != n) throw Error(what + ": holds " + std::to_string(have) + " values for dims of " + std::to_string(n) + " elements (a truncated file?)");
    };
    if (t.data_location() == TP::EXTERNAL || t.has_raw_data()) {
        const std::string ext = t.data_location() == TP::EXTERNAL ? external_bytes(t, what, dir, n * size) : std::string();
        const std::string& raw = t.data_location() == TP::EXTERNAL ? ext : t.raw_data();
        check(raw.size() / size);
        if (raw.size() % size) check(n + 1);
        out.reserve(n);
        for (size_t i = 0; i < n; ++i) out.push_back(from_raw<T>(raw.data() + i * size, type));
        return out;
    }
    switch (type) {
        case TP::FLOAT: check(size_t(t.float_data_size())); for (float v : t.float_data()) out.push_back(T(v)); break;
        case TP::DOUBLE: check(size_t(t.double_data_size())); for (double v : t.double_data()) out.push_back(T(v)); break;
        case TP::INT64: check(size_t(t.int64_data_size())); for (int64_t v : t.int64_data()) out.push_back(T(v)); break;
        case TP::UINT64: case TP::UINT32: check(size_t(t.uint64_data_size())); for (uint64_t v : t.uint64_data()) out.push_back(T(v)); break;
        default: check(size_t(t.int32_data_size())); for (int32_t v : t.int32_data()) out.push_back(T(v)); break;
    }
    return out;
}
template std::vector<float> values_of<float>(const TP&, const std::string&, const std::string&);
template std::vector<double> values_of<double>(const TP&, const std::string&, const std::string&);

Const const_of(const TP& t, const std::string& what, const std::string& dir) {
    Const c;
    c.floating = is_float_type(t.data_type());
    c.dims.assign(t.dims().begin(), t.dims().end());
    c.v = values_of<double>(t, what, dir);
    return c;
}

}  // namespace joule::onnx_io
