// import/: users' own models in and out of joule as ONNX (the format PyTorch's torch.onnx.export writes).
//
//   zoo::Model m = import_onnx("resnet.onnx", {.batch = 32});   // train it like a zoo net
//   export_onnx(m.graph, m.input, m.logits, values, "trained.onnx");
//
// Import reads a ModelProto (opsets 11-17, Debian's libonnx / protobuf) and maps every node to joule
// ops; initializers become parameters (or BatchNorm running statistics) carrying their data. Patterns
// PyTorch's exporter spells out in several nodes are recognised as the one joule op they are: the erf
// form of GELU, a decomposed LayerNorm, MatMul + Add (a linear layer with bias), a transpose or scalar
// scale folded into MatMul; shape arithmetic (Shape, Gather, Concat, ... on sizes) is evaluated at import.
// Images are NCHW in ONNX and stored nhwc in joule: the input is declared nhwc once and activations keep
// that layout until a flatten, which is the only layout change (no per-op conversions).
// The labels are the label input of the model's own loss (SoftmaxCrossEntropyLoss, or LogSoftmax +
// NegativeLogLikelihoodLoss), the input named by OnnxImportOptions::labels, or, for a model whose output
// is the logits, a new i32 input that joule's cross-entropy loss reads.
// Anything joule cannot run exactly is an Error naming the node, its op type and the opset.
#pragma once

#include <functional>
#include <string>

#include "zoo/zoo.hpp"

namespace joule {

struct OnnxImportOptions {
    int64_t batch = 0;   // the batch size: fills a symbolic batch dimension; 0 takes the file's fixed one
    std::string labels;  // the graph input holding the labels, when the model has no loss of its own
};

// Throws Error naming the file on a missing, truncated or non-ONNX file, missing external data, an
// opset outside 11-17, an op or attribute joule does not have, or a shape it cannot resolve.
zoo::Model import_onnx(const std::string& path, const OnnxImportOptions& o = {});
// The same from bytes in memory (`where` names them in errors; external data is not allowed).
zoo::Model import_onnx_bytes(const std::string& bytes, const std::string& where, const OnnxImportOptions& o = {});
// The batch size a model's data input fixes (0: symbolic, or no such input); Error as import_onnx.
int64_t onnx_fixed_batch(const std::string& path);

// The forward graph of `g` from `input` to `logits` as an ONNX model (opset 17) with each parameter's
// and running statistic's values from `values` (f32, logical row-major order): loadable by
// onnxruntime or PyTorch-side tools; import_onnx of the file gives the same outputs. The loss is left out.
void export_onnx(const Graph& g, TensorId input, TensorId logits, const std::function<std::vector<float>(TensorId)>& values,
                 const std::string& path);

// A net of the zoo by name, or, when `onnx_file` is set, the model in that file at cfg.batch (cfg's
// other sizes must be 0 or agree with the file): what --net / --model name.
zoo::Model load_model(const std::string& net, const std::string& onnx_file, const zoo::NetConfig& cfg, const std::string& labels = "");
// Where one name stands for either (profile records, calibration): a path ending in .onnx is a model file.
inline bool is_onnx_file(const std::string& net) { return net.ends_with(".onnx"); }
inline zoo::Model load_model(const std::string& net_or_file, const zoo::NetConfig& cfg) {
    return is_onnx_file(net_or_file) ? load_model("", net_or_file, cfg) : zoo::build(net_or_file, cfg);
}

}  // namespace joule
