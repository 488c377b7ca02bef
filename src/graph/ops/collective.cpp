// Data-parallel gradient averaging (inserted by plan/'s allreduce pass, never by a network):
//   AllReduceStart(G1..Gk) = B, f32[bucket_offsets(shapes).back()]: the gradients packed in order, each
//     at its 64-byte aligned offset, zeros between; the sum of B over the job's P processes starts.
//   AllReduceWait(B) = (G1'..Gk'): Gi' = (sum over processes of Gi) / P, once the sum is complete.
// Their arithmetic is the 1/P scaling (one multiply per element, counted on the wait); their cost is
// the bytes they move and, above all, the link's time (predict/data_parallel.hpp models it).
#include "graph/ops/rules.hpp"

namespace joule {

std::vector<int64_t> bucket_offsets(const std::vector<Shape>& shapes) {
    constexpr int64_t align = 16;  // f32 elements: 64 bytes
    std::vector<int64_t> at;
    int64_t end = 0;
    for (const Shape& s : shapes) {
        int64_t e = 1;
        for (int64_t d : s) e *= d;
        at.push_back((end + align - 1) / align * align);
        end = at.back() + e;
    }
    at.push_back(end);
    return at;
}

}  // namespace joule

namespace joule::rules {

namespace {
int64_t bucket_elements(const std::vector<Shape>& shapes) { return bucket_offsets(shapes).back(); }
}  // namespace

Descs shape_AllReduceStart(const Node& n, const Descs& in) {
    const auto& shapes = attrs_as<AllReduceAttrs>(n).shapes;
    require(shapes.size() == in.size(), "the bucket names " + std::to_string(shapes.size()) + " gradient shapes for " + std::to_string(in.size()) + " inputs");
    for (size_t i = 0; i < in.size(); ++i) {
        require(in[i].dtype == DType::F32, "input " + std::to_string(i) + " is " + dtype_name(in[i].dtype) + "; gradients are all-reduced in f32");
        require(in[i].shape == shapes[i], "input " + std::to_string(i) + " is " + desc_str(in[i]) + ", the bucket expects another shape");
        require(in[i].layout == Layout::Plain, "input " + std::to_string(i) + " is not in plain layout");
    }
    return {f32({bucket_elements(shapes)})};
}
double flops_AllReduceStart(const Node&, const Descs&, const Descs&) { return 0; }

Descs shape_AllReduceWait(const Node& n, const Descs& in) {
    const auto& shapes = attrs_as<AllReduceAttrs>(n).shapes;
    require(!shapes.empty(), "an all-reduce bucket holds at least one gradient");
    require(in[0].dtype == DType::F32 && in[0].shape == Shape{bucket_elements(shapes)},
            "the bucket is " + desc_str(in[0]) + ", its gradients need f32[" + std::to_string(bucket_elements(shapes)) + "]");
    Descs out;
    for (const Shape& s : shapes) out.push_back(f32(s));
    return out;
}
double flops_AllReduceWait(const Node&, const Descs& in, const Descs&) { return numel(in[0]); }

}  // namespace joule::rules
